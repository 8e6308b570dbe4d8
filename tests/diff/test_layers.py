"""Per-layer error pieces: dequantization, SQNR, and a runtime that will not run degrades to a note."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphwright import formats
from graphwright.diff.layers import dequantize, layer_errors, quantize_like
from graphwright.ir.tensor import QuantParams
from graphwright.verify.quantized import sqnr_of
from tests.models import tflite_model


def test_dequantize_per_channel_and_quantize_round_trip() -> None:
    q = np.array([[-128, 0, 127], [10, 20, 30]], np.int8)
    params = QuantParams([0.5, 0.25], [0, 10], axis=0)
    assert dequantize(q, params).tolist() == [[-64.0, 0.0, 63.5], [0.0, 2.5, 5.0]]
    per_tensor = QuantParams([1 / 255], [-128])
    x = np.array([0.0, 0.2, 1.0, 2.0], np.float32)  # 0.2 * 255 = 51; 2.0 is past the range: clipped to 127
    assert quantize_like(x, per_tensor, np.dtype(np.int8)).tolist() == [-128, -77, 127, 127]


def test_sqnr() -> None:
    a = np.array([3.0, 4.0])
    assert sqnr_of(a, a) == math.inf
    assert sqnr_of(a, np.array([3.0, 3.0])) == pytest.approx(10 * math.log10(25 / 1))


def test_a_runtime_that_cannot_run_is_a_note_not_a_failure() -> None:
    a, b = tflite_model("float").path, tflite_model("int8").path
    report = layer_errors(formats.load(a), formats.load(b), str(a), str(b), backend_b="no-such-runtime")
    assert report is not None and report.layers == []
    assert report.notes[0].startswith("per-layer error unavailable: ") and "no-such-runtime" in report.notes[0]


def test_a_model_against_itself_is_exact_on_every_layer() -> None:
    a = tflite_model("float").path
    report = layer_errors(formats.load(a), formats.load(a), str(a), str(a), seed=1)
    assert report is not None and len(report.layers) == 10 and report.notes == []
    assert all(x.sqnr_db == math.inf and x.max_abs == 0 and x.max_steps is None for x in report.layers)
    assert {row["sqnr_db"] for row in report.to_json()["layers"]} == {None}  # JSON has no Infinity
