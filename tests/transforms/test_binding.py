"""Binding --inputs/--outputs: unknown names are errors, named ONNX inputs cut the graph,
TF outputs are guessed with a warning."""

from __future__ import annotations

import pytest

from graphwright.errors import TransformError
from graphwright.ir import DType, Graph, Model, Node, Value
from graphwright.transforms import run_pipeline

from ._generic import tf_graph


def test_outputs_must_exist() -> None:
    model, _ = tf_graph()
    with pytest.raises(TransformError, match=r"--outputs names 'softmax'.*no node 'softmax'"):
        run_pipeline(model, "strip_unused_nodes", outputs=["softmax"])


def test_onnx_inputs_cut_the_graph() -> None:
    g = Graph("onnx")
    x = Value("x", DType.FLOAT32, (1, 4))
    g.set_inputs([x])
    a = g.append(Node("Relu", [x], dialect="onnx", name="relu", outputs=[Value("a", DType.FLOAT32, (1, 4))]))
    b = g.append(Node("Neg", [a.output], dialect="onnx", name="neg", outputs=[Value("b", DType.FLOAT32, (1, 4))]))
    g.set_outputs([b.output])
    model = Model(g, "onnx")
    run_pipeline(model, "strip_unused_nodes", inputs=["a"])
    assert [node.op for node in model.graph] == ["Neg"]
    assert [v.name for v in model.graph.inputs] == ["a"]
    assert b.input(0) is model.graph.inputs[0]


def test_tf_outputs_are_guessed_with_a_warning() -> None:
    model, _ = tf_graph()
    report = run_pipeline(model, "strip_unused_nodes")
    assert any("no --outputs given" in w and "(out)" in w for w in report.warnings)
    assert [v.producer.name for v in model.graph.outputs] == ["out"]  # SaveV2 is never an output
    assert model.graph.find_node("save") is None
