"""Small TF graphs built with TensorFlow itself, for the batch-norm and Remapper tests.

Every builder returns serialized GraphDef bytes with a float32 Placeholder ``x`` and
an output node ``out``; batch-norm statistics are random (never the trivial 0/1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import graphwright as gw
from tests import tf_oracle

tf = tf_oracle.tf
v1 = tf.compat.v1


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(r: np.random.Generator, *shape: int, lo: float | None = None) -> np.ndarray:
    """Standard normal float32 values; with ``lo``, uniform in [lo, lo + 1] (variances, gammas)."""
    if lo is not None:
        return (lo + r.random(shape)).astype(np.float32)
    return r.standard_normal(shape).astype(np.float32)


def build(body: Callable[[Any], Any], x_shape: Sequence[int], *, producer: int | None = None) -> bytes:
    """``out = body(x)`` in a fresh TF graph; returns the GraphDef bytes."""
    with tf.Graph().as_default() as graph:
        x = v1.placeholder(tf.float32, list(x_shape), name="x")
        tf.identity(body(x), name="out")
        graph_def = graph.as_graph_def()
    if producer is not None:
        graph_def.versions.producer = producer
        graph_def.versions.min_consumer = 0
    return graph_def.SerializeToString()


def apply(graph_bytes: bytes, transforms: str, tmp: Path, *, outputs: Sequence[str] = ("out",)) -> tuple[bytes, gw.PipelineReport]:
    """Run our pipeline on the bytes (through a file, as a user would); returns the new bytes and report."""
    path = tmp / "in.pb"
    path.write_bytes(graph_bytes)
    model = gw.load(path)
    report = gw.transform(model, transforms, inputs=["x"], outputs=list(outputs))
    return gw.serialize(model), report


def run(graph_bytes: bytes, x: np.ndarray, outputs: Sequence[str] = ("out",)) -> list[np.ndarray]:
    return tf_oracle.run_graphdef(graph_bytes, {"x": x}, list(outputs))


def ops(graph_bytes: bytes) -> Counter[str]:
    return tf_oracle.op_histogram(graph_bytes)


def assert_same_outputs(before: bytes, after: bytes, x: np.ndarray, *, rtol: float = 1e-5,
                        atol: float = 1e-5, outputs: Sequence[str] = ("out",)) -> None:
    for want, got in zip(run(before, x, outputs), run(after, x, outputs)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def build_bngn(pre: Callable[[Any], Any], x_shape: Sequence[int], channels: int, *, scale_after: bool = True,
               epsilon: float = 1e-3, seed: int = 0) -> bytes:
    """``out = BatchNormWithGlobalNormalization(pre(x), μ, σ², β, γ)`` with producer version 8.

    TF's Python API refuses to create the op (removed in GraphDef version 9), so the graph is
    built with a stand-in Identity named ``bn`` that is then rewritten into the real NodeDef.
    """
    r = rng(seed)
    with tf.Graph().as_default() as graph:
        x = v1.placeholder(tf.float32, list(x_shape), name="x")
        y = pre(x)
        params = {
            "m": tf.constant(randn(r, channels), name="bn_mean"),
            "v": tf.constant(randn(r, channels, lo=0.5), name="bn_var"),
            "beta": tf.constant(randn(r, channels), name="bn_beta"),
            "gamma": tf.constant(randn(r, channels, lo=0.5), name="bn_gamma"),
        }
        stand_in = tf.identity(y, name="bn")
        tf.identity(stand_in, name="out")
        graph_def = graph.as_graph_def()
    node = next(n for n in graph_def.node if n.name == "bn")
    node.op = "BatchNormWithGlobalNormalization"
    del node.input[:]
    node.input.extend([y.op.name if y.value_index == 0 else y.name] + [t.op.name for t in params.values()])
    node.attr["variance_epsilon"].f = epsilon
    node.attr["scale_after_normalization"].b = scale_after
    graph_def.versions.producer = 8
    graph_def.versions.min_consumer = 0
    return graph_def.SerializeToString()
