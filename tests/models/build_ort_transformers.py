"""Transformers exported to ONNX for the onnxruntime fusions: BERT, GPT-2, T5, ViT, two exporters, two sizes.

Each model is built from a transformers config (no download), with random weights from a fixed
seed and randomized biases and norm parameters (default init makes them 0 and 1, which hides
mistakes in bias and γ/β handling), eager attention (plain MatMul/Softmax), then exported

* ``ts``: the TorchScript exporter, opset 14, dynamic batch and sequence (LayerNorm written out
  op by op, as every export below opset 17 is), and
* ``dynamo``: the dynamo exporter (its default opset, native LayerNormalization), dynamic batch
  and sequence.

Names are ``<arch>_<exporter>`` (tiny: 2 layers, hidden 64, what the default tests use) and
``<arch>_<exporter>_bench`` (4 layers, hidden 256, intermediate 1024: what the benchmark uses).
ViT's sequence is its patch count, so only its batch is dynamic.  The build checks the export
on onnxruntime against torch at two values of every dynamic dim.

Cached like ``tests.models``' families, but self-contained (the family table is not ours):
``get("bert_ts")`` builds on first use in a subprocess (``python -m
tests.models.build_ort_transformers NAME DIR``) and returns a :class:`ModelInfo`; later calls read the
cache under ``tests/models/_cache/ort_transformers-<name>-<key>.*``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ._cache import CACHE_DIR, REPO_ROOT, ModelBuildError, _build_env, _ensure_cache_dir, _locked, library_versions
from ._cache import Family as _Family
from ._info import ModelInfo, save_reference

BUILDER_VERSION = 1
FAMILY = "ort_transformers"
ARCHS = ("bert", "gpt2", "t5", "vit")
EXPORTERS = ("ts", "dynamo")
NAMES = tuple(f"{a}_{e}{s}" for s in ("", "_bench") for a in ARCHS for e in EXPORTERS)
TS_OPSET = 14
SEED = 0
ATOL = 1e-4
VOCAB = 1000
SEQ = 16
IMAGE = 32
PATCH = 8
#: (layers, hidden, heads, intermediate) per size
SIZES = {"tiny": (2, 64, 4, 128), "bench": (4, 256, 4, 1024)}
_LIBS = (("torch", ("torch",)), ("transformers", ("transformers",)), ("onnx", ("onnx",)),
         ("onnxruntime", ("onnxruntime",)), ("onnxscript", ("onnxscript",)))


def _key(name: str) -> str:
    payload = {"family": FAMILY, "name": name, "builder_version": BUILDER_VERSION,
               "libraries": library_versions(_Family(__name__, NAMES, ".onnx", _LIBS)),
               "python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def get(name: str) -> ModelInfo:
    """The cached model ``name`` (one of :data:`NAMES`), built in a subprocess on first use."""
    if name not in NAMES:
        raise ValueError(f"unknown {FAMILY} model {name!r}; choose from {NAMES}")
    stem = f"{FAMILY}-{name}-{_key(name)}"
    sidecar = CACHE_DIR / f"{stem}.json"
    if sidecar.exists():
        return ModelInfo.read_sidecar(sidecar)
    _ensure_cache_dir()
    with _locked(CACHE_DIR / f".{FAMILY}-{name}.lock"):
        if not sidecar.exists():
            for old in CACHE_DIR.glob(f"{FAMILY}-{name}-*"):
                old.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=".build-") as tmp:
                log = CACHE_DIR / f"{stem}.log"
                with open(log, "w") as out:
                    proc = subprocess.run([sys.executable, "-m", __name__, name, tmp, stem], cwd=REPO_ROOT,
                                          env=_build_env(), stdout=out, stderr=subprocess.STDOUT, check=False,
                                          timeout=1800)
                built = Path(tmp) / f"{stem}.json"
                if proc.returncode or not built.exists():
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                    raise ModelBuildError(f"building {FAMILY}:{name} failed; log: {log}\n{tail}")
                for path in Path(tmp).glob(f"{stem}.*"):
                    if path.suffix != ".json":
                        os.replace(path, CACHE_DIR / path.name)
                os.replace(built, sidecar)
    return ModelInfo.read_sidecar(sidecar)


def shapes(info: ModelInfo) -> Iterator[dict[str, tuple[int, ...]]]:
    """Two input shapes per dynamic dim: the built one and (batch 3, sequence 7) or (batch 3)."""
    yield dict(info.inputs)
    other: dict[str, tuple[int, ...]] = {}
    for name, shape in info.inputs.items():
        dims = list(shape)
        for axis in info.dynamic_axes.get(name, {}):
            dims[axis] = 3 if axis == 0 else 7
        other[name] = tuple(dims)
    yield other


def feeds(info: ModelInfo, shape: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of the given shapes: token ids, a mask with a padded tail, pixels."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, dims in shape.items():
        if name == "pixel_values":
            out[name] = rng.standard_normal(dims).astype(np.float32)
        elif name == "attention_mask":
            mask = np.ones(dims, np.int64)
            mask[-1, dims[1] - 2:] = 0  # the last row is padded: the mask matters
            out[name] = mask
        elif name == "token_type_ids":
            out[name] = (np.arange(dims[1])[None, :] >= dims[1] // 2).repeat(dims[0], 0).astype(np.int64)
        else:
            out[name] = rng.integers(0, VOCAB, dims).astype(np.int64)
    return out


# -- the build (runs in the subprocess; imports torch) ----------------------------------------------
def _model(arch: str, size: str) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    """(torch module returning a tuple, input shapes, output names)."""
    import torch  # lazy: the build subprocess only
    import transformers  # lazy: the build subprocess only

    layers, hidden, heads, inter = SIZES[size]
    common: dict[str, Any] = {"attn_implementation": "eager"}
    if arch == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                                         num_attention_heads=heads, intermediate_size=inter,
                                         max_position_embeddings=128, **common)
        net, inputs = transformers.BertModel(config, add_pooling_layer=False), ["input_ids", "attention_mask",
                                                                                 "token_type_ids"]
    elif arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=heads,
                                         n_inner=inter, n_positions=128, activation_function="gelu_new",
                                         bos_token_id=None, eos_token_id=None, **common)
        net, inputs = transformers.GPT2Model(config), ["input_ids", "attention_mask"]
    elif arch == "t5":
        config = transformers.T5Config(vocab_size=VOCAB, d_model=hidden, d_kv=hidden // heads, d_ff=inter,
                                       num_layers=layers, num_decoder_layers=layers, num_heads=heads,
                                       decoder_start_token_id=0, **common)
        net, inputs = transformers.T5Model(config), ["input_ids", "attention_mask", "decoder_input_ids"]
    elif arch == "vit":
        config = transformers.ViTConfig(image_size=IMAGE, patch_size=PATCH, hidden_size=hidden,
                                        num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=inter,
                                        **common)
        net, inputs = transformers.ViTModel(config, add_pooling_layer=False), ["pixel_values"]
    else:
        raise ValueError(arch)
    net.eval()
    rng = np.random.default_rng(SEED)
    with torch.no_grad():  # default init: biases 0, norms 1 -- randomize them
        for pname, param in net.named_parameters():
            lowered = pname.lower()
            if pname.endswith("bias"):
                param.copy_(torch.from_numpy(rng.normal(0.0, 0.2, param.shape).astype(np.float32)))
            elif ("norm" in lowered or ".ln_" in lowered or lowered.startswith("ln_f")) and param.ndim == 1:
                param.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, param.shape).astype(np.float32)))

    class Wrapper(torch.nn.Module):
        """Keyword call (transformers 5 rejects positional use_cache) returning a plain tuple."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            kwargs: dict[str, Any] = dict(zip(inputs, args, strict=True))
            if arch in ("gpt2", "t5"):
                kwargs["use_cache"] = False
            return (self.inner(**kwargs, return_dict=True).last_hidden_state,)

    shape = {n: (2, 3, IMAGE, IMAGE) if n == "pixel_values" else (2, SEQ) for n in inputs}
    return Wrapper(net).eval(), shape, ["last_hidden_state"]


def _dynamic(arch: str, inputs: list[str]) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {}
    for name in inputs:
        axes[name] = {0: "batch"} if name == "pixel_values" else {0: "batch", 1: "decoder_sequence"
                                                                 if name.startswith("decoder") else "sequence"}
    axes["last_hidden_state"] = {0: "batch"} if arch == "vit" else {
        0: "batch", 1: "decoder_sequence" if arch == "t5" else "sequence"}
    return axes


def _export(module: Any, args: tuple[Any, ...], path: Path, exporter: str, inputs: list[str], outputs: list[str],
            axes: dict[str, dict[int, str]]) -> None:
    import warnings  # lazy: the build subprocess only

    import torch  # lazy: the build subprocess only

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=TS_OPSET, input_names=inputs,
                              output_names=outputs, dynamic_axes=axes)
            return
        dims = {name: {axis: torch.export.Dim.DYNAMIC for axis in a} for name, a in axes.items() if name in inputs}
        program = torch.onnx.export(module, args, dynamo=True, input_names=inputs, output_names=outputs,
                                    dynamic_shapes=(tuple(dims[n] for n in inputs),), optimize=True, verbose=False)
        program.save(str(path))


def build(name: str, out_dir: Path, stem: str) -> ModelInfo:
    """Build, export and verify ``name`` into ``out_dir/stem.{onnx,npz,json}``."""
    import onnx  # lazy: the build subprocess only
    import onnxruntime as ort  # lazy: the build subprocess only
    import torch  # lazy: the build subprocess only

    parts = name.split("_")
    arch, exporter, size = parts[0], parts[1], "bench" if name.endswith("_bench") else "tiny"
    torch.manual_seed(SEED)
    module, shape, outputs = _model(arch, size)
    inputs = list(shape)
    axes = _dynamic(arch, inputs)
    path = out_dir / f"{stem}.onnx"
    info = ModelInfo(family=FAMILY, name=name, format="onnx", path=path, inputs=shape, outputs=outputs,
                     input_dtype="float32" if arch == "vit" else "int64",
                     input_dtypes={n: "float32" if n == "pixel_values" else "int64" for n in inputs},
                     dynamic_axes=axes, reference=out_dir / f"{stem}.npz", metadata={"vocab_size": VOCAB})
    first = feeds(info, shape)
    _export(module, tuple(torch.from_numpy(v) for v in first.values()), path, exporter, inputs, outputs, axes)
    proto = onnx.load(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    diffs = []
    for dims in shapes(info):
        data = feeds(info, dims)
        got = session.run(None, data)
        with torch.no_grad():
            want = module(*(torch.from_numpy(v) for v in data.values()))
        diff = max(float(np.max(np.abs(g - w.numpy()))) for g, w in zip(got, want, strict=True))
        if not diff < ATOL:
            raise AssertionError(f"{name} at {dims}: onnxruntime differs from torch by {diff}")
        diffs.append(diff)
        if dims == shape:
            save_reference(info.reference, list(data.values()), got)  # type: ignore[arg-type]
    hist: dict[str, int] = {}
    for node in proto.graph.node:
        hist[node.op_type] = hist.get(node.op_type, 0) + 1
    meta = {"vocab_size": VOCAB, "max_abs_diff_vs_torch": diffs, "num_nodes": len(proto.graph.node),
            "op_histogram": dict(sorted(hist.items())), "opset": {o.domain or "ai.onnx": o.version
                                                                 for o in proto.opset_import},
            "size": size, "exporter": exporter}
    info = replace(info, metadata=meta)
    info.write_sidecar()
    return info


if __name__ == "__main__":
    # transformers imports torchvision when it is installed; none of these models needs it, and a
    # torchvision whose compiled ops don't match the installed torch must not break the build.
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]
    build(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
