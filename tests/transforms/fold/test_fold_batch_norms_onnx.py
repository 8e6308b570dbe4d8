"""fold_batch_norms on ONNX: Conv/Gemm + per-channel Mul (+ Add), checked with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphwright as gw  # noqa: E402
import graphwright.transforms.fold.fold_batch_norms  # noqa: E402 - registers the transform

R = np.random.default_rng(0)


def _f(*shape: int, lo: float | None = None) -> np.ndarray:
    return ((lo + R.random(shape)) if lo is not None else R.standard_normal(shape)).astype(np.float32)


def _model(nodes, inits, x_shape, y_shape) -> bytes:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        [numpy_helper.from_array(a, name) for name, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def conv_case(bias: bool, t_shape=(1, 4, 1, 1)):
    inits = {"W": _f(4, 3, 3, 3), "s": _f(4, 1, 1, lo=0.5), "t": _f(*t_shape)}
    conv_in = ["x", "W"] + (["B"] if bias else [])
    if bias:
        inits["B"] = _f(4)
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Add", ["t", "m"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return _model(nodes, inits, (1, 3, 8, 8), (1, 4, 8, 8)), (1, 3, 8, 8)


def gemm_case():
    inits = {"W": _f(4, 5), "C": _f(4), "s": _f(4, lo=0.5), "t": _f(1, 4)}
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["g"], transB=1, beta=0.5, alpha=1.5),
             helper.make_node("Mul", ["s", "g"], ["m"]),
             helper.make_node("Add", ["m", "t"], ["y"])]
    return _model(nodes, inits, (2, 5), (2, 4)), (2, 5)


def _apply(data: bytes, tmp: Path) -> tuple[bytes, gw.PipelineReport]:
    path = tmp / "m.onnx"
    path.write_bytes(data)
    model = gw.load(path)
    report = gw.transform(model, "fold_batch_norms")
    return gw.serialize(model), report


def _run(data: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", ["conv", "conv_bias", "conv_scalar_t", "gemm"])
def test_onnx_fold_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    data, x_shape = {"conv": lambda: conv_case(False), "conv_bias": lambda: conv_case(True),
                     "conv_scalar_t": lambda: conv_case(True, ()), "gemm": gemm_case}[case]()
    after, report = _apply(data, tmp_path)
    assert report.steps[0].changed and report.steps[0].stats["folded"] == 1
    model = onnx.load_from_string(after)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == (["Gemm"] if case == "gemm" else ["Conv", "Relu"])
    assert len(model.graph.initializer) == 2
    x = _f(*x_shape)
    np.testing.assert_allclose(_run(after, x), _run(data, x), rtol=1e-5, atol=1e-5)


def test_onnx_shared_weights_refused(tmp_path: Path) -> None:
    inits = {"W": _f(4, 3, 1, 1), "s": _f(4, 1, 1, lo=0.5)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c1"]), helper.make_node("Conv", ["x", "W"], ["c2"]),
             helper.make_node("Mul", ["c1", "s"], ["m"]), helper.make_node("Add", ["m", "c2"], ["y"])]
    data = _model(nodes, inits, (1, 3, 4, 4), (1, 4, 4, 4))
    after, report = _apply(data, tmp_path)
    step = report.steps[0]
    assert not step.changed and step.stats["weights_shared"] == 1
    assert [n.op_type for n in onnx.load_from_string(after).graph.node] == ["Conv", "Conv", "Mul", "Add"]
