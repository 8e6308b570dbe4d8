"""fuse_bn_into_conv: BatchNormalization into Conv / ConvTranspose / Gemm on hand-built graphs (randomized
statistics), checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

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


def test_batch_norm_over_a_flattened_matmul_folds_into_its_weight() -> None:
    """LeViT's Linear + BatchNorm1d: MatMul -> Reshape[-1, C] -> BN -> Reshape back, with a dynamic batch."""
    nodes = [mk("MatMul", ["x", "w"], ["mm"]), mk("Reshape", ["mm", "flat"], ["f"]),
             mk("BatchNormalization", ["f", "gamma", "beta", "mean", "var"], ["bn"], epsilon=1e-5),
             mk("Reshape", ["bn", "back"], ["r"]), mk("Neg", ["r"], ["y"])]
    inits = [init("w", _rand(6, 5)), init("flat", np.array([-1, 5], np.int64)),
             init("back", np.array([-1, 4, 5], np.int64))] + _bn_inits(5)
    m, p = model(nodes, [vi("x", F, ["N", 4, 6])], [vi("y", F, ["N", 4, 5])], inits)
    apply(m, "infer_shapes")
    result = apply(m, "fuse_bn_into_conv")
    assert result.stats["batch_norms_fused"] == 1
    apply(m, "fuse_consecutive_reshapes")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["MatMul", "Add", "Reshape", "Neg"]
    for n in (1, 3):
        same_outputs(p, m, rtol=1e-4, atol=1e-5, dims={"N": n}, seed=n)
    assert not apply(m, "fuse_bn_into_conv").changed


def test_batch_norm_over_a_2d_matmul_keeps_its_output_name() -> None:
    nodes = [mk("MatMul", ["x", "w"], ["mm"]), mk("BatchNormalization", ["mm", "gamma", "beta", "mean", "var"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["N", 6])], [vi("y", F, ["N", 5])], [init("w", _rand(6, 5))] + _bn_inits(5))
    apply(m, "infer_shapes")
    assert apply(m, "fuse_bn_into_conv").changed
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["MatMul", "Add"] and m.graph.outputs[0].name == "y"
    for n in (2, 7):
        same_outputs(p, m, rtol=1e-4, atol=1e-5, dims={"N": n}, seed=n)


def test_batch_norm_not_over_the_matmul_columns_stays() -> None:
    # BN of a 3-D [N, C, T] tensor normalizes axis 1, not the MatMul's columns (its last axis)
    nodes = [mk("MatMul", ["x", "w"], ["mm"]), mk("BatchNormalization", ["mm", "gamma", "beta", "mean", "var"], ["y"])]
    m, p = model(nodes, [vi("x", F, [2, 5, 6])], [vi("y", F, [2, 5, 5])], [init("w", _rand(6, 5))] + _bn_inits(5))
    apply(m, "infer_shapes")
    result = apply(m, "fuse_bn_into_conv")
    assert not result.changed and any("is not known to be [N, 5]" in r for *_, r in result.refusals)
    same_outputs(p, m)
