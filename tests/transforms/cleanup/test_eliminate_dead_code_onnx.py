"""eliminate_dead_code: unread nodes and initializers on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def test_dead_code_and_unused_initializers_go_graph_inputs_stay() -> None:
    nodes = [mk("Relu", ["x"], ["h"]), mk("Sigmoid", ["h"], ["dead"]), mk("Neg", ["dead"], ["dead2"]),
             mk("Tanh", ["h"], ["y"])]
    m, p = model(nodes, [vi("x", F, [2]), vi("unused", F, [2])], [vi("y", F, [2])],
                 [init("w", np.ones([2], np.float32))])
    result = apply(m, "eliminate_dead_code")
    assert ops(m) == ["Relu", "Tanh"] and result.stats == {"nodes_removed": 2, "initializers_removed": 1}
    assert [v.name for v in m.graph.inputs] == ["x", "unused"]
    same_outputs(p, m)
