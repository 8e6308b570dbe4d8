"""Small ONNX models built by hand, and the checks every ONNX pass test makes.

``model(nodes, inputs, outputs, inits)`` builds an IR model through a real
ModelProto (so the reader sees what a file would give); ``same_outputs``
runs the original proto and the transformed IR model on onnxruntime with
seeded inputs and compares; ``checked`` runs ``onnx.checker`` on the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import graphwright.simplify.passes  # noqa: F401 - registers the ONNX passes
from graphwright.formats import onnx as onnx_format
from graphwright.ir import Model
from graphwright.transforms import TransformContext, TransformResult, get

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name: str, elem: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def proto(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: Sequence[onnx.TensorProto] = (), opset: int = 17, ir: int = 8) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def model(*args: Any, **kwargs: Any) -> tuple[Model, onnx.ModelProto]:
    """(IR model, the proto it was read from)."""
    p = proto(*args, **kwargs)
    return onnx_format.from_proto(onnx.load_from_string(p.SerializeToString()), None), p


def apply(m: Model, name: str, **kwargs: Any) -> TransformResult:
    result = get(name).fn(m, TransformContext(), **kwargs)
    from graphwright.ir import check

    check(m.graph)
    return result


def ops(m: Model) -> list[str]:
    return [n.op for n in m.graph]


def feeds_for(p: onnx.ModelProto, seed: int = 0, dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in p.graph.initializer}
    out = {}
    for i in p.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 2) for d in tt.shape.dim]
        np_type = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np_type.kind == "f":
            out[i.name] = rng.standard_normal(shape).astype(np_type)
        elif np_type.kind == "b":
            out[i.name] = np.asarray(rng.random(shape) < 0.5)
        else:
            out[i.name] = rng.integers(0, 4, shape).astype(np_type)
    return out


def run(data: bytes, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, dict(feeds))]


def checked(m: Model) -> onnx.ModelProto:
    p = onnx_format.to_proto(m)
    onnx.checker.check_model(p, full_check=True)
    return p


def same_outputs(original: onnx.ModelProto, m: Model, *, rtol: float = 1e-5, atol: float = 1e-6,
                 seed: int = 0, dims: Mapping[str, int] | None = None) -> None:
    """onnxruntime gives the same outputs for ``original`` and ``m`` (which also passes the checker)."""
    checked(m)
    feeds = feeds_for(original, seed, dims)
    want = run(original.SerializeToString(), feeds)
    got = run(onnx_format.serialize(m), feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
