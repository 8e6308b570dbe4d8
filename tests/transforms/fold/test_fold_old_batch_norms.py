"""fold_old_batch_norms: FusedBatchNorm V1/V2/V3 and BatchNormWithGlobalNormalization, checked in TensorFlow."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.tf
tg = pytest.importorskip("tests.transforms.fold._tfgraphs")
import graphwright.transforms.fold.fold_old_batch_norms  # noqa: E402, F401 - registers the transform
from tests import tf_oracle  # noqa: E402

tf, raw = tg.tf, tg.tf.raw_ops
C = 6
X_SHAPE = (2, 8, 8, 3)
BN_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "BatchNormWithGlobalNormalization")


def _conv(x, r, op="Conv2D"):
    if op == "DepthwiseConv2dNative":
        w = tf.constant(tg.randn(r, 3, 3, 3, 2), name="w")
        return raw.DepthwiseConv2dNative(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", name="conv")
    w = tf.constant(tg.randn(r, 3, 3, 3, C), name="w")
    return raw.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", name="conv")


def _fused(y, r, version="V3", *, training=False, stats_out=False):
    op = {"V1": raw.FusedBatchNorm, "V2": raw.FusedBatchNormV2, "V3": raw.FusedBatchNormV3}[version]
    channels = int(y.shape[-1])
    empty = not training
    outs = op(x=y, scale=tf.constant(tg.randn(r, channels, lo=0.5)), offset=tf.constant(tg.randn(r, channels)),
              mean=tf.constant(tg.randn(r, channels) if empty else tg.randn(r, 0)),
              variance=tf.constant(tg.randn(r, channels, lo=0.5) if empty else tg.randn(r, 0)),
              epsilon=1e-3, is_training=training, name="bn")
    return outs[0] + tf.reduce_sum(outs[1]) if stats_out else outs[0]


def fused_case(version, pre="Conv2D", bias=False, **kw):
    def body(x):
        r = tg.rng(11)
        y = tf.nn.relu(x) if pre == "none" else _conv(x, r, pre)
        if bias:
            y = tf.nn.bias_add(y, tf.constant(tg.randn(r, int(y.shape[-1]))))
        return _fused(y, r, version, **kw)
    return body


FOLD_CASES = {
    "conv_fbn_v3": fused_case("V3"),
    "conv_bias_fbn_v1": fused_case("V1", bias=True),
    "depthwise_fbn_v2": fused_case("V2", pre="DepthwiseConv2dNative"),
}


@pytest.mark.parametrize("case", sorted(FOLD_CASES))
def test_fused_batch_norm_after_contraction_folds(case: str, tmp_path: Path) -> None:
    before = tg.build(FOLD_CASES[case], X_SHAPE)
    after, report = tg.apply(before, "fold_old_batch_norms", tmp_path)
    step = report.steps[0]
    assert step.changed and step.stats == {"folded_into_weights": 1, "to_mul_add": 0, "left": 0}
    ops = tg.ops(after)
    assert not any(ops[op] for op in BN_OPS) and ops["Mul"] == 0 and ops["BiasAdd"] == 1
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(3), *X_SHAPE), rtol=1e-4, atol=1e-4)


def test_fused_batch_norm_without_contraction_becomes_mul_and_bias(tmp_path: Path) -> None:
    before = tg.build(fused_case("V3", pre="none"), X_SHAPE)
    after, report = tg.apply(before, "fold_old_batch_norms", tmp_path)
    assert report.steps[0].stats["to_mul_add"] == 1
    ops = tg.ops(after)
    assert ops["FusedBatchNormV3"] == 0 and ops["Mul"] == 1 and ops["BiasAdd"] == 1
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(3), *X_SHAPE), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw, why", [
    ({"training": True}, "training mode"),
    ({"stats_out": True}, "batch statistics"),
])
def test_training_mode_or_used_statistics_are_refused(kw, why, tmp_path: Path) -> None:
    before = tg.build(fused_case("V3", **kw), X_SHAPE)
    after, report = tg.apply(before, "fold_old_batch_norms", tmp_path)
    step = report.steps[0]
    assert not step.changed and step.stats["left"] == 1
    assert any(why in note for note in step.notes)
    assert tg.ops(after) == tg.ops(before)


@pytest.mark.parametrize("scale_after", [True, False])
@pytest.mark.parametrize("pre", ["Conv2D", "none"])
def test_batch_norm_with_global_normalization(scale_after: bool, pre: str, tmp_path: Path) -> None:
    """Producer version 8, so TensorFlow still executes the original; the original tool folds it too."""
    def conv_or_relu(x):
        return tf.nn.relu(x) if pre == "none" else _conv(x, tg.rng(12))
    before = tg.build_bngn(conv_or_relu, X_SHAPE, 3 if pre == "none" else C, scale_after=scale_after)
    after, report = tg.apply(before, "fold_old_batch_norms", tmp_path)
    assert report.steps[0].changed
    ops = tg.ops(after)
    assert ops["BatchNormWithGlobalNormalization"] == 0
    x = tg.randn(tg.rng(3), *X_SHAPE)
    tg.assert_same_outputs(before, after, x, rtol=1e-4, atol=1e-4)
    if pre == "Conv2D":
        theirs = tf_oracle.original_tool(before, ["x"], ["out"], "fold_old_batch_norms")
        assert sum(ops.values()) == sum(tg.ops(theirs).values())
        assert ops["Mul"] == tg.ops(theirs)["Mul"] == 0
        tg.assert_same_outputs(theirs, after, x, rtol=1e-4, atol=1e-4)


def test_original_tool_leaves_v3_we_fold_it(tmp_path: Path) -> None:
    before = tg.build(FOLD_CASES["conv_fbn_v3"], X_SHAPE)
    ours, _ = tg.apply(before, "fold_old_batch_norms", tmp_path)
    theirs = tf_oracle.original_tool(before, ["x"], ["out"], "fold_old_batch_norms")
    assert tg.ops(theirs)["FusedBatchNormV3"] == 1 and tg.ops(ours)["FusedBatchNormV3"] == 0
    assert sum(tg.ops(ours).values()) < sum(tg.ops(theirs).values())


def test_v1_matches_original_tool(tmp_path: Path) -> None:
    before = tg.build(fused_case("V1"), X_SHAPE)
    ours, _ = tg.apply(before, "fold_old_batch_norms", tmp_path)
    theirs = tf_oracle.original_tool(before, ["x"], ["out"], "fold_old_batch_norms")
    assert tg.ops(theirs)["FusedBatchNorm"] == 0
    assert sum(tg.ops(ours).values()) == sum(tg.ops(theirs).values())
    tg.assert_same_outputs(theirs, ours, tg.randn(tg.rng(3), *X_SHAPE), rtol=1e-4, atol=1e-4)
