"""fuse_pad_into_conv: a constant zero Pad into Conv's pads on hand-built graphs (randomized weights), checked
on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

# the seeded stream these tests drew from when they shared tests/simplify/test_fuse.py with the
# BatchNormalization tests
from .test_fuse_bn_into_conv_onnx import _rand

mk = helper.make_node


def test_zero_pad_folds_into_conv_padding() -> None:
    nodes = [mk("Pad", ["x", "pads"], ["p"]), mk("Conv", ["p", "w"], ["y"], pads=[1, 0, 1, 0])]
    pads = np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64)
    m, p = model(nodes, [vi("x", F, [1, 2, 5, 5])], [vi("y", F, None)], [init("pads", pads), init("w", _rand(3, 2, 3, 3))])
    apply(m, "infer_shapes")
    assert apply(m, "fuse_pad_into_conv").changed
    assert ops(m) == ["Conv"] and list(next(iter(m.graph)).attrs["pads"].value) == [2, 2, 4, 1]
    same_outputs(p, m)


def test_reflect_pad_does_not_fold() -> None:
    nodes = [mk("Pad", ["x", "pads"], ["p"], mode="reflect"), mk("Conv", ["p", "w"], ["y"])]
    m, _ = model(nodes, [vi("x", F, [1, 2, 5, 5])], [vi("y", F, None)],
                 [init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), init("w", _rand(3, 2, 3, 3))])
    apply(m, "infer_shapes")
    assert not apply(m, "fuse_pad_into_conv").changed
