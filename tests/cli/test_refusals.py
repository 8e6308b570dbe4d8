"""Why a rewrite was refused reaches the user: ``transform`` and ``simplify``, as text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from tests.transforms.fuse._graphs_onnx import layer_norm

from .test_cli import gw

REASON = ("opset 16 < 17: LayerNormalization is not available (target=onnxruntime emits onnxruntime's own "
          "LayerNormalization)")
# the full chain, then its gamma-only and bare sub-chains: each rule set refuses at its own root
EXPECTED = [{"rule": "layer_norm", "node": "y_node", "op": "Add", "reason": REASON},
            {"rule": "layer_norm_gamma", "node": "s_node", "op": "Mul", "reason": REASON},
            {"rule": "layer_norm_bare", "node": "n_node", "op": "Div", "reason": REASON}]


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "ln16.onnx"
    onnx.save(layer_norm(opset=16), path)
    return path


def test_transform_prints_the_refusal_count_and_reason(tmp_path: Path) -> None:
    src = _model(tmp_path)
    result = gw("transform", src, tmp_path / "out.onnx", "--transforms", "fuse_layer_norm")
    assert result.returncode == 0, result.stderr
    assert f"fuse_layer_norm: 3 matches left alone: 3x {REASON}" in result.stdout
    assert "layer_norm at y_node" not in result.stdout  # the list only with --verbose
    verbose = gw("transform", src, tmp_path / "out2.onnx", "--transforms", "fuse_layer_norm", "--verbose")
    for refusal in EXPECTED:
        assert f"  {refusal['rule']} at {refusal['node']} ({refusal['op']}): {REASON}" in verbose.stdout


def test_transform_json_lists_every_refusal(tmp_path: Path) -> None:
    result = gw("transform", _model(tmp_path), tmp_path / "out.onnx", "--transforms", "fuse_layer_norm", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (step,) = report["steps"]
    assert step["call"] == "fuse_layer_norm" and step["changed"] is False
    assert step["refusals"] == EXPECTED
    assert report["nodes_before"] == report["nodes_after"] == 10


def test_simplify_shows_refusals_in_text_and_json(tmp_path: Path) -> None:
    src = _model(tmp_path)
    text = gw("simplify", src, tmp_path / "s.onnx")
    assert text.returncode == 0, text.stderr
    assert f"fuse_layer_norm: 3 matches left alone: 3x {REASON}" in text.stdout
    result = gw("simplify", src, tmp_path / "s2.onnx", "--json")
    refusals = json.loads(result.stdout)["refusals"]
    assert refusals["fuse_layer_norm"] == EXPECTED
