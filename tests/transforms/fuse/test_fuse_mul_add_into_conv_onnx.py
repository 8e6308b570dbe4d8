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


def _layer_scale(bias: str | None, scale: np.ndarray, *, bias_first: bool = False, shared: bool = False):
    """y = Mul(Add(MatMul(x[N, T, 6], W[6, 5]), b), s) (no Add when ``bias`` is None), T and N dynamic."""
    nodes = [mk("MatMul", ["x", "w"], ["mm"])]
    inner = "mm"
    if bias is not None:
        nodes.append(mk("Add", ["b", "mm"] if bias_first else ["mm", "b"], ["a"]))
        inner = "a"
    nodes.append(mk("Mul", ["s", inner], ["y"]))
    outputs = [vi("y", F, ["N", "T", 5])]
    if shared:
        nodes.append(mk("MatMul", ["x", "w"], ["z"]))
        outputs.append(vi("z", F, ["N", "T", 5]))
    inits = [init("w", _rand(6, 5)), init("s", scale)] + ([init("b", _rand(*map(int, bias.split("x"))))] if bias else [])
    return model(nodes, [vi("x", F, ["N", "T", 6])], outputs, inits)


def test_a_per_column_mul_folds_through_the_bias_into_a_matmul() -> None:
    """EfficientFormer's layer scale after its last-stage MLP, with the bias on either side."""
    for bias, scale, bias_first in (("5", _rand(5), False), ("1x1x5", _rand(1, 1, 5), True), (None, _rand(1, 5), False),
                                    ("5", np.array(0.5, np.float32), False)):
        m, p = _layer_scale(bias, scale, bias_first=bias_first)
        apply(m, "infer_shapes")
        assert apply(m, "fuse_mul_add_into_conv").stats["nodes_fused"] == 1
        apply(m, "eliminate_dead_code")
        assert ops(m) == (["MatMul", "Add"] if bias else ["MatMul"]) and m.graph.outputs[0].name == "y"
        for n, t in ((1, 3), (2, 7)):
            same_outputs(p, m, rtol=1e-4, atol=1e-5, dims={"N": n, "T": t}, seed=n)


def test_muls_that_are_not_per_column_or_on_a_shared_weight_stay() -> None:
    for scale, shared, why in ((_rand(3, 1, 5), False, "one per column"), (_rand(5, 1), False, "one per column"),
                               (_rand(5), True, "read only by it")):
        m, p = _layer_scale("5", scale, shared=shared)
        apply(m, "infer_shapes")
        result = apply(m, "fuse_mul_add_into_conv")
        assert not result.changed and any(why in r for *_, r in result.refusals), result.refusals
        same_outputs(p, m, dims={"N": 3, "T": 5})
