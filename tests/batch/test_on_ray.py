"""``run_ray`` against ``run_local`` on the same 20 models plus a crashing one: byte-identical outputs,
equal summaries except the times, the crash reported the same way; the same for quantize jobs (ONNX
and TFLite, calibrated on data or seeded inputs, one below its SQNR floor); calibration sharded over
two Ray workers against one TensorFlow run.  One local Ray cluster (2 CPUs) for the module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright.batch import (
    Job,
    calibrate_sharded,
    jobs_from_folder,
    merge_records,
    min_max,
    parse_manifest,
    run_local,
    run_ray,
    shard_bounds,
    summary_dict,
)
from graphwright.calibrate import calibrate, random_samples
from graphwright.transforms.quantize.freeze_requantization_ranges import parse_min_max_log
from tests.calibrate.test_run import SPEC, _prepare
from tests.transforms.quantize._helpers import EXAMPLE_OUTPUTS, ours

from .test_quantize_jobs import _errors, _mlp, _ort
from .zoo import EXAMPLES, make_zoo, write_plugin

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _jobs(models: Path, out: Path) -> list[Job]:
    onnx_models = sorted(p for p in models.iterdir() if p.suffix == ".onnx")
    jobs = jobs_from_folder(models, out, simplify={})
    for job in jobs[::4]:  # verified against the original on onnxruntime / LiteRT: a few, to stay quick
        job.check = 1
    # the non-ONNX examples get a pipeline instead (simplify is ONNX-only)
    for job in jobs:
        if job.model.endswith(".pb"):  # verifying a GraphDef needs TensorFlow: left out here
            job.simplify, job.transforms, job.check = None, "fold_batch_norms strip_unused_nodes", 0
        elif job.model.endswith(".tflite"):
            job.simplify, job.transforms, job.check = None, "strip_unused_nodes", 1
    jobs.insert(5, Job("crasher", str(onnx_models[0]), str(out / "crasher.onnx"), transforms="test_segfault"))
    return jobs


def _comparable(summary: dict, out: Path) -> dict:
    rows = [{**row, "seconds": None, "output": str(Path(row["output"]).relative_to(out)),
             "error": row["error"].replace(str(out), "<out>")} for row in summary["models"]]
    return {"models": rows, "totals": summary["totals"]}


def test_ray_and_local_give_identical_results(cluster, tmp_path: Path) -> None:
    models = tmp_path / "models"
    make_zoo(models, 20)
    plugin = [str(write_plugin(tmp_path))]
    local_out, ray_out = tmp_path / "local", tmp_path / "ray"
    streamed: list[str] = []
    local = run_local(_jobs(models, local_out), workers=2, retries=1, plugins=plugin)
    on_ray = run_ray(_jobs(models, ray_out), retries=1, plugins=plugin, on_result=lambda r: streamed.append(r.name))
    assert len(local) == len(on_ray) == 21
    assert sorted(streamed) == sorted(r.name for r in on_ray)
    a, b = summary_dict(local), summary_dict(on_ray)
    assert a["totals"] == {"models": 21, "ok": 20, "failed": 0, "error": 0, "crashed": 1, "timeout": 0}
    assert _comparable(a, local_out) == _comparable(b, ray_out)
    crashed = [r for r in on_ray if r.status == "crashed"]
    assert [(r.name, r.error, r.attempts) for r in crashed] == [("crasher", "worker process killed by SIGSEGV", 2)]
    written = sorted(p.name for p in local_out.iterdir())
    assert written == sorted(p.name for p in ray_out.iterdir()) and len(written) == 20
    for name in written:
        assert (local_out / name).read_bytes() == (ray_out / name).read_bytes(), name
    chains = [r for r in on_ray if r.name.startswith("chain")]
    assert len(chains) == 17 and all((r.nodes_before, r.nodes_after) == (4, 2) for r in chains)
    verified = [r for r in on_ray if r.checks]
    assert len(verified) >= 5 and all(r.max_abs_error is not None and r.max_abs_error < 1e-4 for r in verified)


def _quantize_jobs(root: Path, out: Path) -> list[Job]:
    return parse_manifest({"output_dir": str(out), "models": [
        {"model": "mlp.onnx", "quantize": {"mode": "static", "method": "entropy", "data": "calib"}, "check": 2},
        {"model": "mlp.onnx", "name": "dynamic", "output": "dynamic.onnx", "quantize": {"mode": "dynamic"},
         "check": 1, "min_sqnr_db": 20},
        {"model": "mlp.onnx", "name": "floor", "output": "floor.onnx", "quantize": {"mode": "weights", "bits": 4},
         "min_sqnr_db": 99},
        {"model": str(EXAMPLES / "small_cnn.onnx"), "quantize": {"mode": "static", "calibration_samples": 12,
                                                                 "eval_samples": 2}},
        {"model": str(EXAMPLES / "small_cnn_float.tflite"), "quantize": {"mode": "int8", "calibration_samples": 12,
                                                                         "eval_samples": 2}, "check": 1},
    ]}, base=root)


def test_quantize_jobs_give_the_same_bytes_and_numbers_locally_and_on_ray(cluster, tmp_path: Path) -> None:
    _mlp(tmp_path / "mlp.onnx")
    (tmp_path / "calib").mkdir()
    rng = np.random.default_rng(5)
    for i in range(10):
        np.save(tmp_path / "calib" / f"s{i}.npy", rng.normal(size=(1, 64)).astype(np.float32))
    local_out, ray_out = tmp_path / "local", tmp_path / "ray"
    local = run_local(_quantize_jobs(tmp_path, local_out), workers=2)
    on_ray = run_ray(_quantize_jobs(tmp_path, ray_out))
    a, b = summary_dict(local), summary_dict(on_ray)
    assert a["totals"] == {"models": 5, "ok": 4, "failed": 1, "error": 0, "crashed": 0, "timeout": 0}, a
    assert _comparable(a, local_out) == _comparable(b, ray_out)  # every number, bit for bit
    assert [r.name for r in on_ray if r.status == "failed"] == ["floor"]
    written = sorted(p.name for p in local_out.iterdir())
    assert written == sorted(p.name for p in ray_out.iterdir()) == [
        "dynamic.onnx", "mlp.onnx", "small_cnn.onnx", "small_cnn_float.tflite"]
    for name in written:
        assert (local_out / name).read_bytes() == (ray_out / name).read_bytes(), name
    # the Ray-written static model against onnxruntime: the job's numbers are no better than these
    held_out = [{"x": np.load(tmp_path / "calib" / f"s{i}.npy")} for i in (4, 9)]
    sqnr, max_abs, _ = _errors(_ort(tmp_path / "mlp.onnx", held_out), _ort(ray_out / "mlp.onnx", held_out))
    static = on_ray[0]
    assert static.sqnr_db <= sqnr + 1e-6 and static.max_abs_error >= max_abs - 1e-6 and static.checks == 2


@pytest.mark.tf
def test_calibration_sharded_over_two_ray_workers_gives_the_single_process_ranges(cluster, tmp_path: Path) -> None:
    quantized, logged = _prepare(tmp_path)
    samples = random_samples([SPEC], 8, 3)
    single, sharded = tmp_path / "single.log", tmp_path / "sharded.log"
    calibrate(logged, single, samples, outputs=["Identity"])
    report = calibrate_sharded(logged, sharded, samples, shards=2, outputs=["Identity"], use_ray=True)
    assert (report.samples, report.log_lines, len(report.nodes_logged)) == (8, 160, 20)
    one, _ = parse_min_max_log(single)
    merged, _ = parse_min_max_log(sharded)
    assert merged == one  # every node's per-sample [min][max], in sample order, bit for bit
    assert len(one) == 20 and all(len(mins) == len(maxs) == 8 for mins, maxs in one.values())
    assert min_max(merged) == {node: (float(np.min(lo)), float(np.max(hi))) for node, (lo, hi) in one.items()}
    frozen = [ours(quantized, f"freeze_requantization_ranges(min_max_log_file={log})", ["input"],
                   EXAMPLE_OUTPUTS)[0] for log in (single, sharded)]
    assert frozen[0] == frozen[1]


def test_parsed_shard_logs_merge_in_order_and_bounds_cover_the_samples(tmp_path: Path) -> None:
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(2, 5) == [(0, 1), (1, 2)]
    line = "I x] ;{}__print__;__requant_min_max:[{}][{}]"
    rows = [line.format(node, -s - i, s + 2 * i) for s in range(6) for i, node in enumerate(("a", "b"))]
    paths = []
    for k, (start, stop) in enumerate(shard_bounds(6, 2)):
        paths.append(tmp_path / f"part{k}.log")
        paths[-1].write_text("\n".join(rows[2 * start:2 * stop]) + "\n")
    (tmp_path / "all.log").write_text("\n".join(rows) + "\n")
    merged = merge_records([parse_min_max_log(p)[0] for p in paths])
    assert merged == parse_min_max_log(tmp_path / "all.log")[0]
    assert merged["b"] == ([-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], [2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert min_max(merged) == {"a": (-5.0, 5.0), "b": (-6.0, 7.0)}
