"""fuse_attention on hand-built self-attention blocks with dynamic batch and sequence: fused into
com.microsoft::Attention and equal on onnxruntime at two sizes; shapes it can't take are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import graphwright.transforms.fuse.fuse_attention_onnx  # noqa: F401 - registers fuse_attention
from graphwright.formats import onnx as onnx_format
from graphwright.ir import check
from graphwright.transforms import TransformContext, TransformResult, get

from ._helpers_onnx import assert_same, build, init, node, ops, vi

H, N, D = 8, 2, 4
DIMS = ({"batch": 2, "seq": 5}, {"batch": 3, "seq": 4})


def block(*, masked: bool = True, divide: bool = True, mask_shape: tuple[object, ...] = ("batch", 1, "seq", "seq"),
          k_heads: tuple[int, int] = (N, D), computed_split: bool = True, softmax_axis: int | None = -1,
          t5: bool = False, packed: bool = False, flat_merge: bool = False, opset: int = 17,
          cross: bool = False) -> onnx.ModelProto:
    """BERT's self-attention as exported: the split's target from Shape(x) (dynamic) or a constant.
    ``t5``: T5's form instead: no projection biases, no scaling, a position bias (1, N, S, S) then the mask.
    ``packed``: GPT-2's: one (H, 3H) projection cut by a Split; ``flat_merge``: the heads merge into
    (B·S, H) for a 2-D product after it (GPT-2's c_proj); ``cross``: k and v from another input,
    ``enc`` (batch, enc, H), as a decoder's cross-attention reads the encoder's output."""
    rng = np.random.default_rng(7)
    inits = [init("heads", np.array([N, D], np.int64)), init("k_heads", np.array(k_heads, np.int64)),
             init("merged", np.array([0, 0, H], np.int64)), init("zero", np.array([0], np.int64)),
             init("two", np.array([2], np.int64)),
             init("c", np.float32(np.sqrt(D)) if divide else np.float32(1 / np.sqrt(D)))]
    nodes = [node("Shape", ["x"], ["shp"]), node("Slice", ["shp", "zero", "two"], ["bs"]),
             node("Concat", ["bs", "heads"], ["split"], axis=0), node("Concat", ["bs", "k_heads"], ["ksplit"], axis=0)]
    if packed:
        inits += [init("wqkv", (rng.standard_normal((H, 3 * H)) / 3).astype(np.float32)),
                  init("bqkv", rng.normal(0, 0.3, 3 * H).astype(np.float32)), init("thirds", np.array([H] * 3, np.int64))]
        nodes += [node("MatMul", ["x", "wqkv"], ["mmqkv"]), node("Add", ["mmqkv", "bqkv"], ["pqkv"]),
                  node("Split", ["pqkv", "thirds"], ["pq", "pk", "pv"], axis=2)]
    for t in "qkv":
        inits += [init(f"w{t}", (rng.standard_normal((H, H)) / 3).astype(np.float32)),
                  init(f"b{t}", rng.normal(0, 0.3, H).astype(np.float32))]
        if packed:
            inits = inits[:-2]
        target = ("ksplit" if t == "k" else "split") if computed_split else "const_split"
        if not packed:
            source = "enc" if cross and t != "q" else "x"
            nodes += [node("MatMul", [source, f"w{t}"], [f"mm{t}"]), node("Add", [f"b{t}", f"mm{t}"], [f"p{t}"])]
        if t5:
            nodes[-1] = node("Identity", [f"mm{t}"], [f"p{t}"])  # folded away below: no bias
        nodes += [node("Reshape", [f"p{t}", target], [f"r{t}"]),
                  node("Transpose", [f"r{t}"], [f"t{t}"], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])]
    if not computed_split:
        inits.append(init("const_split", np.array([0, 0, N, D], np.int64)))
    nodes += [node("MatMul", ["tq", "tk"], ["qk"])]
    inputs = [vi("x", ["batch", "seq", H])] + ([vi("enc", ["batch", "enc", H])] if cross else [])
    if t5:
        nodes.append(node("Add", ["qk", "pos"], ["scaled"]))
        inputs.append(vi("pos", [1, N, "seq", "seq"]))
    else:
        nodes.append(node("Div" if divide else "Mul", ["qk", "c"], ["scaled"]))
    if masked:
        nodes.append(node("Add", ["scaled", "mask"], ["scores"]))
        inputs.append(vi("mask", list(mask_shape)))
    softmax_attrs = {} if softmax_axis is None else {"axis": softmax_axis}
    nodes += [node("Softmax", ["scores" if masked else "scaled"], ["p"], **softmax_attrs), node("MatMul", ["p", "tv"], ["ctx"]),
              node("Transpose", ["ctx"], ["tctx"], perm=[0, 2, 1, 3]),
              node("Reshape", ["tctx", "flat" if flat_merge else "merged"], ["y"])]
    inits.append(init("flat", np.array([-1, H], np.int64)))
    return build(nodes, inputs, [vi("y", [None, H] if flat_merge else ["batch", "seq", H])], inits, opset=opset)


def fuse(proto: onnx.ModelProto, **params: Any) -> tuple[onnx.ModelProto, TransformResult]:
    model = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    get("infer_shapes").fn(model, TransformContext())
    get("eliminate_identity").fn(model, TransformContext())
    result = get("fuse_attention").fn(model, TransformContext(), **params)
    check(model.graph)
    out = onnx_format.to_proto(model)
    onnx.checker.check_model(out)
    return out, result


FORMS = {"masked_div": {}, "masked_mul": {"divide": False}, "unmasked": {"masked": False}, "t5": {"t5": True},
         "constant_split": {"computed_split": False}, "mask_broadcast_batch": {"mask_shape": (1, 1, "seq", "seq")},
         "packed_gpt2": {"packed": True, "divide": False, "flat_merge": True},
         "cross": {"cross": True, "computed_split": False, "mask_shape": ("batch", 1, "seq", "enc")}}


@pytest.mark.parametrize("kwargs", FORMS.values(), ids=FORMS.keys())
def test_self_attention_becomes_one_attention(kwargs: dict[str, Any]) -> None:
    before = block(**kwargs)
    after, result = fuse(before, target="onnxruntime")
    assert result.stats["fused"] == 1, result.notes
    counts = ops(after)
    if kwargs.get("cross"):  # k, v from another tensor: the projections stay, MultiHeadAttention takes them
        assert counts["com.microsoft::MultiHeadAttention"] == 1 and counts["MatMul"] == 3
        for dims in ({"batch": 2, "seq": 5, "enc": 3}, {"batch": 3, "seq": 4, "enc": 6}):
            assert_same(before, after, dims=dims, seed=1)
        return
    assert counts["com.microsoft::Attention"] == 1
    assert not any(counts[op] for op in ("Softmax", "MatMul", "Transpose", "Div", "Mul", "Split"))
    assert counts["Reshape"] == (1 if kwargs.get("flat_merge") else 0)  # a flattening merge stays, after Attention
    assert counts["Add"] == (1 if kwargs.get("t5") else 0)
    (attention,) = [n for n in after.graph.node if n.op_type == "Attention"]
    attrs = {a.name: helper.get_attribute_value(a) for a in attention.attribute}
    assert attrs["num_heads"] == N and attrs["scale"] == pytest.approx(1.0 if kwargs.get("t5") else 1 / np.sqrt(D))
    weights = {t.name: t for t in after.graph.initializer}[attention.input[1]]
    assert list(weights.dims) == [H, 3 * H]
    if kwargs.get("t5"):  # position bias + mask, summed once for the kernel's attention_bias
        bias_sum = next(n for n in after.graph.node if n.output[0] == attention.input[5])
        assert bias_sum.op_type == "Add" and set(bias_sum.input) == {"pos", "mask"}
    else:
        assert (list(attention.input[5:]) == ["mask"]) == kwargs.get("masked", True)
    for dims in DIMS:
        assert_same(before, after, dims=dims, seed=1)


REFUSALS = {
    "mask_not_per_query": ({"mask_shape": ("batch", 1, 1, "seq")}, "is not (B or 1, N or 1, S, S)"),
    "softmax_over_queries": ({"softmax_axis": 2}, "Softmax over axis 2"),
    "softmax_default_axis_before_opset13": ({"softmax_axis": None, "opset": 12}, "Softmax over axis 1"),
}


@pytest.mark.parametrize("kwargs,reason", REFUSALS.values(), ids=REFUSALS.keys())
def test_refusals(kwargs: dict[str, Any], reason: str) -> None:
    before = block(**kwargs)
    after, result = fuse(before, target="onnxruntime")
    assert not result.changed and ops(after) == ops(before)
    assert any(reason in n for n in result.notes), result.notes


def test_standard_target_says_why() -> None:
    before = block()
    after, result = fuse(before)
    assert not result.changed and ops(after) == ops(before)
    assert "target=onnxruntime" in result.notes[0]
