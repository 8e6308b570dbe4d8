"""sparsify_gather: TensorFlow runs the hash-table lookup (after the init node) with the gather's
outputs; compared with the original tool on the graphs it accepts."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

import graphwright as gw  # noqa: E402
import graphwright.transforms.quantize.sparsify_gather_tf  # noqa: E402

from .._tf import build, nodes, ops, ours, tf, theirs, v1  # noqa: E402

TABLE = np.zeros((6, 1), np.float32)
TABLE[1], TABLE[4] = 2.0, 5.0


def _run_with_init(data: bytes, feeds: dict[str, np.ndarray], outputs: list[str], init: str | None) -> list[np.ndarray]:
    graph_def = v1.GraphDef()
    graph_def.ParseFromString(data)
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(graph_def, name="")
        with v1.Session(graph=graph) as session:
            if init:
                session.run(init)
            return session.run([f"{o}:0" for o in outputs], {f"{k}:0": v for k, v in feeds.items()})


def _graph(ids_type: object, v2_too: bool) -> bytes:
    def fn() -> None:
        ids = v1.placeholder(ids_type, [4], name="ids")
        read = tf.identity(tf.constant(TABLE, name="table"), name="table/read")
        tf.identity(tf.raw_ops.Gather(params=read, indices=ids, name="gather"), name="out")
        if v2_too:
            tf.identity(tf.gather(read, ids, name="gather2"), name="out2")
    return build(fn)


@pytest.mark.parametrize("ids_type", [tf.int64, tf.int32])
def test_sparsify_gather_runs_in_tf_with_equal_outputs(ids_type: object) -> None:
    data = _graph(ids_type, v2_too=True)
    outputs = ["out", "out2"]
    got, report = ours(data, "sparsify_gather", ["ids"], outputs)
    assert report.steps[0].stats == {"gathers_sparsified": 2, "tables": 1}
    histogram = ops(got)
    assert histogram["HashTable"] == 1 and histogram["LookupTableFind"] == 2 and histogram["InitializeTable"] == 1
    assert "Gather" not in histogram and "GatherV2" not in histogram and "table" not in nodes(got)
    values = tf.make_ndarray(nodes(got)["table/values"].attr["value"].tensor)
    np.testing.assert_array_equal(values, [2.0, 5.0])  # only the non-zero rows are stored
    feeds = {"ids": np.array([1, 0, 4, 5], ids_type.as_numpy_dtype)}
    expected = _run_with_init(data, feeds, outputs, None)
    for e, g in zip(expected, _run_with_init(got, feeds, outputs, "group_deps")):
        np.testing.assert_array_equal(g, e)


def test_sparsify_gather_matches_original_tool_node_counts() -> None:
    data = _graph(tf.int64, v2_too=False)  # the original breaks GatherV2 readers of a shared table
    got, _ = ours(data, "sparsify_gather", ["ids"], ["out"])
    want = theirs(data, "sparsify_gather", ["ids"], ["out"])
    assert ops(got) == ops(want)
    assert list(nodes(got)["gather"].input) == [t.removesuffix(":0") for t in nodes(want)["gather"].input]
    feeds = {"ids": np.array([4, 4, 1, 3], np.int64)}
    for a, b in zip(_run_with_init(got, feeds, ["out"], "group_deps"), _run_with_init(want, feeds, ["out"], "group_deps")):
        np.testing.assert_array_equal(a, b)


def test_sparsify_gather_refuses_checkpoint_parameter() -> None:
    from graphwright.formats.graphdef import model_from_proto, parse_bytes
    model = model_from_proto(parse_bytes(_graph(tf.int64, v2_too=False))[0])
    with pytest.raises(gw.TransformError, match="input_checkpoint"):
        gw.transform(model, "sparsify_gather(input_checkpoint=/tmp/ckpt)", inputs=["ids"], outputs=["out"])
