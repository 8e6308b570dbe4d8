"""fuse_resize_and_conv / fuse_pad_and_conv / fuse_resize_pad_and_conv / fuse_convolutions (their
rules in fuse/_conv_chains_tf.py): TensorFlow's CPU runtime runs the result with the input graph's
outputs; the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.fuse.fuse_convolutions_tf  # noqa: E402
import graphwright.transforms.fuse.fuse_pad_and_conv_tf  # noqa: E402
import graphwright.transforms.fuse.fuse_resize_and_conv_tf  # noqa: E402
import graphwright.transforms.fuse.fuse_resize_pad_and_conv_tf  # noqa: E402, F401

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

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3, 3, 4)).astype(np.float32)
OUTS = ["out", "out2", "out3"]


def _fusion_graph(half_pixel: bool = False) -> bytes:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [1, 8, 8, 3], name="x")
        w = tf.constant(W, name="w")
        r = tf.raw_ops.ResizeBilinear(images=x, size=[12, 14], align_corners=False,
                                      half_pixel_centers=half_pixel, name="resize")
        p = tf.pad(r, [[0, 0], [1, 1], [2, 2], [0, 0]], mode="REFLECT", name="pad")
        tf.identity(tf.nn.conv2d(p, w, [1, 1, 1, 1], "VALID", name="conv"), name="out")
        r2 = tf.raw_ops.ResizeBilinear(images=x, size=[12, 14], align_corners=True, name="resize2")
        tf.identity(tf.nn.conv2d(r2, w, [1, 1, 1, 1], "SAME", name="conv2"), name="out2")
        p3 = tf.pad(x, [[0, 0], [1, 1], [2, 2], [0, 0]], mode="SYMMETRIC", name="pad3")
        tf.identity(tf.nn.conv2d(p3, w, [1, 2, 2, 1], "VALID", name="conv3"), name="out3")
    return build(fn)


FEEDS = {"x": RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)}


@pytest.mark.parametrize("transforms, fused", [
    ("fuse_resize_and_conv", {"conv2": "FusedResizeAndPadConv2D"}),
    ("fuse_pad_and_conv", {"conv3": "FusedPadConv2D"}),
    ("fuse_resize_pad_and_conv", {"conv": "FusedResizeAndPadConv2D"}),
    ("fuse_resize_pad_and_conv fuse_resize_and_conv fuse_pad_and_conv",
     {"conv": "FusedResizeAndPadConv2D", "conv2": "FusedResizeAndPadConv2D", "conv3": "FusedPadConv2D"}),
])
def test_conv_fusions_run_in_tf_and_match_original_tool(transforms: str, fused: dict[str, str]) -> None:
    data = _fusion_graph()
    got, report = ours(data, transforms, ["x"], OUTS)
    want = theirs(data, transforms, ["x"], OUTS)
    assert ops(got) == ops(want)
    for name, op in fused.items():
        node = nodes(got)[name]
        assert node.op == op
        assert set(node.attr) == set(nodes(want)[name].attr)
        assert list(node.input) == list(nodes(want)[name].input) or name == "conv2"
    assert all(step.changed for step in report.steps)
    assert_same_outputs(data, got, FEEDS, OUTS, rtol=1e-5, atol=1e-5)


def test_fuse_convolutions_alias_runs_all_three() -> None:
    data = _fusion_graph()
    got, report = ours(data, "fuse_convolutions", ["x"], OUTS)
    want = theirs(data, "fuse_resize_pad_and_conv fuse_resize_and_conv fuse_pad_and_conv", ["x"], OUTS)
    assert ops(got) == ops(want)
    assert report.steps[0].stats["convolutions_fused"] == 3
    assert_same_outputs(data, got, FEEDS, OUTS, rtol=1e-5, atol=1e-5)


def test_half_pixel_resize_is_not_fused_unlike_original_tool() -> None:
    data = _fusion_graph(half_pixel=True)
    got, report = ours(data, "fuse_resize_pad_and_conv", ["x"], OUTS)
    want = theirs(data, "fuse_resize_pad_and_conv", ["x"], OUTS)
    assert nodes(got)["conv"].op == "Conv2D"
    assert any("half-pixel" in n for n in notes(report))
    assert_same_outputs(data, got, FEEDS, OUTS)
    # the original fuses it anyway and changes the result
    expected, broken = oracle.run_graphdef(data, FEEDS, ["out"])[0], oracle.run_graphdef(want, FEEDS, ["out"])[0]
    assert nodes(want)["conv"].op == "FusedResizeAndPadConv2D"
    assert np.abs(expected - broken).max() > 1e-3


def test_shared_pad_is_not_fused() -> None:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [1, 8, 8, 3], name="x")
        p = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT", name="pad")
        tf.identity(tf.nn.conv2d(p, tf.constant(W), [1, 1, 1, 1], "VALID", name="conv"), name="out")
        tf.identity(p, name="out2")
    data = build(fn)
    got, report = ours(data, "fuse_pad_and_conv", ["x"], ["out", "out2"])
    assert not report.steps[0].changed and "FusedPadConv2D" not in ops(got)
