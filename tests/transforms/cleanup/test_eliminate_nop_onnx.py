"""eliminate_nop: x*1, x+0, same-shape Reshape ... and their look-alikes on hand-built graphs, checked on
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


NOPS = [
    ("Mul", ["x", "one"], {}, {"one": np.ones([3], np.float32)}),                  # x*1
    ("Mul", ["one", "x"], {}, {"one": np.ones([1, 3], np.float32)}),               # 1*x
    ("Add", ["x", "zero"], {}, {"zero": np.zeros([], np.float32)}),                # x+0
    ("Sub", ["x", "zero"], {}, {"zero": np.zeros([1], np.float32)}),               # x-0
    ("Div", ["x", "one"], {}, {"one": np.ones([], np.float32)}),                   # x/1
    ("Pow", ["x", "one"], {}, {"one": np.ones([], np.float32)}),                   # x**1
    ("Reshape", ["x", "shape"], {}, {"shape": np.array([0, -1], np.int64)}),       # same shape
    ("Cast", ["x"], {"to": TensorProto.FLOAT}, {}),
    ("Transpose", ["x"], {"perm": [0, 1]}, {}),
    ("Slice", ["x", "s", "e"], {}, {"s": np.array([0], np.int64), "e": np.array([2**63 - 1], np.int64)}),
    ("Pad", ["x", "pads"], {}, {"pads": np.zeros([4], np.int64)}),
    ("Expand", ["x", "shape"], {}, {"shape": np.array([1, 3], np.int64)}),
    ("Concat", ["x"], {"axis": 0}, {}),
    ("Flatten", ["x"], {"axis": 1}, {}),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts"), NOPS, ids=[f"{n[0]}-{i}" for i, n in enumerate(NOPS)])
def test_nop_is_removed(op: str, inputs: list[str], attrs: dict, consts: dict) -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk(op, inputs, ["n"], **attrs), mk("Neg", ["n"], ["y"])]
    m, p = model(nodes, [vi("a", F, [2, 3])], [vi("y", F, [2, 3])], [init(k, v) for k, v in consts.items()])
    apply(m, "infer_shapes")
    result = apply(m, "eliminate_nop")
    assert result.changed and ops(m) == ["Relu", "Neg"]
    same_outputs(p, m)


KEPT = [
    ("Mul", ["x", "one"], {"one": np.ones([2, 2, 3], np.float32)}),   # broadcasting adds a dim
    ("Add", ["x", "zero"], {"zero": np.zeros([4, 1, 1], np.float32)}),  # broadcasting grows the shape
    ("Mul", ["x", "two"], {"two": np.full([3], 2.0, np.float32)}),     # not a unit
    ("Sub", ["zero", "x"], {"zero": np.zeros([3], np.float32)}),       # 0-x is -x
    ("Reshape", ["x", "shape"], {"shape": np.array([3, 2], np.int64)}),
    ("Slice", ["x", "s", "e"], {"s": np.array([0], np.int64), "e": np.array([1], np.int64)}),
]


@pytest.mark.parametrize(("op", "inputs", "consts"), KEPT, ids=[f"{k[0]}-{i}" for i, k in enumerate(KEPT)])
def test_look_alike_that_is_not_a_nop_stays(op: str, inputs: list[str], consts: dict) -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk(op, inputs, ["y"])]
    m, p = model(nodes, [vi("a", F, [2, 3])], [vi("y", F, None)], [init(k, v) for k, v in consts.items()])
    apply(m, "infer_shapes")
    assert not apply(m, "eliminate_nop").changed
    same_outputs(p, m)


def test_skip_turns_a_rule_off_and_unknown_rules_are_errors() -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk("Cast", ["x"], ["y"], to=TensorProto.FLOAT)]
    m, _ = model(nodes, [vi("a", F, [2])], [vi("y", F, [2])])
    apply(m, "infer_shapes")
    assert not apply(m, "eliminate_nop", skip=["eliminate_nop_cast"]).changed
    from graphwright.errors import TransformError

    with pytest.raises(TransformError, match="unknown rule 'nope'"):
        apply(m, "eliminate_nop", skip=["nope"])


def test_a_large_zero_bias_under_a_dynamic_batch_is_removed() -> None:
    """EfficientFormer's folded attention bias: scores[N, 8, 49, 49] + zeros[8, 49, 49] (19208 elements)."""
    nodes = [mk("Relu", ["a"], ["x"]), mk("Add", ["x", "bias"], ["s"]), mk("Softmax", ["s"], ["y"], axis=-1)]
    bias = init("bias", np.zeros([8, 49, 49], np.float32))
    m, p = model(nodes, [vi("a", F, ["N", 8, 49, 49])], [vi("y", F, ["N", 8, 49, 49])], [bias])
    apply(m, "infer_shapes")
    assert apply(m, "eliminate_nop").changed and ops(m) == ["Relu", "Softmax"]
    for n in (1, 3):
        same_outputs(p, m, dims={"N": n})


def test_a_large_bias_zero_but_for_one_element_stays() -> None:
    values = np.zeros([8, 49, 49], np.float32)
    values[7, 48, 48] = 1e-3  # the first element is a unit: the whole array decides
    nodes = [mk("Relu", ["a"], ["x"]), mk("Add", ["x", "bias"], ["y"])]
    m, p = model(nodes, [vi("a", F, [2, 8, 49, 49])], [vi("y", F, [2, 8, 49, 49])], [init("bias", values)])
    apply(m, "infer_shapes")
    assert not apply(m, "eliminate_nop").changed
    same_outputs(p, m)
