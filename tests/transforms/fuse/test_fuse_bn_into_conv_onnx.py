"""Fusion passes on hand-built graphs (randomized statistics), checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from ._build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node
RNG = np.random.default_rng(7)


def _rand(*shape: int, positive: bool = False) -> np.ndarray:
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def _bn_inits(c: int) -> list:
    return [init("gamma", _rand(c)), init("beta", _rand(c)), init("mean", _rand(c)), init("var", _rand(c, positive=True))]


@pytest.mark.parametrize("with_bias", [True, False])
def test_batch_norm_folds_into_conv(with_bias: bool) -> None:
    conv_in = ["x", "w", "b"] if with_bias else ["x", "w"]
    nodes = [mk("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
             mk("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"], epsilon=1e-3)]
    inits = [init("w", _rand(4, 3, 3, 3)), init("b", _rand(4))] + _bn_inits(4)
    m, p = model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 4, 8, 8])], inits if with_bias else inits[:1] + inits[2:])
    assert apply(m, "fuse_bn_into_conv").stats["batch_norms_fused"] == 1
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["Conv"] and m.graph.outputs[0].name == "y"
    same_outputs(p, m, rtol=1e-4, atol=1e-5)


def test_batch_norm_folds_into_grouped_conv_transpose() -> None:
    nodes = [mk("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2]),
             mk("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"])]
    inits = [init("w", _rand(4, 3, 2, 2))] + _bn_inits(6)
    m, p = model(nodes, [vi("x", F, [1, 4, 5, 5])], [vi("y", F, None)], inits)
    apply(m, "infer_shapes")
    assert apply(m, "fuse_bn_into_conv").changed
    same_outputs(p, m, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batch_norm_folds_into_gemm(trans_b: int) -> None:
    w = _rand(5, 6) if trans_b else _rand(6, 5)
    nodes = [mk("Gemm", ["x", "w", "c"], ["g"], transB=trans_b, beta=0.5),
             mk("BatchNormalization", ["g", "gamma", "beta", "mean", "var"], ["y"])]
    m, p = model(nodes, [vi("x", F, [3, 6])], [vi("y", F, [3, 5])], [init("w", w), init("c", _rand(5))] + _bn_inits(5))
    assert apply(m, "fuse_bn_into_conv").changed
    assert ops(m) == ["Gemm"]
    same_outputs(p, m, rtol=1e-4, atol=1e-5)


def test_shared_weight_is_not_folded() -> None:
    nodes = [mk("Conv", ["x", "w"], ["c"]), mk("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"]),
             mk("Conv", ["x", "w"], ["z"])]
    m, _p = model(nodes, [vi("x", F, [1, 3, 4, 4])], [vi("y", F, None), vi("z", F, None)],
                 [init("w", _rand(4, 3, 1, 1))] + _bn_inits(4))
    assert not apply(m, "fuse_bn_into_conv").changed
    assert "BatchNormalization" in ops(m)


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
