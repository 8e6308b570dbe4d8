"""fuse_ort_contrib on hand-built graphs: FusedConv, BiasGelu/FastGelu, SkipLayerNormalization, FusedMatMul."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from ._helpers_onnx import assert_same, build, fuse, init, node, ops, vi

ORT = {"target": "onnxruntime", "skip_layer_norm": True}
MS = "com.microsoft"


def _rng() -> np.random.Generator:
    return np.random.default_rng(2)


def conv_act(act: str, opset: int = 17, **attrs: Any) -> onnx.ModelProto:
    rng = _rng()
    inits = [init("W", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             init("B", rng.standard_normal(4).astype(np.float32))]
    nodes = [node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1])]
    if act == "Clip" and opset >= 11:
        inits += [init("lo", np.float32(-0.5)), init("hi", np.float32(0.7))]
        nodes.append(node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(node(act, ["c"], ["y"], **attrs))
    return build(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], inits, opset=opset)


CONV_CASES: dict[str, tuple[str, dict[str, Any], list[float] | None]] = {
    "relu": ("Relu", {}, None),
    "tanh": ("Tanh", {}, None),
    "sigmoid": ("Sigmoid", {}, None),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.3}, [0.3]),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [0.3, 0.4]),
    "clip_inputs": ("Clip", {}, [-0.5, 0.7]),
}


@pytest.mark.parametrize("act,attrs,params", CONV_CASES.values(), ids=CONV_CASES.keys())
def test_fused_conv(act: str, attrs: dict[str, Any], params: list[float] | None) -> None:
    before = conv_act(act, **attrs)
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert result.stats == {"fused_conv": 1, "fused": 1}
    assert ops(after) == {f"{MS}::FusedConv": 1}
    (fused,) = after.graph.node
    got = {a.name: helper.get_attribute_value(a) for a in fused.attribute}
    assert got["activation"] == act.encode() and got["pads"] == [1, 1, 1, 1]
    if params is not None:
        np.testing.assert_allclose(got["activation_params"], params, rtol=1e-6)
    assert (MS, 1) in [(o.domain, o.version) for o in after.opset_import]
    assert_same(before, after)


def test_fused_conv_clip_attributes_below_opset11() -> None:
    before = conv_act("Clip", opset=10, min=-0.25, max=0.5)
    after, _ = fuse(before, "fuse_ort_contrib", **ORT)
    (fused,) = after.graph.node
    got = {a.name: helper.get_attribute_value(a) for a in fused.attribute}
    np.testing.assert_allclose(got["activation_params"], [-0.25, 0.5])
    assert_same(before, after)


def test_standard_target_changes_nothing_and_says_why() -> None:
    before = conv_act("Relu")
    after, result = fuse(before, "fuse_ort_contrib")
    assert not result.changed and ops(after) == ops(before)
    assert "target=onnxruntime" in result.notes[0]


def test_conv_read_twice_is_refused() -> None:
    before = conv_act("Relu")
    before.graph.node.append(node("Identity", ["c"], ["c_copy"]))
    before.graph.output.append(vi("c_copy", [1, 4, 8, 8]))
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert not result.changed and ops(after) == ops(before)
    assert any("outside the pattern" in n for n in result.notes)
    assert_same(before, after)


def matmul(ta: bool, tb: bool, alpha: bool, perm: list[int] | None = None) -> onnx.ModelProto:
    nodes, inits, a, b = [], [], "a", "b"
    if ta:
        nodes.append(node("Transpose", ["a"], ["at"], perm=perm or [0, 2, 1]))
        a = "at"
    if tb:
        nodes.append(node("Transpose", ["b"], ["bt"], perm=perm or [0, 2, 1]))
        b = "bt"
    nodes.append(node("MatMul", [a, b], ["mm" if alpha else "y"]))
    if alpha:
        inits.append(init("alpha", np.float32(0.125)))
        nodes.append(node("Mul", ["alpha", "mm"], ["y"]))
    return build(nodes, [vi("a", [2, 4, 5] if ta else [2, 5, 4]), vi("b", [2, 6, 4] if tb else [2, 4, 6])],
                 [vi("y", [2, 5, 6])], inits)


@pytest.mark.parametrize("ta,tb,alpha", [(0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 0), (0, 1, 1), (1, 1, 1)])
def test_fused_matmul(ta: int, tb: int, alpha: int) -> None:
    before = matmul(bool(ta), bool(tb), bool(alpha))
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert result.stats["fused"] == 1
    assert ops(after) == {f"{MS}::FusedMatMul": 1}
    got = {a.name: helper.get_attribute_value(a) for a in after.graph.node[0].attribute}
    assert (got["transA"], got["transB"]) == (ta, tb)
    assert got["alpha"] == pytest.approx(0.125 if alpha else 1.0)
    assert_same(before, after)


def test_transpose_other_than_last_two_is_left_alone() -> None:
    before = build([node("Transpose", ["a"], ["at"], perm=[1, 0, 2]), node("MatMul", ["at", "b"], ["y"])],
                   [vi("a", [5, 2, 4]), vi("b", [2, 4, 6])], [vi("y", [2, 5, 6])])
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert not result.changed and ops(after) == ops(before)


def bias_gelu(kind: str) -> onnx.ModelProto:
    """Add(x, b) then a Gelu of ``kind``: none20, tanh20, ms_gelu, ms_fast_gelu."""
    bias = init("bias", _rng().standard_normal(8).astype(np.float32))
    add = node("Add", ["bias", "x"], ["xb"])
    if kind.startswith("ms"):
        op = "Gelu" if kind == "ms_gelu" else "FastGelu"
        act = helper.make_node(op, ["xb"], ["y"], domain=MS, name="act")
        graph = helper.make_graph([add, act], "g", [vi("x", [2, 3, 8])], [vi("y", [2, 3, 8])], [bias])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                                  ir_version=10)
        return model
    approx = "tanh" if kind == "tanh20" else "none"
    return build([add, node("Gelu", ["xb"], ["y"], approximate=approx)], [vi("x", [2, 3, 8])],
                 [vi("y", [2, 3, 8])], [bias], opset=20)


@pytest.mark.parametrize("kind,op", [("none20", "BiasGelu"), ("tanh20", "FastGelu"),
                                     ("ms_gelu", "BiasGelu"), ("ms_fast_gelu", "FastGelu")])
def test_bias_gelu(kind: str, op: str) -> None:
    before = bias_gelu(kind)
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert result.stats["fused"] == 1
    assert ops(after) == {f"{MS}::{op}": 1}
    assert list(after.graph.node[0].input) == ["x", "bias"]
    assert_same(before, after)


def skip_ln(*, with_bias: bool = False, reuse_sum: bool = False, axis: int = -1, beta: bool = True,
            shape: tuple[int, ...] = (2, 3, 8)) -> onnx.ModelProto:
    rng = _rng()
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
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
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
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert not result.changed and ops(after) == ops(before)
    assert any("not over the last axis only" in n for n in result.notes), result.notes


@pytest.mark.parametrize("which", ["a", "s"])
def test_skip_layer_norm_broadcast_skip_goes_second(which: str) -> None:
    """A (1, S, H) summand is what the kernel can broadcast: it becomes the skip, whichever side it was."""
    before = skip_ln()
    position = [i.name for i in before.graph.input].index(which)
    before.graph.input[position].CopyFrom(vi(which, [1, 3, 8]))
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert result.stats["fused"] == 1
    fused = next(n for n in after.graph.node if n.op_type == "SkipLayerNormalization")
    assert fused.input[1] == which
    assert_same(before, after)


def test_skip_layer_norm_with_unsupported_broadcast_is_refused() -> None:
    before = skip_ln()
    before.graph.input[1].CopyFrom(vi("s", [2, 1, 8]))  # broadcast along the sequence: not the kernel's
    after, result = fuse(before, "fuse_ort_contrib", **ORT)
    assert not result.changed and ops(after) == ops(before)
    assert any("nor a (1, S, H) or (S, H) skip of the other" in n for n in result.notes), result.notes
    assert_same(before, after)


def test_scale_that_could_broadcast_is_refused() -> None:
    before = matmul(False, True, True)
    before.graph.initializer[0].CopyFrom(init("alpha", np.full([1], 0.125, np.float32)))
    after, result = fuse(before, "fuse_ort_contrib", **ORT)  # the product's shape is not known in the IR
    assert result.stats == {"fused_matmul_tb": 1, "fused": 1}  # the Transpose still folds, the Mul stays
    assert ops(after) == {f"{MS}::FusedMatMul": 1, "Mul": 1}
    assert any("may broadcast" in n for n in result.notes), result.notes
    assert_same(before, after)
