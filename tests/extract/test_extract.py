"""extract: .npy files + manifest reproduce the model's tensors; refusals leave the folder as it was.

The manifest is tested in test_manifest.py, the C header in test_c_header.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import GraphwrightError
from graphwright.extract import extract
from graphwright.ir import constant_value, constant_values

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TFLITE = EXAMPLES / "small_cnn.tflite"


def _reassemble(folder: Path) -> dict[str, np.ndarray]:
    doc = json.loads((folder / "manifest.json").read_text())
    out = {}
    for c in doc["constants"]:
        array = np.load(folder / c["file"], allow_pickle=False)
        assert str(array.dtype) == c["dtype"] and list(array.shape) == c["shape"]
        out[c["name"]] = array
    return out


@pytest.mark.parametrize("path", [TFLITE, EXAMPLES / "small_cnn.onnx", EXAMPLES / "small_cnn.pb"],
                         ids=["tflite", "onnx", "graphdef"])
def test_npy_files_reassemble_every_constant_exactly(path: Path, tmp_path: Path) -> None:
    manifest = extract(path, tmp_path / "out")
    got = _reassemble(tmp_path / "out")
    graph = gw.load(path).graph
    expected = {v.name: constant_value(v).numpy() for v in constant_values(graph)}  # type: ignore[union-attr]
    assert set(got) == set(expected) and len(manifest.constants) == len(expected)
    for name, array in expected.items():
        assert got[name].dtype == array.dtype
        np.testing.assert_array_equal(got[name], array)
    roles = {u["role"] for c in manifest.constants for u in c.uses}
    assert "weights" in roles and ("bias" in roles or path.suffix == ".onnx")


def test_refuses_a_non_empty_folder_and_unknown_formats(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(GraphwrightError, match="not an empty folder"):
        extract(TFLITE, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    with pytest.raises(GraphwrightError, match="unknown extract format"):
        extract(TFLITE, tmp_path / "new", format="hex")
    assert not (tmp_path / "new").exists()
