"""Sparse TFLite tensors: the sparsity metadata as plain values, and densification.

A sparse constant stores only its kept values (in traversal order) plus
``SparsityParameters``: ``traversal_order`` (the order its dimensions are walked,
block dimensions last), ``block_map`` (which original dimension each block
dimension splits) and one ``DimensionMetadata`` per traversed dimension —
``DENSE`` (all ``dense_size`` coordinates) or ``SPARSE_CSR`` (``array_segments``
and ``array_indices``, stored as int32, uint16 or uint8 vectors).  The reader keeps
the schema object (``value.meta["tflite.sparsity"]``, which the writer re-emits
with the stored values unchanged) and gives the constant its dense values through
:func:`densify`.  O(dense size + stored values), vectorized per level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ir import DType, Tensor, Value
from . import _schema as S
from .carried import TFLiteBuffer

__all__ = ["DENSE", "SPARSE_CSR", "DimMetadata", "SparseForm", "densify", "sparse_form", "stored_values"]

DENSE, SPARSE_CSR = S.fb.DimensionType.DENSE, S.fb.DimensionType.SPARSE_CSR
_VECTOR_NAMES = {v: k for k, v in S.SPARSE_INDEX_VECTORS.items()}
_VECTOR_DTYPES = {"Int32Vector": "int32", "Uint16Vector": "uint16", "Uint8Vector": "uint8"}
#: the most bytes a densified constant may take (as the interpreter's other size bounds)
MAX_DENSE_BYTES = 1 << 31


@dataclass(frozen=True, slots=True)
class DimMetadata:
    """One traversed dimension: ``DENSE`` with ``dense_size``, or ``SPARSE_CSR`` with its
    ``segments``/``indices`` (int64 copies) and the vector type each is stored as."""

    format: str  # "DENSE" or "SPARSE_CSR"
    dense_size: int
    segments: np.ndarray | None = None
    indices: np.ndarray | None = None
    segments_type: str | None = None  # "int32", "uint16" or "uint8"
    indices_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.format == "DENSE":
            return {"format": "DENSE", "dense_size": self.dense_size}
        assert self.segments is not None and self.indices is not None
        return {"format": "SPARSE_CSR", "array_segments": [int(v) for v in self.segments],
                "array_segments_type": self.segments_type, "array_indices": [int(v) for v in self.indices],
                "array_indices_type": self.indices_type}


@dataclass(frozen=True, slots=True)
class SparseForm:
    """A tensor's ``SparsityParameters`` as plain values."""

    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    dim_metadata: tuple[DimMetadata, ...]

    def to_json(self) -> dict[str, Any]:
        return {"traversal_order": list(self.traversal_order), "block_map": list(self.block_map),
                "dim_metadata": [d.to_json() for d in self.dim_metadata]}


def sparse_form(value: Value) -> SparseForm | None:
    """The sparsity of a tensor read from a ``.tflite`` file, or None when it is dense.
    Raises ``ValueError`` on metadata no runtime could read (missing fields, bad formats)."""
    params = value.meta.get("tflite.sparsity")
    if params is None:
        return None
    where = f"sparse tensor {value.name!r}"
    if params.traversalOrder is None or params.dimMetadata is None:
        raise ValueError(f"{where} lacks its traversal order or dimension metadata")
    dims = []
    for i, dm in enumerate(params.dimMetadata):
        if dm.format == DENSE:
            dims.append(DimMetadata("DENSE", int(dm.denseSize)))
        elif dm.format == SPARSE_CSR:
            seg_type, segments = _index_vector(dm.arraySegmentsType, dm.arraySegments, where, i, "segments")
            idx_type, indices = _index_vector(dm.arrayIndicesType, dm.arrayIndices, where, i, "indices")
            dims.append(DimMetadata("SPARSE_CSR", int(dm.denseSize), segments, indices, seg_type, idx_type))
        else:
            raise ValueError(f"{where}: dimension {i} has format {dm.format}, neither DENSE nor SPARSE_CSR")
    block_map = () if params.blockMap is None else tuple(int(b) for b in params.blockMap)
    return SparseForm(tuple(int(t) for t in params.traversalOrder), block_map, tuple(dims))


def stored_values(tensor: Tensor) -> np.ndarray:
    """A sparse constant's stored values (in traversal order) as its buffer holds them."""
    if not isinstance(tensor.source, TFLiteBuffer):
        raise ValueError(f"sparse tensor {tensor.name!r} has no buffer")
    np_type = tensor.dtype.numpy
    if np_type is None or tensor.dtype is DType.STRING:
        raise ValueError(f"sparse tensor {tensor.name!r} has type {tensor.dtype.value}, which cannot be densified")
    data, itemsize = tensor.source.data, np.dtype(np_type).itemsize
    return data[:data.size - data.size % itemsize].view(np.dtype(np_type).newbyteorder("<"))


def _index_vector(kind: int, vector: Any, where: str, dim: int, what: str) -> tuple[str, np.ndarray]:
    name = _VECTOR_NAMES.get(int(kind))
    if name not in _VECTOR_DTYPES or vector is None:
        raise ValueError(f"{where}: sparse dimension {dim} has no array {what}")
    values = vector.values if vector.values is not None else ()
    return _VECTOR_DTYPES[name], np.asarray(values, np.int64).reshape(-1)


def densify(form: SparseForm, stored: np.ndarray, shape: tuple[int, ...], where: str = "sparse tensor") -> np.ndarray:
    """The dense tensor of ``shape`` whose kept values ``stored`` are laid out by ``form``,
    as LiteRT's sparsity FormatConverter fills it (DENSIFY and the sparse kernels):

    * the traversed dimensions are walked depth-first in ``traversal_order``; a DENSE level
      visits coordinates ``0..dense_size-1``, a SPARSE_CSR level reached from position ``p``
      of the level above visits ``array_indices[i]`` for ``i`` in
      ``array_segments[p]..array_segments[p+1]-1`` (none when ``p+1`` is past the segments),
      and the position it hands down is ``p·dense_size + coordinate`` (DENSE) or ``i`` (CSR);
    * each complete path takes the next stored value; the k-th block dimension (listed last,
      of size the ``dense_size`` of the dimension metadata at ``traversal_order[rank + k]``)
      refines original dimension ``block_map[k]``: ``coordinate·block_size + block coordinate``;
    * everything not visited is zero.

    Metadata whose paths would read past the stored values or write outside ``shape`` (where
    the C code has undefined behaviour) raises ``ValueError``.
    """
    rank, total = len(shape), len(form.traversal_order)
    order, block_map, dims = form.traversal_order, form.block_map, form.dim_metadata
    if len(dims) != total or sorted(order) != list(range(total)) or total != rank + len(block_map):
        raise ValueError(f"{where}: traversal order {list(order)}, block map {list(block_map)} and "
                         f"{len(dims)} dimension metadata do not describe a rank-{rank} tensor")
    if any(o >= rank for o in order[:rank]) or any(not 0 <= b < rank for b in block_map):
        raise ValueError(f"{where}: block dimensions must be traversed last and split dimensions of {list(shape)}")
    dense_size = int(np.prod(shape, dtype=np.int64))
    if dense_size * stored.dtype.itemsize > MAX_DENSE_BYTES:
        raise ValueError(f"{where}: its dense shape {list(shape)} is over {MAX_DENSE_BYTES >> 30} GiB")
    block_size = _block_sizes(form, rank)
    # level by level, every path in depth-first order: its coordinate per level and its position
    position = np.zeros(1, np.int64)
    coords: list[np.ndarray] = []
    for level, dm in enumerate(dims):
        if dm.format == "DENSE":
            size = max(dm.dense_size, 0)
            if len(position) * size > dense_size:
                raise ValueError(f"{where}: its dimension metadata visits more positions than {list(shape)} has")
            child = np.tile(np.arange(size, dtype=np.int64), len(position))
            parent = np.repeat(np.arange(len(position)), size)
            position = position[parent] * size + child
            coords = [c[parent] for c in coords] + [child]
            continue
        assert dm.segments is not None and dm.indices is not None
        seg, idx = dm.segments, dm.indices
        if np.any(seg < 0) or np.any(np.diff(seg) < 0):
            raise ValueError(f"{where}: array_segments of dimension {level} are not a non-decreasing count")
        has = position + 1 < len(seg)  # a position past the segments has no children
        safe = np.where(has, position, 0)
        bounds = np.append(seg, np.zeros(2, np.int64))  # readable at safe and safe + 1
        start = np.where(has, bounds[safe], 0)
        stop = np.where(has, np.minimum(bounds[safe + 1], len(idx)), 0)  # entries past array_indices: skipped
        count = np.maximum(stop - start, 0)
        parent = np.repeat(np.arange(len(position)), count)
        offsets = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        position = start[parent] + offsets
        coords = [c[parent] for c in coords] + [idx[position]]
    if len(position) > stored.size:
        raise ValueError(f"{where}: its metadata visits {len(position)} values but {stored.size} are stored")
    full = [np.zeros(len(position), np.int64) for _ in range(rank)]
    for level in range(rank):
        full[order[level]] = coords[level]
    for level in range(rank, total):
        k = order[level] - rank
        full[block_map[k]] = full[block_map[k]] * block_size[k] + coords[level]
    flat = np.zeros(len(position), np.int64)
    for d in range(rank):
        if np.any(full[d] < 0) or np.any(full[d] >= shape[d]):
            raise ValueError(f"{where}: its metadata points outside dimension {d} of {list(shape)}")
        flat = flat * shape[d] + full[d]
    dense = np.zeros(dense_size, stored.dtype)
    dense[flat] = stored[:len(position)]
    return dense.reshape(shape)


def _block_sizes(form: SparseForm, rank: int) -> list[int]:
    """Block k's size, as LiteRT pairs them: walking the original dimensions in order, the
    next unpaired block whose ``block_map`` entry is that dimension takes the ``dense_size`` of
    the metadata at ``traversal_order[rank + k]``; a block left unpaired (a block map not in
    increasing order) has size 0."""
    sizes = [0] * len(form.block_map)
    k = 0
    for d in range(rank):
        if k < len(form.block_map) and form.block_map[k] == d:
            sizes[k] = form.dim_metadata[form.traversal_order[rank + k]].dense_size
            k += 1
    return sizes
