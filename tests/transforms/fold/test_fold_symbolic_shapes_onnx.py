"""fold_symbolic_shapes: run-time shape glue made constant on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def _attention_glue():
    """h[B, S, 64] -> Reshape(h, [B, S, -1, 16]) with B and S read at run time (exporter style)."""
    nodes = [
        mk("Shape", ["x"], ["s"]),
        mk("Gather", ["s", "i0"], ["b"], axis=0), mk("Gather", ["s", "i1"], ["q"], axis=0),
        mk("Unsqueeze", ["b", "ax"], ["bu"]), mk("Unsqueeze", ["q", "ax"], ["qu"]),
        mk("Concat", ["bu", "qu", "m1", "c16"], ["t"], axis=0),
        mk("Add", ["x", "bias"], ["h"]),
        mk("Reshape", ["h", "t"], ["r"]),
        mk("Equal", ["t", "m1s"], ["eq"]), mk("Where", ["eq", "ones", "t"], ["w"]),
        mk("Expand", ["r", "w"], ["y"]),
    ]
    inits = [init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
             init("ax", np.array([0], np.int64)), init("m1", np.array([-1], np.int64)),
             init("c16", np.array([16], np.int64)), init("bias", np.ones([64], np.float32)),
             init("m1s", np.full([4], -1, np.int64)), init("ones", np.ones([4], np.int64))]
    return model(nodes, [vi("x", F, ["B", "S", 64])], [vi("y", F, None)], inits)


def test_symbolic_shape_glue_becomes_constant_targets() -> None:
    m, p = _attention_glue()
    apply(m, "infer_shapes")
    result = apply(m, "fold_symbolic_shapes")
    apply(m, "eliminate_dead_code")
    assert result.stats["targets_folded"] == 2
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [0, 0, -1, 16]
    assert "Shape" not in ops(m)
    for seed, dims in enumerate(({"B": 1, "S": 7}, {"B": 3, "S": 2})):
        same_outputs(p, m, dims=dims, seed=seed)
