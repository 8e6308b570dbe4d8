"""fuse_matmul_gelu on TF-built graphs: MatMul + BiasAdd + a written-out GELU (tf.nn.gelu exact and
tanh, the erf form) -> _FusedMatMul, run by TensorFlow with oneDNN in a child process.  The frozen
Keras encoder is in test_fuse_mkl_layer_norm_tf.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")

from .._tf import build, nodes, notes, ops, ours, tf, v1  # noqa: E402
from ._composite_models import run_in_child  # noqa: E402

RNG = np.random.default_rng(11)
FEEDS = {"x": RNG.standard_normal((4, 6)).astype(np.float32) * 2}
OUTS = ["out_exact", "out_erf", "out_tanh"]


def _dense(x, units: int, seed: int):
    rng = np.random.default_rng(seed)
    w = tf.constant(rng.standard_normal((int(x.shape[-1]), units)).astype(np.float32))
    return tf.nn.bias_add(tf.matmul(x, w), tf.constant(rng.normal(0, 0.5, units).astype(np.float32)))


def _graph(shared_matmul: bool = False) -> bytes:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [4, 6], name="x")
        tf.identity(tf.nn.gelu(_dense(x, 5, 1), approximate=False), name="out_exact")
        y = _dense(x, 5, 2)
        tf.identity(0.5 * y * (1.0 + tf.math.erf(y / math.sqrt(2.0))), name="out_erf")
        tf.identity(tf.nn.gelu(_dense(x, 5, 3), approximate=True), name="out_tanh")
        tf.identity(tf.nn.gelu(x), name="out_alone")  # no MatMul before it
        if shared_matmul:
            tf.identity(y * 3.0, name="out_shared")
    return build(fn)


def test_gelus_after_matmul_bias_become_fused_matmul_and_match_tf() -> None:
    data = _graph()
    got, report = ours(data, "fuse_matmul_gelu", ["x"], [*OUTS, "out_alone"])
    step = report.steps[0]
    assert step.stats["fused"] == 3 and ops(got)["_FusedMatMul"] == 3 and "MatMul" not in ops(got)
    assert "Erf" not in ops(got) and "Tanh" not in ops(got) and ops(got)["Erfc"] == 1  # the lone GELU stays
    by_name = nodes(got)
    assert by_name["out_exact"].input[0] == "Gelu/mul_2"  # the fused node took the GELU root's name
    assert by_name["Gelu/mul_2"].op == "_FusedMatMul"
    kinds = {n.name: tuple(n.attr["fused_ops"].list.s) for n in by_name.values() if n.op == "_FusedMatMul"}
    assert sorted(kinds.values()) == [(b"BiasAdd", b"GeluApproximate"), (b"BiasAdd", b"GeluExact"),
                                      (b"BiasAdd", b"GeluExact")]
    assert any("no TF op computes a GELU alone" in n for n in notes(report))
    expected = oracle.run_graphdef(data, FEEDS, [*OUTS, "out_alone"])
    ok, result = run_in_child(got, FEEDS, [*OUTS, "out_alone"], onednn=True)
    assert ok, result
    for e, g in zip(expected, result):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_a_matmul_read_elsewhere_is_not_fused() -> None:
    _, report = ours(_graph(shared_matmul=True), "fuse_matmul_gelu", ["x"], [*OUTS, "out_alone", "out_shared"])
    assert report.steps[0].stats["fused"] == 2
    assert any("BiasAdd" in n and "read" in n for n in notes(report))
