"""``graphwright extract`` through a local parser (the lead wires it into cli/main.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from graphwright.cli import extract_cmd
from graphwright.cli.main import build_parser

TFLITE = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.tflite"


def _main(argv: list[str]) -> int:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "extract" not in sub.choices:
        extract_cmd.add_parser(sub)
    args = parser.parse_args(argv)
    return int(args.run(args))


def test_extract_npy_and_c(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["extract", str(TFLITE), str(tmp_path / "npy")]) == 0
    doc = json.loads((tmp_path / "npy" / "manifest.json").read_text())
    assert doc["format"] == "npy" and all((tmp_path / "npy" / c["file"]).is_file() for c in doc["constants"])
    assert "quantized layers" in capsys.readouterr().out
    assert _main(["extract", str(TFLITE), str(tmp_path / "c"), "--format", "c"]) == 0
    assert (tmp_path / "c" / "model_data.h").read_text().count("static const") > len(doc["constants"])
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["header"] == "model_data.h"
    # an existing, non-empty folder is replaced only with --force
    with pytest.raises(Exception, match="not an empty folder"):
        _main(["extract", str(TFLITE), str(tmp_path / "c")])
    assert _main(["extract", str(TFLITE), str(tmp_path / "c"), "--force"]) == 0
    assert not (tmp_path / "c" / "model_data.h").exists()
