"""The CLI imports only the module of the command it runs (``graphwright simplify`` should not pay
for the TFLite schema and the quantizer), and its table names every command the full parser has."""

from __future__ import annotations

import subprocess
import sys

from graphwright.cli.main import COMMANDS, _subparsers, build_parser


def test_every_command_is_in_the_table_and_builds_alone() -> None:
    full = _subparsers(build_parser())
    assert list(full) == list(COMMANDS)
    for name in COMMANDS:
        assert name in _subparsers(build_parser([name, "x"]))


def test_simplify_imports_neither_the_tflite_schema_nor_the_quantizer() -> None:
    code = ("import sys; from graphwright.cli.main import build_parser; build_parser(['--debug', 'simplify', 'a.onnx']);"
            "print(sorted(m for m in ('ai_edge_litert', 'graphwright.quantize.driver', 'graphwright.formats.tflite',"
            " 'graphwright.batch', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code_all = code.replace("['--debug', 'simplify', 'a.onnx']", "[]")
    out_all = subprocess.run([sys.executable, "-c", code_all], capture_output=True, text=True, check=True).stdout
    assert "graphwright.formats.tflite" in out_all  # the check can fail: the full parser does import it
