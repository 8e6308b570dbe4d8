"""merge_duplicate_nodes: equal constants merge, then the readers they make equal."""

from __future__ import annotations

import graphwright as gw
from graphwright.ir import Node
from graphwright.transforms import run_pipeline

from .._generic import _apply, _model, tf_graph


def test_merge_duplicate_nodes_merges_constants_then_their_readers() -> None:
    model, n = tf_graph()
    n["a2"].replace_input(0, n["id2"].output)  # a2 = id2 + k2 == a1 = id2 + k1 once k1/k2 merge
    n["out"].replace_input(0, n["a2"].output)
    n["k2"].add_control_input(n["init"])  # same control inputs as k1, else they are not duplicates
    extra = model.graph.append(Node("AddV2", [n["a1"].output, n["a2"].output], dialect="tf", name="sum"))
    model.graph.append(Node("Identity", [extra.output], dialect="tf", name="out2"))
    report = run_pipeline(model, "merge_duplicate_nodes", outputs=["out", "out2"])
    names = [node.name for node in model.graph]
    assert "k2" not in names and "a2" not in names
    assert extra.inputs == (n["a1"].output, n["a1"].output)
    assert report.steps[0].stats["nodes_merged"] == 2


def test_merge_duplicate_nodes_shrinks_bert() -> None:
    path = _model("onnx_bert")
    before = len(gw.load(path).graph)
    model = _apply(path, "merge_duplicate_nodes")
    assert len(model.graph) < before - 10  # dozens of identical Constant nodes in the export
