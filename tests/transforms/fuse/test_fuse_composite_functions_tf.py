"""fuse_composite_functions (and inline_partitionedcall on what it leaves) on graphs whose function
library was built by tf.function; TensorFlow runs the result."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

from tensorflow.python.framework import function  # noqa: E402
from tensorflow.python.ops import functional_ops, inplace_ops  # noqa: E402

import graphwright.transforms.fuse.fuse_composite_functions_tf  # noqa: E402
import graphwright.transforms.inline.inline_partitionedcall_tf  # noqa: E402, F401
from graphwright.transforms import PipelineReport  # noqa: E402
from tests.models import ModelInfo  # noqa: E402

from .._tf import _library_size, assert_same_outputs, build, nodes, notes, ops, ours, tf, v1  # noqa: E402
from ._composite_models import composite_model, run_in_child  # noqa: E402

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


# -- embedding lookups keep what the function does with ids outside the table (issue 13 item 7)

ROWS, DIM = 7, 3
OUT_OF_RANGE = [0, ROWS, 3, -1, 6, ROWS + 5]


def _table() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((ROWS, DIM)).astype(np.float32) + 2.0  # no zero rows


def _lookup_graph(implements: str, body, dtype=tf.int32, ids_first: bool = False) -> bytes:
    fn = tf.function(experimental_implements=implements)(body)

    def build_it() -> None:
        ids = v1.placeholder(dtype, [len(OUT_OF_RANGE)], name="ids")
        table = tf.constant(_table(), name="table")
        looked = fn(ids, table) if ids_first else fn(table, ids)
        tf.identity(looked * 1.0, name="out")
    return build(build_it)


def _seed_lookup(embs, ids_vec):
    """The seed's EmbFprop: a For loop gathering one row per id into an InplaceUpdate'd buffer."""
    num = tf.shape(ids_vec)[0]
    rets = inplace_ops.empty([num, DIM], tf.float32)

    @function.Defun(tf.int32, tf.float32, ids_vec.dtype, tf.float32)
    def loop(i, embs, ids_vec, rets):
        row = tf.reshape(tf.gather(embs, tf.gather(ids_vec, i)), [1, DIM])
        return embs, ids_vec, inplace_ops.alias_inplace_update(rets, [i], row)
    _, _, rets = functional_ops.For(start=0, limit=num, delta=1, inputs=[embs, ids_vec, rets], body=loop)
    return rets


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_one_hot_lookup_keeps_zero_rows_for_ids_outside_the_table(dtype) -> None:
    data = _lookup_graph("embedding_matmul", lambda t, i: tf.matmul(tf.one_hot(i, ROWS), t), dtype)
    got, report = ours(data, "fuse_composite_functions", ["ids"], ["out"])
    assert report.steps[0].stats["calls_fused"] == 1 and "PartitionedCall" not in ops(got)
    assert "StatefulPartitionedCall" not in ops(got) and ops(got)["GatherV2"] == 1
    feeds = {"ids": np.array(OUT_OF_RANGE, dtype.as_numpy_dtype)}
    (before,) = oracle.run_graphdef(data, feeds, ["out"])
    assert not before[1].any() and not before[3].any() and not before[5].any()  # TF: zero rows
    np.testing.assert_allclose(before[0], _table()[0], rtol=1e-6)
    assert_same_outputs(data, got, feeds, ["out"], rtol=1e-6, atol=1e-6)


def test_seed_embedding_lookup_becomes_gather_and_fails_where_the_seed_fails() -> None:
    data = _lookup_graph("embedding_lookup", _seed_lookup)
    got, report = ours(data, "fuse_composite_functions", ["ids"], ["out"])
    assert report.steps[0].stats == {"calls_fused": 1, "functions_removed": 2}  # the call's and the loop's
    assert ops(got)["GatherV2"] == 1 and "For" not in ops(got) and _library_size(got) == 0
    inside = {"ids": np.array([0, 6, 3, 3, 1, 2], np.int32)}
    assert_same_outputs(data, got, inside, ["out"])
    for bad in ([0, ROWS, 1, 1, 1, 1], [0, -1, 1, 1, 1, 1]):  # the For loop's gather fails on CPU: so does ours
        for graph in (data, got):
            with pytest.raises(tf.errors.InvalidArgumentError, match="not in \\[0, 7\\)"):
                oracle.run_graphdef(graph, {"ids": np.array(bad, np.int32)}, ["out"])


def test_clipping_lookup_keeps_its_clip_and_reads_ids_first_signatures() -> None:
    data = _lookup_graph("embedding_lookup", lambda i, t: tf.gather(t, tf.clip_by_value(i, 0, ROWS - 1)),
                         ids_first=True)
    got, report = ours(data, "fuse_composite_functions", ["ids"], ["out"])
    assert report.steps[0].stats["calls_fused"] == 1
    assert ops(got)["Maximum"] == 1 and ops(got)["Minimum"] == 1 and ops(got)["GatherV2"] == 1
    feeds = {"ids": np.array(OUT_OF_RANGE, np.int32)}
    (before,) = oracle.run_graphdef(data, feeds, ["out"])
    np.testing.assert_array_equal(before[1], _table()[ROWS - 1])  # TF clips: last row, first row
    np.testing.assert_array_equal(before[3], _table()[0])
    assert_same_outputs(data, got, feeds, ["out"])


def test_lookup_whose_body_is_not_read_is_left_alone_with_the_reason() -> None:
    data = _lookup_graph("embedding_lookup", lambda t, i: tf.tile(t[:1], [tf.size(i), 1]))
    got, report = ours(data, "fuse_composite_functions", ["ids"], ["out"])
    assert not report.steps[0].changed and ops(got)["PartitionedCall"] == 1
    assert any("neither gathers rows nor multiplies by a one-hot" in n for n in notes(report))


# -- tf-keras recurrent layers (issue 13 item 8): lstm_<uuid> functions -> BlockLSTMV2

def _fused_model(name: str) -> tuple[bytes, bytes, PipelineReport, ModelInfo]:
    info = composite_model(name)
    data = info.path.read_bytes()
    got, report = ours(data, "fuse_composite_functions", list(info.inputs), info.outputs)
    return data, got, report, info


def _function_attr(data: bytes, key: str) -> list[str]:
    gd = v1.GraphDef()
    gd.ParseFromString(data)
    return [f.attr[key].s.decode() for f in gd.library.function if key in f.attr]


def test_keras_lstm_functions_become_block_lstm_and_match_the_original_in_tf() -> None:
    data, got, report, info = _fused_model("lstm")
    assert all(i.startswith("lstm_") for i in _function_attr(data, "api_implements"))  # the interface fused
    assert ops(data)["PartitionedCall"] == 2 and "BlockLSTMV2" not in ops(data)
    assert report.steps[0].stats["calls_fused"] == 2
    assert ops(got)["BlockLSTMV2"] == 2 and "PartitionedCall" not in ops(got) and _library_size(got) == 0
    assert ops(got)["ReverseV2"] == 1  # the go_backwards layer reverses time first
    feeds, expected = info.reference_data()
    (out,) = info.outputs
    for onednn in (False, True):  # TF's CPU kernels, Grappler off, both builds
        ok, result = run_in_child(got, feeds, [out], onednn=onednn)
        assert ok, result
        np.testing.assert_allclose(result[0], expected[out], rtol=1e-5, atol=1e-6)
    # large inputs drive |c| well past BlockLSTM's default clip of 3: cell_clip=0 must not clip
    big = {k: v * 25.0 for k, v in feeds.items()}
    assert_same_outputs(data, got, big, [out], rtol=1e-5, atol=1e-5)


def test_keras_lstm_outputs_keep_their_layout_and_the_last_cell_state() -> None:
    """The fused call's other outputs (every step's h batch-major, the last c), when read."""
    info = composite_model("lstm")
    data = info.path.read_bytes()
    fetches = ["model/lstm_seq/PartitionedCall:1", "model/lstm_back/PartitionedCall:3", *info.outputs]
    got, report = ours(data, "fuse_composite_functions", list(info.inputs), fetches)
    assert report.steps[0].stats["calls_fused"] == 2
    feeds = info.reference_data()[0]
    before = oracle.run_graphdef(data, feeds, fetches)
    names = {n.name: n.op for n in nodes(got).values()}
    assert names["model/lstm_back/PartitionedCall"] == "StridedSlice"  # the call's name: its last h
    after = oracle.run_graphdef(got, feeds, ["model/lstm_seq/PartitionedCall/outputs",
                                             "model/lstm_back/PartitionedCall/last_c", info.outputs[0]])
    assert before[0].shape == (2, 7, 8) and before[1].shape == (2, 6)
    for b, a in zip(before, after):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_keras_gru_functions_are_left_alone_with_the_reason() -> None:
    data, got, report, _ = _fused_model("gru")
    assert all(i.startswith("gru_") for i in _function_attr(data, "api_implements"))
    step = report.steps[0]
    assert not step.changed and ops(got)["PartitionedCall"] == 2
    assert len(step.refusals) == 2
    assert all("GRUBlockCell" in reason and "reset_after=True" in reason for *_, reason in step.refusals)


LSTM_UUID = "lstm_0b0e0c1a-7f3e-4c55-9a77-3f5b1a2c4d6e"


def _lstm_like(body, with_mask: bool) -> bytes:
    fn = tf.function(experimental_attributes={"api_implements": LSTM_UUID, "time_major": False,
                                              "go_backwards": False})(body)

    def build_it() -> None:
        x = v1.placeholder(tf.float32, [2, 3, 4], name="x")
        h = tf.zeros([2, 5])
        args = [x, h, h, tf.ones([4, 20]), tf.ones([5, 20]), tf.zeros([20])]
        if with_mask:
            args.append(tf.ones([2, 3], tf.bool))
        tf.identity(fn(*args)[0], name="out")
    return build(build_it)


def test_lstm_interfaces_that_are_not_keras_standard_cells_are_left_alone_with_the_reason() -> None:
    def masked(x, h, c, k, r, b, mask):
        return tf.reduce_sum(x, 1)[:, :1] + h, x, h, c, tf.constant(1.0)

    def relu_cell(x, h, c, k, r, b):
        return tf.nn.relu(tf.matmul(x[:, 0], k)[:, :5] + h), x, h, c, tf.constant(1.0)

    for body, with_mask, reason in ((masked, True, "a masked LSTM"), (relu_cell, False, "not Keras' tanh/sigmoid")):
        data = _lstm_like(body, with_mask)
        got, report = ours(data, "fuse_composite_functions", ["x"], ["out"])
        assert not report.steps[0].changed and "BlockLSTMV2" not in ops(got)
        assert any(reason in n for n in notes(report)), notes(report)


def test_keras_lstm_with_weights_fed_at_run_time_concatenates_them_in_the_graph() -> None:
    """Weights that are not constants (here: the first layer's, turned into placeholders and fed)
    are concatenated by a ConcatV2 in the fused graph instead of at fusion time."""
    info = composite_model("lstm")
    gd = v1.GraphDef()
    gd.ParseFromString(info.path.read_bytes())
    fed = {}
    for node in gd.node:
        if node.name in ("model/lstm_seq/Read/ReadVariableOp", "model/lstm_seq/Read_1/ReadVariableOp"):
            fed[node.name] = tf.make_ndarray(node.attr["value"].tensor)
            shape = node.attr["value"].tensor.tensor_shape
            node.op = "Placeholder"
            del node.attr["value"]
            node.attr["shape"].shape.CopyFrom(shape)
    assert len(fed) == 2
    data = gd.SerializeToString()
    names = [*info.inputs, *fed]
    got, report = ours(data, "fuse_composite_functions", names, info.outputs)
    assert report.steps[0].stats["calls_fused"] == 2
    assert ops(got)["ConcatV2"] == 1 and ops(got)["BlockLSTMV2"] == 2  # one layer's weights joined in the graph
    feeds = {**info.reference_data()[0], **fed}
    assert_same_outputs(data, got, feeds, info.outputs, rtol=1e-5, atol=1e-6)


def test_time_major_keras_lstm_needs_no_transposes() -> None:
    data, got, report, info = _fused_model("lstm_time_major")
    assert report.steps[0].stats["calls_fused"] == 1
    assert ops(got)["BlockLSTMV2"] == 1 and "Transpose" not in ops(got) and "PartitionedCall" not in ops(got)
    feeds, expected = info.reference_data()
    (out,) = info.outputs
    (got_out,) = oracle.run_graphdef(got, feeds, [out])
    np.testing.assert_allclose(got_out, expected[out], rtol=1e-5, atol=1e-6)  # h, c and one step of the sequence
    assert_same_outputs(data, got, feeds, [out], rtol=1e-5, atol=1e-6)
