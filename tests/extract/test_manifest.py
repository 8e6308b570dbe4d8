"""extract's manifest: constants tied to operators, roles and quantization; the per-channel
multipliers and shifts reproduce LiteRT's layer output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.extract import extract
from graphwright.runtime import run
from graphwright.runtime.reference.fixedpoint import multiply_by_quantized_multiplier

TFLITE = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.tflite"


def test_manifest_ties_tensors_to_operators_and_quantization(tmp_path: Path) -> None:
    manifest = extract(TFLITE, tmp_path / "out")
    model = gw.load(TFLITE)
    conv = next(n for n in model.graph if n.op == "CONV_2D")
    weights = next(c for c in manifest.constants if c.name == conv.inputs[1].name)  # type: ignore[union-attr]
    assert weights.uses[0]["op"] == "CONV_2D" and weights.uses[0]["role"] == "weights"
    assert weights.uses[0]["operator_index"] == 0 and weights.dtype == "int8"
    q = weights.quantization
    assert q is not None and q["axis"] == 0 and len(q["scale"]) == weights.shape[0]
    assert weights.tensor_index == conv.inputs[1].meta["tflite.tensor_index"]  # type: ignore[union-attr]
    layer = manifest.layers[0]
    assert layer.op == "CONV_2D" and len(layer.params["multiplier"]) == len(layer.params["shift"]) == weights.shape[0]
    s_in = float(conv.inputs[0].quant.scale[0])  # type: ignore[union-attr]
    s_out = float(conv.outputs[0].quant.scale[0])  # type: ignore[union-attr]
    for m, s, sw in zip(layer.params["multiplier"], layer.params["shift"], q["scale"]):
        assert m * 2.0 ** (s - 31) == pytest.approx(s_in * sw / s_out, rel=1e-8)


def test_layer_parameters_reproduce_litert_first_convolution(tmp_path: Path) -> None:
    """An integer-only implementation from the extracted data alone matches LiteRT."""
    manifest = extract(TFLITE, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "manifest.json").read_text())
    layer = doc["layers"][0]
    op = doc["operators"][layer["operator_index"]]
    files = {c["name"]: c["file"] for c in doc["constants"]}
    w = np.load(tmp_path / "out" / files[op["inputs"][1]]).astype(np.int64)
    b = np.load(tmp_path / "out" / files[op["inputs"][2]]).astype(np.int64)
    model = gw.load(TFLITE)
    x = np.random.default_rng(1).integers(-128, 128, (1, 32, 32, 3)).astype(np.int8)
    name = model.graph.inputs[0].name
    expected = run(TFLITE, {name: x}, backend="litert-ref", outputs=[op["outputs"][0]])[op["outputs"][0]]
    # stride 2, SAME on 32x32 with a 3x3 kernel: pad 0 top/left, 1 bottom/right
    assert layer["strides"] == [2, 2] and layer["padding"] == "SAME"
    xp = np.pad(x.astype(np.int64) - layer["input_zero_point"], ((0, 0), (0, 1), (0, 1), (0, 0)))
    acc = np.zeros((1, 16, 16, w.shape[0]), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nhwc,oc->nhwo", xp[:, i:i + 31:2, j:j + 31:2, :], w[:, i, j, :])
    y = multiply_by_quantized_multiplier(acc + b, np.array(layer["multiplier"]), np.array(layer["shift"]))
    y = np.clip(y + layer["output_zero_point"], layer["activation_min"], layer["activation_max"])
    np.testing.assert_array_equal(y, expected)
    assert manifest.layers[0].params["activation_min"] >= -128
