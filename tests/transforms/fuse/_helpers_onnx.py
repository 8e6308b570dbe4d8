"""Hand-built ONNX graphs and the checks every fusion test makes.

``build`` makes a ModelProto (ir_version 10: onnxruntime 1.31 reads up to 13);
``fuse`` reads it into the IR, runs one fusion transform, writes it back, runs
``onnx.checker`` and returns the result; ``assert_same`` runs the original and
the fused model on onnxruntime with seeded inputs and compares within 1e-5
relative.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import graphwright.transforms.fuse.fuse_gelu_onnx
import graphwright.transforms.fuse.fuse_layer_norm_onnx
import graphwright.transforms.fuse.fuse_ort_contrib_onnx  # noqa: F401 - registers fuse_ort_contrib
from graphwright.formats import onnx as onnx_format
from graphwright.ir import check
from graphwright.transforms import TransformContext, TransformResult, get

F = TensorProto.FLOAT
IR_VERSION = 10
RTOL = 1e-5
ATOL = 1e-6


def vi(name: str, shape: Sequence[int | str | None] | None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=outputs[0] + "_node", **attrs)


def build(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], inits: Sequence[onnx.TensorProto] = (),
          opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def fuse(proto: onnx.ModelProto, name: str, **params: Any) -> tuple[onnx.ModelProto, TransformResult]:
    """(fused proto after onnx.checker, the transform's result)."""
    model = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    result = get(name).fn(model, TransformContext(), **params)
    check(model.graph)
    out = onnx_format.to_proto(model)
    onnx.checker.check_model(out)
    return out, result


def ops(proto: onnx.ModelProto) -> Counter[str]:
    return Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in proto.graph.node)


def feeds(proto: onnx.ModelProto, seed: int = 0, dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in proto.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for i in proto.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 3) for d in tt.shape.dim]
        np_type = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np_type.kind == "f":
            out[i.name] = (rng.standard_normal(shape) * 2).astype(np_type)
        else:
            out[i.name] = rng.integers(0, 4, shape).astype(np_type)
    return out


def run(proto: onnx.ModelProto, inputs: Mapping[str, np.ndarray], optimize: bool = False) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))


def assert_same(before: onnx.ModelProto, after: onnx.ModelProto, seed: int = 0,
                dims: Mapping[str, int] | None = None, rtol: float = RTOL, atol: float = ATOL) -> None:
    """onnxruntime outputs of both models agree on seeded inputs."""
    data = feeds(before, seed, dims)
    want = run(before, data)
    got = run(after, data)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
