"""fuse_skip_layer_norm: SkipLayerNormalization and SkipSimplifiedLayerNormalization on hand-built
graphs, static and dynamic shapes, and the shape probe that decides when the IR's shapes can't.

The graphs hold onnxruntime's own ``SimplifiedLayerNormalization`` (default domain), which
``onnx.checker`` does not know, so every model here is checked by running it on onnxruntime,
at two sizes of its dynamic dims.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphwright.transforms.fuse.fuse_skip_layer_norm_onnx  # noqa: F401 - registers fuse_skip_layer_norm
from graphwright.formats import onnx as onnx_format
from graphwright.ir import check
from graphwright.transforms import TransformContext, TransformResult, get

from ._helpers_onnx import assert_same, build, init, node, ops, vi
from ._helpers_onnx import fuse as fuse_checked

H = 8
MS = "com.microsoft"
DIMS = ({"batch": 2, "seq": 5}, {"batch": 3, "seq": 4})


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto],
          outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [vi(o, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def fuse(proto: onnx.ModelProto, **params: Any) -> tuple[onnx.ModelProto, TransformResult]:
    """infer_shapes (as simplify runs before its fusions), then fuse_skip_layer_norm(target=onnxruntime)."""
    m = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    get("infer_shapes").fn(m, TransformContext())
    result = get("fuse_skip_layer_norm").fn(m, TransformContext(), target="onnxruntime", **params)
    check(m.graph)
    return onnx_format.to_proto(m), result


def same_at_two_sizes(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    for dims in DIMS:
        assert_same(before, after, dims=dims)


def params(rms: bool) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(4)
    out = [init("gamma", rng.uniform(0.5, 1.5, H).astype(np.float32)), init("bias", rng.normal(0, 0.3, H).astype(np.float32))]
    return out if rms else [*out, init("beta", rng.normal(0, 0.3, H).astype(np.float32))]


def norm(rms: bool, src: str, dst: str) -> onnx.NodeProto:
    if rms:
        return node("SimplifiedLayerNormalization", [src, "gamma"], [dst], axis=-1, epsilon=1e-6)
    return node("LayerNormalization", [src, "gamma", "beta"], [dst], axis=-1, epsilon=1e-6)


def residual(rms: bool, skip_from: str = "reshape", reuse_sum: bool = True) -> onnx.ModelProto:
    """y = norm(x + (relu(x)·W + bias)) with the dense output's shape lost on the way (a Reshape whose
    target is computed from Shape), as dynamic exports lose it; the sum also feeds a second norm."""
    rng = np.random.default_rng(5)
    inits = [*params(rms), init("w", rng.standard_normal((H, H)).astype(np.float32) / 3),
             init("hid", np.array([H], np.int64)), init("zero", np.array([0], np.int64)),
             init("two", np.array([2], np.int64)), init("one", np.array([1], np.int64))]
    nodes = [node("Relu", ["x"], ["r"]), node("MatMul", ["r", "w"], ["mm"]),
             node("Shape", ["x"], ["shp"]), node("Slice", ["shp", "zero", "two"], ["bs"]),
             node("Concat", ["bs", "hid"], ["target"], axis=0)]
    if skip_from == "reshape":
        nodes.append(node("Reshape", ["mm", "target"], ["dense"]))
    else:  # the first position only, broadcast over the sequence by the Add: not the kernel's broadcast
        nodes.append(node("Slice", ["mm", "zero", "one", "one"], ["dense"]))
    nodes += [node("Add", ["dense", "bias"], ["biased"]), node("Add", ["x", "biased"], ["sum"]), norm(rms, "sum", "y")]
    outputs: tuple[str, ...] = ("y",)
    if reuse_sum:
        nodes.append(node("Mul", ["sum", "y"], ["z"]))
        outputs = ("y", "z")
    return model(nodes, [vi("x", ["batch", "seq", H])], inits, outputs)


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "simplified"])
def test_dynamic_residual_fuses_after_the_shape_probe(rms: bool) -> None:
    before = residual(rms)
    after, result = fuse(before)
    fused_op = "SkipSimplifiedLayerNormalization" if rms else "SkipLayerNormalization"
    assert ops(after)[f"{MS}::{fused_op}"] == 1, result.notes
    assert ops(after)["Add"] == 0
    fused = next(n for n in after.graph.node if n.op_type == fused_op)
    assert list(fused.input)[-1] == "bias"  # the bias Add folded in too
    mul = next(n for n in after.graph.node if n.op_type == "Mul")
    assert mul.input[0] == fused.output[3]  # the residual stream reads the sum from output 3
    same_at_two_sizes(before, after)


def test_summands_that_differ_at_run_time_are_refused_with_their_shapes() -> None:
    before = residual(rms=True, skip_from="slice")
    after, result = fuse(before)
    assert ops(after) == ops(before)
    assert any("at run time they are [(2, 5, 8), (3, 7, 8)] and [(2, 1, 8), (3, 1, 8)]" in n
               for n in result.notes), result.notes
    same_at_two_sizes(before, after)


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "simplified"])
def test_each_kind_can_be_left_alone(rms: bool) -> None:
    before = residual(rms=rms)
    after, result = fuse(before, **({"simplified": False} if rms else {"layer_norm": False}))
    assert ops(after) == ops(before) and not result.changed


def test_not_part_of_simplify() -> None:
    """onnxruntime's CPU skip kernels are slower than what they replace (see the transform's docstring)."""
    from graphwright.simplify.passes import ONNX_FUSIONS

    assert "fuse_skip_layer_norm" not in ONNX_FUSIONS


def position_embedding() -> onnx.ModelProto:
    """x (batch, seq, H) + table[:, :seq] — a (1, seq, H) slice of a position table, shape unknown to the IR."""
    rng = np.random.default_rng(6)
    inits = [*params(rms=True), init("table", rng.standard_normal((1, 16, H)).astype(np.float32)),
             init("one", np.array([1], np.int64)), init("two", np.array([2], np.int64)),
             init("zero", np.array([0], np.int64))]
    nodes = [node("Shape", ["x"], ["shp"]), node("Slice", ["shp", "one", "two"], ["seq_len"]),
             node("Slice", ["table", "zero", "seq_len", "one"], ["pos"]),
             node("Relu", ["x"], ["r"]), node("Add", ["pos", "r"], ["sum"]), norm(True, "sum", "y")]
    return model(nodes, [vi("x", ["batch", "seq", H])], inits)


def test_position_embedding_becomes_the_broadcast_skip() -> None:
    before = position_embedding()
    after, result = fuse(before)
    assert ops(after)[f"{MS}::SkipSimplifiedLayerNormalization"] == 1, result.notes
    fused = next(n for n in after.graph.node if n.op_type == "SkipSimplifiedLayerNormalization")
    assert list(fused.input[:2]) == ["r", "pos"]  # (1, seq, H) can only be the skip
    same_at_two_sizes(before, after)


def test_probe_failure_is_the_refusal_reason() -> None:
    """An input that can't be fed (no rank) leaves the sum alone and says why."""
    before = residual(rms=True)
    before.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    after, result = fuse(before)
    assert ops(after) == ops(before)
    assert any("no known rank" in n for n in result.notes), result.notes


# -- static shapes: onnx.checker-valid graphs (LayerNormalization at opset 17) ------------
def skip_ln(*, with_bias: bool = False, reuse_sum: bool = False, axis: int = -1, beta: bool = True,
            shape: tuple[int, ...] = (2, 3, 8)) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    hidden = shape[-1] if axis == -1 else int(np.prod(shape[axis:]))
    norm = (hidden,) if axis == -1 else shape[axis:]
    inits = [init("gamma", rng.standard_normal(norm).astype(np.float32))]
    if beta:
        inits.append(init("beta", rng.standard_normal(norm).astype(np.float32)))
    nodes, a = [], "a"
    if with_bias:
        inits.append(init("bias", rng.standard_normal(shape[-1]).astype(np.float32)))
        nodes.append(node("Add", ["a", "bias"], ["ab"]))
        a = "ab"
    nodes.append(node("Add", ["s", a], ["sum"]))
    nodes.append(node("LayerNormalization", ["sum", "gamma"] + (["beta"] if beta else []), ["y"],
                      axis=axis, epsilon=1e-6))
    outputs = [vi("y", list(shape))]
    if reuse_sum:  # pre-LN style: the residual stream reads the sum too
        nodes.append(node("Mul", ["sum", "y"], ["z"]))
        outputs.append(vi("z", list(shape)))
    return build(nodes, [vi("a", list(shape)), vi("s", list(shape))], outputs, inits, opset=17)


SKIP_CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "no_beta": {"beta": False},
    "with_bias": {"with_bias": True},
    "with_bias_no_beta": {"with_bias": True, "beta": False},
    "sum_also_read": {"reuse_sum": True},
    "rank2": {"shape": (6, 8)},
}


@pytest.mark.parametrize("kwargs", SKIP_CASES.values(), ids=SKIP_CASES.keys())
def test_skip_layer_norm(kwargs: dict[str, Any]) -> None:
    before = skip_ln(**kwargs)
    after, result = fuse_checked(before, "fuse_skip_layer_norm", target="onnxruntime")
    assert result.stats["fused"] == 1
    expected = {f"{MS}::SkipLayerNormalization": 1}
    if kwargs.get("reuse_sum"):
        expected["Mul"] = 1
    assert ops(after) == expected
    fused = next(n for n in after.graph.node if n.op_type == "SkipLayerNormalization")
    assert {fused.input[0], fused.input[1]} == {"a", "s"}
    assert len(fused.input) == (5 if kwargs.get("with_bias") else 4 if kwargs.get("beta", True) else 3)
    if kwargs.get("reuse_sum"):
        mul = next(n for n in after.graph.node if n.op_type == "Mul")
        assert mul.input[0] == fused.output[3]
    assert_same(before, after)


def test_skip_layer_norm_over_two_axes_is_refused() -> None:
    before = skip_ln(axis=-2)
    after, result = fuse_checked(before, "fuse_skip_layer_norm", target="onnxruntime")
    assert not result.changed and ops(after) == ops(before)
    assert any("not over the last axis only" in n for n in result.notes), result.notes


@pytest.mark.parametrize("which", ["a", "s"])
def test_skip_layer_norm_broadcast_skip_goes_second(which: str) -> None:
    """A (1, S, H) summand is what the kernel can broadcast: it becomes the skip, whichever side it was."""
    before = skip_ln()
    position = [i.name for i in before.graph.input].index(which)
    before.graph.input[position].CopyFrom(vi(which, [1, 3, 8]))
    after, result = fuse_checked(before, "fuse_skip_layer_norm", target="onnxruntime")
    assert result.stats["fused"] == 1
    fused = next(n for n in after.graph.node if n.op_type == "SkipLayerNormalization")
    assert fused.input[1] == which
    assert_same(before, after)


def test_skip_layer_norm_with_unsupported_broadcast_is_refused() -> None:
    before = skip_ln()
    before.graph.input[1].CopyFrom(vi("s", [2, 1, 8]))  # broadcast along the sequence: not the kernel's
    after, result = fuse_checked(before, "fuse_skip_layer_norm", target="onnxruntime")
    assert not result.changed and ops(after) == ops(before)
    assert any("nor a (1, S, H) or (S, H) skip of the other" in n for n in result.notes), result.notes
    assert_same(before, after)
