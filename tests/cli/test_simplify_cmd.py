"""``graphwright simplify`` through its argparse module (cli/main.py wiring is the lead's), and
``--fold-budget``, the total budget of folding, as users type it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphwright.cli import simplify_cmd
from graphwright.cli.main import _Parser
from graphwright.errors import TransformError
from graphwright.runtime import input_specs, run
from graphwright.verify import random_feeds
from tests.transforms.fold._bombs import node_names
from tests.transforms.fold.test_onnx_fold_constants import _expands

from .test_cli import gw

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.onnx"


def _main(argv: list[str]) -> int:
    parser = _Parser(prog="graphwright")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    simplify_cmd.add_parser(sub)
    args = parser.parse_args(argv)
    return int(args.run(args))


def test_fold_budget_leaves_the_nodes_over_it_in_place_and_says_so(tmp_path: Path) -> None:
    src = tmp_path / "expands.onnx"
    onnx.save(_expands(3, 1000), src)  # three 3.9 KB Expands
    result = gw("simplify", src, tmp_path / "small.onnx", "--fold-budget", "5KB")
    assert result.returncode == 0, result.stderr
    assert ("onnx_fold_constants: left 2 node(s) unfolded, their results over the total budget of 5.0 KB "
            "(--fold-budget / fold_budget): 'expand1' (Expand, 3.9 KB), 'expand2' (Expand, 3.9 KB)") in result.stdout
    assert {"expand1", "expand2"} <= node_names(tmp_path / "small.onnx")
    report = json.loads(gw("simplify", src, tmp_path / "all.onnx", "--json").stdout)
    assert not any("budget" in w for w in report["warnings"])
    assert not {"expand0", "expand1", "expand2"} & node_names(tmp_path / "all.onnx")


def test_fold_budget_must_be_a_size(tmp_path: Path) -> None:
    src = tmp_path / "expands.onnx"
    onnx.save(_expands(1, 10), src)
    result = gw("simplify", src, tmp_path / "out.onnx", "--fold-budget", "lots")
    assert result.returncode == 2
    assert "cannot read size 'lots'" in result.stderr


def test_simplify_writes_a_smaller_equivalent_model_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.onnx"
    assert _main(["simplify", str(EXAMPLE), str(out), "--check", "2"]) == 0
    text = capsys.readouterr().out
    assert "nodes" in text and "file size" in text and "every output within tolerance" in text
    assert "BatchNormalization" in text
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    feeds = random_feeds(input_specs(EXAMPLE), seed=3)
    a, b = run(EXAMPLE, feeds), run(out, feeds)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-5)


def test_json_report_and_onnxsim_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.onnx"
    argv = ["simplify", str(EXAMPLE), str(out), "--json", "--skip-fuse-bn", "--no-large-tensor",
            "--overwrite-input-shape", "input:1,3,32,32", "--save-as-external-data"]
    assert _main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["after"]["ops"].get("BatchNormalization") == report["before"]["ops"].get("BatchNormalization")
    assert report["converged"] and report["after"]["file_bytes"] == out.stat().st_size
    assert (tmp_path / "s.onnx.data").exists()


def test_skip_optimization_without_names_skips_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.onnx"
    assert _main(["simplify", str(EXAMPLE), str(out), "--skip-optimization", "--skip-constant-folding", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["after"]["ops"] == report["before"]["ops"]


def test_failed_check_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.onnx"
    assert _main(["simplify", str(EXAMPLE), str(out), "--check", "1", "--rtol", "0", "--atol", "0"]) == 1
    assert "check failed" in capsys.readouterr().out and not out.exists()


def test_bad_input_is_a_graphwright_error(tmp_path: Path) -> None:
    with pytest.raises(TransformError, match="refusing to overwrite the input"):
        _main(["simplify", str(EXAMPLE), str(EXAMPLE)])
    with pytest.raises(TransformError, match="names input 'nope'"):
        _main(["simplify", str(EXAMPLE), str(tmp_path / "o.onnx"), "--overwrite-input-shape", "nope:1,2"])
