"""The calibration workflow end to end: quantize_nodes -> insert_logging -> calibrate -> freeze -> TensorFlow."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphwright import VerificationError
from graphwright.calibrate import calibrate, random_samples
from graphwright.cli import calibrate_cmd
from graphwright.ir import DType
from graphwright.runtime import InputSpec, input_specs
from tests.cli.test_diff_cmd import _run_in_pty
from tests.transforms.quantize._helpers import EXAMPLE, EXAMPLE_INPUTS, EXAMPLE_OUTPUTS, feeds, ours

LOGGING = 'insert_logging(op=RequantizationRange, show_name=true, message="__requant_min_max:")'
SPEC = InputSpec("input", DType.FLOAT32, (1, 32, 32, 3))


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    calibrate_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.run(args)


def _prepare(tmp_path: Path) -> tuple[Path, Path]:
    quantized, _ = ours(EXAMPLE, "quantize_weights(minimum_size=16) quantize_nodes", ["input"], EXAMPLE_OUTPUTS)
    (tmp_path / "quantized.pb").write_bytes(quantized)
    logged, _ = ours(tmp_path / "quantized.pb", LOGGING, ["input"], EXAMPLE_OUTPUTS)
    (tmp_path / "logged.pb").write_bytes(logged)
    return tmp_path / "quantized.pb", tmp_path / "logged.pb"


@pytest.mark.tf
def test_whole_chain_runs_in_tensorflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    oracle = pytest.importorskip("tests.tf_oracle")
    quantized, logged = _prepare(tmp_path)
    log = tmp_path / "ranges.log"
    assert _cli(["calibrate", str(logged), str(log), "--inputs", "input", "--outputs", "Identity",
                 "--num", "8", "--seed", "3"]) == 0
    assert "ran 8 sample(s); wrote 160 range line(s) for 20 node(s)" in capsys.readouterr().out
    lines = log.read_text().splitlines()
    assert len(lines) == 160 and all("__print__;__requant_min_max:[" in ln for ln in lines)
    frozen, report = ours(quantized, f"freeze_requantization_ranges(min_max_log_file={log})",
                          ["input"], EXAMPLE_OUTPUTS)
    assert report.steps[0].stats == {"ranges_frozen": 20, "ranges_left": 0}
    assert oracle.op_histogram(frozen)["RequantizationRange"] == 0
    x = feeds(EXAMPLE_INPUTS, seed=11)
    ref = oracle.run_graphdef(EXAMPLE.read_bytes(), x, EXAMPLE_OUTPUTS)[0]
    dynamic = oracle.run_graphdef(quantized.read_bytes(), x, EXAMPLE_OUTPUTS)[0]
    got = oracle.run_graphdef(frozen, x, EXAMPLE_OUTPUTS)[0]
    # calibrated on other inputs, so a little worse than measuring each run (1.5e-3), still close
    assert np.abs(got - ref).max() < 0.02 and got.argmax() == ref.argmax()
    assert np.abs(dynamic - ref).max() < 0.01


@pytest.mark.tf
def test_fallback_ranges_need_no_calibration(tmp_path: Path) -> None:
    oracle = pytest.importorskip("tests.tf_oracle")
    graph, _ = ours(EXAMPLE, "quantize_nodes(fallback_min=-8, fallback_max=8) " + LOGGING,
                    ["input"], EXAMPLE_OUTPUTS)
    assert oracle.op_histogram(graph)["Print"] == 0  # nothing to log: no RequantizationRange left
    x = feeds(EXAMPLE_INPUTS)
    got = oracle.run_graphdef(graph, x, EXAMPLE_OUTPUTS)[0]
    ref = oracle.run_graphdef(EXAMPLE.read_bytes(), x, EXAMPLE_OUTPUTS)[0]
    assert np.abs(got - ref).max() < 0.05
    (tmp_path / "g.pb").write_bytes(graph)
    with pytest.raises(VerificationError, match="has no Print nodes; run insert_logging"):
        calibrate(tmp_path / "g.pb", tmp_path / "log", random_samples([SPEC], 1, 0))


@pytest.mark.tf
def test_user_samples_from_a_directory(tmp_path: Path) -> None:
    _, logged = _prepare(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.save(data / "a.npy", rng.uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32))
    np.savez(data / "b.npz", input=rng.uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32))
    from PIL import Image

    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(data / "c.png")
    (data / "notes.txt").write_text("ignored")
    log = tmp_path / "ranges.log"
    assert _cli(["calibrate", str(logged), str(log), "--data", str(data), "--outputs", "Identity"]) == 0
    assert len(log.read_text().splitlines()) == 3 * 20


def test_cli_rejects_unknown_inputs_and_bad_counts(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="has no input 'nope'"):
        _cli(["calibrate", str(EXAMPLE), str(tmp_path / "log"), "--inputs", "nope"])
    with pytest.raises(VerificationError, match="at least 1"):
        _cli(["calibrate", str(EXAMPLE), str(tmp_path / "log"), "--num", "0"])
    with pytest.raises(VerificationError, match="has no Print nodes"):
        _cli(["calibrate", str(EXAMPLE), str(tmp_path / "log"), "--num", "1"])
    assert input_specs(EXAMPLE)[0].name == "input"
    assert not (tmp_path / "log").exists()


@pytest.mark.tf
def test_progress_reports_samples_as_they_finish_and_the_bar_is_on_a_terminal_only(tmp_path: Path) -> None:
    """``on_progress`` sees the finished-sample count rise to the total (never past it, never down);
    the command draws a bar with an ETA under a pseudo-terminal and nothing but its result line in a pipe."""
    _, logged = _prepare(tmp_path)
    seen: list[tuple[int, int]] = []
    report = calibrate(logged, tmp_path / "a.log", random_samples([SPEC], 12, 0), outputs=["Identity"],
                       on_progress=lambda done, total, what: seen.append((done, total)))
    assert report.samples == 12 and seen and seen[-1] == (12, 12)
    assert all(t == 12 for _, t in seen) and [d for d, _ in seen] == sorted({d for d, _ in seen})

    argv = [sys.executable, "-m", "graphwright.cli.main", "calibrate", str(logged), str(tmp_path / "b.log"),
            "--inputs", "input", "--outputs", "Identity", "--num", "40", "--seed", "1"]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", _run_in_pty(argv[3:], tmp_path))
    assert re.search(r"calibrating: sample [0-9]+ of 40 [━╸╺ ]+ [0-9]+/40", plain), plain[-1500:]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout + piped.stderr
    assert "calibrating" not in piped.stderr and piped.stdout.startswith("ran 40 sample(s)")
