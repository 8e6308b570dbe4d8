"""fuse_consecutive_transposes: Transpose chains composed on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

from onnx import helper

from .._onnx_build import F, apply, model, ops, same_outputs, vi

mk = helper.make_node


def test_consecutive_transposes_compose_and_vanish_when_identity() -> None:
    nodes = [mk("Transpose", ["x"], ["t1"], perm=[1, 2, 0]), mk("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             mk("Transpose", ["t2"], ["y"], perm=[1, 0, 2]), mk("Transpose", ["x"], ["u1"], perm=[2, 0, 1]),
             mk("Transpose", ["u1"], ["u2"], perm=[1, 2, 0]), mk("Relu", ["u2"], ["z"])]
    m, p = model(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, None), vi("z", F, None)])
    apply(m, "infer_shapes")
    apply(m, "fuse_consecutive_transposes")
    apply(m, "eliminate_dead_code")
    # y = x itself, but a graph input cannot be renamed to the output's name: one identity Transpose stays
    assert ops(m) == ["Transpose", "Relu"]
    assert list(next(iter(m.graph)).attrs["perm"].value) == [0, 1, 2]
    same_outputs(p, m)
