"""``graphwright extract`` on sparse TFLite models (the converter's EXPERIMENTAL_SPARSITY):
dense ``.npy`` files equal to what LiteRT's DENSIFY computes, the sparse form in the manifest
(rebuilt into the dense tensor from the manifest alone), the C header's sparse arrays."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.cli.main import main
from graphwright.runtime.execute import Job, execute
from tests.models import get_model

pytestmark = pytest.mark.slow

NAMES = ("pruned_float", "pruned_int8")


def _densify_from_manifest(sparsity: dict, values: np.ndarray, shape: list[int]) -> np.ndarray:
    """The dense tensor from the manifest's sparse form, written from the TFLite schema's
    description (depth-first over the traversed dimensions; blocks refine their dimension)."""
    order, block_map, dims = sparsity["traversal_order"], sparsity["block_map"], sparsity["dim_metadata"]
    rank = len(shape)
    blocks = [dims[order[rank + k]]["dense_size"] for k in range(len(block_map))]
    dense = np.zeros(shape, values.dtype)
    taken = 0

    def walk(level: int, position: int, coords: list[int]) -> None:
        nonlocal taken
        if level == len(order):
            index = [0] * rank
            for lv in range(rank):
                index[order[lv]] = coords[lv]
            for lv in range(rank, len(order)):
                k = order[lv] - rank
                index[block_map[k]] = index[block_map[k]] * blocks[k] + coords[lv]
            dense[tuple(index)] = values[taken]
            taken += 1
            return
        dim = dims[level]
        if dim["format"] == "DENSE":
            for i in range(dim["dense_size"]):
                walk(level + 1, position * dim["dense_size"] + i, [*coords, i])
        else:
            segments, indices = dim["array_segments"], dim["array_indices"]
            for i in range(segments[position], segments[position + 1]):
                walk(level + 1, i, [*coords, indices[i]])

    walk(0, 0, [])
    assert taken == values.size
    return dense


@pytest.mark.parametrize("name", NAMES)
def test_cli_extracts_dense_values_and_the_sparse_form(name: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    info = get_model("tflite_sparse", name)
    out = tmp_path / "out"
    assert main(["extract", str(info.path), str(out)]) == 0
    assert "quantized layers" in capsys.readouterr().out
    doc = json.loads((out / "manifest.json").read_text())
    sparse = [c for c in doc["constants"] if "sparsity" in c]
    assert len(sparse) == 3
    # LiteRT's own densification: DENSIFY's outputs (and the weights the block-sparse layer reads)
    graph = gw.load(info.path).graph
    densified = {n.inputs[0].name: n.outputs[0].name for n in graph if n.op == "DENSIFY"}
    feeds = {k: np.zeros(v, np.dtype(info.input_dtypes[k])) for k, v in info.inputs.items()}
    theirs = execute(info.path, feeds, Job(backend="litert-ref", outputs=list(densified.values()))).outputs
    for c in sparse:
        dense = np.load(out / c["file"])
        values = np.load(out / c["sparsity"]["values_file"])
        assert values.size == c["sparsity"]["values_count"] and values.dtype == dense.dtype
        assert any(d["format"] == "SPARSE_CSR" for d in c["sparsity"]["dim_metadata"])
        np.testing.assert_array_equal(_densify_from_manifest(c["sparsity"], values, c["shape"]), dense)
        if c["name"] in densified:
            np.testing.assert_array_equal(dense, theirs[densified[c["name"]]])
        assert {u["role"] for u in c["uses"]} <= {"input", "weights"}
    if name == "pruned_float":
        assert any(c["sparsity"]["block_map"] == [1] for c in sparse)


def test_c_header_holds_the_sparse_arrays(tmp_path: Path) -> None:
    info = get_model("tflite_sparse", "pruned_int8")
    assert main(["extract", str(info.path), str(tmp_path / "c"), "--format", "c"]) == 0
    header = (tmp_path / "c" / "model_data.h").read_text()
    doc = json.loads((tmp_path / "c" / "manifest.json").read_text())
    for c in doc["constants"]:
        if "sparsity" in c:
            assert f"{c['c_name']}_sparse_values[{c['sparsity']['values_count']}]" in header
            assert f"{c['c_name']}_traversal_order" in header
    program = tmp_path / "check.c"
    program.write_text('#include "c/model_data.h"\nint main(void) { return 0; }\n')
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-Wno-unused-const-variable", "-I", str(tmp_path), "-o",
                    str(tmp_path / "check"), str(program)], check=True)


def test_malformed_sparsity_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = gw.load(get_model("tflite_sparse", "pruned_int8").path)
    value = next(v for v in model.graph.initializers if "tflite.sparsity" in v.meta)
    indices = value.meta["tflite.sparsity"].dimMetadata[-1].arrayIndices
    indices.values = np.full(len(indices.values), 250)  # past the last dimension
    bad = tmp_path / "bad.tflite"
    gw.save(model, bad)
    assert main(["extract", str(bad), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot extract" in err and "\n" not in err and "bug" not in err
    assert not (tmp_path / "out").exists()
