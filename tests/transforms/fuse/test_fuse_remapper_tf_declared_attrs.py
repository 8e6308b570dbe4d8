"""Fused nodes carry exactly the attributes TensorFlow's op definitions declare."""

from __future__ import annotations

from pathlib import Path

import graphwright as gw
from graphwright.formats.graphdef.op_registry import op_def

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.pb"


def test_fused_nodes_have_no_undeclared_attributes() -> None:
    model = gw.load(EXAMPLE)
    gw.transform(model, "optimize_for_deployment fuse_remapper", outputs=["Identity"])
    fused = [n for n in model.graph if n.op in ("_FusedConv2D", "_FusedMatMul")]
    assert {n.op for n in fused} == {"_FusedConv2D", "_FusedMatMul"}
    for node in fused:
        declared = {a.name for a in op_def(node.op).attr}
        assert set(node.attrs) <= declared, (node.name, set(node.attrs) - declared)
