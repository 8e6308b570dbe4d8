"""fuse_slices_into_split: sibling single-axis Slices of disjoint pieces -> one Split, checked on
onnxruntime at two sizes of the dynamic batch; the Slices it must leave alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphwright.transforms.fuse.fuse_slices_into_split_onnx  # noqa: F401 - registers the transform

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node
I64 = np.int64


def _slices(pieces: list[tuple[int, int, int, int]], *, opset: int = 17, graph_output_first: bool = False):
    """x[N, 8, 5, 3]; one Slice per (start, end, axis, step), each read by a Relu (the first one's output
    also a graph output when asked)."""
    inits, nodes, outputs = [], [], []
    for i, (start, end, axis, step) in enumerate(pieces):
        names = []
        for key, v in (("s", start), ("e", end), ("a", axis), ("t", step)):
            inits.append(init(f"{key}{i}", np.array([v], I64)))
            names.append(f"{key}{i}")
        nodes.append(mk("Slice", ["x", *names], [f"p{i}"], name=f"slice{i}"))
        nodes.append(mk("Relu", [f"p{i}"], [f"y{i}"], name=f"relu{i}"))
        outputs.append(vi(f"y{i}", F, None))
    if graph_output_first:
        outputs.append(vi("p0", F, None))
    return model(nodes, [vi("x", F, ["N", 8, 5, 3])], outputs, inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 17])
def test_chunks_become_one_split(opset: int) -> None:
    # torch.chunk(x, 2, 1) as the TorchScript exporter writes it, plus a third piece with a negative axis
    m, p = _slices([(0, 3, 1, 1), (3, 6, 1, 1), (6, 100, -3, 1)], opset=opset)
    apply(m, "infer_shapes")
    result = apply(m, "fuse_slices_into_split")
    apply(m, "eliminate_dead_code")
    assert result.stats == {"slices_to_split": 3, "splits": 1}
    assert ops(m) == ["Split", "Relu", "Relu", "Relu"]
    split = next(iter(m.graph))
    assert [v.name for v in split.outputs] == ["p0", "p1", "p2"] and split.attr("axis") == 1
    same_outputs(p, m, dims={"N": 2})
    same_outputs(p, m, dims={"N": 5}, seed=1)
    assert not apply(m, "fuse_slices_into_split").changed  # idempotent


def test_gaps_become_unread_outputs_and_graph_outputs_keep_their_names() -> None:
    m, p = _slices([(4, 6, 2, 1), (1, 3, 2, 1)], graph_output_first=True)  # pieces [1,3) and [4,5) of 5
    apply(m, "infer_shapes")
    assert apply(m, "fuse_slices_into_split").stats["splits"] == 1
    apply(m, "eliminate_dead_code")
    split = next(iter(m.graph))
    assert split.op == "Split" and len(split.outputs) == 4  # gap [0,1), [1,3), gap [3,4), [4,5)
    assert "p0" in [v.name for v in m.graph.outputs]
    same_outputs(p, m, dims={"N": 3})
    same_outputs(p, m, dims={"N": 1}, seed=2)


@pytest.mark.parametrize("pieces", [
    [(0, 4, 1, 1), (2, 6, 1, 1)],  # overlapping
    [(0, 8, 1, 2), (1, 8, 1, 2)],  # steps of 2 (a Split cannot interleave)
    [(0, 3, 1, 1), (0, 2, 2, 1)],  # different axes
    [(0, 1, 0, 1), (1, 2, 0, 1)],  # the dynamic batch: size unknown
])
def test_left_alone(pieces: list[tuple[int, int, int, int]]) -> None:
    m, p = _slices(pieces)
    apply(m, "infer_shapes")
    assert not apply(m, "fuse_slices_into_split").changed
    assert ops(m).count("Slice") == 2
    same_outputs(p, m, dims={"N": 3})
