"""fold_batch_norms on hand-built graphs: TensorFlow runs before/after, the original tool is the yardstick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
tg = pytest.importorskip("tests.transforms.fold._tfgraphs")
import graphwright.transforms.fold.fold_batch_norms  # noqa: E402, F401 - registers the transform
from tests import tf_oracle  # noqa: E402

tf, raw = tg.tf, tg.tf.raw_ops
C = 6


def _conv(x, r, *, controls=False, cin=3, cout=C, fmt="NHWC"):
    """Conv2D; with ``controls``, weights read through an Identity that a NoOp depends on (Keras 3)."""
    w = tf.constant(tg.randn(r, 3, 3, cin, cout), name="w")
    if controls:
        w = tf.identity(w, name="w/read")
        with tf.control_dependencies([w]):
            tf.no_op(name="init")
    strides = [1, 1, 1, 1]
    return raw.Conv2D(input=x, filter=w, strides=strides, padding="SAME", data_format=fmt, name="conv")


def conv_mul_add(x, controls=False, s_shape=(C,), t_shape=(C,)):
    r = tg.rng(1)
    y = _conv(x, r, controls=controls)
    s = tf.constant(tg.randn(r, *s_shape, lo=0.5), name="s")
    t = tf.constant(tg.randn(r, *t_shape), name="t")
    return tf.nn.relu(raw.AddV2(x=raw.Mul(x=y, y=s, name="bn/mul"), y=t, name="bn/add"))


def conv_bias_mul_add(x):  # ResNet50 (BiasAdd before the Mul) with InceptionV3's [1,1,1,C] scale
    r = tg.rng(2)
    y = tf.nn.bias_add(_conv(x, r, controls=True), tf.constant(tg.randn(r, C)), name="bias")
    s = tf.constant(tg.randn(r, 1, 1, 1, C, lo=0.5), name="s")
    t = tf.constant(tg.randn(r, 1, 1, 1, C), name="t")
    return raw.AddV2(x=raw.Mul(x=y, y=s), y=t)


def conv_add_mul(x):  # a per-channel Add as the bias, offset first operand of the last Add
    r = tg.rng(3)
    y = raw.AddV2(x=_conv(x, r), y=tf.constant(tg.randn(r, C)))
    y = raw.Mul(x=tf.constant(tg.randn(r, C, lo=0.5)), y=y)
    return raw.Add(x=tf.constant(tg.randn(r, C)), y=y)


def depthwise_mul_add(x):
    r = tg.rng(4)
    w = tf.constant(tg.randn(r, 3, 3, 3, 2))
    y = raw.DepthwiseConv2dNative(input=x, filter=w, strides=[1, 1, 1, 1], padding="VALID")
    return raw.AddV2(x=raw.Mul(x=y, y=tf.constant(tg.randn(r, 6, lo=0.5))), y=tf.constant(tg.randn(r, 6)))


def matmul_mul_add(x, transpose_b=False):
    r = tg.rng(5)
    flat = tf.reshape(x, [2, -1])
    k = 8 * 8 * 3  # batch 2 reshaped to 2 rows
    w = tf.constant(tg.randn(r, C, k) if transpose_b else tg.randn(r, k, C))
    y = raw.MatMul(a=flat, b=w, transpose_b=transpose_b)
    return raw.AddV2(x=raw.Mul(x=y, y=tf.constant(tg.randn(r, C, lo=0.5))), y=tf.constant(tg.randn(r, C)))


def conv_mul_only(x):
    r = tg.rng(6)
    return raw.Mul(x=_conv(x, r, controls=True), y=tf.constant(tg.randn(r, C, lo=0.5)))


def conv_mul_mul(x):  # two scales in a row: two sweeps
    r = tg.rng(13)
    return raw.Mul(x=raw.Mul(x=_conv(x, r), y=tf.constant(tg.randn(r, C, lo=0.5))),
                   y=tf.constant(tg.randn(r, 1, 1, 1, C, lo=0.5)))


CASES = {
    "conv_mul_add": (conv_mul_add, 1),
    "conv_mul_add_control_edges": (lambda x: conv_mul_add(x, controls=True), 1),
    "conv_mul_add_scalar_t": (lambda x: conv_mul_add(x, t_shape=()), 1),
    "conv_bias_mul_add_1111C": (conv_bias_mul_add, 1),
    "conv_add_mul_add_swapped": (conv_add_mul, 1),
    "depthwise_mul_add": (depthwise_mul_add, 1),
    "matmul_mul_add": (matmul_mul_add, 1),
    "matmul_transpose_b": (lambda x: matmul_mul_add(x, transpose_b=True), 1),
    "conv_mul_only": (conv_mul_only, 1),
    "conv_mul_mul": (conv_mul_mul, 2),
}
X_SHAPE = (2, 8, 8, 3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_folds_and_tensorflow_agrees(case: str, tmp_path: Path) -> None:
    body, folds = CASES[case]
    before = tg.build(body, X_SHAPE)
    after, report = tg.apply(before, "fold_batch_norms", tmp_path)
    step = report.steps[0]
    assert step.changed and step.stats["folded"] == folds
    ops_after = tg.ops(after)
    assert ops_after["Mul"] == 0, ops_after
    assert ops_after["Add"] + ops_after["AddV2"] == 0, ops_after
    assert ops_after["BiasAdd"] == (0 if case in ("conv_mul_only", "conv_mul_mul") else 1)
    assert ops_after["Const"] <= tg.ops(before)["Const"]  # replaced constants are swept
    x = tg.randn(tg.rng(9), *X_SHAPE)
    tg.assert_same_outputs(before, after, x)


@pytest.mark.parametrize("case", ["conv_mul_add", "conv_mul_add_control_edges", "conv_bias_mul_add_1111C"])
def test_folds_more_than_the_original_tool(case: str, tmp_path: Path) -> None:
    before = tg.build(CASES[case][0], X_SHAPE)
    pipeline = "remove_nodes(op=Identity) fold_batch_norms"
    ours, _ = tg.apply(before, pipeline, tmp_path)
    theirs = tf_oracle.original_tool(before, ["x"], ["out"], pipeline)
    mine, orig = tg.ops(ours), tg.ops(theirs)
    # the original folds only Mul(conv, Const 1-D s) and leaves the AddV2 (we make it a BiasAdd, which
    # the Remapper fuses); with control edges, a BiasAdd in between or a [1,1,1,C] scale it folds nothing
    assert orig["AddV2"] == 1 and mine["AddV2"] == 0 and mine["BiasAdd"] >= 1
    if case == "conv_mul_add":
        assert sum(mine.values()) == sum(orig.values()) and orig["Mul"] == 0
    else:
        assert sum(mine.values()) < sum(orig.values()) and orig["Mul"] == 1
    x = tg.randn(tg.rng(9), *X_SHAPE)
    for want, got in zip(tg.run(theirs, x), tg.run(ours, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_shared_weights_are_refused_and_reported(tmp_path: Path) -> None:
    def body(x):
        r = tg.rng(7)
        w = tf.constant(tg.randn(r, 3, 3, 3, C), name="w")
        a = raw.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", name="conv_a")
        b = raw.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", name="conv_b")
        return raw.AddV2(x=raw.Mul(x=a, y=tf.constant(tg.randn(r, C, lo=0.5))), y=b)

    before = tg.build(body, X_SHAPE)
    after, report = tg.apply(before, "fold_batch_norms", tmp_path)
    step = report.steps[0]
    assert not step.changed and step.stats["weights_shared"] == 1
    assert any("shared weights" in note and "'w'" in note for note in step.notes)
    assert tg.ops(after) == tg.ops(before)


def test_scale_varying_across_space_is_left_alone(tmp_path: Path) -> None:
    before = tg.build(lambda x: conv_mul_add(x, s_shape=(8, 1, C)), X_SHAPE)
    after, report = tg.apply(before, "fold_batch_norms", tmp_path)
    assert not report.steps[0].changed
    assert any("not one value per output channel" in n for n in report.steps[0].notes)
    assert tg.ops(after)["Mul"] == 1


def test_shared_intermediate_is_left_alone(tmp_path: Path) -> None:
    def body(x):
        r = tg.rng(8)
        y = _conv(x, r)
        return raw.AddV2(x=raw.Mul(x=y, y=tf.constant(tg.randn(r, C, lo=0.5))), y=y)

    before = tg.build(body, X_SHAPE)
    after, report = tg.apply(before, "fold_batch_norms", tmp_path)
    assert not report.steps[0].changed
    assert tg.ops(after) == tg.ops(before)


def test_nchw_conv_folds_along_axis_1(tmp_path: Path) -> None:
    """NCHW: the scale is [C,1,1]; checked with numpy (TF's CPU Conv2D only runs NHWC)."""
    import graphwright as gw
    from graphwright.ir import constant_value

    r = tg.rng(10)
    w, s, t = tg.randn(r, 3, 3, 3, C), tg.randn(r, C, 1, 1, lo=0.5), tg.randn(r, C, 1, 1)

    def body(x):
        y = _conv(x, tg.rng(10), fmt="NCHW")
        return raw.AddV2(x=raw.Mul(x=y, y=tf.constant(s)), y=tf.constant(t))

    before = tg.build(body, (2, 3, 8, 8))
    after, report = tg.apply(before, "fold_batch_norms", tmp_path)
    assert report.steps[0].changed
    folded = gw.load(_write(tmp_path / "after.pb", after)).graph
    conv = next(n for n in folded if n.op == "Conv2D")
    bias = next(n for n in folded if n.op == "BiasAdd")
    assert bias.inputs[0].producer is conv and bias.attr("data_format") == b"NCHW"
    np.testing.assert_allclose(constant_value(conv.inputs[1]).numpy(), w * s.reshape(C), rtol=1e-6)
    np.testing.assert_allclose(constant_value(bias.inputs[1]).numpy(), t.reshape(C), rtol=1e-6)
    assert not {"Mul", "AddV2"} & {n.op for n in folded}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
