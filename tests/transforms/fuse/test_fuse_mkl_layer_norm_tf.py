"""fuse_mkl_layer_norm (and fuse_matmul_gelu beside it) on TF-built graphs and on a frozen Keras 3
transformer encoder; TensorFlow runs the results in child processes with oneDNN on and off."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

from graphwright.errors import TransformError  # noqa: E402
from graphwright.transforms.fuse.fuse_mkl_layer_norm_tf import TARGETS  # noqa: E402

from .._tf import assert_same_outputs, build, nodes, notes, ops, ours, tf, v1  # noqa: E402
from ._composite_models import composite_model, run_all_in_child  # noqa: E402

RNG = np.random.default_rng(7)
WIDTH = 8
GAMMA = RNG.uniform(0.5, 1.5, WIDTH).astype(np.float32)
BETA = RNG.normal(0.0, 0.3, WIDTH).astype(np.float32)
FEEDS = {"x": (RNG.standard_normal((4, WIDTH)) * 3 + 1).astype(np.float32)}


def _batch_norm_form(axes: list[int], extra_mean_reader: bool = False) -> bytes:
    """tf.nn.moments + tf.nn.batch_normalization: x·s + (β − m·s), s = rsqrt(v + ε)·γ."""
    def fn() -> None:
        x = v1.placeholder(tf.float32, [4, WIDTH], name="x")
        mean, var = tf.nn.moments(x, axes, keepdims=True)
        y = tf.nn.batch_normalization(x, mean, var, tf.constant(BETA), tf.constant(GAMMA), 1e-3)
        tf.identity(y, name="out")
        if extra_mean_reader:
            tf.identity(mean * 2.0, name="mean_out")
    return build(fn)


def test_batch_normalization_form_becomes_one_mkl_layer_norm() -> None:
    data = _batch_norm_form([-1])
    got, report = ours(data, "fuse_mkl_layer_norm", ["x"], ["out"])
    assert report.steps[0].stats == {"layer_norm_sub_gamma": 1, "fused": 1}
    assert ops(got)["_MklLayerNorm"] == 1
    for gone in ("Mean", "SquaredDifference", "Rsqrt", "Sub", "Reshape"):  # rank 2: no reshape around it
        assert gone not in ops(got), gone
    fused = next(n for n in nodes(got).values() if n.op == "_MklLayerNorm")
    assert abs(fused.attr["epsilon"].f - 1e-3) < 1e-9 and fused.input[0] == "x"
    x = FEEDS["x"]
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3) * GAMMA + BETA
    (tf_out,) = oracle.run_graphdef(got, FEEDS, ["out"])
    np.testing.assert_allclose(tf_out, expected, rtol=1e-5, atol=1e-5)
    assert_same_outputs(data, got, FEEDS, ["out"], rtol=1e-5, atol=1e-6)


def test_refusals_say_why() -> None:
    _, report = ours(_batch_norm_form([0]), "fuse_mkl_layer_norm", ["x"], ["out"])
    assert not report.steps[0].changed
    assert any("reduces axes [0], not the last axis only" in n for n in notes(report))
    _, report = ours(_batch_norm_form([-1], extra_mean_reader=True), "fuse_mkl_layer_norm", ["x"],
                     ["out", "mean_out"])
    assert not report.steps[0].changed and any("outside the pattern" in n for n in notes(report))
    _, report = ours(_batch_norm_form([-1]), "fuse_mkl_layer_norm(target=gpu)", ["x"], ["out"])
    assert any("only a CPU (oneDNN) kernel" in n for n in notes(report))
    with pytest.raises(TransformError, match="unknown target 'cuda'"):
        ours(_batch_norm_form([-1]), "fuse_mkl_layer_norm(target=cuda)", ["x"], ["out"])


def test_tf_keras_layer_norms_both_frozen_forms_become_mkl_layer_norm() -> None:
    """tf-keras' LayerNormalization: the fused-batch-norm trick (epsilon 1e-3) and the Sub form (1e-5)."""
    info = composite_model("layer_norm_tf_keras")
    data = info.path.read_bytes()
    assert ops(data)["FusedBatchNormV3"] == 1 and ops(data)["Sub"] == 1
    got, report = ours(data, "fuse_mkl_layer_norm", list(info.inputs), info.outputs)
    assert report.steps[0].stats == {"layer_norm_fused_batch_norm": 1, "layer_norm_sub_gamma": 1, "fused": 2}
    assert ops(got)["_MklLayerNorm"] == 2
    for gone in ("FusedBatchNormV3", "Fill", "Prod", "Mean", "Rsqrt", "Sub"):  # the trick's shape maths too
        assert gone not in ops(got), gone
    eps = sorted(round(n.attr["epsilon"].f, 9) for n in nodes(got).values() if n.op == "_MklLayerNorm")
    assert eps == [1e-5, 1e-3]
    feeds, expected = info.reference_data()
    (tf_out,) = oracle.run_graphdef(got, feeds, info.outputs)
    np.testing.assert_allclose(tf_out, expected[info.outputs[0]], rtol=1e-5, atol=2e-5)


# -- the frozen Keras 3 transformer encoder (issue 13 item 9)

ENCODER_PIPELINE = "fuse_mkl_layer_norm{t} fuse_matmul_gelu{t}"


@pytest.fixture(scope="module")
def encoder() -> dict:
    """The encoder fused for each target, and every TF run the tests check (one child process per
    oneDNN setting, Grappler off: the graphs run as written)."""
    info = composite_model("encoder")
    data = info.path.read_bytes()
    runs: dict = {"data": data, "out": info.outputs[0]}
    for target in TARGETS:
        runs[target] = ours(data, ENCODER_PIPELINE.format(t=f"(target={target})"), list(info.inputs), info.outputs)
    runs["layer_norm_only"], _ = ours(data, "fuse_mkl_layer_norm", list(info.inputs), info.outputs)
    runs["feeds"], expected = info.reference_data()
    runs["expected"] = expected[runs["out"]]
    job = lambda graph: (graph, runs["feeds"], info.outputs)  # noqa: E731
    runs["onednn_on"] = run_all_in_child([job(runs["onednn"][0]), (data, "constfold,arithmetic,remap", info.outputs)],
                                         onednn=True)
    runs["onednn_off"] = run_all_in_child([job(runs["onednn"][0]), job(runs["eigen"][0]),
                                           job(runs["layer_norm_only"])], onednn=False)
    return runs


def test_keras_encoder_layer_norms_and_gelus_fuse_for_onednn_and_run_in_tf(encoder: dict) -> None:
    data, (got, report) = encoder["data"], encoder["onednn"]
    assert ops(data)["Mean"] == 4 and ops(data)["Erfc"] == 1 and ops(data)["Tanh"] == 1
    assert [s.stats["fused"] for s in report.steps] == [2, 2]
    assert ops(got)["_MklLayerNorm"] == 2 and ops(got)["_FusedMatMul"] == 2
    for gone in ("Mean", "Rsqrt", "SquaredDifference", "Erfc", "Tanh", "Pow"):
        assert gone not in ops(got), gone
    fused_ops = sorted(tuple(n.attr["fused_ops"].list.s) for n in nodes(got).values() if n.op == "_FusedMatMul")
    assert fused_ops == [(b"BiasAdd", b"GeluApproximate"), (b"BiasAdd", b"GeluExact")]
    (ok, result), (_, grappler) = encoder["onednn_on"]
    assert ok, result
    np.testing.assert_allclose(result[0], encoder["expected"], rtol=1e-5, atol=2e-5)
    # Grappler (constant folding, arithmetic, remapper; oneDNN on) fuses none of them on this graph
    assert "_MklLayerNorm" not in ops(grappler) and "_FusedMatMul" not in ops(grappler)
    assert ops(grappler)["Mean"] == 4 and ops(grappler)["Erfc"] == 1
    # the same graph with oneDNN off: TF's Eigen _FusedMatMul has no GELU, which is why target=eigen refuses
    ok, message = encoder["onednn_off"][0]
    assert not ok and "Fusion is not implemented" in message


def test_keras_encoder_under_eigen_or_gpu_emits_nothing_and_says_why(encoder: dict) -> None:
    for target in ("eigen", "gpu"):
        got, report = encoder[target]
        assert not any(s.changed for s in report.steps) and ops(got) == ops(encoder["data"])
        reasons = notes(report)
        assert sum(f"target={target}: _MklLayerNorm" in r for r in reasons) == 2, reasons
        assert sum(f"target={target}:" in r and "_FusedMatMul" in r for r in reasons) == 2, reasons
    ok, result = encoder["onednn_off"][1]
    assert ok, result
    np.testing.assert_allclose(result[0], encoder["expected"], rtol=1e-5, atol=2e-5)


def test_mkl_layer_norm_kernel_is_registered_with_onednn_opts_off_too(encoder: dict) -> None:
    """What the target names mean: TF 2.21's x86 build registers _MklLayerNorm whatever
    TF_ENABLE_ONEDNN_OPTS says (only the GELU fusions need it on); eigen means a build without oneDNN."""
    assert ops(encoder["layer_norm_only"])["_MklLayerNorm"] == 2
    ok, result = encoder["onednn_off"][2]
    assert ok, result
    np.testing.assert_allclose(result[0], encoder["expected"], rtol=1e-5, atol=2e-5)
