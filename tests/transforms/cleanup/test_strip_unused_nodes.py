"""strip_unused_nodes: named inputs become placeholders, everything the outputs do not need goes."""

from __future__ import annotations

import numpy as np

import graphwright as gw
from graphwright.ir import DType, check
from graphwright.transforms import run_pipeline

from .._generic import _apply, _model, _outputs, tf_graph


def test_strip_unused_nodes_replaces_a_non_placeholder_input_and_cuts_above_it() -> None:
    model, n = tf_graph()
    report = run_pipeline(model, 'strip_unused_nodes(type=float, shape="1,8,8,3")', inputs=["x"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "decode" not in names and "raw" not in names and "save" not in names
    x = model.graph.find_node("x")
    assert x is not None and x.op == "Placeholder"
    assert x.attr("dtype") is DType.FLOAT32 and x.attr("shape") == (1, 8, 8, 3)
    assert n["id1"].input(0) is x.output
    assert "init" in names  # control input of a needed Const is kept
    assert report.steps[0].stats["placeholders_added"] == 1
    check(model.graph)


def test_strip_unused_nodes_per_name_types() -> None:
    model, _ = tf_graph()
    run_pipeline(model, 'strip_unused_nodes(name=x, type_for_name=int32, shape_for_name="2,-1")',
                 inputs=["x:0"], outputs=["out"])
    x = model.graph.find_node("x")
    assert x is not None and x.attr("dtype") is DType.INT32 and x.attr("shape") == (2, None)


def test_strip_to_one_output_removes_the_other_branch() -> None:
    path = _model("onnx_bert")
    full = gw.load(path)
    model = _apply(path, "strip_unused_nodes", outputs=["last_hidden_state"])
    assert [v.name for v in model.graph.outputs] == ["last_hidden_state"]
    assert len(model.graph) < len(full.graph)
    assert "Tanh" not in {n.op for n in model.graph}  # the pooler's activation is gone
    np.testing.assert_array_equal(_outputs(model)["last_hidden_state"], _outputs(path)["last_hidden_state"])
