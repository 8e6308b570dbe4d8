"""The README's commands work as written (the front door): the main job on the bundled
examples and the TFLite walkthrough, run in a scratch copy of ``examples/`` with the
installed ``graphwright`` (the ``pip install -e .`` step is what the test run already did)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

import graphwright as gw

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

pytestmark = pytest.mark.slow


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def _run(script: str, cwd: Path) -> str:
    """Run a README block with the ``graphwright`` console script of the interpreter under test
    first on PATH, so the test needs no activated virtual environment."""
    env = dict(os.environ, PATH=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")]))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def test_main_job_runs_as_written(scratch: Path) -> None:
    (main,) = [b for b in _blocks() if b.startswith("pip install -e . && ")]
    assert main.startswith("pip install -e . && ")
    out = _run(main.removeprefix("pip install -e . && "), scratch)
    deployed, simplified = gw.load(scratch / "small_cnn_deploy.pb"), gw.load(scratch / "small_cnn_sim.onnx")
    assert "110 nodes" in README and "to 20" in README
    assert len(gw.load(scratch / "examples" / "small_cnn.pb").graph) == 110
    assert len(deployed.graph) == 20
    assert len(simplified.graph) < len(gw.load(scratch / "examples" / "small_cnn.onnx").graph)
    assert "every output within tolerance" in out


def test_tflite_walkthrough_runs_as_written(scratch: Path) -> None:
    (block,) = [b for b in _blocks() if "graphwright extract examples/small_cnn.tflite" in b]
    out = _run(block, scratch)
    assert (scratch / "small_cnn_weights" / "model_data.h").is_file()
    assert (scratch / "small_cnn_weights" / "manifest.json").is_file()
    assert len(list((scratch / "trace").glob("*.npy"))) == 11  # the input and 10 operator outputs
    assert "all 10 layers agree with litert-ref (tolerance 0)" in " ".join(out.split())


def test_diff_walkthrough_runs_as_written(scratch: Path) -> None:
    """The 'Seeing what changed' block: the sidecar is written and the report says what the README says."""
    (block,) = [b for b in _blocks() if "graphwright diff examples/small_cnn.pb" in b]
    _run(block, scratch)
    sidecar = scratch / "small_cnn_deploy.pb.provenance.json"
    assert sidecar.is_file() and (ROOT / "docs" / "img" / "diff_report.png").is_file()
    report = (scratch / "report.html").read_text()
    assert "small_cnn_deploy.pb.provenance.json" in report and "_FusedConv2D" in report
    assert "5 fusions" in README and "26 removals" in README
    out = _run("graphwright diff examples/small_cnn.pb small_cnn_deploy.pb --json", scratch)
    counts = json.loads(out)["counts"]
    assert counts == {"fused": 5, "removed": 26}
