"""``graphwright batch`` as a user runs it: a folder, a manifest, a crash, the summary, bad input, quantize jobs
(their numbers against onnxruntime on the written file)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphwright.runtime import input_specs
from graphwright.verify import random_feeds
from tests.batch.test_quantize_jobs import _errors, _mlp, _ort
from tests.batch.zoo import conv_bn_model, write_plugin
from tests.cli.test_diff_cmd import _run_in_pty
from tests.diff.test_html import CHROMIUM, _browser, _console

from .test_cli import assert_one_line_error, gw

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.onnx"


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_folder_is_simplified_into_the_output_folder_with_a_table(tmp_path: Path) -> None:
    src = tmp_path / "models"
    src.mkdir()
    for i in range(2):
        onnx.save(conv_bn_model(i), src / f"chain{i}.onnx")
    before = _digest(src)
    result = gw("batch", src, "--out", tmp_path / "out", "--simplify", "--check", "1", "--jobs", "2",
                "--summary", tmp_path / "summary.json")
    assert result.returncode == 0, result.stderr
    assert "ok chain0.onnx" in result.stderr and "ok chain1.onnx" in result.stderr  # streamed per model
    assert "4 -> 2" in result.stdout and "2 model(s): 2 ok" in result.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["chain0.onnx", "chain1.onnx"]
    assert [n.op_type for n in onnx.load(tmp_path / "out" / "chain1.onnx").graph.node] == ["Conv", "Relu"]
    assert _digest(src) == before  # inputs untouched
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["totals"]["ok"] == 2 and summary["models"][0]["checks"] == 1


def test_a_manifest_with_a_crashing_model_reports_it_and_exits_1(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path)
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"output_dir": "out", "models": [
        {"model": str(EXAMPLE), "simplify": True},
        {"model": str(EXAMPLE), "name": "boom", "transforms": "test_exit(code=5)", "output": "boom.onnx"},
    ]}))
    result = gw("batch", manifest, "--json", "--plugin", plugin, "--retries", "1")
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)
    rows = {row["name"]: row for row in summary["models"]}
    assert rows["small_cnn.onnx"]["status"] == "ok" and rows["small_cnn.onnx"]["nodes_after"] == 15
    assert (rows["boom"]["status"], rows["boom"]["attempts"], rows["boom"]["error"]) == (
        "crashed", 2, "worker process exited with code 5 before reporting a result")
    assert summary["totals"] == {"models": 2, "ok": 1, "failed": 0, "error": 0, "crashed": 1, "timeout": 0}
    assert (tmp_path / "out" / "small_cnn.onnx").exists() and not (tmp_path / "out" / "boom.onnx").exists()


class _Rows(HTMLParser):
    """The cells of every <tr class="model ..."> of a page, with the row's class."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        if tag == "tr" and cls.startswith("model"):
            self.rows.append((cls, []))
        elif tag == "td" and self.rows:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1][1].append("".join(self._cell))
            self._cell = None


def test_html_summary_has_the_json_summary_rows_and_renders_in_chromium(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path)
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"output_dir": "out", "models": [
        {"model": str(EXAMPLE), "simplify": True, "check": 1},
        {"model": str(EXAMPLE), "name": "boom <&>", "transforms": "test_exit(code=5)", "output": "boom.onnx"},
    ]}))
    page = tmp_path / "summary.html"
    result = gw("batch", manifest, "--quiet", "--plugin", plugin, "--summary", tmp_path / "summary.json",
                "--html", page)
    assert result.returncode == 1, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    parser = _Rows()
    parser.feed(page.read_text())
    assert len(parser.rows) == 2
    for (cls, cells), row in zip(parser.rows, summary["models"], strict=True):
        name, status, before, after, err, checks, seconds, error, output = cells
        assert (name, status, error, output) == (row["name"], row["status"], row["error"], row["output"])
        assert (before, after) == ("" if row["nodes_before"] is None else str(row["nodes_before"]),
                                   "" if row["nodes_after"] is None else str(row["nodes_after"]))
        assert float(seconds) == pytest.approx(row["seconds"], abs=0.006)
        assert int(checks) == row["checks"]
        assert (err == "") == (row["max_abs_error"] is None)
        assert cls == ("model ok" if row["status"] == "ok" else "model bad")  # the failure highlighted
    ok, boom = parser.rows
    nodes = (len(onnx.load(EXAMPLE).graph.node), len(onnx.load(tmp_path / "out" / "small_cnn.onnx").graph.node))
    assert ok[1][:4] == ["small_cnn.onnx", "ok", str(nodes[0]), str(nodes[1])] and float(ok[1][4]) < 1e-4
    assert boom[1][:2] == ["boom <&>", "crashed"]
    assert boom[1][7] == "worker process exited with code 5 before reporting a result"
    if CHROMIUM is None:
        pytest.skip("no chromium to open the page in: apt-get install -y chromium")
    dom, log = _browser(page, tmp_path, screenshot=tmp_path / "summary.png")
    assert _console(log) == []
    assert "did not finish ok" in dom and dom.count("<tr class=\"model bad\"") == 1
    assert (tmp_path / "summary.png").stat().st_size > 1000


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert_one_line_error(gw("batch", tmp_path / "nothing"), "no such folder or manifest")
    assert_one_line_error(gw("batch", tmp_path, "--simplify"), "needs --out DIR")
    assert_one_line_error(gw("batch", tmp_path, "--out", tmp_path / "o"), "needs --transforms")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": [{"model": "a.onnx", "simplify": True, "oops": 1}]}))
    assert_one_line_error(gw("batch", bad, "--out", tmp_path / "o"), "unknown key(s) 'oops'")
    assert_one_line_error(gw("batch", bad, "--jobs", "0"), "--jobs needs at least 1")
    assert_one_line_error(gw("batch", bad, "--html", bad), "refusing to overwrite the manifest")
    assert_one_line_error(gw("batch", tmp_path, "--out", tmp_path / "o", "--simplify", "--html",
                             tmp_path / "no" / "r.html"), f"directory {tmp_path / 'no'} does not exist")
    assert not (tmp_path / "o").exists()


def test_ray_gives_the_local_summary_and_outputs(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    src = tmp_path / "models"
    src.mkdir()
    for i in range(3):
        onnx.save(conv_bn_model(i), src / f"chain{i}.onnx")
    runs = {}
    for name, extra in (("local", ["--jobs", "2"]), ("ray", ["--ray", "--jobs", "2"])):
        result = gw("batch", src, "--out", tmp_path / name, "--simplify", "--check", "1", "--json", *extra)
        assert result.returncode == 0, result.stderr
        runs[name] = json.loads(result.stdout)
        for row in runs[name]["models"]:
            row["seconds"] = None
            row["output"] = Path(row["output"]).name
    assert runs["local"] == runs["ray"]
    assert runs["ray"]["totals"]["ok"] == 3
    assert _digest(tmp_path / "local") == _digest(tmp_path / "ray")


def test_progress_bar_counts_models_on_a_terminal_only(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path)
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"output_dir": "out", "models": [
        {"model": str(EXAMPLE), "name": f"m{i}", "transforms": "test_sleep(seconds=0.4)", "output": f"m{i}.onnx"}
        for i in range(3)]}))
    argv = ["batch", str(manifest), "--plugin", str(plugin)]
    shown = _run_in_pty(argv, tmp_path)
    assert "\x1b[" in shown  # drawn with terminal control sequences
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    bars = re.findall(r"batch [━╸╺ ]+ ([0-3])/3 [0-9:]+ eta", plain)  # models done / total, elapsed, ETA
    assert {"1", "2"} & set(bars), plain[-2000:]
    assert "3 model(s): 3 ok" in shown
    piped = subprocess.run([sys.executable, "-m", "graphwright.cli.main", *argv], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "eta" not in piped.stderr and "\x1b[" not in piped.stderr + piped.stdout
    assert piped.stderr.count(" ok m") == 3  # the per-model lines only
    for flag in ("--quiet", "--json"):
        out = _run_in_pty([*argv, flag], tmp_path)
        assert "eta" not in out and "/3" not in out, out[-2000:]


def _calibration_folder(tmp_path: Path) -> tuple[Path, Path]:
    """``models/mlp.onnx`` and ten samples in ``calib/``."""
    models, calib = tmp_path / "models", tmp_path / "calib"
    models.mkdir()
    calib.mkdir()
    _mlp(models / "mlp.onnx")
    rng = np.random.default_rng(2)
    for i in range(10):
        np.save(calib / f"s{i}.npy", rng.normal(size=(1, 64)).astype(np.float32))
    return models, calib


def test_a_folder_is_quantized_with_its_numbers_in_the_table_and_json(tmp_path: Path) -> None:
    models, calib = _calibration_folder(tmp_path)
    result = gw("batch", "models", "--out", "out", "--quantize", "static", "--quantize-data", "calib",
                "--method", "entropy", "--check", "2", "--summary", "summary.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((tmp_path / "summary.json").read_text())["models"]
    written = tmp_path / "out" / "mlp.onnx"
    assert (row["status"], row["quantize_mode"], row["checks"]) == ("ok", "static", 2)
    # the worst of the held-out data samples (every fifth) and the two seeded check inputs, by onnxruntime
    held_out = [{"x": np.load(calib / f"s{i}.npy")} for i in (4, 9)]
    checks = [random_feeds(input_specs(models / "mlp.onnx"), seed=s) for s in range(2)]
    measured = [_errors(_ort(models / "mlp.onnx", feeds), _ort(written, feeds)) for feeds in (held_out, checks)]
    assert row["sqnr_db"] == pytest.approx(min(m[0] for m in measured), abs=1e-6)
    assert row["max_abs_error"] == pytest.approx(max(m[1] for m in measured), rel=1e-6)
    assert (row["size_before"], row["size_after"]) == ((models / "mlp.onnx").stat().st_size, written.stat().st_size)
    assert "SQNR dB" in result.stdout and f"{row['sqnr_db']:.1f}" in result.stdout
    assert "NO CALIBRATION DATA" not in result.stderr
    # without --check, the floor is on the held-out samples: just above what they reach, failed, exit 1
    floor = gw("batch", "models", "--out", "high", "--quantize", "static", "--quantize-data", "calib",
               "--method", "entropy", "--min-sqnr", f"{measured[0][0] + 0.01:.3f}", "--json", cwd=tmp_path)
    assert floor.returncode == 1, floor.stderr
    (failed,) = json.loads(floor.stdout)["models"]
    assert failed["status"] == "failed" and "below min_sqnr_db" in failed["error"]
    assert not (tmp_path / "high" / "mlp.onnx").exists()
    assert failed["sqnr_db"] == pytest.approx(measured[0][0], abs=1e-6) and failed["checks"] == 0


def test_quantize_columns_appear_in_the_html_only_with_a_quantize_job(tmp_path: Path) -> None:
    models, _ = _calibration_folder(tmp_path)
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"output_dir": "out", "models": [
        {"model": str(EXAMPLE), "simplify": True},
        {"model": "models/mlp.onnx", "quantize": {"mode": "dynamic"}, "check": 1}]}))
    page = tmp_path / "summary.html"
    result = gw("batch", manifest, "--quiet", "--summary", tmp_path / "s.json", "--html", page)
    assert result.returncode == 0, result.stderr
    simplified, quantized = json.loads((tmp_path / "s.json").read_text())["models"]
    assert "quantize_mode" not in simplified and quantized["quantize_mode"] == "dynamic"
    parser = _Rows()
    parser.feed(page.read_text())
    (_, first), (_, second) = parser.rows
    assert len(first) == len(second) == 14 and first[6:11] == [""] * 5
    assert second[6:11] == ["dynamic", f"{quantized['sqnr_db']:.2f}", f"{quantized['top1_agreement']:.1%}",
                            str(quantized["size_before"]), str(quantized["size_after"])]
    plain = tmp_path / "plain.html"
    manifest.write_text(json.dumps({"output_dir": "out2", "models": [{"model": str(EXAMPLE), "simplify": True}]}))
    assert gw("batch", manifest, "--quiet", "--html", plain).returncode == 0
    assert "SQNR" not in plain.read_text()
    assert_one_line_error(gw("batch", models, "--out", tmp_path / "o", "--method", "entropy"),
                          "options of --quantize MODE")
    assert_one_line_error(gw("batch", models, "--out", tmp_path / "o", "--quantize", "static", "--quantize-data",
                             tmp_path / "none"), "--quantize-data", "no such folder")
