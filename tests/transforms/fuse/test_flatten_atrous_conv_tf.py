"""flatten_atrous_conv: TensorFlow's CPU runtime runs the result with the input graph's outputs; the
original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.fuse.flatten_atrous_conv_tf  # noqa: E402, F401

from .._tf import (  # noqa: E402
    assert_same_outputs,
    build,
    nodes,
    notes,
    ops,
    ours,
    tf,
    theirs,
    v1,
)

# the seeded stream these tests drew from when they shared a module with the conv-chain tests
from .test_conv_chains_tf import RNG, W  # noqa: E402


@pytest.mark.parametrize("padding, shape, rate", [
    ("SAME", (1, 16, 16, 3), 2),
    ("SAME", (1, 15, 17, 3), 3),
    ("VALID", (1, 15, 17, 3), 3),
    ("VALID", (1, 20, 20, 3), 2),
])
def test_flatten_atrous_conv_is_exact_in_tf(padding: str, shape: tuple[int, ...], rate: int) -> None:
    weights = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)

    def fn() -> None:
        x = v1.placeholder(tf.float32, shape, name="x")
        y = tf.nn.atrous_conv2d(x, tf.constant(weights, name="w"), rate=rate, padding=padding)
        tf.identity(y, name="out")
    data = build(fn)
    got, report = ours(data, "flatten_atrous_conv", ["x"], ["out"])
    want = theirs(data, "flatten_atrous_conv", ["x"], ["out"])
    assert report.steps[0].stats["atrous_convs_flattened"] == 1
    assert ops(got) == ops(want)
    assert ops(got)["Conv2D"] == 1 and "SpaceToBatchND" not in ops(got) and "BatchToSpaceND" not in ops(got)
    conv = nodes(got)["convolution/BatchToSpaceND"]
    assert conv.op == "Conv2D" and conv.input[1] == "w"
    upsampled = tf.make_ndarray(nodes(got)["w"].attr["value"].tensor)
    assert upsampled.shape == (2 * rate + 1, rate + 1, 3, 4)
    np.testing.assert_array_equal(upsampled[::rate, ::rate], weights)
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    assert_same_outputs(data, got, feeds, ["out"], rtol=1e-4, atol=1e-4)
    if padding == "SAME":  # the original tool agrees; for VALID it writes SAME and gets shapes wrong
        assert conv.attr["padding"].s == nodes(want)[conv.name].attr["padding"].s == b"SAME"
        assert_same_outputs(got, want, feeds, ["out"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Conv2D", "DepthwiseConv2dNative"])
def test_flatten_atrous_conv_with_uneven_padding_uses_explicit_padding(op: str) -> None:
    weights = RNG.standard_normal((3, 3, 3, 2 if op == "Conv2D" else 1)).astype(np.float32)

    def fn() -> None:
        x = v1.placeholder(tf.float32, (1, 10, 10, 3), name="x")
        s = tf.raw_ops.SpaceToBatchND(input=x, block_shape=[2, 2], paddings=[[2, 0], [1, 1]], name="s2b")
        w = tf.identity(tf.constant(weights, name="w"), name="w/read")  # as TF1 variables freeze
        if op == "Conv2D":
            c = tf.nn.conv2d(s, w, [1, 1, 1, 1], "VALID", name="conv")
        else:
            c = tf.nn.depthwise_conv2d(s, w, [1, 1, 1, 1], "VALID", name="conv")
        tf.identity(tf.raw_ops.BatchToSpaceND(input=c, block_shape=[2, 2], crops=[[0, 0], [0, 0]], name="b2s"), name="out")
    data = build(fn)
    got, report = ours(data, "flatten_atrous_conv", ["x"], ["out"])
    assert report.steps[0].changed
    flat = nodes(got)["b2s"]
    assert flat.op == op and flat.attr["padding"].s == b"EXPLICIT"
    assert list(flat.attr["explicit_paddings"].list.i) == [0, 0, 2, 0, 1, 1, 0, 0]
    assert "w" not in nodes(got) and flat.input[1] == "w/read"  # old chain gone, its name reused
    feeds = {"x": RNG.standard_normal((1, 10, 10, 3)).astype(np.float32)}
    assert_same_outputs(data, got, feeds, ["out"], rtol=1e-4, atol=1e-4)


def test_flatten_atrous_conv_refuses_crops_beyond_padding() -> None:
    def fn() -> None:
        x = v1.placeholder(tf.float32, (1, 8, 8, 3), name="x")
        s = tf.raw_ops.SpaceToBatchND(input=x, block_shape=[2, 2], paddings=[[0, 0], [0, 0]], name="s2b")
        c = tf.nn.conv2d(s, tf.constant(W, name="w"), [1, 1, 1, 1], "VALID", name="conv")
        tf.identity(tf.raw_ops.BatchToSpaceND(input=c, block_shape=[2, 2], crops=[[1, 1], [0, 0]], name="b2s"), name="out")
    got, report = ours(build(fn), "flatten_atrous_conv", ["x"], ["out"])
    assert not report.steps[0].changed and ops(got)["SpaceToBatchND"] == 1
    assert any("negative effective padding" in n for n in notes(report))


def test_fold_flatten_fold_leaves_what_the_original_leaves() -> None:
    weights = RNG.standard_normal((3, 3, 3, 4)).astype(np.float32)

    def fn() -> None:
        x = v1.placeholder(tf.float32, (1, 16, 16, 3), name="x")
        y = tf.nn.atrous_conv2d(x, tf.constant(weights, name="w"), rate=2, padding="SAME")
        tf.identity(y, name="out")
    data = build(fn)
    pipeline = "fold_constants flatten_atrous_conv fold_constants"
    got, _ = ours(data, pipeline, ["x"], ["out"])
    want = theirs(data, pipeline, ["x"], ["out"])
    assert sorted(nodes(got)) == sorted(nodes(want)) == ["convolution/BatchToSpaceND", "out", "w", "x"]
    assert ops(got) == ops(want)
    feeds = {"x": RNG.standard_normal((1, 16, 16, 3)).astype(np.float32)}
    assert_same_outputs(data, got, feeds, ["out"], rtol=1e-4, atol=1e-4)
