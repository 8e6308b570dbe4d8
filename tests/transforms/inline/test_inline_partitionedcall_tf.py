"""inline_partitionedcall on graphs whose function library was built by tf.function; TensorFlow
runs the result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.inline.inline_partitionedcall_tf  # noqa: E402, F401

from .._tf import _library_size, assert_same_outputs, build, nodes, ops, ours, tf, theirs, v1  # noqa: E402

FEEDS = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}


def _call_graph(nested: bool = False) -> bytes:
    @tf.function
    def inner(c):
        return tf.nn.relu(c) + 1.0

    @tf.function
    def f(a, b):
        c = tf.matmul(a, b)
        s = tf.split(c, 2, axis=1)
        return (inner(s[1]) if nested else tf.nn.relu(s[1]) + 1.0), s[0]

    def fn() -> None:
        x = v1.placeholder(tf.float32, [2, 4], name="x")
        w = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6) / 10, name="w")
        r1, r2 = f(x, w)
        tf.identity(r1 * 2.0, name="out")
        tf.identity(r2, name="out2")
    return build(fn)


@pytest.mark.parametrize("nested", [False, True])
def test_inline_partitionedcall_runs_in_tf_and_matches_original_tool(nested: bool) -> None:
    data = _call_graph(nested)
    outputs = ["out", "out2"]
    got, report = ours(data, "inline_partitionedcall", ["x"], outputs)
    want = theirs(data, "inline_partitionedcall", ["x"], outputs)
    assert not any(op.endswith("PartitionedCall") for op in ops(got))
    assert report.steps[0].stats["calls_inlined"] == (2 if nested else 1)
    if not nested:  # the original inlines one level only
        assert ops(got) == ops(want)
        assert sorted(nodes(got)) == sorted(nodes(want))
        canonical = [t.removesuffix(":0") for t in nodes(want)["PartitionedCall/split"].input]
        assert list(nodes(got)["PartitionedCall/split"].input) == canonical
    # the original keeps the now-unused functions; we drop them
    assert _library_size(got) == 0 < _library_size(want)
    assert_same_outputs(data, got, FEEDS, outputs)


def test_inline_partitionedcall_without_library_is_a_no_op() -> None:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [2, 4], name="x")
        tf.identity(x * 2.0, name="out")
    got, report = ours(build(fn), "inline_partitionedcall", ["x"], ["out"])
    assert not report.steps[0].changed and ops(got)["Mul"] == 1
