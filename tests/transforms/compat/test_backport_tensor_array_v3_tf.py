"""backport_tensor_array_v3: TensorFlow runs the result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.compat.backport_tensor_array_v3_tf  # noqa: E402, F401

from .._tf import assert_same_outputs, build, nodes, ops, ours, tf, theirs, v1  # noqa: E402


def _tensor_array_graph() -> bytes:
    raw = tf.raw_ops

    def fn() -> None:
        x = v1.placeholder(tf.float32, [3, 4], name="x")
        handle, flow = raw.TensorArrayV3(size=3, dtype=tf.float32, name="ta")
        flow = raw.TensorArrayScatterV3(handle=handle, indices=[0, 1, 2], value=x, flow_in=flow, name="scatter")
        y = raw.TensorArrayReadV3(handle=handle, index=1, flow_in=flow, dtype=tf.float32, name="read") * 2.0
        size = raw.TensorArraySizeV3(handle=handle, flow_in=flow, name="size")
        gathered = raw.TensorArrayGatherV3(handle=handle, indices=[0, 2], flow_in=flow, dtype=tf.float32,
                                           element_shape=[4], name="gather")
        tf.identity(gathered * tf.cast(size, tf.float32), name="out")
        tf.identity(y, name="out2")
    return build(fn)


def test_backport_tensor_array_v3_runs_in_tf_and_matches_original_tool() -> None:
    data = _tensor_array_graph()
    outputs = ["out", "out2"]
    got, report = ours(data, "backport_tensor_array_v3", ["x"], outputs)
    want = theirs(data, "backport_tensor_array_v3", ["x"], outputs)
    assert ops(got) == ops(want)
    assert not any(op.endswith("V3") for op in ops(got))
    assert ops(got)["TensorArrayV2"] == 1
    assert nodes(got)["scatter"].input[3] == "ta/replacement_flow_node"
    assert "identical_element_shapes" not in nodes(got)["ta"].attr
    assert report.steps[0].stats["flows_replaced"] == 1
    feeds = {"x": np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)}
    assert_same_outputs(data, got, feeds, outputs)


def test_backport_tensor_array_grad_v3_runs_in_tf() -> None:
    raw = tf.raw_ops

    def fn() -> None:
        x = v1.placeholder(tf.float32, [2, 3], name="x")
        handle, flow = raw.TensorArrayV3(size=2, dtype=tf.float32, name="ta")
        flow = raw.TensorArrayScatterV3(handle=handle, indices=[0, 1], value=x, flow_in=flow, name="scatter")
        grad, grad_flow = raw.TensorArrayGradV3(handle=handle, flow_in=flow, source="g", name="grad")
        grad_flow = raw.TensorArrayWriteV3(handle=grad, index=1, value=x[0] * 3.0, flow_in=grad_flow, name="gw")
        value = raw.TensorArrayReadV3(handle=grad, index=1, flow_in=grad_flow, dtype=tf.float32, name="gr")
        tf.identity(value, name="out")
    data = build(fn)
    got, report = ours(data, "backport_tensor_array_v3", ["x"], ["out"])
    want = theirs(data, "backport_tensor_array_v3", ["x"], ["out"])
    assert ops(got) == ops(want) and ops(got)["TensorArrayGradV2"] == 1
    assert report.steps[0].stats["flows_replaced"] == 2
    assert nodes(got)["gw"].input[3] == "grad/replacement_flow_node"
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)}
    assert_same_outputs(data, got, feeds, ["out"])
