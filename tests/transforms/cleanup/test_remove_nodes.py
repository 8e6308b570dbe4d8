"""remove_nodes: a removed node's readers and control edges move to its input; outputs stay."""

from __future__ import annotations

from graphwright.transforms import run_pipeline

from .._generic import tf_graph


def test_remove_nodes_moves_control_edges_to_the_input() -> None:
    model, n = tf_graph()
    run_pipeline(model, "remove_nodes(op=Identity)", inputs=["raw"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "id1" not in names and "id2" not in names and "out" in names  # outputs are never removed
    assert n["a1"].input(0) is n["x"].output
    assert n["out"].control_inputs == (n["x"],)
