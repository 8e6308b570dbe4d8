"""obfuscate_names: graph inputs and outputs keep their names, everything else gets a short one."""

from __future__ import annotations

import graphwright as gw
from graphwright.transforms import run_pipeline

from .._generic import _apply, _model, tf_graph


def test_obfuscate_names_keeps_inputs_and_outputs() -> None:
    model, _ = tf_graph()
    run_pipeline(model, "obfuscate_names", inputs=["raw"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "raw" in names and "out" in names
    assert len(set(names)) == len(names)
    assert all(len(name) <= 2 for name in names if name not in ("raw", "out"))


def test_obfuscate_keeps_io_names_and_hides_the_rest() -> None:
    path = _model("onnx_bert")
    model = _apply(path, "obfuscate_names")
    proto = gw.formats.onnx.to_proto(model)
    assert [i.name for i in proto.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in proto.graph.output] == ["last_hidden_state", "pooler_output"]
    names = [i.name for i in proto.graph.initializer] + [o for n in proto.graph.node for o in n.output]
    assert names and all(len(n) <= 3 for n in names if n not in ("last_hidden_state", "pooler_output"))
