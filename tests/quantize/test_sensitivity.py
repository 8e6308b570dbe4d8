"""quantize.sensitivity: keep_float parsing and rank_layers, with a quantizer written here.

The quantizer of these tests rounds layers' weights to a grid of the test's choosing, so each
layer's cost is known in advance; the scores rank_layers returns are checked against onnxruntime
running the same rounded models, built here with onnx directly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import graphwright as gw
from graphwright.ir import DType, Model, Tensor
from graphwright.quantize.report import weighted_layers
from graphwright.quantize.sensitivity import parse_keep_float, rank_layers
from tests.quantize.test_driver import mlp, samples

#: Step each layer's weights are rounded to: fc1 fine, fc2 coarse.
STEPS = {"fc1": 1 / 256, "fc2": 1 / 4}
WEIGHT_OF = {"fc1": "W1", "fc2": "W2"}


@pytest.mark.parametrize(("spec", "count"), [(None, None), (0, 0), (3, 3), ("2", 2), ("auto:4", 4), ("auto:0", 0)])
def test_parse_keep_float(spec: object, count: int | None) -> None:
    assert parse_keep_float(spec) == count  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["auto:", "auto:-1", "-2", "worst:3", "auto:1.5"])
def test_parse_keep_float_refuses(spec: str) -> None:
    with pytest.raises(ValueError, match="keep_float must be N or auto:N"):
        parse_keep_float(spec)


def _round_layers(model: Model, keep: frozenset[str]) -> None:
    """The test's quantizer: round each layer's weight to its STEPS grid, but those in ``keep``."""
    by_name = {v.name: v for v in model.graph.initializers}
    for node, step in STEPS.items():
        if node in keep:
            continue
        value = by_name[WEIGHT_OF[node]]
        value.const = Tensor.from_numpy(np.round(value.const.numpy() / step) * step, DType.FLOAT32)


def _rounded_with_onnx(src: Path, layers: list[str]) -> bytes:
    model = onnx.load(src)
    for init in model.graph.initializer:
        for layer in layers:
            if init.name == WEIGHT_OF[layer]:
                w = numpy_helper.to_array(init)
                rounded = (np.round(w / STEPS[layer]) * STEPS[layer]).astype(np.float32)
                init.CopyFrom(numpy_helper.from_array(rounded, init.name))
    return model.SerializeToString()


def _ort(data: bytes, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, f)[0] for f in feeds]).astype(np.float64)


def test_rank_layers_scores_each_layer_left_out_as_onnxruntime_measures_it(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    model = gw.load(src)
    before = gw.serialize(model)
    feeds = samples(6)
    seen: list[tuple[int, int, str]] = []
    ranked = rank_layers(model, _round_layers, weighted_layers(model), feeds,
                         on_layer=lambda done, total, what: seen.append((done, total, what)))
    assert gw.serialize(model) == before  # every candidate is a copy
    reference = _ort(src.read_bytes(), feeds)

    def sqnr(layers: list[str]) -> float:
        got = _ort(_rounded_with_onnx(src, layers), feeds)
        return 10 * math.log10(np.sum(reference ** 2) / np.sum((reference - got) ** 2))

    baseline = sqnr(["fc1", "fc2"])
    kept = {"fc1": sqnr(["fc2"]), "fc2": sqnr(["fc1"])}  # each layer left float, the other rounded
    assert [s.node for s in ranked] == sorted(kept, key=kept.get, reverse=True) == ["fc2", "fc1"]
    for item in ranked:
        assert item.sqnr_db == pytest.approx(kept[item.node], abs=1e-4)
        assert item.gain_db == pytest.approx(kept[item.node] - baseline, abs=1e-4)
        assert item.op == "MatMul" and not item.kept_float
    assert ranked[0].gain_db > 10 > abs(ranked[1].gain_db)  # the coarse grid is what costs
    assert seen == [(0, 3, "everything quantized"), (1, 3, "fc1"), (2, 3, "fc2"), (3, 3, "done")]


def test_a_layer_the_quantizer_leaves_exact_gains_nothing(tmp_path: Path) -> None:
    model = gw.load(mlp(tmp_path / "mlp.onnx"))

    def only_fc2(candidate: Model, keep: frozenset[str]) -> None:
        _round_layers(candidate, keep | {"fc1"})

    ranked = rank_layers(model, only_fc2, weighted_layers(model), samples(3))
    assert [s.node for s in ranked] == ["fc2", "fc1"]
    assert math.isinf(ranked[0].sqnr_db) and math.isinf(ranked[0].gain_db)  # fc2 float: nothing rounded
    assert ranked[1].gain_db == 0.0
    assert ranked[0].to_json()["gain_db"] is None and ranked[1].to_json()["gain_db"] == 0.0


def _worst_output_sqnr_litert(float_path: Path, quant_path: Path, feeds: list[dict[str, np.ndarray]]) -> float:
    from tests.quantize.test_report import _litert_run

    runs_a = [_litert_run(str(float_path), next(iter(f.values())), []) for f in feeds]
    runs_b = [_litert_run(str(quant_path), next(iter(f.values())), []) for f in feeds]
    worst = math.inf
    for name in runs_a[0]:
        a = np.concatenate([r[name].ravel() for r in runs_a])
        b = np.concatenate([r[name].ravel() for r in runs_b])
        worst = min(worst, 10 * math.log10(np.sum(a ** 2) / np.sum((a - b) ** 2)))
    return worst


def test_keeping_the_most_sensitive_layers_beats_keeping_the_least(tmp_path: Path) -> None:
    """TFLite int8 of the landmarks model: keep_float=auto:2 against the two lowest-ranked layers
    kept float instead, both measured on LiteRT (driven here) on samples neither run saw.  (This
    model's error is mostly activation rounding no layer choice removes: the margin is small.)"""
    from tests.models import get_model
    from tests.quantize.test_driver import _images, held_out

    info = get_model("tflite_real", "landmarks_float")
    feeds = _images(info.path, 60)
    best, report = gw.quantize(info.path, mode="int8", samples=feeds, calibration_samples=40, keep_float="auto:2")
    least = [s.node for s in report.sensitivity[-2:]]
    assert len(report.sensitivity) == 16 and not set(least) & set(report.kept_float)
    other, _ = gw.quantize(info.path, mode="int8", samples=feeds, calibration_samples=40, exclude_nodes=least)
    gw.save(best, tmp_path / "best.tflite")
    gw.save(other, tmp_path / "other.tflite")
    evaluated = held_out(feeds)
    sqnr_best = _worst_output_sqnr_litert(info.path, tmp_path / "best.tflite", evaluated)
    sqnr_other = _worst_output_sqnr_litert(info.path, tmp_path / "other.tflite", evaluated)
    assert sqnr_best > sqnr_other, (sqnr_best, sqnr_other)


@pytest.mark.wide
def test_keep_float_on_mobilenet_v3_buys_back_accuracy_on_onnxruntime(tmp_path: Path) -> None:
    """torchvision MobileNetV3-small, ONNX static int8: the four layers with the largest gain kept
    float lift the output SQNR (measured here on onnxruntime, on held-out synthetic images) by
    several dB, more than the four lowest-ranked ones do."""
    from graphwright.quantize.calibration import synthetic_samples
    from tests.models.build_onnx_corpus import corpus_model
    from tests.quantize.test_driver import held_out

    path = corpus_model("tv_mobilenet_v3_small-ts-fixed").path
    feeds = list(synthetic_samples(path, 100, seed=0))
    best, report = gw.quantize(path, mode="static", samples=feeds, calibration_samples=64, keep_float="auto:4")
    plain, _ = gw.quantize(path, mode="static", samples=feeds, calibration_samples=64, report=False)
    lowest, _ = gw.quantize(path, mode="static", samples=feeds, calibration_samples=64, report=False,
                            exclude_nodes=[s.node for s in report.sensitivity[-4:]])
    evaluated = held_out(feeds)
    reference = _ort(path.read_bytes(), evaluated)

    def sqnr(model: Model) -> float:
        got = _ort(gw.serialize(model), evaluated)
        return 10 * math.log10(np.sum(reference ** 2) / np.sum((reference - got) ** 2))

    assert sqnr(best) > sqnr(plain) + 5 and sqnr(best) > sqnr(lowest) + 5
    assert report.outputs[0].sqnr_db == pytest.approx(sqnr(best), abs=1e-3)  # ORT fuses differently with taps
