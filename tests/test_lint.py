"""The code base stays clean under the project's ruff configuration (pyproject.toml [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_reports_nothing() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "src", "tests",
                           "benchmarks", "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
