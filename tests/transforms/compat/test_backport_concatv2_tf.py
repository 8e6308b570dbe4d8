"""backport_concatv2 (and add_default_attributes before it on a real model): TensorFlow runs the
result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.compat.add_default_attributes_tf  # noqa: E402
import graphwright.transforms.compat.backport_concatv2_tf  # noqa: E402, F401

from .._tf import assert_same_outputs, build, nodes, notes, ops, ours, tf, theirs, v1  # noqa: E402
from ._graphs import _conv_graph  # noqa: E402


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
