"""eliminate_identity: Identity and inference Dropout on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

from onnx import TensorProto, helper

from .._onnx_build import F, apply, model, ops, same_outputs, vi

mk = helper.make_node


def test_identity_and_inference_dropout_go_and_output_names_stay() -> None:
    nodes = [mk("Relu", ["x"], ["h"]), mk("Identity", ["h"], ["i"]), mk("Dropout", ["i"], ["d"]),
             mk("Identity", ["d"], ["y"])]
    m, p = model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    result = apply(m, "eliminate_identity")
    assert ops(m) == ["Relu"]
    assert result.stats == {"identity_removed": 2, "dropout_removed": 1}
    assert [v.name for v in m.graph.outputs] == ["y"] and m.graph.outputs[0].producer.op == "Relu"
    same_outputs(p, m)


def test_identity_between_graph_input_and_output_stays() -> None:
    m, _ = model([mk("Identity", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])])
    assert not apply(m, "eliminate_identity").changed and ops(m) == ["Identity"]


def test_dropout_whose_mask_is_read_stays() -> None:
    nodes = [mk("Dropout", ["x"], ["d", "mask"])]
    m, _ = model(nodes, [vi("x", F, [2])], [vi("d", F, [2]), vi("mask", TensorProto.BOOL, [2])])
    assert not apply(m, "eliminate_identity").changed
