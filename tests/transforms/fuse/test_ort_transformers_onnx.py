"""simplify --target onnxruntime on transformers exports: BERT, GPT-2, T5, ViT (tests/models/build_ort_transformers.py).

Tiny configs (2 layers, hidden 64), random weights with randomized biases and norms, dynamic
batch and sequence.  The TorchScript exports (opset 14: every LayerNorm written out op by op,
T5's RMSNorm too) run by default; the dynamo exports (opset 20, native LayerNormalization and
Gelu) are ``wide``.  Every result is compared with the original on onnxruntime at two shapes
per dynamic dim, and simplifying it again changes nothing.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify
from graphwright.transforms import TransformContext, get

pytestmark = pytest.mark.slow
RTOL = ATOL = 1e-5
MS = "com.microsoft::"

#: per model: fused operators expected (exact counts; 2 layers) and written-out ops that must be gone
EXPECTED: dict[str, tuple[dict[str, int], tuple[str, ...]]] = {
    "bert": ({"LayerNormalization": 5, MS + "BiasGelu": 2, MS + "Attention": 2, "Softmax": 0},
             ("ReduceMean", "Erf", "Sqrt")),
    "gpt2": ({"LayerNormalization": 5, MS + "FastGelu": 2, MS + "Attention": 2, "Gemm": 0, "Softmax": 0},
             ("ReduceMean", "Tanh", "Pow", "Split")),
    "t5": ({"SimplifiedLayerNormalization": 12, MS + "Attention": 4, MS + "MultiHeadAttention": 2, "Softmax": 0},
           ("ReduceMean", "Pow", "Sqrt", "Reciprocal")),
    "vit": ({"LayerNormalization": 5, MS + "BiasGelu": 2, MS + "Attention": 2, "Softmax": 0}, ("ReduceMean", "Erf")),
}
ARCHS = ("bert", "gpt2", "t5", "vit")
MODELS = [pytest.param(f"{arch}_ts", id=f"{arch}_ts") for arch in ARCHS] + [
    pytest.param(f"{arch}_dynamo", id=f"{arch}_dynamo", marks=pytest.mark.wide) for arch in ARCHS]


def histogram(proto: onnx.ModelProto) -> Counter[str]:
    return Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in proto.graph.node)


def outputs(proto: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = proto if isinstance(proto, str) else proto.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_same_at_two_shapes(info: object, proto: onnx.ModelProto) -> None:
    from tests.models import build_ort_transformers as corpus

    for dims in corpus.shapes(info):  # type: ignore[arg-type]
        feeds = corpus.feeds(info, dims, seed=3)  # type: ignore[arg-type]
        for want, got in zip(outputs(str(info.path), feeds), outputs(proto, feeds), strict=True):  # type: ignore[attr-defined]
            assert want.shape == got.shape
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", MODELS)
def test_simplify_for_onnxruntime(name: str) -> None:
    from tests.models import build_ort_transformers as corpus

    info = corpus.get(name)
    model, _ = simplify(str(info.path), target="onnxruntime")
    proto = onnx_format.to_proto(model)
    counts = histogram(proto)
    fused, gone = EXPECTED[name.split("_")[0]]
    assert {op: counts[op] for op in fused} == fused, counts
    assert not any(counts[op] for op in gone), counts
    assert not counts[MS + "SkipLayerNormalization"] and not counts[MS + "SkipSimplifiedLayerNormalization"]
    # (off by default: slower on onnxruntime's CPU kernels)
    assert len(proto.graph.node) < info.metadata["num_nodes"]
    assert_same_at_two_shapes(info, proto)
    again, _ = simplify(model, target="onnxruntime")
    assert histogram(onnx_format.to_proto(again)) == counts  # a fixed point


def test_skip_layer_norm_on_request_bert() -> None:
    """fuse_skip_layer_norm on request: every LayerNorm of BERT follows a residual sum (the embeddings' a broadcast
    position table, found by the shape probe since the dynamic export's shapes don't say)."""
    from tests.models import build_ort_transformers as corpus

    info = corpus.get("bert_ts")
    model, _ = simplify(str(info.path), target="onnxruntime")
    result = get("fuse_skip_layer_norm").fn(model, TransformContext(), target="onnxruntime")
    proto = onnx_format.to_proto(model)
    counts = histogram(proto)
    assert result.stats["skip_layer_norm"] + result.stats["bias_skip_layer_norm"] == 5, result.notes
    assert counts[MS + "SkipLayerNormalization"] == 5 and counts["LayerNormalization"] == 0
    assert_same_at_two_shapes(info, proto)
