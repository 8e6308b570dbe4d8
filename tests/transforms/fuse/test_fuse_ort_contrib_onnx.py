"""fuse_ort_contrib on hand-built graphs: FusedConv, BiasGelu/FastGelu, FusedMatMul."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from ._helpers_onnx import assert_same, build, fuse, init, node, ops, vi

ORT = {"target": "onnxruntime"}
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


def test_scale_that_could_broadcast_is_refused() -> None:
    before = matmul(False, True, True)
    before.graph.initializer[0].CopyFrom(init("alpha", np.full([1], 0.125, np.float32)))
    after, result = fuse(before, "fuse_ort_contrib", **ORT)  # the product's shape is not known in the IR
    assert result.stats == {"fused_matmul_tb": 1, "fused": 1}  # the Transpose still folds, the Mul stays
    assert ops(after) == {f"{MS}::FusedMatMul": 1, "Mul": 1}
    assert any("may broadcast" in n for n in result.notes), result.notes
    assert_same(before, after)
