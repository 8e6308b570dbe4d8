"""fuse_rms_norm on hand-built graphs: every written-out RMSNorm form fuses and computes the same on onnxruntime.

Below opset 23 the result is onnxruntime's own ``SimplifiedLayerNormalization`` (default domain,
unknown to ``onnx.checker``), so these models are checked by loading and running them on
onnxruntime instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import graphwright.transforms.fuse.fuse_rms_norm_onnx  # noqa: F401 - registers fuse_rms_norm
from graphwright.formats import onnx as onnx_format
from graphwright.ir import check
from graphwright.transforms import TransformContext, TransformResult, get

from ._helpers_onnx import assert_same, init, node, ops, vi

SHAPE = (2, 3, 8)


def rms(opset: int = 17, *, inverse: str = "reciprocal", square: str = "pow", gamma: Sequence[int] | None = (8,),
        axes: Sequence[int] = (-1,), two: float = 2.0, eps: float = 1e-6, leak: bool = False) -> onnx.ModelProto:
    """``x · 1/√(mean(x²) + ε) · γ`` as T5's exporters write it; ``inverse``: reciprocal, div_one, div."""
    rng = np.random.default_rng(3)
    inits = [init("eps", np.float32(eps))]
    nodes = []
    if square == "pow":
        inits.append(init("two", np.float32(two)))
        nodes.append(node("Pow", ["x", "two"], ["sq"]))
    else:
        nodes.append(node("Mul", ["x", "x"], ["sq"]))
    if opset >= 18:
        inits.append(init("axes", np.array(axes, np.int64)))
        nodes.append(node("ReduceMean", ["sq", "axes"], ["ms"]))
    else:
        nodes.append(node("ReduceMean", ["sq"], ["ms"], axes=list(axes)))
    nodes += [node("Add", ["ms", "eps"], ["mse"]), node("Sqrt", ["mse"], ["r"])]
    if inverse == "reciprocal":
        nodes += [node("Reciprocal", ["r"], ["inv"]), node("Mul", ["x", "inv"], ["n"])]
    elif inverse == "div_one":
        inits.append(init("one", np.float32(1.0)))
        nodes += [node("Div", ["one", "r"], ["inv"]), node("Mul", ["inv", "x"], ["n"])]
    else:
        nodes.append(node("Div", ["x", "r"], ["n"]))
    last = "n"
    if gamma is not None:
        inits.append(init("g", rng.uniform(0.5, 1.5, gamma).astype(np.float32)))
        nodes.append(node("Mul", ["g", "n"], ["y"]))
        last = "y"
    nodes.append(node("Identity", [last], ["out"]))
    outputs = [vi("out", list(SHAPE))]
    if leak:
        nodes.append(node("Identity", ["r"], ["leak"]))
        outputs.append(vi("leak", None))
    graph = helper.make_graph(nodes, "g", [vi("x", list(SHAPE))], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def fuse(proto: onnx.ModelProto, **params: Any) -> tuple[onnx.ModelProto, TransformResult]:
    model = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    result = get("fuse_rms_norm").fn(model, TransformContext(), **params)
    check(model.graph)
    return onnx_format.to_proto(model), result


FORMS: dict[str, dict[str, Any]] = {
    "reciprocal": {},
    "div_one": {"inverse": "div_one"},
    "div": {"inverse": "div"},
    "square_as_mul": {"square": "mul"},
    "no_gamma": {"gamma": None},
    "axes_input_opset18": {"opset": 18},
}


@pytest.mark.parametrize("kwargs", FORMS.values(), ids=FORMS.keys())
def test_onnxruntime_target_emits_simplified_layer_norm(kwargs: dict[str, Any]) -> None:
    before = rms(**kwargs)
    after, result = fuse(before, target="onnxruntime")
    assert result.stats["fused"] == 1
    assert ops(after) == {"SimplifiedLayerNormalization": 1, "Identity": 1}
    fused = next(n for n in after.graph.node if n.op_type == "SimplifiedLayerNormalization")
    attrs = {a.name: helper.get_attribute_value(a) for a in fused.attribute}
    assert attrs["axis"] == -1 and attrs["epsilon"] == pytest.approx(1e-6)
    assert fused.domain == ""
    assert not any(t.name in ("two", "eps", "one", "axes") for t in after.graph.initializer)
    assert_same(before, after)


def test_opset23_emits_standard_rms_normalization() -> None:
    before = rms(23, axes=(1, 2), gamma=(3, 8))
    onnx.checker.check_model(before)
    after, result = fuse(before)
    assert result.stats["fused"] == 1
    assert ops(after) == {"RMSNormalization": 1, "Identity": 1}
    onnx.checker.check_model(after)
    fused = next(n for n in after.graph.node if n.op_type == "RMSNormalization")
    assert {a.name: helper.get_attribute_value(a) for a in fused.attribute}["axis"] == -2
    assert_same(before, after)


REFUSALS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "standard_below_23": ({}, {}, "opset 17 < 23"),
    "cube": ({"two": 3.0}, {"target": "onnxruntime"}, "Pow exponent is 3.0"),
    "two_axes_for_contrib": ({"axes": (1, 2), "gamma": (3, 8)}, {"target": "onnxruntime"}, "last axis only"),
    "leading_axis": ({"axes": (0,)}, {"target": "onnxruntime"}, "not over the trailing axes"),
    "rms_read_elsewhere": ({"leak": True}, {"target": "onnxruntime"}, "outside the pattern"),
}


@pytest.mark.parametrize("kwargs,params,reason", REFUSALS.values(), ids=REFUSALS.keys())
def test_refusal_leaves_graph_alone(kwargs: dict[str, Any], params: dict[str, Any], reason: str) -> None:
    before = rms(**kwargs)
    after, result = fuse(before, **params)
    assert not result.changed and ops(after) == ops(before)
    assert any(reason in note for note in result.notes), result.notes
    assert_same(before, after)


def test_layer_norm_is_not_mistaken_for_rms_norm() -> None:
    """A LayerNorm's tail is an RMSNorm of x - mean: simplify fuses the LayerNorm first, whole."""
    from . import _graphs_onnx as graphs

    before = graphs.layer_norm(opset=17)
    model = onnx_format.from_proto(onnx.load_from_string(before.SerializeToString()), None)
    for name in ("fuse_layer_norm", "fuse_rms_norm"):
        get(name).fn(model, TransformContext(), target="onnxruntime")
    after = onnx_format.to_proto(model)
    assert ops(after) == {"LayerNormalization": 1, "Identity": 1}
    assert_same(before, after)
