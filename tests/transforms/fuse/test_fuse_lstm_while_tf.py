"""fuse_lstm_while on Keras 3 and tf-keras LSTM layers frozen as functional While loops: one
BlockLSTMV2 per layer, the fused graph run by TensorFlow against the Keras model's outputs."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

from .._tf import assert_same_outputs, build, notes, ops, ours, tf, v1  # noqa: E402
from ._composite_models import composite_model, run_all_in_child  # noqa: E402

LOOPS = ("lstm_loop_keras3", "lstm_loop_tf_keras")


@pytest.fixture(scope="module")
def fused() -> dict:
    """Each loop model fused, and the fused graphs run in one child with oneDNN off, Grappler off."""
    runs = {}
    for name in LOOPS:
        info = composite_model(name)
        data = info.path.read_bytes()
        got, report = ours(data, "fuse_lstm_while", list(info.inputs), info.outputs)
        runs[name] = (info, data, got, report)
    jobs = [(runs[n][2], runs[n][0].reference_data()[0], runs[n][0].outputs) for n in LOOPS]
    jobs += [(graph, {}, ["out"]) for graph in _KERNEL_PROBES.values()]
    results = run_all_in_child(jobs, onednn=False)
    runs["child"] = dict(zip(LOOPS, results))
    runs["probes"] = dict(zip(_KERNEL_PROBES, results[len(LOOPS):]))
    return runs


def _probe(make) -> bytes:
    def fn() -> None:
        rng = np.random.default_rng(0)
        tf.identity(make(lambda *shape: tf.constant(rng.standard_normal(shape).astype(np.float32))), name="out")
    return build(fn)


T, B, IN, H = 3, 2, 4, 5
#: The fused recurrent ops TF has, each run once on CPU (which the fusions may emit is decided by this).
_KERNEL_PROBES = {
    "BlockLSTMV2": _probe(lambda f: tf.raw_ops.BlockLSTMV2(
        seq_len_max=tf.constant(T, tf.int64), x=f(T, B, IN), cs_prev=f(B, H), h_prev=f(B, H), w=f(IN + H, 4 * H),
        wci=f(H), wcf=f(H), wco=f(H), b=f(4 * H)).h),
    "BlockLSTM": _probe(lambda f: tf.raw_ops.BlockLSTM(
        seq_len_max=tf.constant(T, tf.int64), x=f(T, B, IN), cs_prev=f(B, H), h_prev=f(B, H), w=f(IN + H, 4 * H),
        wci=f(H), wcf=f(H), wco=f(H), b=f(4 * H)).h),
    "GRUBlockCell": _probe(lambda f: tf.raw_ops.GRUBlockCell(
        x=f(B, IN), h_prev=f(B, H), w_ru=f(IN + H, 2 * H), w_c=f(IN + H, H), b_ru=f(2 * H), b_c=f(H)).h),
    "CudnnRNNV3": _probe(lambda f: tf.raw_ops.CudnnRNNV3(
        input=f(T, B, IN), input_h=f(1, B, H), input_c=f(1, B, H), params=f(4 * H * (IN + H) + 8 * H),
        sequence_lengths=tf.constant([T] * B), is_training=False)[0]),
}


def test_which_fused_recurrent_kernels_tf_runs_on_cpu(fused: dict) -> None:
    """BlockLSTM(V2) and GRUBlockCell run on CPU; CudnnRNN has no CPU kernel (so it is never emitted)."""
    probes = fused["probes"]
    for op in ("BlockLSTMV2", "BlockLSTM", "GRUBlockCell"):
        ok, result = probes[op]
        assert ok and np.isfinite(result[0]).all(), (op, result)
    ok, message = probes["CudnnRNNV3"]
    assert not ok and "No OpKernel was registered" in message


@pytest.mark.parametrize("name", LOOPS)
def test_keras_lstm_loops_become_block_lstm_and_match_keras(fused: dict, name: str) -> None:
    info, data, got, report = fused[name]
    loop_op = "While" if name.endswith("keras3") else "StatelessWhile"
    assert ops(data)[loop_op] == 2 and "BlockLSTMV2" not in ops(data)
    assert report.steps[0].stats == {"loops_fused": 2}, notes(report)
    assert ops(got)["BlockLSTMV2"] == 2 and loop_op not in ops(got)
    for gone in ("TensorListReserve", "TensorListGetItem", "Range", "Max"):
        assert gone not in ops(got), gone
    feeds, expected = info.reference_data()
    (out,) = info.outputs
    ok, result = fused["child"][name]  # oneDNN off, Grappler off
    assert ok, result
    np.testing.assert_allclose(result[0], expected[out], rtol=1e-5, atol=1e-6)
    assert_same_outputs(data, got, feeds, info.outputs, rtol=1e-5, atol=1e-6)  # this process's TF
    big = {k: v * 25.0 for k, v in feeds.items()}  # cell states far past any default clip
    assert_same_outputs(data, got, big, info.outputs, rtol=1e-5, atol=1e-5)


def test_other_while_loops_are_left_alone_with_the_reason() -> None:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [3], name="x")
        _, total = tf.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s * 2.0 + x), [tf.constant(0), x])
        tf.identity(total, name="out")

    data = build(fn)
    assert ops(data).get("While", 0) + ops(data).get("StatelessWhile", 0) == 1
    got, report = ours(data, "fuse_lstm_while", ["x"], ["out"])
    assert not report.steps[0].changed and ops(got) == ops(data)
    assert any("not a Keras LSTM loop: the loop body writes 0 tensor lists" in n for n in notes(report))
    assert_same_outputs(data, got, {"x": np.arange(3, dtype=np.float32)}, ["out"])



def test_lowered_loops_are_reported_not_fused() -> None:
    """The default freezing lowers loops to Enter/Merge/Switch/Exit: said so, not fused."""
    def fn() -> None:
        x = v1.placeholder(tf.float32, [3], name="x")
        _, total = tf.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + x), [tf.constant(0), x])
        tf.identity(total, name="out")

    graph = tf.Graph()
    with graph.as_default():
        v1.disable_control_flow_v2()
        try:
            fn()
        finally:
            v1.enable_control_flow_v2()
    data = graph.as_graph_def().SerializeToString()
    assert ops(data)["Enter"] >= 1
    got, report = ours(data, "fuse_lstm_while", ["x"], ["out"])
    assert not report.steps[0].changed and ops(got) == ops(data)
    assert any("1 lowered while loop(s)" in n for n in notes(report))
