"""quantize.report and quantize.html: errors and per-layer SQNR of a quantized model against its float one.

The TFLite converter's own float / full-integer pair (int8 inputs and outputs) is compared by
``compare_models`` and, independently, by LiteRT's interpreter driven here (inputs quantized and
outputs dequantized with the parameters LiteRT reports, intermediates kept by LiteRT).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from html.parser import HTMLParser

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

import graphwright as gw
from graphwright.quantize.html import LOW_SQNR_DB, render_html, sqnr_chart
from graphwright.quantize.report import (
    LayerSQNR,
    OutputError,
    QuantReport,
    classifier_like,
    compare_models,
    weighted_layers,
)
from graphwright.quantize.sensitivity import LayerSensitivity
from tests.models import get_model


def _interpreter(path: str) -> Interpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    return interp


def _real(array: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    if array.dtype.kind in "iu" and scale:
        return (array.astype(np.float64) - zero) * scale
    return array.astype(np.float64)


def _litert_run(path: str, image: np.ndarray, tensors: list[str]) -> dict[str, np.ndarray]:
    """Outputs and intermediates by name, as real numbers, straight from LiteRT."""
    interp = _interpreter(path)
    (inp,) = interp.get_input_details()
    scale, zero = inp["quantization"]
    fed = image if inp["dtype"] == np.float32 else np.clip(np.round(image / scale) + zero, -128, 127).astype(inp["dtype"])
    interp.set_tensor(inp["index"], fed)
    interp.invoke()
    details = {d["name"]: d for d in interp.get_tensor_details()}
    out = {d["name"]: _real(interp.get_tensor(d["index"]), d) for d in interp.get_output_details()}
    for name in tensors:
        out[name] = _real(interp.get_tensor(details[name]["index"]), details[name])
    return out


def _sqnr(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    a64 = np.concatenate([x.ravel() for x in a])
    b64 = np.concatenate([x.ravel() for x in b])
    return 10 * math.log10(np.sum(a64 ** 2) / np.sum((a64 - b64) ** 2))


def test_converter_int8_pair_matches_litert_driven_directly() -> None:
    float_info, int8_info = get_model("tflite_real", "landmarks_float"), get_model("tflite_real", "landmarks_int8")
    float_model, int8_model = gw.load(float_info.path), gw.load(int8_info.path)
    rng = np.random.default_rng(0)
    spec = float_model.graph.inputs[0]
    images = [rng.uniform(-1, 1, size=tuple(spec.shape)).astype(np.float32) for _ in range(4)]
    layers = weighted_layers(float_model)
    assert {op for _, op, _ in layers} == {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"} and len(layers) == 16
    outputs, per_layer, notes = compare_models(float_model, int8_model, [{spec.name: x} for x in images],
                                               layers=layers)
    tensors = [t for _, _, t in layers]
    runs_a = [_litert_run(str(float_info.path), x, tensors) for x in images]
    runs_b = [_litert_run(str(int8_info.path), x, tensors) for x in images]
    assert [o.name for o in outputs] == [v.name for v in float_model.graph.outputs]
    for row in outputs:
        a = [r[row.name] for r in runs_a]
        b = [r[row.name] for r in runs_b]
        assert row.sqnr_db == pytest.approx(_sqnr(a, b), abs=1e-6)
        diff = np.abs(np.stack(a) - np.stack(b))
        assert row.max_abs == pytest.approx(diff.max(), rel=1e-6)
        assert row.mean_abs == pytest.approx(diff.mean(), rel=1e-6)
        assert 0 < row.sqnr_db < 60  # the converter's int8 (calibrated on other data): near, not exact
        if row.shape == [1, 12]:  # the classifier-like head: argmax agreement, computed here
            agree = np.mean([x.argmax() == y.argmax() for x, y in zip(a, b)])
            assert row.top1_agreement == pytest.approx(agree)
        else:
            assert row.top1_agreement is None
    assert [x.tensor for x in per_layer] == tensors and notes == []
    for x in per_layer:
        expected = _sqnr([r[x.tensor] for r in runs_a], [r[x.tensor] for r in runs_b])
        assert x.sqnr_db == pytest.approx(expected, abs=1e-6), x


def test_classifier_like_shapes() -> None:
    assert classifier_like([1, 1000]) and classifier_like([8, 10]) and classifier_like([10])
    assert not classifier_like([1, 1]) and not classifier_like([1, 896, 4]) and not classifier_like([])


def _report() -> QuantReport:
    report = QuantReport("onnx", "static", method="minmax", data_source="synthetic (seed 0)", calibration_samples=100,
                         eval_samples=16, warnings=["NO CALIBRATION DATA: <random> inputs"])
    report.outputs = [OutputError("logits", [1, 10], 0.5, 0.1, 0.02, 31.5, 0.9375),
                      OutputError("exact_out", [1, 3], 0.0, 0.0, 0.0, math.inf, None)]
    report.layers = [LayerSQNR("conv1", "Conv", "c1", 42.0), LayerSQNR("fc<&>", "Gemm", "f", 12.5),
                     LayerSQNR("kept", "Conv", "k", math.inf)]
    report.sensitivity = [LayerSensitivity("fc<&>", "Gemm", 20.0, 5.0, True), LayerSensitivity("conv1", "Conv", 15.0, 0.0)]
    report.kept_float = ["fc<&>"]
    report.size_before, report.size_after = 4_000_000, 1_000_000
    return report


def test_json_has_no_infinity_and_keeps_every_row() -> None:
    doc = json.loads(json.dumps(_report().to_json(), allow_nan=False))
    assert doc["outputs"][1]["sqnr_db"] is None and doc["outputs"][0]["top1_agreement"] == 0.9375
    assert [x["node"] for x in doc["layers"]] == ["conv1", "fc<&>", "kept"] and doc["layers"][2]["sqnr_db"] is None
    assert doc["sensitivity"][0] == {"node": "fc<&>", "op": "Gemm", "sqnr_db": 20.0, "gain_db": 5.0, "kept_float": True}


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_with_one_bar_per_layer() -> None:
    page = render_html(_report())
    parsed = _Collect()
    parsed.feed(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "link" not in tags and not re.search(r"https?://(?!www\.w3\.org)", page)
    bars = [a for t, a in parsed.tags if t == "rect"]
    assert len(bars) == 3
    widths = [float(a["width"]) for a in bars]
    assert widths[2] == max(widths) and widths[1] < widths[0]  # exact drawn full length; 12.5 dB shorter than 42
    colors = [a["fill"] for a in bars]
    assert colors[1] != colors[0]  # below LOW_SQNR_DB is drawn in another colour
    assert 12.5 < LOW_SQNR_DB < 42.0
    text = "".join(parsed.text)
    assert "fc<&>" in text and "<&>" not in page  # escaped in the markup, intact in the text
    assert "NO CALIBRATION DATA" in text and "exact" in text and "93.8%" in text


def test_empty_chart_says_so() -> None:
    assert "No layer" in sqnr_chart([], [])
