"""fuse_embed_layer_norm: onnxruntime's EmbedLayerNormalization on hand-built DistilBERT-style
embeddings and on transformers' BERT exports, every result run on onnxruntime against the
original at two (batch, sequence) shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import graphwright.transforms.fuse.fuse_embed_layer_norm_onnx  # noqa: F401 - registers fuse_embed_layer_norm
from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify
from graphwright.transforms import TransformContext, get

from ._helpers_onnx import build, init, node, ops, vi

RTOL = ATOL = 1e-5
V, N, H = 30, 16, 8
SHAPES = ((2, 9), (3, 5))


def _run(proto: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = proto if isinstance(proto, str) else proto.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _embeddings(table: np.ndarray) -> onnx.ModelProto:
    """DistilBERT's embeddings: W[ids] + P[Slice(table, 0, Shape(ids)[1])], then a LayerNorm."""
    rng = np.random.default_rng(0)
    nodes = [
        node("Shape", ["ids"], ["shape"]),
        node("Gather", ["shape", "one"], ["seq"], axis=0),
        node("Unsqueeze", ["seq", "zero_axis"], ["seq_1"]),
        node("Slice", ["pos_table", "zero_1", "seq_1", "one_1", "one_1"], ["positions"]),
        node("Gather", ["W", "ids"], ["words"]),
        node("Gather", ["P", "positions"], ["pos"]),
        node("Add", ["words", "pos"], ["sum"]),
        node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12),
    ]
    inits = [init("one", np.array(1, np.int64)), init("zero_axis", np.array([0], np.int64)),
             init("zero_1", np.array([0], np.int64)), init("one_1", np.array([1], np.int64)),
             init("pos_table", table), init("W", rng.standard_normal((V, H)).astype(np.float32)),
             init("P", rng.standard_normal((N, H)).astype(np.float32)),
             init("gamma", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)),
             init("beta", (0.1 * rng.standard_normal(H)).astype(np.float32))]
    return build(nodes, [vi("ids", ("batch", "seq"), TensorProto.INT64)], [vi("y", ("batch", "seq", H))], inits)


def _fuse(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, object]:
    model = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    ctx = TransformContext()
    get("infer_shapes").fn(model, ctx)
    result = get("fuse_embed_layer_norm").fn(model, ctx, target="onnxruntime")
    get("eliminate_dead_code").fn(model, ctx)
    return onnx_format.to_proto(model), result


def _ids(batch: int, seq: int, seed: int = 1) -> dict[str, np.ndarray]:
    return {"ids": np.random.default_rng(seed).integers(0, V, (batch, seq)).astype(np.int64)}


def test_word_and_position_lookups_fuse_and_match_onnxruntime() -> None:
    before = _embeddings(np.arange(N, dtype=np.int64)[None, :])
    after, result = _fuse(before)
    assert result.changed, result.notes  # type: ignore[attr-defined]
    assert ops(after) == {"Cast": 1, "com.microsoft::EmbedLayerNormalization": 1}
    for batch, seq in SHAPES:
        feeds = _ids(batch, seq)
        np.testing.assert_allclose(_run(after, feeds)[0], _run(before, feeds)[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("table", [np.arange(N, dtype=np.int64)[None, ::-1].copy(),  # not 0 … N-1
                                   np.minimum(np.arange(N, dtype=np.int64), 5)[None, :]])
def test_a_position_table_other_than_0_to_n_is_refused(table: np.ndarray) -> None:
    before = _embeddings(table)
    after, result = _fuse(before)
    assert not result.changed  # type: ignore[attr-defined]
    assert any("does not hold" in r[-1] for r in result.refusals), result.refusals  # type: ignore[attr-defined]
    assert ops(after) == ops(before)


def test_not_part_of_simplify() -> None:
    """Opt-in: with it onnxruntime's own optimizer then fuses its slow SkipLayerNormalization (see the module)."""
    model, _ = simplify(onnx_format.from_proto(_embeddings(np.arange(N, dtype=np.int64)[None, :]), None),
                        target="onnxruntime")
    assert all(n.op != "EmbedLayerNormalization" for n in model.graph)


def _bert(name: str) -> None:
    from tests.models import build_ort_transformers as corpus

    info = corpus.get(name)
    model, _ = simplify(str(info.path), target="onnxruntime")
    result = get("fuse_embed_layer_norm").fn(model, TransformContext(), target="onnxruntime")
    get("eliminate_dead_code").fn(model, TransformContext())
    assert result.stats["fused"] == 1, result.refusals
    proto = onnx_format.to_proto(model)
    hist = ops(proto)
    assert hist["com.microsoft::EmbedLayerNormalization"] == 1 and hist["LayerNormalization"] == 4
    assert hist["Gather"] <= 4  # the three lookups are gone (shape Gathers of the mask path stay)
    for dims in corpus.shapes(info):
        feeds = corpus.feeds(info, dims, seed=3)
        for want, got in zip(_run(str(info.path), feeds), _run(proto, feeds), strict=True):
            assert want.shape == got.shape
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_bert_torchscript_export() -> None:
    _bert("bert_ts")


@pytest.mark.slow
@pytest.mark.wide
def test_bert_dynamo_export() -> None:
    _bert("bert_dynamo")
