"""Shared helpers for the tf-transform tests: build graphs in TensorFlow, transform them with
graphwright and with the original tool, run both in TensorFlow."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

import graphwright as gw
from graphwright.formats.graphdef import model_from_proto, parse_bytes, serialize
from graphwright.transforms import PipelineReport
from tests import tf_oracle as oracle

tf = oracle.tf
v1 = tf.compat.v1


def build(fn: Callable[[], None]) -> bytes:
    """A serialized GraphDef of what ``fn`` builds in a fresh v1 graph."""
    graph = tf.Graph()
    with graph.as_default():
        fn()
    return graph.as_graph_def().SerializeToString()


def ours(data: bytes, transforms: str, inputs: Sequence[str], outputs: Sequence[str]) -> tuple[bytes, PipelineReport]:
    model = model_from_proto(parse_bytes(data)[0])
    report = gw.transform(model, transforms, inputs=list(inputs), outputs=list(outputs))
    return serialize(model), report


def theirs(data: bytes, transforms: str, inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    return oracle.original_tool(data, list(inputs), list(outputs), transforms)


def run(data: bytes, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
    return oracle.run_graphdef(data, feeds, list(outputs))


def assert_same_outputs(a: bytes, b: bytes, feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
                        rtol: float = 0.0, atol: float = 0.0) -> None:
    for x, y in zip(run(a, feeds, outputs), run(b, feeds, outputs)):
        assert x.shape == y.shape
        np.testing.assert_allclose(y, x, rtol=rtol, atol=atol)


def ops(data: bytes) -> dict[str, int]:
    return dict(oracle.op_histogram(data))


def nodes(data: bytes) -> dict[str, object]:
    """name -> NodeDef."""
    gd = v1.GraphDef()
    gd.ParseFromString(data)
    return {n.name: n for n in gd.node}


def notes(report: PipelineReport) -> list[str]:
    return [n for step in report.steps for n in step.notes]


def _library_size(data: bytes) -> int:
    """How many functions the GraphDef's library holds."""
    gd = v1.GraphDef()
    gd.ParseFromString(data)
    return len(gd.library.function)
