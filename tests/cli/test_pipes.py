"""The command line in pipes and scripts: nothing cut when stdout is not a terminal, a closed pipe
ends quietly, one line on stderr for errors and nothing for success, usage errors exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cli import MODELS, gw

COMMAND = [sys.executable, "-m", "graphwright.cli.main"]


def _piped(*args: str) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe and no COLUMNS: what ``graphwright ... | grep`` sees."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=300)


def test_list_transforms_in_a_pipe_cuts_no_name_and_no_summary() -> None:
    result = _piped("list-transforms")
    assert result.returncode == 0 and "…" not in result.stdout
    listed = json.loads(_piped("list-transforms", "--json").stdout)
    names = [t["name"] for t in listed["transforms"]]
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ ")]
    for name in names:
        assert any(row.split("│")[1].strip() == name for row in rows), name
    for t in listed["transforms"]:
        if t["summary"]:
            assert t["summary"] in result.stdout, t["name"]


def test_summarize_in_a_pipe_keeps_long_tensor_names_whole() -> None:
    result = _piped("summarize", str(MODELS["tflite"]))
    assert result.returncode == 0 and "…" not in result.stdout
    detail = json.loads(_piped("summarize", str(MODELS["tflite"]), "--json").stdout)["tflite"]
    names = [t["name"] for sub in detail["subgraphs"] for t in sub["tensors"]]
    assert max(map(len, names)) > 60  # the converter's long names are what got cut or wrapped
    for name in names:
        assert name in result.stdout, name
    assert len(result.stdout.splitlines()) < 120  # no wrapping character by character (415 lines before)


def test_transform_in_a_pipe_shows_the_whole_pipeline_text(tmp_path: Path) -> None:
    pipeline = ("strip_unused_nodes(type=float, shape=\"1,32,32,3\") remove_nodes(op=Identity, op=CheckNumerics) "
                "fold_constants(ignore_errors=true) fold_batch_norms fold_old_batch_norms sort_by_execution_order")
    result = _piped("transform", str(MODELS["graphdef"]), str(tmp_path / "o.pb"), "--outputs", "Identity",
                    "--transforms", pipeline)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert "remove_nodes(op=Identity, op=CheckNumerics)" in result.stdout
    assert result.stderr == ""  # no progress residue (a blank line before) when stderr is not a terminal


@pytest.mark.parametrize("args", [["summarize", "--json", "{tflite}"], ["list-transforms"],
                                  ["summarize", "{tflite}"]])
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    argv = [a.format(tflite=MODELS["tflite"]) for a in args]
    proc = subprocess.Popen([*COMMAND, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written (``| head`` that exited)
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and err == b""


def test_usage_errors_exit_2_with_the_subcommand_s_help() -> None:
    result = gw("summarize")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "summarize needs a model file" in result.stderr
    result = gw("transform", MODELS["graphdef"], "o.pb", "--transforms", "strip_unused_nodes", "sort_by_execution_order")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "quote the whole pipeline: --transforms 'strip_unused_nodes sort_by_execution_order'" in result.stderr
    assert "see 'graphwright transform --help'" in result.stderr


def test_version() -> None:
    from importlib import metadata

    result = gw("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"graphwright {metadata.version('graphwright')}"


def test_every_positional_argument_has_help() -> None:
    from graphwright.cli.main import _subparsers, build_parser

    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if not action.option_strings:
                assert action.help, f"graphwright {name}: positional {action.dest!r} has no help"


def test_errors_name_tensorflow_graphdef_not_the_proto_package(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("garbage: 1\n")
    result = gw("summarize", bad)
    assert result.returncode == 2 and "tensorboard" not in result.stderr
    assert "TensorFlow GraphDef" in result.stderr
