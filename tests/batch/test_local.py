"""The local runner: one worker process per model; crashes, time-outs and retries; results streamed.

Numbers are checked against onnxruntime directly (the original and the written result run on
the same random input), never against the runner's own report."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphwright.batch import BatchResult, Job, parse_manifest, run_local, summary_dict
from graphwright.batch.local import crash_reason

from .zoo import EXAMPLES, conv_bn_model, write_plugin


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    for i in range(3):
        onnx.save(conv_bn_model(i), folder / f"chain{i}.onnx")
    write_plugin(folder)
    return folder


def test_each_model_runs_and_the_results_match_onnxruntime(models: Path, tmp_path: Path) -> None:
    jobs = parse_manifest({"output_dir": str(tmp_path / "out"), "models": [
        {"model": str(models / "chain0.onnx"), "simplify": True, "check": 2},
        {"model": str(models / "chain1.onnx"), "transforms": "fuse_bn_into_conv eliminate_identity"},
        {"model": str(EXAMPLES / "small_cnn.tflite"), "transforms": "strip_unused_nodes", "check": 1},
        {"model": str(tmp_path / "missing.onnx"), "simplify": True},
    ]}, base=tmp_path)
    streamed: list[str] = []
    results = run_local(jobs, workers=2, on_result=lambda r: streamed.append(r.name))
    assert sorted(streamed) == sorted(j.name for j in jobs)
    assert [r.name for r in results] == [j.name for j in jobs]  # job order, whatever the finishing order
    by_name = {r.name: r for r in results}
    simplified, fused = by_name["chain0.onnx"], by_name["chain1.onnx"]
    # Conv, BatchNormalization, Relu, Identity -> Conv, Relu (the model is built that way)
    assert (simplified.status, simplified.nodes_before, simplified.nodes_after, simplified.checks) == ("ok", 4, 2, 2)
    assert (fused.status, fused.nodes_before, fused.nodes_after) == ("ok", 4, 2)
    assert simplified.max_abs_error is not None and simplified.max_abs_error < 1e-4
    for name in ("chain0.onnx", "chain1.onnx"):
        out = tmp_path / "out" / name
        assert [n.op_type for n in onnx.load(out).graph.node] == ["Conv", "Relu"]
        x = np.random.default_rng(7).normal(size=(1, 1 + int(name[5]) % 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(_ort(out, x), _ort(models / name, x), rtol=1e-4, atol=1e-4)
    tfl = by_name["small_cnn.tflite"]
    assert tfl.status == "ok" and tfl.max_abs_error == 0.0 and (tmp_path / "out" / "small_cnn.tflite").exists()
    missing = by_name["missing.onnx"]
    assert missing.status == "error" and "no such file" in missing.error and missing.attempts == 1
    assert not (tmp_path / "out" / "missing.onnx").exists()
    totals = summary_dict(results)["totals"]
    assert totals == {"models": 4, "ok": 3, "failed": 0, "error": 1, "crashed": 0, "timeout": 0}


def test_a_result_beyond_tolerance_is_failed_and_not_written(models: Path, tmp_path: Path) -> None:
    (job,) = parse_manifest([{"model": str(models / "chain2.onnx"), "transforms": "round_weights(num_steps=2)",
                              "check": 1, "atol": 1e-6, "rtol": 1e-6, "output": str(tmp_path / "r.onnx")}],
                            base=tmp_path)
    (result,) = run_local([job])
    assert result.status == "failed", result
    assert "was not written" in result.error and result.max_abs_error > 1e-3
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the output nor its temporary file


def test_a_crashing_model_is_reported_and_the_others_finish(models: Path, tmp_path: Path) -> None:
    plugin = str(models / "gw_batch_test_plugin.py")
    src = str(models / "chain0.onnx")
    jobs = [Job(f"ok{i}", src, str(tmp_path / f"ok{i}.onnx"), transforms="eliminate_identity") for i in range(2)]
    jobs.insert(1, Job("segfault", src, str(tmp_path / "seg.onnx"), transforms="test_segfault"))
    jobs.append(Job("exit", src, str(tmp_path / "exit.onnx"), transforms="test_exit(code=4)"))
    results = run_local(jobs, workers=2, retries=1, plugins=[plugin])
    assert [(r.name, r.status, r.attempts) for r in results] == [
        ("ok0", "ok", 1), ("segfault", "crashed", 2), ("ok1", "ok", 1), ("exit", "crashed", 2)]
    assert results[1].error == "worker process killed by SIGSEGV"
    assert results[3].error == "worker process exited with code 4 before reporting a result"
    assert (tmp_path / "ok0.onnx").exists() and (tmp_path / "ok1.onnx").exists()
    assert not (tmp_path / "seg.onnx").exists()


def test_a_retry_recovers_a_worker_that_crashed_once(models: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    job = Job("flaky", str(models / "chain0.onnx"), str(tmp_path / "f.onnx"),
              transforms=f"test_crash_once(marker={marker})")
    plugin = [str(models / "gw_batch_test_plugin.py")]
    (result,) = run_local([job], retries=1, plugins=plugin)
    assert (result.status, result.attempts) == ("ok", 2)
    assert marker.read_text() == "crashed once"
    marker.unlink()
    (result,) = run_local([job], retries=0, plugins=plugin)  # no retry: the crash is the result
    assert (result.status, result.attempts, result.error) == (
        "crashed", 1, "worker process exited with code 9 before reporting a result")


def test_a_slow_model_times_out_and_results_stream_as_they_finish(models: Path, tmp_path: Path) -> None:
    src = str(models / "chain0.onnx")
    jobs = [Job("slow", src, str(tmp_path / "s.onnx"), transforms="test_sleep(seconds=30)"),
            Job("fast", src, str(tmp_path / "f.onnx"), transforms="eliminate_identity")]
    order: list[tuple[str, float]] = []
    start = time.perf_counter()
    results = run_local(jobs, workers=2, timeout=3, plugins=[str(models / "gw_batch_test_plugin.py")],
                        on_result=lambda r: order.append((r.name, time.perf_counter() - start)))
    assert [name for name, _ in order] == ["fast", "slow"]  # the fast one is reported while the slow one runs
    assert (results[0].status, results[0].error) == ("timeout", "stopped after 3 s")
    assert results[1].status == "ok"
    assert time.perf_counter() - start < 25  # the sleeping worker was killed, not waited for


def test_crash_reasons_and_bad_options() -> None:
    assert crash_reason(-9) == "worker process killed by SIGKILL"
    assert crash_reason(1) == "worker process exited with code 1 before reporting a result"
    with pytest.raises(Exception, match="--jobs needs at least 1"):
        run_local([], workers=0)
    assert run_local([]) == []
    row = BatchResult("a", "a.onnx", "b.onnx", "ok", 3, 2, seconds=0.5)
    assert BatchResult.from_dict(row.to_dict()) == row
