"""fuse_mul_add_into_conv: per-channel Mul / Add / Sub into Conv on hand-built graphs (randomized weights),
checked on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

# the seeded stream these tests drew from when they shared tests/simplify/test_fuse.py with the
# BatchNormalization tests
from .test_fuse_bn_into_conv_onnx import _rand

mk = helper.make_node


def test_per_channel_mul_add_sub_fold_into_conv() -> None:
    nodes = [mk("Conv", ["x", "w", "b"], ["c"]), mk("Mul", ["c", "s"], ["m"]), mk("Add", ["t", "m"], ["a"]),
             mk("Sub", ["a", "u"], ["y"])]
    inits = [init("w", _rand(4, 3, 3, 3)), init("b", _rand(4)), init("s", _rand(1, 4, 1, 1)),
             init("t", _rand(4, 1, 1)), init("u", np.array([0.25], np.float32))]
    m, p = model(nodes, [vi("x", F, [2, 3, 6, 6])], [vi("y", F, None)], inits)
    apply(m, "infer_shapes")
    assert apply(m, "fuse_mul_add_into_conv").stats["nodes_fused"] == 3
    assert ops(m) == ["Conv"]
    same_outputs(p, m, rtol=1e-4, atol=1e-5)


def test_spatial_mul_does_not_fold_into_conv() -> None:
    nodes = [mk("Conv", ["x", "w"], ["c"]), mk("Mul", ["c", "s"], ["y"])]
    m, _ = model(nodes, [vi("x", F, [1, 3, 4, 4])], [vi("y", F, None)],
                 [init("w", _rand(2, 3, 1, 1)), init("s", _rand(1, 1, 4, 4))])
    assert not apply(m, "fuse_mul_add_into_conv").changed
