"""fuse_matmul_add_into_gemm: MatMul + Add -> Gemm on hand-built graphs (randomized weights), checked on
onnxruntime."""

from __future__ import annotations

from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

# the seeded stream these tests drew from when they shared tests/simplify/test_fuse.py with the
# BatchNormalization tests
from .test_fuse_bn_into_conv_onnx import _rand

mk = helper.make_node


def test_matmul_add_becomes_gemm_only_in_2d() -> None:
    nodes = [mk("MatMul", ["x", "w"], ["h"]), mk("Add", ["h", "b"], ["y"]),
             mk("MatMul", ["x3", "w"], ["h3"]), mk("Add", ["h3", "b"], ["y3"])]
    m, p = model(nodes, [vi("x", F, [3, 4]), vi("x3", F, [2, 3, 4])], [vi("y", F, [3, 5]), vi("y3", F, [2, 3, 5])],
                 [init("w", _rand(4, 5)), init("b", _rand(5))])
    apply(m, "infer_shapes")
    assert apply(m, "fuse_matmul_add_into_gemm").stats["gemms_made"] == 1
    assert sorted(ops(m)) == ["Add", "Gemm", "MatMul"]
    same_outputs(p, m, rtol=1e-5, atol=1e-5)


def test_matmul_add_with_growing_broadcast_stays() -> None:
    nodes = [mk("MatMul", ["x", "w"], ["h"]), mk("Add", ["h", "b"], ["y"])]
    m, _ = model(nodes, [vi("x", F, [1, 4])], [vi("y", F, None)], [init("w", _rand(4, 5)), init("b", _rand(3, 5))])
    apply(m, "infer_shapes")
    assert not apply(m, "fuse_matmul_add_into_gemm").changed
