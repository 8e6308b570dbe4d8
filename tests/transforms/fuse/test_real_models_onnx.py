"""The fusions on real exports: BERT (tests.models, erf GELU) and a small GPT-2 (tanh GELU, decomposed LayerNorm).

Every fused model passes onnx.checker (inside ``fuse``) and gives onnxruntime outputs equal to
the original's within 1e-5 relative (plus a 1e-5 absolute floor for values near zero) on seeded
inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

from ._helpers_onnx import fuse, ops, run

pytestmark = pytest.mark.slow
RTOL = ATOL = 1e-5


def _same(before: onnx.ModelProto, after: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> None:
    want, got = run(before, feeds), run(after, feeds)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def _chain(proto: onnx.ModelProto, target: str) -> tuple[onnx.ModelProto, dict[str, dict[str, int]]]:
    """Shape inference, then fuse_layer_norm, fuse_gelu, fuse_ort_contrib and fuse_skip_layer_norm (on
    request only in simplify: onnxruntime's CPU kernel is slower than what it replaces); the stats of each."""
    stats: dict[str, dict[str, int]] = {}
    # first, as simplify does: SkipLayerNormalization/BiasGelu need known shapes, and onnx's
    # inference can't see through com.microsoft ops once they are there (the IR keeps the shapes)
    proto = onnx.shape_inference.infer_shapes(proto)
    for name in ("fuse_layer_norm", "fuse_gelu", "fuse_ort_contrib", "fuse_skip_layer_norm"):
        proto, result = fuse(proto, name, target=target)
        stats[name] = result.stats
    return proto, stats


@pytest.fixture(scope="module")
def bert() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from tests.models import torch_onnx

    info = torch_onnx("bert")
    rng = np.random.default_rng(0)
    ids_shape = info.inputs["input_ids"]
    feeds = {"input_ids": rng.integers(0, info.metadata["vocab_size"], ids_shape).astype(np.int64),
             "attention_mask": np.ones(info.inputs["attention_mask"], np.int64)}
    feeds["attention_mask"][0, -3:] = 0
    return onnx.load(info.path), feeds


def test_bert_standard_opset17_refuses_gelu_with_reason(bert: tuple[onnx.ModelProto, dict[str, np.ndarray]]) -> None:
    proto, _ = bert
    assert ops(proto)["Erf"] == 2 and ops(proto)["LayerNormalization"] == 5  # what the export holds
    after, result = fuse(proto, "fuse_gelu")
    assert not result.changed and ops(after) == ops(proto)
    assert any("opset 17 < 20" in note for note in result.notes)


def test_bert_onnxruntime_target(bert: tuple[onnx.ModelProto, dict[str, np.ndarray]]) -> None:
    proto, feeds = bert
    after, stats = _chain(proto, "onnxruntime")
    counts = ops(after)
    assert stats["fuse_layer_norm"]["fused"] == 0  # LayerNorm is exported natively already
    assert stats["fuse_gelu"]["fused"] == 2
    assert counts["Erf"] == 0 and counts["com.microsoft::BiasGelu"] == 2  # Add(bias) + Gelu
    assert counts["com.microsoft::FusedMatMul"] >= 2
    assert counts["com.microsoft::SkipLayerNormalization"] >= 1
    assert len(after.graph.node) < len(proto.graph.node) - 20
    _same(proto, after, feeds)
    # onnxruntime's own optimizer accepts the contrib ops and still computes the same
    np.testing.assert_allclose(run(after, feeds, optimize=True)[0], run(proto, feeds)[0], rtol=RTOL, atol=ATOL)


def test_bert_opset20_standard_gelu(bert: tuple[onnx.ModelProto, dict[str, np.ndarray]]) -> None:
    """The same graph declared opset 20 (every op in it is unchanged between 17 and 20): standard Gelu."""
    proto, feeds = bert
    bumped = onnx.ModelProto()
    bumped.CopyFrom(proto)
    bumped.opset_import[0].version = 20
    after, result = fuse(bumped, "fuse_gelu")
    assert result.stats["fused"] == 2
    assert ops(after)["Gelu"] == 2 and ops(after)["Erf"] == 0
    assert [(o.domain, o.version) for o in after.opset_import] == [("", 20)]
    _same(bumped, after, feeds)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return tmp_path_factory.mktemp("gpt2")


def _gpt2(directory: Path, opset: int) -> onnx.ModelProto:
    from ._gpt2 import export_gpt2

    path = directory / f"gpt2_opset{opset}.onnx"
    if not path.exists():
        export_gpt2(path, opset)
    return onnx.load(path)


@pytest.mark.parametrize("opset,target,gelu_op", [(17, "onnxruntime", "com.microsoft::FastGelu"),
                                                   (20, "standard", "Gelu"),
                                                   (20, "onnxruntime", "Gelu")])
def test_gpt2_tanh_gelu(gpt2_dir: Path, opset: int, target: str, gelu_op: str) -> None:
    from ._gpt2 import feeds

    proto = _gpt2(gpt2_dir, opset)
    assert ops(proto)["Tanh"] == 2 and ops(proto)["LayerNormalization"] == 5
    after, stats = _chain(proto, target)
    assert stats["fuse_gelu"]["fused"] == 2
    counts = ops(after)
    assert counts[gelu_op] == 2 and counts["Tanh"] == 0 and counts["Pow"] == 0
    assert len(after.graph.node) <= len(proto.graph.node) - 24  # 13 nodes (with Constants) -> 1, twice
    if target == "onnxruntime":
        assert stats["fuse_ort_contrib"]["fused"] >= 2  # the attention scale folds into FusedMatMul
    _same(proto, after, feeds())


def test_gpt2_opset17_standard_refuses_gelu(gpt2_dir: Path) -> None:
    proto = _gpt2(gpt2_dir, 17)
    after, result = fuse(proto, "fuse_gelu")
    assert not result.changed and ops(after) == ops(proto)
    assert any("opset 17 < 20" in note for note in result.notes)


def test_gpt2_decomposed_layer_norm(gpt2_dir: Path) -> None:
    """Below opset 17 torch writes LayerNorm out op by op; declared opset 17, all 5 fuse."""
    from ._gpt2 import feeds

    proto = _gpt2(gpt2_dir, 16)
    assert ops(proto)["ReduceMean"] == 10 and "LayerNormalization" not in ops(proto)
    refused, result = fuse(proto, "fuse_layer_norm")
    assert ops(refused) == ops(proto)
    assert not result.changed and any("opset 16 < 17" in n for n in result.notes)
    bumped = onnx.ModelProto()
    bumped.CopyFrom(proto)
    bumped.opset_import[0].version = 17  # no op of this graph changed meaning between 16 and 17
    after, stats = _chain(bumped, "onnxruntime")
    assert stats["fuse_layer_norm"]["fused"] == 5
    counts = ops(after)
    assert counts["ReduceMean"] == 0 and counts["Sqrt"] == 0 and counts["Sub"] == 0
    assert counts["LayerNormalization"] + counts["com.microsoft::SkipLayerNormalization"] == 5
    assert counts["com.microsoft::FastGelu"] == 2
    _same(bumped, after, feeds())
