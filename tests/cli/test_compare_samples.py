"""``graphwright compare A B`` over a sample set (``--num``, ``--data``) and ``--shards``: the example CNN
against its weight-rounded copy; two worker processes print the JSON one process prints, sample 0 of the
set is the single run of ``--seed``, and a folder of samples gives what the same arrays give by ``--input``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_cli import MODELS, assert_one_line_error, gw


@pytest.fixture(scope="module")
def rounded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rounded") / "rounded.onnx"
    assert gw("transform", MODELS["onnx"], out, "--transforms", "round_weights(num_steps=16)").returncode == 0
    return out


def _json(*args: object) -> tuple[int, dict]:
    result = gw("compare", MODELS["onnx"], *args, "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_two_shards_print_the_one_process_report(rounded: Path) -> None:
    code, one = _json(rounded, "--num", "24", "--seed", "7")
    assert (code, one["samples"]) == (1, 24)
    assert _json(rounded, "--num", "24", "--seed", "7", "--shards", "2") == (code, one)
    (logits,) = one["outputs"]
    assert logits["samples"] == 24 and logits["elements"] == 24 * 10
    assert 0 < logits["mean_abs_error"] < logits["max_abs_error"]
    assert sum(logits["abs_error_histogram"]) == logits["elements"]
    assert 0 < logits["top1_agreement"] <= 1
    # one sample: the plain single run of the same seed
    _, first = _json(rounded, "--num", "1", "--seed", "7")
    _, plain = _json(rounded, "--seed", "7")
    assert first["outputs"][0]["max_abs_error"] == plain["outputs"][0]["max_abs_error"]
    assert first["outputs"][0]["mismatched"] == plain["outputs"][0]["mismatched"]


def test_a_folder_of_samples_is_the_same_as_each_given_by_input(rounded: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    for i, array in enumerate(arrays):
        np.save(tmp_path / f"s{i}.npy", array)
    _, folder = _json(rounded, "--data", tmp_path, "--shards", "2")
    singles = [_json(rounded, "--input", f"input={tmp_path / f's{i}.npy'}")[1]["outputs"][0] for i in range(3)]
    (row,) = folder["outputs"]
    assert row["samples"] == 3
    assert row["max_abs_error"] == max(s["max_abs_error"] for s in singles)
    assert row["mismatched"] == sum(s["mismatched"] for s in singles)


def test_table_and_mistakes(rounded: Path, tmp_path: Path) -> None:
    table = gw("compare", MODELS["onnx"], rounded, "--num", "3")
    assert table.returncode == 1 and "mean abs err" in table.stdout and "3 samples" in table.stdout
    (line,) = [ln for ln in table.stdout.splitlines() if ln.startswith("|a-b| of logits: ")]
    assert sum(int(n) for n in re.findall(r": (\d+)", line)) == 3 * 10  # every element in one bin
    assert_one_line_error(gw("compare", MODELS["onnx"], rounded, "--num", "0"), "--num needs at least 1")
    assert_one_line_error(gw("compare", MODELS["onnx"], rounded, "--shards", "0"), "--shards needs at least 1")
    assert_one_line_error(gw("compare", MODELS["onnx"], rounded, "--num", "2", "--input", "x.npy"), "--input is for one run")
    assert_one_line_error(gw("compare", MODELS["onnx"], rounded, "--data", tmp_path / "none"), "does not exist")
