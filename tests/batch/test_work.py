"""One job in this process (:func:`graphwright.batch.work.run_job`): simplify jobs read the model from its path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from graphwright.batch import Job
from graphwright.batch.work import run_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_simplify_job_counts_nodes_and_writes_what_onnxruntime_agrees_with(tmp_path: Path) -> None:
    out = tmp_path / "sim.onnx"
    result = run_job(Job(name="cnn", model=str(EXAMPLES / "small_cnn.onnx"), output=str(out), simplify={}, check=1))
    assert result.status == "ok", result.error
    assert result.nodes_before > result.nodes_after > 0
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    a = ort.InferenceSession(str(EXAMPLES / "small_cnn.onnx")).run(None, {"input": x})[0]
    b = ort.InferenceSession(str(out)).run(None, {"input": x})[0]
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_simplify_job_on_a_tflite_model_is_an_error_row(tmp_path: Path) -> None:
    out = tmp_path / "x.tflite"
    result = run_job(Job(name="t", model=str(EXAMPLES / "small_cnn_float.tflite"), output=str(out), simplify={}))
    assert result.status == "error" and "simplify works on ONNX models" in (result.error or "")
    assert not out.exists()
