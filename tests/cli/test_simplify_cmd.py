"""``graphwright simplify --fold-budget``: the total budget of folding, as users type it."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from tests.transforms.fold._bombs import node_names
from tests.transforms.fold.test_onnx_fold_constants import _expands

from .test_cli import gw


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
