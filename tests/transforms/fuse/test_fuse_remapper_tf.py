"""fuse_remapper: the fused graph runs in TensorFlow's CPU runtime (v1 Session) with the same outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.tf
tg = pytest.importorskip("tests.transforms.fold._tfgraphs")
import graphwright.transforms.fold.fold_old_batch_norms  # noqa: E402
import graphwright.transforms.fuse.fuse_remapper_tf  # noqa: E402, F401
from graphwright.runtime.tensorflow import in_tf_process  # noqa: E402

tf, raw = tg.tf, tg.tf.raw_ops
C = 5
X_SHAPE = (2, 8, 8, 3)


def _conv(x, r, fmt="NHWC"):
    w = tf.constant(tg.randn(r, 3, 3, int(x.shape[1 if fmt == "NCHW" else -1]), C), name="w")
    return raw.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", data_format=fmt, name="conv")


def _act(y, act):
    if act is None:
        return y
    if act == "LeakyRelu":
        return raw.LeakyRelu(features=y, alpha=0.3, name="act")
    return getattr(raw, act)(features=y, name="act") if act != "Tanh" else raw.Tanh(x=y, name="act")


def conv_bias(act=None):
    def body(x):
        r = tg.rng(1)
        return _act(tf.nn.bias_add(_conv(x, r), tf.constant(tg.randn(r, C)), name="bias"), act)
    return body


def matmul_bias(act=None):
    def body(x):
        r = tg.rng(2)
        y = raw.MatMul(a=tf.reshape(x, [2, -1]), b=tf.constant(tg.randn(r, 192, C)), name="conv")
        return _act(tf.nn.bias_add(y, tf.constant(tg.randn(r, C)), name="bias"), act)
    return body


def conv_bn(version="V3", act=None, training=False):
    def body(x):
        r = tg.rng(3)
        op = {"V1": raw.FusedBatchNorm, "V2": raw.FusedBatchNormV2, "V3": raw.FusedBatchNormV3}[version]
        n = 0 if training else C
        y = op(x=_conv(x, r), scale=tf.constant(tg.randn(r, C, lo=0.5)), offset=tf.constant(tg.randn(r, C)),
               mean=tf.constant(tg.randn(r, n)), variance=tf.constant(tg.randn(r, n, lo=0.5)),
               epsilon=2e-3, is_training=training, name="bn")[0]
        return _act(y, act)
    return body


def conv_squeeze_bias(x):
    r = tg.rng(4)
    y = raw.Squeeze(input=_conv(x, r), axis=[1], name="squeeze")
    return tf.nn.bias_add(y, tf.constant(tg.randn(r, C)), name="bias")


def conv_addv2_relu(x):
    r = tg.rng(5)
    return tf.nn.relu(raw.AddV2(x=_conv(x, r), y=tf.constant(tg.randn(r, 1, 1, 1, C))))


FUSE_CASES = {
    **{f"conv_bias_{a}": (conv_bias(a), "_FusedConv2D", ["BiasAdd"] + ([a] if a else []))
       for a in [None, "Relu", "Relu6", "Elu", "LeakyRelu"]},
    **{f"matmul_bias_{a}": (matmul_bias(a), "_FusedMatMul", ["BiasAdd"] + ([a] if a else []))
       for a in [None, "Relu", "Tanh", "LeakyRelu"]},
    "conv_fbn_v1": (conv_bn("V1"), "_FusedConv2D", ["FusedBatchNorm"]),
    "conv_fbn_v3_relu6": (conv_bn("V3", "Relu6"), "_FusedConv2D", ["FusedBatchNorm", "Relu6"]),
    "conv_fbn_v2_elu": (conv_bn("V2", "Elu"), "_FusedConv2D", ["FusedBatchNorm", "Elu"]),
    "conv_addv2_relu": (conv_addv2_relu, "_FusedConv2D", ["BiasAdd", "Relu"]),
}


@pytest.mark.parametrize("case", sorted(FUSE_CASES))
def test_fused_graph_runs_in_tensorflow_with_same_outputs(case: str, tmp_path: Path) -> None:
    body, fused_op, fused_ops = FUSE_CASES[case]
    before = tg.build(body, X_SHAPE)
    after, report = tg.apply(before, "fuse_remapper", tmp_path)
    assert report.steps[0].changed and report.steps[0].stats["fused"] == 1
    ops = tg.ops(after)
    assert ops[fused_op] == 1
    assert not {"Conv2D", "MatMul", "BiasAdd", "AddV2", "Relu", "Relu6", "Elu", "LeakyRelu", "Tanh",
                "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"} & {op for op, n in ops.items() if n}
    node = _node(after, fused_op)
    assert [s.decode() for s in node.attr["fused_ops"].list.s] == fused_ops
    assert node.attr["num_args"].i == (4 if fused_ops[0] == "FusedBatchNorm" else 1)
    if fused_op == "_FusedConv2D":
        assert list(node.attr["TArgs"].list.type) == [tf.float32.as_datatype_enum] * node.attr["num_args"].i
    if fused_ops[0] == "FusedBatchNorm":
        assert node.attr["epsilon"].f == pytest.approx(2e-3)
    if "LeakyRelu" in fused_ops:
        assert node.attr["leakyrelu_alpha"].f == pytest.approx(0.3)
    assert node.device == ""  # a v1 Session places and runs it without one
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X_SHAPE))


def test_conv_squeeze_bias(tmp_path: Path) -> None:
    shape = (2, 1, 8, 3)
    before = tg.build(conv_squeeze_bias, shape)
    after, report = tg.apply(before, "fuse_remapper", tmp_path)
    assert report.steps[0].stats["conv_squeeze_bias"] == 1
    ops = tg.ops(after)
    assert ops["_FusedConv2D"] == 1 and ops["Squeeze"] == 1 and ops["BiasAdd"] == 0
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *shape))


def _nodes(graph_bytes: bytes):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(graph_bytes)
    return list(gd.node)


def _node(graph_bytes: bytes, op: str):
    return next(n for n in _nodes(graph_bytes) if n.op == op)


def test_training_batch_norm_is_not_fused(tmp_path: Path) -> None:
    before = tg.build(conv_bn("V3", training=True), X_SHAPE)
    after, report = tg.apply(before, "fuse_remapper", tmp_path)
    assert not report.steps[0].changed
    assert any("training mode" in n for n in report.steps[0].notes)
    assert tg.ops(after) == tg.ops(before)


def test_control_edge_blocks_fusion(tmp_path: Path) -> None:
    def body(x):
        r = tg.rng(6)
        y, b = _conv(x, r), tf.constant(tg.randn(r, C))
        with tf.control_dependencies([tf.no_op(name="barrier")]):
            return tf.nn.relu(tf.nn.bias_add(y, b, name="bias"))
    before = tg.build(body, X_SHAPE)
    after, report = tg.apply(before, "fuse_remapper", tmp_path)
    assert report.steps[0].stats["fused"] == 0
    assert any("control edges" in n for n in report.steps[0].notes)
    assert tg.ops(after)["_FusedConv2D"] == 0


def test_shared_intermediate_blocks_fusion_but_not_the_inner_pair(tmp_path: Path) -> None:
    """BiasAdd read twice: the activation can't be fused in, Conv2D+BiasAdd still is."""
    def body(x):
        r = tg.rng(7)
        y = tf.nn.bias_add(_conv(x, r), tf.constant(tg.randn(r, C)), name="bias")
        return tf.nn.relu(y) + y
    before = tg.build(body, X_SHAPE)
    after, _ = tg.apply(before, "fuse_remapper", tmp_path)
    ops = tg.ops(after)
    assert ops["_FusedConv2D"] == 1 and ops["Relu"] == 1
    assert _node(after, "_FusedConv2D").attr["fused_ops"].list.s == [b"BiasAdd"]
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X_SHAPE))


def test_fetched_root_fuses_and_keeps_its_name(tmp_path: Path) -> None:
    """TF 2.21's Session fuses a chain fetched at its end; the fused node takes the fetched name."""
    before = tg.build(conv_bias("Relu"), X_SHAPE)
    after, report = tg.apply(before, "fuse_remapper", tmp_path, outputs=["act"])
    assert _node(after, "_FusedConv2D").name == "act"
    assert report.steps[0].stats["contraction_bias_act"] == 1
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X_SHAPE), outputs=["act"])


def test_fetched_intermediate_stops_the_chain_as_grappler_does(tmp_path: Path) -> None:
    """Fetching the BiasAdd too: Conv2D+BiasAdd fuse under the BiasAdd's name, the Relu stays (Grappler's answer)."""
    before = tg.build(conv_bias("Relu"), X_SHAPE)
    after, report = tg.apply(before, "fuse_remapper", tmp_path, outputs=["bias", "act"])
    node = _node(after, "_FusedConv2D")
    assert node.name == "bias" and node.attr["fused_ops"].list.s == [b"BiasAdd"] and tg.ops(after)["Relu"] == 1
    assert any("'bias' (BiasAdd) is a graph input/output" in n for n in report.steps[0].notes)
    theirs = in_tf_process("grappler_optimize", before, ["bias", "act"], onednn=True)
    assert {(n.op, n.name) for n in _nodes(theirs) if n.op.startswith("_Fused") or n.op == "Relu"} == {
        ("_FusedConv2D", "bias"), ("Relu", "act")}
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X_SHAPE), outputs=["bias", "act"])


def test_nchw_fuses_for_onednn_only(tmp_path: Path) -> None:
    def body(x):
        r = tg.rng(9)
        return tf.nn.bias_add(_conv(x, r, "NCHW"), tf.constant(tg.randn(r, C)), data_format="NCHW")
    before = tg.build(body, (2, 3, 8, 8))
    after, report = tg.apply(before, "fuse_remapper(target=eigen)", tmp_path)
    assert tg.ops(after)["_FusedConv2D"] == 0
    assert any("NCHW runs only in the oneDNN build" in n for n in report.steps[0].notes)
    after, _ = tg.apply(before, "fuse_remapper", tmp_path)
    assert tg.ops(after)["_FusedConv2D"] == 1  # run in the oneDNN child process by test_fuse_remapper_tf_targets


def test_after_fold_old_batch_norms_the_chain_fuses(tmp_path: Path) -> None:
    before = tg.build(conv_bn("V3", "Relu"), X_SHAPE)
    after, _ = tg.apply(before, "fold_old_batch_norms fuse_remapper", tmp_path)
    ops = tg.ops(after)
    assert ops["_FusedConv2D"] == 1 and ops["FusedBatchNormV3"] == 0 and ops["Relu"] == 0
    assert _node(after, "_FusedConv2D").attr["fused_ops"].list.s == [b"BiasAdd", b"Relu"]
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X_SHAPE), rtol=1e-4, atol=1e-4)


_RUN_PAIRS = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
def run(path, x):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(path, "rb").read())
    with tf.Graph().as_default() as g:
        tf.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=g) as s:
            return s.run("out:0", {"x:0": x})
x = np.load(sys.argv[1])
for before, after in zip(sys.argv[2::2], sys.argv[3::2]):
    want, got = run(before, x), run(after, x)
    print(float(np.abs(want - got).max() / np.abs(want).max()))
"""


def test_fused_graphs_run_without_onednn(tmp_path: Path) -> None:
    """TF_ENABLE_ONEDNN_OPTS=0 (the Eigen kernels): every fused form still runs, same outputs."""
    import os
    import subprocess
    import sys

    import numpy as np

    x = tg.randn(tg.rng(8), *X_SHAPE)
    np.save(tmp_path / "x.npy", x)
    args = [str(tmp_path / "x.npy")]
    cases = ["conv_bias_LeakyRelu", "conv_fbn_v3_relu6", "matmul_bias_Tanh", "conv_addv2_relu"]
    for case in cases:
        before = tg.build(FUSE_CASES[case][0], X_SHAPE)
        after, _ = tg.apply(before, "fuse_remapper", tmp_path)
        assert any(tg.ops(after)[op] for op in ("_FusedConv2D", "_FusedMatMul"))
        for tag, data in (("b", before), ("a", after)):
            (tmp_path / f"{case}.{tag}.pb").write_bytes(data)
        args += [str(tmp_path / f"{case}.b.pb"), str(tmp_path / f"{case}.a.pb")]
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0")
    done = subprocess.run([sys.executable, "-c", _RUN_PAIRS, *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [float(line) for line in done.stdout.split()]
    assert len(errors) == len(cases) and max(errors) <= 1e-5
