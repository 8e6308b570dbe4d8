"""Quantize jobs of a batch: the numbers a job reports against onnxruntime / LiteRT running the written
file and the float model (never against the quantization report itself), the calibration data read from
the manifest's folder, and the ``min_sqnr_db`` floor (failed, nothing written)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper, numpy_helper

from graphwright.batch import parse_manifest, run_job, run_local
from graphwright.runtime import input_specs
from graphwright.verify import random_feeds

from .zoo import EXAMPLES


def _mlp(path: Path) -> Path:
    """x[1,64] -> MatMul 64x128 -> Relu -> MatMul 128x10 -> y[1,10] (a classifier's scores)."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "W2"], ["y"], name="fc2")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(rng.normal(size=(64, 128)).astype(np.float32) / 8, "W1"),
         numpy_helper.from_array(rng.normal(size=(128, 10)).astype(np.float32) / 10, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mlp.onnx``, 20 calibration samples ``calib/s00.npy`` … (x * 2 + 0.5: not what random inputs
    look like), and one check input ``check.npz``."""
    root = tmp_path_factory.mktemp("qjobs")
    _mlp(root / "mlp.onnx")
    (root / "calib").mkdir()
    rng = np.random.default_rng(11)
    for i in range(20):
        np.save(root / "calib" / f"s{i:02d}.npy", (rng.normal(size=(1, 64)) * 2 + 0.5).astype(np.float32))
    np.savez(root / "check.npz", x=(rng.normal(size=(1, 64)) * 2 + 0.5).astype(np.float32))
    return root


def _ort(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(None, feed)[0] for feed in feeds]


def _errors(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float, float]:
    """SQNR (dB, over all samples), max |a - b|, top-1 agreement: computed here with numpy."""
    x, y = np.concatenate(a).astype(np.float64), np.concatenate(b).astype(np.float64)
    sqnr = 10 * math.log10(np.sum(x ** 2) / np.sum((x - y) ** 2))
    return sqnr, float(np.max(np.abs(x - y))), float(np.mean(x.argmax(-1) == y.argmax(-1)))


def test_a_verified_quantize_job_reports_what_onnxruntime_measures_on_the_written_file(folder: Path,
                                                                                        tmp_path: Path) -> None:
    # eval_samples 0: no report numbers, so the job's numbers are the check inputs' alone
    (job,) = parse_manifest({"output_dir": str(tmp_path), "models": [
        {"model": "mlp.onnx", "quantize": {"mode": "static", "method": "entropy", "data": "calib",
                                           "eval_samples": 0}, "check": 3}]}, base=folder)
    assert job.quantize["data"] == str(folder / "calib")
    result = run_job(job)
    assert (result.status, result.quantize_mode, result.checks) == ("ok", "static", 3), result.error
    written = tmp_path / "mlp.onnx"
    ops = [n.op_type for n in onnx.load(written).graph.node]
    assert ops.count("QuantizeLinear") >= 2 and ops.count("DequantizeLinear") >= 4
    # the seeded inputs the check runs (graphwright's generator; the numbers are onnxruntime's)
    feeds = [random_feeds(input_specs(folder / "mlp.onnx"), seed=s) for s in range(3)]
    sqnr, max_abs, top1 = _errors(_ort(folder / "mlp.onnx", feeds), _ort(written, feeds))
    assert 15 < sqnr < 60  # quantized, and not broken
    assert result.sqnr_db == pytest.approx(sqnr, abs=1e-6)
    assert result.max_abs_error == pytest.approx(max_abs, rel=1e-6)
    assert result.top1_agreement == top1
    assert result.size_before == (folder / "mlp.onnx").stat().st_size
    assert result.size_after == written.stat().st_size < result.size_before / 2
    assert result.notes == []  # calibrated on the data: no synthetic-data warning


def test_the_report_numbers_are_those_of_the_held_out_samples(folder: Path, tmp_path: Path) -> None:
    """No check: the numbers are the quantization report's, on every fifth data sample (held out from
    calibration, as graphwright quantize documents) — recomputed here with onnxruntime."""
    (job,) = parse_manifest({"output_dir": str(tmp_path), "models": [
        {"model": "mlp.onnx", "quantize": {"mode": "static", "data": "calib"}}]}, base=folder)
    result = run_job(job)
    assert (result.status, result.checks) == ("ok", 0), result.error
    held_out = [{"x": np.load(folder / "calib" / f"s{i:02d}.npy")} for i in (4, 9, 14, 19)]
    sqnr, max_abs, top1 = _errors(_ort(folder / "mlp.onnx", held_out), _ort(tmp_path / "mlp.onnx", held_out))
    assert result.sqnr_db == pytest.approx(sqnr, abs=1e-6)
    assert result.max_abs_error == pytest.approx(max_abs, rel=1e-6)
    assert result.top1_agreement == top1


def test_below_min_sqnr_db_the_job_fails_and_writes_nothing(folder: Path, tmp_path: Path) -> None:
    check = np.load(folder / "check.npz")["x"]
    base = {"model": "mlp.onnx", "quantize": {"mode": "dynamic", "eval_samples": 0}, "inputs": ["check.npz"]}
    low, high = parse_manifest({"output_dir": str(tmp_path), "models": [
        {**base, "name": "low", "output": "low.onnx", "min_sqnr_db": -100},
        {**base, "name": "high", "output": "high.onnx", "min_sqnr_db": 200}]}, base=folder)
    ok, failed = run_local([low, high], workers=2)
    assert ok.status == "ok" and (tmp_path / "low.onnx").exists(), ok.error
    sqnr, _, _ = _errors(_ort(folder / "mlp.onnx", [{"x": check}]), _ort(tmp_path / "low.onnx", [{"x": check}]))
    assert ok.sqnr_db == pytest.approx(sqnr, abs=1e-6) and ok.checks == 1
    assert failed.status == "failed" and not (tmp_path / "high.onnx").exists()
    assert failed.sqnr_db == pytest.approx(sqnr, abs=1e-6)
    assert "below min_sqnr_db 200" in failed.error and "was not written" in failed.error
    assert not list(tmp_path.glob(".high*"))  # no temporary file left behind


def test_a_tflite_int8_job_with_integer_io_matches_litert(tmp_path: Path) -> None:
    float_model = EXAMPLES / "small_cnn_float.tflite"
    name, shape = _litert_input(float_model)
    x = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (job,) = parse_manifest({"output_dir": str(tmp_path / "out"), "models": [
        {"model": str(float_model), "quantize": {"mode": "int8", "io_type": "int8", "eval_samples": 0,
                                                 "calibration_samples": 20}, "inputs": {name: "x.npy"}}]}, base=tmp_path)
    result = run_job(job)
    assert (result.status, result.quantize_mode, result.checks) == ("ok", "int8", 1), result.error
    assert any("NO CALIBRATION DATA" in note for note in result.notes)  # seeded random calibration, said
    written = tmp_path / "out" / float_model.name
    assert Interpreter(model_path=str(written)).get_input_details()[0]["dtype"] == np.int8
    expected, got = _litert(float_model, x), _litert(written, x)
    sqnr, max_abs, _ = _errors([expected], [got])
    assert result.sqnr_db == pytest.approx(sqnr, abs=1e-4)
    assert result.max_abs_error == pytest.approx(max_abs, rel=1e-4)


def _litert_input(path: Path) -> tuple[str, tuple[int, ...]]:
    (detail,) = Interpreter(model_path=str(path)).get_input_details()
    return detail["name"], tuple(detail["shape"])


def _litert(path: Path, x: np.ndarray) -> np.ndarray:
    """The model's first output for float ``x``: an integer input quantized and an integer output
    dequantized with the file's own scale and zero point."""
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    feed = x
    if inp["dtype"] != np.float32:
        scale, zero = inp["quantization"]
        info = np.iinfo(inp["dtype"])
        feed = np.clip(np.round(x / scale) + zero, info.min, info.max).astype(inp["dtype"])
    interpreter.set_tensor(inp["index"], feed)
    interpreter.invoke()
    y = interpreter.get_tensor(out["index"])
    if out["dtype"] != np.float32:
        scale, zero = out["quantization"]
        y = (y.astype(np.float64) - zero) * scale
    return y
