"""inline_local_functions and simplify(inline_functions=...): bodies spliced in, outputs on onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify

from .._onnx_build import F, apply, init, ops, same_outputs, vi

mk = helper.make_node


def _model() -> tuple:
    """y = my.ScaledRelu<alpha=2>(x, W) + my.ScaledRelu<alpha=3>(x, W); ScaledRelu = Mul(Relu(MatMul(x, W)), alpha)."""
    const = mk("Constant", [], ["a"])  # value_float = the call's alpha (an attribute reference)
    const.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    const.attribute[0].ref_attr_name = "alpha"
    body = [mk("MatMul", ["X", "W"], ["h"]), mk("Relu", ["h"], ["r"]), const, mk("Mul", ["r", "a"], ["Y"])]
    fn = helper.make_function("my", "ScaledRelu", ["X", "W"], ["Y"], body,
                              [helper.make_opsetid("", 17)], attributes=["alpha"])
    nodes = [mk("ScaledRelu", ["x", "w"], ["p"], domain="my", alpha=2.0),
             mk("ScaledRelu", ["x", "w"], ["q"], domain="my", alpha=3.0), mk("Add", ["p", "q"], ["y"])]
    w = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    graph = helper.make_graph(nodes, "g", [vi("x", F, [2, 4])], [vi("y", F, [2, 5]), vi("q", F, [2, 5])],
                              [init("w", w)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my", 1)],
                              functions=[fn], ir_version=8)
    onnx.checker.check_model(proto)
    return onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None), proto


def test_calls_become_bodies_and_functions_are_dropped() -> None:
    m, p = _model()
    result = apply(m, "inline_local_functions")
    assert result.changed and result.stats == {"calls_inlined": 2, "functions_dropped": 1}
    assert "ScaledRelu" not in ops(m) and ops(m).count("MatMul") == 2
    assert [v.name for v in m.graph.outputs] == ["y", "q"]
    assert not onnx_format.to_proto(m).functions
    same_outputs(p, m)


def test_simplify_keeps_functions_unless_asked() -> None:
    kept, p = _model()
    simplify(kept)
    assert ops(kept).count("ScaledRelu") == 2 and len(onnx_format.to_proto(kept).functions) == 1
    same_outputs(p, kept)
    inlined, _ = _model()
    _, report = simplify(inlined, inline_functions=True)
    assert "ScaledRelu" not in ops(inlined)
    assert any(r.name == "inline_local_functions" and r.changed for r in report.passes)
    assert ops(inlined).count("MatMul") == 1  # the two identical MatMul(x, w) merged once inlined
    same_outputs(p, inlined)


def test_model_without_functions_is_unchanged() -> None:
    m, _ = _model()
    apply(m, "inline_local_functions")
    assert not apply(m, "inline_local_functions").changed
