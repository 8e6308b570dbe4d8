"""``run_ray`` against ``run_local`` on the same 20 models plus a crashing one: byte-identical outputs,
equal summaries except the times, the crash reported the same way.  One local Ray cluster
(2 CPUs) for the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphwright.batch import Job, jobs_from_folder, run_local, run_ray, summary_dict

from .zoo import make_zoo, write_plugin

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
    rows = [{**row, "seconds": None, "output": str(Path(row["output"]).relative_to(out))}
            for row in summary["models"]]
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
