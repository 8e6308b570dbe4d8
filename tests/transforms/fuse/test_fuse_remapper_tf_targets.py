"""fuse_remapper(target=...): every fused form runs in TF 2.21 with Grappler off, in the build it targets.

Each small graph is fused for ``onednn`` and for ``eigen``; one child process with
``TF_ENABLE_ONEDNN_OPTS=1`` and one with ``=0`` run the original and the fused graph with Grappler
off (so TF itself fuses nothing) and Grappler's remapper (CPU-placed, remap only) on the
original.  The fused graph must import, run, match the original, and have no more nodes than
Grappler's.  Expected fused ops are written from what TF 2.21 was seen to execute.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
tg = pytest.importorskip("tests.transforms.fold._tfgraphs")
import graphwright as gw  # noqa: E402
import graphwright.transforms.fuse.fuse_remapper_tf  # noqa: E402
from graphwright.errors import TransformError  # noqa: E402
from graphwright.runtime.tensorflow import in_tf_process  # noqa: E402

tf, raw = tg.tf, tg.tf.raw_ops
X = (1, 8, 8, 4)


def _c(r, *shape, dtype=np.float32):
    return tf.constant(tg.randn(r, *shape).astype(dtype))


def _conv(x, r, cout=4, dtype=np.float32, k=3, fmt="NHWC"):
    cin = int(x.shape[1 if fmt == "NCHW" else -1])
    return raw.Conv2D(input=x, filter=_c(r, k, k, cin, cout, dtype=dtype), strides=[1, 1, 1, 1], padding="SAME",
                      data_format=fmt, name="conv")


def _dw(x, r, dtype=np.float32):
    return raw.DepthwiseConv2dNative(input=x, filter=_c(r, 3, 3, int(x.shape[-1]), 1, dtype=dtype),
                                     strides=[1, 1, 1, 1], padding="SAME", name="dw")


def _bias(y, r, dtype=np.float32, fmt="NHWC"):
    return tf.nn.bias_add(y, _c(r, int(y.shape[1 if fmt == "NCHW" else -1]), dtype=dtype), data_format=fmt, name="bias")


def _bn(y, r, op=raw.FusedBatchNormV3, mean=None):
    n = int(y.shape[-1])
    return op(x=y, scale=tf.constant(tg.randn(r, n, lo=0.5)), offset=_c(r, n),
              mean=_c(r, n) if mean is None else mean, variance=tf.constant(tg.randn(r, n, lo=0.5)),
              epsilon=1e-3, is_training=False, name="bn")[0]


def _mm(x, r, dtype=np.float32):
    flat = tf.reshape(x, [2, -1])
    return raw.MatMul(a=flat, b=_c(r, int(flat.shape[1]), 6, dtype=dtype), name="mm")


def _cast(dtype):
    def wrap(body):
        return lambda x, r: tf.cast(body(tf.cast(x, dtype), r), tf.float32)
    return wrap


CASES = {  # name: (body(x, r), {target: Counter of fused ops [fused_ops]}, tolerance)
    "dw_bias_relu6": (lambda x, r: tf.nn.relu6(_bias(_dw(x, r), r)),
                      {"onednn": {"_FusedDepthwiseConv2dNative[BiasAdd,Relu6]": 1}, "eigen": {}}, 1e-5),
    "dw_bias_leakyrelu": (lambda x, r: tf.nn.leaky_relu(_bias(_dw(x, r), r), 0.3),
                          {"onednn": {"_FusedDepthwiseConv2dNative[BiasAdd]": 1}, "eigen": {}}, 1e-5),
    "conv_bias_add_relu": (lambda x, r: tf.nn.relu(raw.AddV2(x=x * 2.0, y=_bias(_conv(x, r), r))),
                           {"onednn": {"_FusedConv2D[BiasAdd,Add,Relu]": 1}, "eigen": {"_FusedConv2D[BiasAdd]": 1}},
                           1e-5),
    "conv_bias_add": (lambda x, r: raw.Add(x=_bias(_conv(x, r), r), y=tf.nn.relu(x)),
                      {"onednn": {"_FusedConv2D[BiasAdd,Add]": 1}, "eigen": {"_FusedConv2D[BiasAdd]": 1}}, 1e-5),
    "conv_add_broadcast": (lambda x, r: tf.nn.relu(raw.AddV2(x=_bias(_conv(x, r), r), y=tf.reduce_mean(x))),
                           {"onednn": {"_FusedConv2D[BiasAdd]": 1}, "eigen": {"_FusedConv2D[BiasAdd]": 1}}, 1e-5),
    "bn_relu": (lambda x, r: tf.nn.relu(_bn(x * 2.0, r)),
                {"onednn": {"_FusedBatchNormEx": 1}, "eigen": {}}, 1e-5),
    "bn_alone": (lambda x, r: _bn(x * 2.0, r, raw.FusedBatchNorm), {"onednn": {}, "eigen": {}}, 1e-5),
    "bn_alone_mean_fed": (lambda x, r: _bn(x * 2.0, r, mean=tf.reduce_mean(x, [0, 1, 2])),
                          {"onednn": {}, "eigen": {}}, 1e-5),
    "matmul_bias_sigmoid": (lambda x, r: tf.sigmoid(_bias(_mm(x, r), r)),
                            {"onednn": {"_FusedMatMul[BiasAdd,Sigmoid]": 1},
                             "eigen": {"_FusedMatMul[BiasAdd,Sigmoid]": 1}}, 1e-5),
    "matmul_bias_gelu_exact": (lambda x, r: tf.nn.gelu(_bias(_mm(x, r), r), approximate=False),
                               {"onednn": {"_FusedMatMul[BiasAdd,GeluExact]": 1},
                                "eigen": {"_FusedMatMul[BiasAdd]": 1}}, 1e-5),
    "matmul_bias_gelu_tanh": (lambda x, r: tf.nn.gelu(_bias(_mm(x, r), r), approximate=True),
                              {"onednn": {"_FusedMatMul[BiasAdd,GeluApproximate]": 1},
                               "eigen": {"_FusedMatMul[BiasAdd]": 1}}, 1e-5),
    "matmul_bias_gelu_erf": (lambda x, r: (lambda y: 0.5 * y * (1.0 + tf.math.erf(y / np.float32(np.sqrt(2.0)))))(
                                 _bias(_mm(x, r), r)),
                             {"onednn": {"_FusedMatMul[BiasAdd,GeluExact]": 1},
                              "eigen": {"_FusedMatMul[BiasAdd]": 1}}, 1e-5),
    "conv64_bias_relu": (_cast(tf.float64)(lambda x, r: tf.nn.relu(_bias(_conv(x, r, dtype=np.float64), r, np.float64))),
                         {"onednn": {"_FusedConv2D[BiasAdd,Relu]": 1}, "eigen": {"_FusedConv2D[BiasAdd,Relu]": 1}},
                         1e-5),
    "matmul16_bias_relu": (_cast(tf.float16)(lambda x, r: tf.nn.relu(_bias(_mm(x, r, np.float16), r, np.float16))),
                           {"onednn": {"_FusedMatMul[BiasAdd,Relu]": 1}, "eigen": {"_FusedMatMul[BiasAdd,Relu]": 1}},
                           2e-2),
    "dw_bf16_bias_relu6": (_cast(tf.bfloat16)(lambda x, r: tf.nn.relu6(_bias(_dw(x, r, tf.bfloat16.as_numpy_dtype), r,
                                                                           tf.bfloat16.as_numpy_dtype))),
                           {"onednn": {"_FusedDepthwiseConv2dNative[BiasAdd,Relu6]": 1}, "eigen": {}}, 5e-2),
    "conv_bf16_bias_relu": (_cast(tf.bfloat16)(lambda x, r: tf.nn.relu(_bias(_conv(x, r, dtype=tf.bfloat16.as_numpy_dtype),
                                                                         r, tf.bfloat16.as_numpy_dtype))),
                            {"onednn": {}, "eigen": {}}, 5e-2),
    "conv_nchw_bias_relu": (lambda x, r: tf.nn.relu(_bias(_conv(tf.transpose(x, [0, 3, 1, 2]), r, fmt="NCHW"), r,
                                                       fmt="NCHW")),
                            {"onednn": {"_FusedConv2D[BiasAdd,Relu]": 1}, "eigen": {}}, 1e-5),
    "conv_squeeze_all_bias": (lambda x, r: _bias(raw.Squeeze(input=_conv(tf.reshape(x, [16, 1, 1, 16]), r, k=1)), r),
                              {"onednn": {"_FusedConv2D[BiasAdd]": 1}, "eigen": {"_FusedConv2D[BiasAdd]": 1}}, 1e-5),
}


#: cases TF cannot run at all with oneDNN off and Grappler off (the Eigen Conv2D kernel is NHWC only)
ONEDNN_ONLY = frozenset({"conv_nchw_bias_relu"})


def _fused(graph_bytes: bytes) -> Counter[str]:
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(graph_bytes)
    out: Counter[str] = Counter()
    for n in gd.node:
        if n.op.startswith("_Fused"):
            ops = ",".join(s.decode() for s in n.attr["fused_ops"].list.s)
            out[f"{n.op}[{ops}]" if ops else n.op] += 1
    return out


def _count(graph_bytes: bytes) -> int:
    return sum(tg.ops(graph_bytes).values())


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every case fused for both targets, then run in both builds in two child processes (one per build)."""
    tmp = tmp_path_factory.mktemp("targets")
    x = tg.randn(tg.rng(8), *X)
    built: dict = {}
    calls: dict[bool, list] = {True: [], False: []}
    for name, (body, _, _) in CASES.items():
        before = tg.build(lambda v, body=body: body(v, tg.rng(3)), X)
        for target, onednn in (("onednn", True), ("eigen", False)):
            after, report = tg.apply(before, f"fuse_remapper(target={target})", tmp)
            built[name, target] = (before, after, report)
            if not onednn and name in ONEDNN_ONLY:
                continue
            calls[onednn] += [("run_graphdef", (before, {"x": x}, ["out"]), {"grappler": False}),
                              ("run_graphdef", (after, {"x": x}, ["out"]), {"grappler": False}),
                              ("grappler_optimize", (before, ["out"]), {})]
    ran = {onednn: in_tf_process("batch", [*calls[onednn], ("onednn_enabled", (), {})], onednn=onednn)
           for onednn in (True, False)}
    assert ran[True][-1] is True and ran[False][-1] is False  # each child runs the build it was asked for
    out = {}
    for onednn, target in ((True, "onednn"), (False, "eigen")):
        values = iter(ran[onednn])
        for name in CASES:
            if not onednn and name in ONEDNN_ONLY:
                out[name, target] = (*built[name, target], None, None, None)
                continue
            want, got, grappler = next(values), next(values), next(values)
            out[name, target] = (*built[name, target], want[0], got[0], grappler)
    return out


@pytest.mark.parametrize("target", ["onednn", "eigen"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_form_runs_in_its_build(results: dict, case: str, target: str) -> None:
    _, after, report, want, got, grappler = results[case, target]
    expected = CASES[case][1][target]
    assert _fused(after) == Counter(expected), report.steps[0].notes
    if want is None:  # ONEDNN_ONLY in the Eigen build: nothing to run, nothing fused (checked above)
        return
    scale = max(float(np.abs(want).max()), 1e-6)
    assert float(np.abs(got - want).max()) / scale <= CASES[case][2]
    if case == "conv_bf16_bias_relu" and target == "onednn":
        # Grappler fuses it inside the runtime, but a GraphDef holding a bfloat16 _FusedConv2D does not
        # import (its op definition lists no bfloat16): we must leave it
        assert _fused(grappler) and not _fused(after)
        return
    assert _count(after) <= _count(grappler), (tg.ops(after), tg.ops(grappler))


REFUSALS = {  # name: (body, target, the reason's words)
    "dw_leakyrelu": (lambda x, r: tf.nn.leaky_relu(_bias(_dw(x, r), r)), "onednn", "LeakyRelu is not a fused activation"),
    "dw_eigen": (lambda x, r: _bias(_dw(x, r), r), "eigen", "only the oneDNN build registers it"),
    "add_eigen": (lambda x, r: raw.AddV2(x=_bias(_conv(x, r), r), y=x), "eigen", "residual Add runs only in the oneDNN"),
    "add_broadcast": (lambda x, r: raw.AddV2(x=_bias(_conv(x, r), r), y=tf.reduce_mean(x)), "onednn", "does not broadcast"),
    "bn_3_channels": (lambda x, r: tf.nn.relu(_bn(x[..., :3] * 2.0, r)), "onednn", "divisible by 4"),
    "bn_eigen": (lambda x, r: tf.nn.relu(_bn(x * 2.0, r)), "eigen", "only the oneDNN build runs it on a CPU"),
    "bf16_conv": (_cast(tf.bfloat16)(lambda x, r: _bias(_conv(x, r, dtype=tf.bfloat16.as_numpy_dtype), r,
                                                         tf.bfloat16.as_numpy_dtype)), "onednn", "no bfloat16"),
    "f64_matmul": (_cast(tf.float64)(lambda x, r: _bias(_mm(x, r, np.float64), r, np.float64)), "onednn",
                   "float32/float16/bfloat16 only"),
    "gelu_eigen": (lambda x, r: tf.nn.gelu(_bias(_mm(x, r), r)), "eigen", "GELU runs only in the oneDNN build"),
    "bn_side_input_cpu": (lambda x, r: tf.nn.relu(raw.AddV2(x=_bn(x * 2.0, r), y=x)), "onednn", "no side input"),
    "conv_sigmoid": (lambda x, r: tf.sigmoid(_bias(_conv(x, r), r)), "onednn", "Sigmoid is not a fused activation"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_carry_their_reason(case: str, tmp_path: Path) -> None:
    body, target, words = REFUSALS[case]
    before = tg.build(lambda v: body(v, tg.rng(4)), X)
    after, report = tg.apply(before, f"fuse_remapper(target={target})", tmp_path)
    assert any(words in note for note in report.steps[0].notes), report.steps[0].notes
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X), rtol=2e-2, atol=2e-2)


def _placed(device_of: dict[str, str], body) -> bytes:
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(tg.build(lambda v: body(v, tg.rng(5)), X))
    for node in gd.node:
        node.device = device_of.get(node.name, "")
    return gd.SerializeToString()


def _model(graph_bytes: bytes, tmp: Path) -> gw.Model:
    (tmp / "g.pb").write_bytes(graph_bytes)
    return gw.load(tmp / "g.pb")


def test_gpu_nodes_fuse_only_into_gpu_kernels_and_keep_their_device(tmp_path: Path) -> None:
    gpu = "/device:GPU:0"
    chain = {"conv": gpu, "bias": gpu, "Relu": gpu}
    spatial = _placed(chain, lambda x, r: tf.nn.relu(_bias(_conv(x, r), r)))
    model = _model(spatial, tmp_path)
    gw.transform(model, "fuse_remapper", inputs=["x"], outputs=["out"])
    fused = [n for n in model.graph if n.op == "_FusedConv2D"]
    assert len(fused) == 1 and fused[0].device == gpu and fused[0].attr("fused_ops") == (b"BiasAdd", b"Relu")
    for body, words in ((lambda x, r: tf.nn.relu(_bias(_conv(x, r, k=1), r)), "1x1"),
                        (lambda x, r: tf.nn.relu6(_bias(_dw(x, r), r)), "no kernel on /device:GPU:0")):
        model = _model(_placed({"conv": gpu, "dw": gpu, "bias": gpu, "bn": gpu, "Relu": gpu, "Relu6": gpu}, body),
                       tmp_path)
        report = gw.transform(model, "fuse_remapper", inputs=["x"], outputs=["out"])
        assert not [n for n in model.graph if n.op.startswith("_Fused")]
        assert any(words in n for n in report.steps[0].notes), report.steps[0].notes
    # Conv2D+FusedBatchNorm+Relu has no GPU kernel; FusedBatchNorm+Relu has (_FusedBatchNormEx), on the GPU
    model = _model(_placed({"conv": gpu, "bn": gpu, "Relu": gpu}, lambda x, r: tf.nn.relu(_bn(_conv(x, r), r))), tmp_path)
    report = gw.transform(model, "fuse_remapper", inputs=["x"], outputs=["out"])
    assert [(n.op, n.device) for n in model.graph if n.op.startswith("_Fused")] == [("_FusedBatchNormEx", gpu)]
    assert any("_FusedConv2D [FusedBatchNorm, Relu] (float32, NHWC) has no kernel on /device:GPU:0" in n
               for n in report.steps[0].notes)
    # the batch-norm side input has a GPU kernel only
    side = _model(_placed({"mul": gpu, "bn": gpu, "AddV2": gpu, "Relu": gpu},
                          lambda x, r: tf.nn.relu(raw.AddV2(x=_bn(x * 2.0, r), y=x))), tmp_path)
    gw.transform(side, "fuse_remapper", inputs=["x"], outputs=["out"])
    (ex,) = [n for n in side.graph if n.op == "_FusedBatchNormEx"]
    assert ex.device == gpu and ex.attr("num_side_inputs") == 1 and ex.inputs[5].name == "x"
    # target=gpu, but nodes pinned to the CPU: held to the kernels both CPU builds run
    cpu = "/device:CPU:0"
    pinned = _model(_placed({"dw": cpu, "bias": cpu, "conv": cpu, "bias_1": cpu, "Relu": cpu},
                            lambda x, r: tf.nn.relu(_bias(_conv(_bias(_dw(x, r), r), r), r))), tmp_path)
    report = gw.transform(pinned, "fuse_remapper(target=gpu)", inputs=["x"], outputs=["out"])
    assert [(n.op, n.device) for n in pinned.graph if n.op.startswith("_Fused")] == [("_FusedConv2D", cpu)]
    assert any("_FusedDepthwiseConv2dNative [BiasAdd] (float32, NHWC) has no kernel on /device:CPU:0" in n
               for n in report.steps[0].notes), report.steps[0].notes
    mixed = _model(_placed({"conv": gpu, "bias": "/device:CPU:0"}, lambda x, r: _bias(_conv(x, r), r)), tmp_path)
    report = gw.transform(mixed, "fuse_remapper", inputs=["x"], outputs=["out"])
    assert any("different devices" in n for n in report.steps[0].notes)


def test_batch_norm_decomposition_is_graplers_arithmetic(tmp_path: Path) -> None:
    """The standalone inference batch norm becomes Mul + Add (constants folded), as Grappler's primitives compute."""
    before = tg.build(lambda v: _bn(v * 2.0, tg.rng(6)), X)
    after, report = tg.apply(before, "fuse_remapper", tmp_path)
    ops = tg.ops(after)
    assert ops["FusedBatchNormV3"] == 0 and ops["Mul"] == 2 and ops["Add"] == 1
    assert report.steps[0].stats["decompose_batch_norm"] == 1
    tg.assert_same_outputs(before, after, tg.randn(tg.rng(8), *X))


def test_unknown_target_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TransformError, match="target must be one of onednn, eigen, gpu"):
        tg.apply(tg.build(lambda v: v * 2.0, X), "fuse_remapper(target=tpu)", tmp_path)


def test_cli_shows_the_refusal_reason(tmp_path: Path) -> None:
    before = tg.build(lambda v: _bias(_dw(v, tg.rng(7)), tg.rng(7)), X)
    (tmp_path / "in.pb").write_bytes(before)
    done = subprocess.run([sys.executable, "-m", "graphwright.cli.main", "transform", str(tmp_path / "in.pb"),
                           str(tmp_path / "out.pb"), "--inputs", "x", "--outputs", "out",
                           "--transforms", "fuse_remapper(target=eigen)", "--verbose"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "only the oneDNN build registers it" in done.stdout + done.stderr
    bad = subprocess.run([sys.executable, "-m", "graphwright.cli.main", "transform", str(tmp_path / "in.pb"),
                          str(tmp_path / "bad.pb"), "--transforms", "fuse_remapper(target=tpu)"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and not (tmp_path / "bad.pb").exists()
