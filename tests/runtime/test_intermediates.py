"""Intermediate values: ONNX against numpy on a graph built here, TFLite on LiteRT against the
LiteRT interpreter driven directly and against graphwright's reference interpreter."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphwright.errors import VerificationError
from graphwright.formats import load
from graphwright.runtime.intermediates import prepare_intermediates
from tests.models import get_model


def _onnx_model(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Add", ["c", "a"], ["y"])]
    path = tmp_path / "m.onnx"
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[two])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_onnx_intermediates_are_what_the_graph_computes(tmp_path: Path) -> None:
    model = load(_onnx_model(tmp_path))
    session = prepare_intermediates(model, ["x", "b", "a", "y"])
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = session.run({"x": x})
    assert list(out) == ["x", "b", "a", "y"] and session.backend == "onnxruntime"
    a = x * 2
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_array_equal(out["a"], a)
    np.testing.assert_array_equal(out["b"], np.maximum(a, 0))
    np.testing.assert_allclose(out["y"], np.exp(np.maximum(a, 0)) + a, rtol=1e-6)
    assert out["x"] is not x
    assert [v.name for v in model.graph.outputs] == ["y"]  # the IR is not touched
    with pytest.raises(VerificationError, match="the model has no value named 'z'"):
        prepare_intermediates(model, ["z"])


def test_tflite_intermediates_on_litert_and_reference() -> None:
    path = get_model("tflite_real", "landmarks_float").path
    model = load(path)
    names = [v.name for node in list(model.graph)[:6] for v in node.outputs]
    image = model.graph.inputs[0]
    x = np.random.default_rng(1).uniform(-1, 1, image.shape).astype(np.float32)
    litert = prepare_intermediates(model, names).run({image.name: x})
    reference = prepare_intermediates(model, names, backend="reference").run({image.name: x})
    from ai_edge_litert.interpreter import Interpreter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    index = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    for name in names:
        direct = interp.get_tensor(index[name])
        np.testing.assert_array_equal(litert[name], direct, err_msg=name)
        np.testing.assert_allclose(reference[name], direct, rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_tflite_name_two_tensors_share_is_refused() -> None:
    model = load(get_model("tflite_real", "landmarks_float").path)
    first, second = list(model.graph)[1:3]
    second.outputs[0].name = first.outputs[0].name
    with pytest.raises(VerificationError, match=re.escape(f"two tensors are named '{first.outputs[0].name}'")):
        prepare_intermediates(model, [first.outputs[0].name])
