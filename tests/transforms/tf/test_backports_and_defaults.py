"""add_default_attributes, backport_concatv2, backport_tensor_array_v3: TensorFlow runs the result,
the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.compat.add_default_attributes_tf  # noqa: E402
import graphwright.transforms.compat.backport_concatv2_tf  # noqa: E402
import graphwright.transforms.compat.backport_tensor_array_v3_tf  # noqa: E402, F401
from graphwright.formats.graphdef.op_registry import attr_defaults  # noqa: E402

from ._helpers import (  # noqa: E402
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


def _conv_graph() -> bytes:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [1, 6, 6, 2], name="x")
        w = tf.constant(np.random.default_rng(0).standard_normal((3, 3, 2, 4)).astype(np.float32), name="w")
        y = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", name="conv")
        z = tf.concat([y, tf.nn.relu(y)], axis=3, name="cat")
        tf.identity(z, name="out")
    return build(fn)


def _strip_defaults(data: bytes, *, custom: bool = True) -> bytes:
    gd = v1.GraphDef()
    gd.ParseFromString(data)
    for node in gd.node:
        for name in attr_defaults(node.op):
            if name in node.attr:
                del node.attr[name]
    if custom:
        gd.node.add(name="custom", op="MyCustomOp")  # unknown op, unconnected
    return gd.SerializeToString()


def test_add_default_attributes_restores_what_tf_would_and_matches_original_tool() -> None:
    full = _conv_graph()
    stripped = _strip_defaults(full)
    assert "data_format" not in nodes(stripped)["conv"].attr
    got, report = ours(stripped, "add_default_attributes", ["x"], ["out"])
    # the original tool refuses the whole graph because of the unknown op; ours lists it and goes on
    want = theirs(_strip_defaults(full, custom=False), "add_default_attributes", ["x"], ["out"])
    conv = nodes(got)["conv"]
    assert conv.attr["data_format"].s == b"NHWC"
    assert list(conv.attr["dilations"].list.i) == [1, 1, 1, 1]
    for name, node in nodes(got).items():
        if name != "custom":
            assert set(node.attr) == set(nodes(full)[name].attr) == set(nodes(want)[name].attr), name
    assert report.steps[0].changed
    assert any("MyCustomOp" in n for n in notes(report))
    assert ops(got) == {**ops(want), "MyCustomOp": 1}
    graph = v1.GraphDef()
    graph.ParseFromString(got)
    del graph.node[-1]  # TF cannot import the unknown op
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 6, 6, 2)).astype(np.float32)}
    assert_same_outputs(full, graph.SerializeToString(), feeds, ["out"])


def test_add_default_attributes_on_complete_graph_changes_nothing() -> None:
    _, report = ours(_conv_graph(), "add_default_attributes", ["x"], ["out"])
    assert not report.steps[0].changed


def test_backport_concatv2_runs_in_tf_and_matches_original_tool() -> None:
    data = _conv_graph()
    got, report = ours(data, "backport_concatv2", ["x"], ["out"])
    want = theirs(data, "backport_concatv2", ["x"], ["out"])
    assert report.steps[0].stats["concats_backported"] == 1
    assert ops(got) == ops(want) and ops(got).get("Concat") == 1 and "ConcatV2" not in ops(got)
    cat = nodes(got)["cat"]
    assert cat.input[0] == nodes(want)["cat"].input[0] == "cat/axis"
    assert "Tidx" not in cat.attr
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 6, 6, 2)).astype(np.float32)}
    assert_same_outputs(data, got, feeds, ["out"])


def test_backport_concatv2_keeps_int64_axis_concat() -> None:
    def fn() -> None:
        a = v1.placeholder(tf.float32, [2, 3], name="a")
        tf.identity(tf.concat([a, a], axis=tf.constant(1, tf.int64)), name="out")
    got, report = ours(build(fn), "backport_concatv2", ["a"], ["out"])
    assert ops(got).get("ConcatV2") == 1 and not report.steps[0].changed
    assert any("int64" in n for n in notes(report))


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


@pytest.mark.slow
def test_defaults_and_concat_backport_on_inception_v3_match_original_tool() -> None:
    from tests.models import keras_graphdef
    info = keras_graphdef("inception_v3")
    data = info.path.read_bytes()
    inputs, outputs = list(info.inputs), list(info.outputs)
    pipeline = "add_default_attributes backport_concatv2"
    got, report = ours(data, pipeline, inputs, outputs)
    want = theirs(data, pipeline, inputs, outputs)
    assert report.steps[1].stats["concats_backported"] > 0
    assert ops(got) == ops(want) and "ConcatV2" not in ops(got)
    for name, node in nodes(got).items():
        assert set(node.attr) == set(nodes(want)[name].attr), name
    rng = np.random.default_rng(4)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in info.inputs.items()}
    assert_same_outputs(data, got, feeds, outputs, rtol=1e-5, atol=1e-6)


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
