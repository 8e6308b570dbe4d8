"""add_default_attributes: TensorFlow runs the result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.compat.add_default_attributes_tf  # noqa: E402, F401
from graphwright.formats.graphdef.op_registry import attr_defaults  # noqa: E402

from .._tf import assert_same_outputs, nodes, notes, ops, ours, theirs, v1  # noqa: E402
from ._graphs import _conv_graph  # noqa: E402


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
