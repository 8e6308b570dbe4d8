"""A small GPT-2 (tanh GELU, pre-LN residuals) exported to ONNX with the TorchScript exporter.

Random weights from a fixed seed, with biases and LayerNorm parameters randomized too (default
init makes them 0/1, which would hide mistakes in bias and γ/β handling).  Built into a pytest
temporary directory; a couple of seconds per opset.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

VOCAB = 100
SEQ = 8


def export_gpt2(path: Path, opset: int) -> Path:
    """Export the model at ``opset`` to ``path`` (inputs input_ids, attention_mask; output last_hidden_state)."""
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=32, bos_token_id=None, eos_token_id=None,
                        activation_function="gelu_new")
    gpt2 = GPT2Model(config).eval()
    gpt2.set_attn_implementation("eager")  # plain MatMul/Softmax attention
    with torch.no_grad():
        for name, param in gpt2.named_parameters():
            if name.endswith("bias") or ".ln_" in name or name.startswith("ln_f"):
                param.normal_(0.0, 0.5)

    class Wrapper(torch.nn.Module):
        """Keyword call (GPT2Model's decorators reject positional use_cache) returning one tensor."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
            return out.last_hidden_state

    ids = torch.randint(0, VOCAB, (1, SEQ))
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapper(gpt2).eval(), (ids, torch.ones_like(ids)), str(path), dynamo=False,
                          opset_version=opset, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return path


def feeds(seed: int = 0, batch: int = 2, seq: int = SEQ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, VOCAB, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}
