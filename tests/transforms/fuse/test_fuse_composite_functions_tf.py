"""fuse_composite_functions (and inline_partitionedcall on what it leaves) on graphs whose function
library was built by tf.function; TensorFlow runs the result."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright.transforms.fuse.fuse_composite_functions_tf  # noqa: E402
import graphwright.transforms.inline.inline_partitionedcall_tf  # noqa: E402, F401

from .._tf import _library_size, assert_same_outputs, build, nodes, ops, ours, tf, v1  # noqa: E402

FEEDS = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}

VOCAB = 7
SCALE_IMPLEMENTS = ('name: "my_scale" attr { key: "factor" value { f: 2.5 } } '
                    'attr { key: "tfl_fusable_op" value { b: true } }')


def _composite_graph() -> bytes:
    @tf.function(experimental_implements="embedding_matmul")
    def embed(table, ids):
        return tf.matmul(tf.one_hot(ids, VOCAB), table)

    @tf.function(experimental_implements="some_interface")
    def other(a):
        return a - 1.0

    def fn() -> None:
        ids = v1.placeholder(tf.int32, [5], name="ids")
        table = tf.constant(np.random.default_rng(1).standard_normal((VOCAB, 3)).astype(np.float32), name="table")
        tf.identity(other(embed(table, ids)), name="out")
    return build(fn)


def test_embedding_matmul_becomes_gather_and_runs_in_tf() -> None:
    data = _composite_graph()
    got, report = ours(data, "fuse_composite_functions", ["ids"], ["out"])
    step = report.steps[0]
    assert step.stats == {"calls_fused": 1, "functions_removed": 1}
    assert ops(got)["GatherV2"] == 1 and ops(got)["PartitionedCall"] == 1  # some_interface stays
    assert any("some_interface" in n for n in step.notes)
    assert _library_size(got) == 1
    feeds = {"ids": np.array([0, 6, 3, 3, 1], np.int32)}
    assert_same_outputs(data, got, feeds, ["out"], rtol=1e-6, atol=1e-6)
    # and inlining what is left gives a graph with no calls that still computes the same
    inlined, _ = ours(got, "inline_partitionedcall", ["ids"], ["out"])
    assert "PartitionedCall" not in ops(inlined) and _library_size(inlined) == 0
    assert_same_outputs(data, inlined, feeds, ["out"], rtol=1e-6, atol=1e-6)


def test_tfl_fusable_function_becomes_custom_op_with_its_attributes() -> None:
    @tf.function(experimental_implements=SCALE_IMPLEMENTS)
    def scale(a):
        return a * 2.5

    def fn() -> None:
        x = v1.placeholder(tf.float32, [2, 4], name="x")
        tf.identity(scale(x) + 1.0, name="out")
    data = build(fn)
    assert_same_outputs(data, data, FEEDS, ["out"])  # the input graph runs; the custom op is for TFLite
    got, report = ours(data, "fuse_composite_functions", ["x"], ["out"])
    assert report.steps[0].stats["calls_fused"] == 1
    fused = [n for n in nodes(got).values() if n.op == "my_scale"]
    assert len(fused) == 1 and list(fused[0].input) == ["x"]
    assert dict(fused[0].attr)["factor"].f == 2.5 and "tfl_fusable_op" not in fused[0].attr
    add = next(n for n in nodes(got).values() if n.op == "AddV2")
    assert add.input[0] == fused[0].name
    assert _library_size(got) == 0 and "PartitionedCall" not in ops(got)


def _controlled_graph(implements: dict[str, str]) -> bytes:
    @tf.function(experimental_attributes=implements)
    def embed(table, ids):
        return tf.matmul(tf.one_hot(ids, VOCAB), table)

    def fn() -> None:
        ids = v1.placeholder(tf.int64, [5], name="ids")
        table = tf.constant(np.random.default_rng(2).standard_normal((VOCAB, 3)).astype(np.float32), name="table")
        check = tf.debugging.assert_less(ids, tf.constant(VOCAB, tf.int64), name="check")
        with tf.control_dependencies([check]):
            looked = embed(table, ids)
        with tf.control_dependencies([looked.op]):
            tf.identity(ids * 2, name="after")
        tf.identity(looked, name="out")
    return build(fn)


@pytest.mark.parametrize("transforms", ["inline_partitionedcall", "fuse_composite_functions"])
def test_control_edges_of_calls_survive_and_api_implements_is_read(transforms: str) -> None:
    data = _controlled_graph({"api_implements": "embedding_matmul"})
    outputs = ["out", "after"]
    got, report = ours(data, transforms, ["ids"], outputs)
    assert report.steps[0].changed and "PartitionedCall" not in ops(got)
    assert "StatefulPartitionedCall" not in ops(got)
    waiting = nodes(got)["mul/y"]  # had a control edge from the call: still waits for what replaced it
    assert any(t.startswith("^") for t in waiting.input)
    feeds = {"ids": np.array([0, 6, 3, 3, 1], np.int64)}
    assert_same_outputs(data, got, feeds, outputs, rtol=1e-6, atol=1e-6)
    bad = {"ids": np.array([0, 9, 3, 3, 1], np.int64)}  # the assert still guards the lookup
    with pytest.raises(tf.errors.InvalidArgumentError):
        oracle.run_graphdef(got, bad, ["out"])
