"""Sparse constants and DENSIFY against LiteRT's reference kernels, on models the converter
made sparse (tests/models/build_tflite_sparse.py); densification edge cases; round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import VerificationError
from graphwright.formats.tflite.sparsity import DimMetadata, SparseForm, densify, sparse_form
from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter
from tests.models import get_model

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow

NAMES = ("pruned_float", "pruned_int8")


def _sparse_values(path: Path) -> list[gw.ir.Value]:
    graph = gw.load(path).graph
    return [v for v in graph.initializers if sparse_form(v) is not None]


@pytest.mark.parametrize("name", NAMES)
def test_every_tensor_matches_litert_reference(name: str) -> None:
    info = get_model("tflite_sparse", name)
    assert info.metadata["op_histogram"]["DENSIFY"] >= 2
    assert assert_matches_reference(info) >= 6 * 6


def test_the_corpus_holds_csr_and_block_sparsity() -> None:
    """What the converter wrote: CSR levels with narrow index vectors behind DENSIFY (both modes)
    and, in float, a 1x4 block-sparse weight read by FULLY_CONNECTED directly."""
    for name in NAMES:
        values = _sparse_values(get_model("tflite_sparse", name).path)
        forms = [sparse_form(v) for v in values]
        assert len(forms) == 3
        kinds = {d.indices_type for f in forms if f for d in f.dim_metadata if d.format == "SPARSE_CSR"}
        assert kinds & {"uint8", "uint16"}
        for v in values:
            dense = v.const.numpy()
            stored = v.const.source.nbytes // dense.dtype.itemsize
            assert dense.shape == v.const.shape and np.count_nonzero(dense) <= stored < dense.size
    graph = gw.load(get_model("tflite_sparse", "pruned_float").path).graph
    direct = [n for n in graph if n.op == "FULLY_CONNECTED" and sparse_form(n.inputs[1]) is not None]
    assert len(direct) == 1
    form = sparse_form(direct[0].inputs[1])
    assert form is not None and form.block_map == (1,) and form.dim_metadata[-1] == DimMetadata("DENSE", 4)


@pytest.mark.parametrize("name", NAMES)
def test_written_file_keeps_the_sparse_form(name: str, tmp_path: Path) -> None:
    path = get_model("tflite_sparse", name).path
    out = tmp_path / "again.tflite"
    gw.save(gw.load(path), out)
    info = get_model("tflite_sparse", name)
    feeds = feeds_for(info, 2)
    theirs = execute(path, dict(feeds), Job(backend="litert-ref")).outputs
    again = execute(out, dict(feeds), Job(backend="litert-ref")).outputs
    for key, array in theirs.items():
        np.testing.assert_array_equal(again[key], array)
    before = {v.name: (sparse_form(v), v.const.numpy()) for v in _sparse_values(path)}
    after = {v.name: (sparse_form(v), v.const.numpy()) for v in _sparse_values(out)}
    assert before.keys() == after.keys()
    for key, (form, dense) in before.items():
        assert after[key][0].to_json() == form.to_json()
        np.testing.assert_array_equal(after[key][1], dense)


def _csr(segments: list[int], indices: list[int]) -> DimMetadata:
    return DimMetadata("SPARSE_CSR", 0, np.asarray(segments, np.int64), np.asarray(indices, np.int64), "int32", "int32")


def test_densify_blocks_and_column_major_traversal() -> None:
    # a 4x4 matrix in 2x2 blocks, block rows dense, block columns CSR, blocks dense inside
    form = SparseForm((0, 1, 2, 3), (0, 1), (DimMetadata("DENSE", 2), _csr([0, 1, 2], [1, 0]),
                                            DimMetadata("DENSE", 2), DimMetadata("DENSE", 2)))
    got = densify(form, np.arange(1, 9, dtype=np.int8), (4, 4))
    expected = np.zeros((4, 4), np.int8)
    expected[0:2, 2:4] = [[1, 2], [3, 4]]
    expected[2:4, 0:2] = [[5, 6], [7, 8]]
    np.testing.assert_array_equal(got, expected)
    # columns first: traversal order (1, 0) stores the matrix column by column
    form = SparseForm((1, 0), (), (DimMetadata("DENSE", 3), _csr([0, 1, 1, 3], [1, 0, 1])))
    got = densify(form, np.asarray([5.0, 6.0, 7.0], np.float32), (2, 3))
    np.testing.assert_array_equal(got, [[0, 0, 6], [5, 0, 7]])


def test_densify_positions_past_short_segments_have_no_values() -> None:
    """LiteRT visits a CSR level from position p only when p + 1 is inside array_segments."""
    form = SparseForm((0, 1), (), (DimMetadata("DENSE", 3), _csr([0, 1], [2])))
    np.testing.assert_array_equal(densify(form, np.asarray([7], np.int8), (3, 3)), [[0, 0, 7], [0, 0, 0], [0, 0, 0]])
    empty = SparseForm((0, 1), (), (DimMetadata("DENSE", 3), _csr([], [])))
    assert not densify(empty, np.zeros(0, np.int8), (3, 3)).any()


@pytest.mark.parametrize(("form", "message"), [
    (SparseForm((0, 1), (), (DimMetadata("DENSE", 2), _csr([0, 1, 2], [0, 7]))), "outside dimension 1"),
    (SparseForm((0, 1), (), (DimMetadata("DENSE", 2), _csr([0, 3, 2], [0, 1, 1]))), "non-decreasing"),
    (SparseForm((0, 1), (), (DimMetadata("DENSE", 2), _csr([0, 2, 4], [0, 1, 0, 1]))), "3 are stored"),
    (SparseForm((1, 1), (), (DimMetadata("DENSE", 2), _csr([0, 1, 2], [0, 1]))), "do not describe"),
    (SparseForm((0, 1), (), (DimMetadata("DENSE", 1 << 20), _csr([0], []))), "more positions"),
])
def test_malformed_metadata_is_refused(form: SparseForm, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        densify(form, np.ones(3, np.float32), (2, 2))


def test_interpreter_refuses_undensifiable_metadata_in_one_line() -> None:
    model = gw.load(get_model("tflite_sparse", "pruned_int8").path)
    value = next(v for v in model.graph.initializers if sparse_form(v) is not None)
    indices = value.meta["tflite.sparsity"].dimMetadata[-1].arrayIndices  # read when first densified
    indices.values = [250] * len(indices.values)
    with pytest.raises(VerificationError, match=r"DENSIFY .*points outside dimension") as e:
        Interpreter(model)
    assert "\n" not in str(e.value)


def test_densify_refuses_a_dense_input() -> None:
    model = gw.load(get_model("tflite_sparse", "pruned_int8").path)
    node = next(n for n in model.graph if n.op == "DENSIFY")
    del node.inputs[0].meta["tflite.sparsity"]
    with pytest.raises(VerificationError, match="not a sparse constant"):
        Interpreter(model)


def test_feeds_run_twice_give_the_same_outputs() -> None:
    """DENSIFY's output is persistent in LiteRT; here the densified constant is reused run after run."""
    info = get_model("tflite_sparse", "pruned_int8")
    interp = Interpreter(info.path)
    feeds = feeds_for(info, 3)
    first = interp.run(feeds)
    np.testing.assert_array_equal(interp.run(feeds)[info.outputs[0]], first[info.outputs[0]])


def test_a_replaced_sparse_constant_is_not_written_with_stale_metadata(tmp_path: Path) -> None:
    model = gw.load(get_model("tflite_sparse", "pruned_int8").path)
    value = next(v for v in model.graph.initializers if sparse_form(v) is not None)
    value.const = gw.ir.Tensor.from_numpy(value.const.numpy() * 0)
    with pytest.raises(gw.errors.ModelSaveError, match="stored sparse and its values were replaced"):
        gw.save(model, tmp_path / "x.tflite")
