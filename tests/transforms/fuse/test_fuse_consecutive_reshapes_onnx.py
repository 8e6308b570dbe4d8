"""fuse_consecutive_reshapes: shape-chain merging on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def test_reshape_chains_become_one_reshape() -> None:
    nodes = [mk("Unsqueeze", ["x", "ax"], ["a"]), mk("Flatten", ["a"], ["b"], axis=2),
             mk("Reshape", ["b", "shape"], ["c"]), mk("Squeeze", ["c", "ax"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["N", 6])], [vi("y", F, None)],
                 [init("ax", np.array([1], np.int64)), init("shape", np.array([0, 1, 2, 3], np.int64))])
    apply(m, "infer_shapes")
    apply(m, "fuse_consecutive_reshapes")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["Reshape"]
    same_outputs(p, m, dims={"N": 3})
    same_outputs(p, m, dims={"N": 5}, seed=1)
