"""The detailed TFLite summary agrees with what LiteRT itself reports about the file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import graphwright as gw
from graphwright.inspect.tflite_detail import render_tflite_detail, tflite_detail

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TFLITE = EXAMPLES / "small_cnn.tflite"


@pytest.fixture(scope="module")
def litert():  # type: ignore[no-untyped-def]
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(TFLITE),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    return interp


def test_tensors_match_litert(litert) -> None:  # type: ignore[no-untyped-def]
    detail = tflite_detail(gw.load(TFLITE))
    (sub,) = detail.subgraphs
    by_index = {t.index: t for t in sub.tensors}
    # LiteRT lists its own scratch tensors after the file's
    details = [d for d in litert.get_tensor_details() if d["index"] < len(sub.tensors)]
    assert sorted(d["index"] for d in details) == sorted(by_index)
    for d in details:
        t = by_index[d["index"]]
        assert t.name == d["name"] and t.shape == [int(x) for x in d["shape"]]
        assert np.dtype(d["dtype"]).name == t.dtype
        q = d["quantization_parameters"]
        if len(q["scales"]):
            assert t.scale == pytest.approx([float(s) for s in q["scales"]], rel=1e-7)
            assert t.zero_point == [int(z) for z in q["zero_points"]]
            if len(q["scales"]) > 1:
                assert t.quantized_dimension == int(q["quantized_dimension"])
        else:
            assert t.scale is None
    weights = next(t for t in sub.tensors if t.dtype == "int8" and t.constant and t.shape and len(t.shape) == 4)
    assert weights.buffer_bytes == int(np.prod(weights.shape)) and weights.buffer is not None


def test_operators_in_execution_order_with_tensor_indices(litert) -> None:  # type: ignore[no-untyped-def]
    detail = tflite_detail(gw.load(TFLITE))
    ops = detail.subgraphs[0].operators
    theirs = litert._get_ops_details()
    assert [o.op for o in ops] == [t["op_name"] for t in theirs]
    for mine, ref in zip(ops, theirs):
        assert [i for i, _ in mine.inputs] == [int(x) for x in ref["inputs"]]
        assert [i for i, _ in mine.outputs] == [int(x) for x in ref["outputs"]]
    assert ops[0].options["stride_w"] == 2 and ops[0].version is not None


def test_signatures_json_and_rendering() -> None:
    detail = tflite_detail(gw.load(TFLITE))
    (sig,) = detail.signatures
    assert sig["key"] == "serving_default" and sig["subgraph"] == 0
    assert sig["inputs"][0]["tensor_index"] == detail.subgraphs[0].inputs[0][0]
    doc = json.loads(json.dumps(detail.to_json()))
    assert doc["subgraphs"][0]["tensors"][0]["name"] == detail.subgraphs[0].tensors[0].name
    buf = io.StringIO()
    render_tflite_detail(detail, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "DEPTHWISE_CONV_2D" in text and "per-channel axis 3" in text and "serving_default" in text


def test_refuses_other_formats() -> None:
    with pytest.raises(ValueError, match="TFLite"):
        tflite_detail(gw.load(EXAMPLES / "small_cnn.onnx"))
