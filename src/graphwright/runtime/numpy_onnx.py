"""Exact NumPy kernels for the cheap ops of constant folding (shape arithmetic, data movement).

Constant folding evaluates most constant subgraphs on onnxruntime (one session
per batch).  The ops here are evaluated in NumPy instead because they are
trivial and exact in any implementation: they only move data or do integer
arithmetic, which is what the Shape -> Gather -> Unsqueeze -> Concat ->
Reshape glue of exported models is made of.  Float arithmetic is never done
here (onnxruntime's kernels define its rounding).  Moving weights in NumPy
(e.g. ``Transpose(W)`` of torch's Linear exports) also spares onnxruntime a
copy of them.

A kernel receives the node, its input arrays (None for an omitted optional
input) and the shapes of its inputs as the IR knows them, and returns the
output arrays, or None to leave the node to onnxruntime.  ``Shape`` and
``Size`` need only the input's *shape*, so they fold even when the input is
not constant, as soon as its dims are static.  Each kernel is O(output size).

Sizes: :func:`output_nbytes` predicts, from the input arrays themselves (never
from declared shapes, which a hostile file can fake), the bytes of the output
of the ops whose output can outgrow their inputs (``ConstantOfShape``,
``Expand``, ``Tile``, ``Range``, ``Concat``, ``Gather``, broadcasting
arithmetic); :func:`evaluate` with ``max_bytes`` raises :class:`OutputTooLarge`
*before* allocating such an output.  Sizes are Python integers (no int64
overflow on hostile shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..ir import Node

__all__ = ["KERNELS", "SHAPE_ONLY", "evaluate", "onnx_dtype_numpy", "broadcast_shape", "reshape_target",
           "output_shape", "output_nbytes", "OutputTooLarge", "shape_nbytes"]

Arrays = Sequence[np.ndarray | None]
Kernel = Callable[[Node, Arrays], "list[np.ndarray] | None"]

#: Ops that read only the static shape of their (first) input.
SHAPE_ONLY = frozenset({"Shape", "Size"})
#: ONNX TensorProto element codes (``Cast.to``, ``ConstantOfShape``) NumPy can hold exactly.
_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}


def onnx_dtype_numpy(code: int) -> np.dtype | None:
    """The NumPy dtype of an ONNX element type code, for the plain numeric types."""
    return _CODES.get(int(code))


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """NumPy/ONNX multidirectional broadcast of two static shapes, or None if incompatible."""
    out: list[int] = []
    for x, y in zip(reversed([1] * (len(b) - len(a)) + list(a)), reversed([1] * (len(a) - len(b)) + list(b))):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def _is_int(a: np.ndarray | None) -> bool:
    return a is not None and (a.dtype.kind in "iub")


def _axes(node: Node, arrays: Arrays, index: int, rank: int) -> list[int] | None:
    """Axes from the attribute (old opsets) or from input ``index`` (new ones), normalised."""
    if len(arrays) > index and arrays[index] is not None:
        raw = [int(x) for x in np.asarray(arrays[index]).reshape(-1)]
    else:
        attr = node.attr("axes")
        if attr is None:
            return None
        raw = [int(x) for x in attr]
    return [a + rank if a < 0 else a for a in raw]


def _shape(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    # the caller passes the static shape of the input as arrays[0]
    dims = np.asarray(arrays[0], dtype=np.int64)
    start = int(node.attr("start", 0))
    end = node.attr("end")
    n = dims.shape[0]
    start = max(0, min(n, start + n if start < 0 else start))
    stop = n if end is None else max(0, min(n, int(end) + n if int(end) < 0 else int(end)))
    return [dims[start:stop].copy()]


def _size(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    return [np.asarray(int(np.prod(np.asarray(arrays[0], dtype=np.int64))), dtype=np.int64)]


def _identity(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    return [np.asarray(arrays[0])]


def _cast(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    target = onnx_dtype_numpy(node.attr("to", 0))
    if x is None or target is None or not _is_int(x):
        return None  # float and string conversions: onnxruntime defines the rounding
    if target.kind in "iu" and x.size and x.dtype.kind in "iu":
        info = np.iinfo(target)
        if x.min() < info.min or x.max() > info.max:
            return None  # wrapping conversions: leave to the runtime
    return [x.astype(target)]


def _gather(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    data, indices = arrays[0], arrays[1]
    if data is None or indices is None or not _is_int(indices):
        return None
    axis = int(node.attr("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < max(data.ndim, 1) or data.ndim == 0:
        return None
    size = data.shape[axis]
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        return None  # out of range: let the runtime raise or define it
    return [np.take(data, np.where(idx < 0, idx + size, idx), axis=axis)]


def _unsqueeze(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    if x is None:
        return None
    out_rank = x.ndim + (len(arrays[1].reshape(-1)) if len(arrays) > 1 and arrays[1] is not None
                         else len(node.attr("axes") or ()))
    axes = _axes(node, arrays, 1, out_rank)
    if axes is None or len(set(axes)) != len(axes) or any(not 0 <= a < out_rank for a in axes):
        return None
    shape = list(x.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return [x.reshape(shape)]


def _squeeze(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    if x is None:
        return None
    axes = _axes(node, arrays, 1, x.ndim)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    if any(not 0 <= a < x.ndim or x.shape[a] != 1 for a in axes):
        return None
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in set(axes)])]


def _concat(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    parts = [a for a in arrays if a is not None]
    if not parts or len(parts) != len(arrays) or len({p.ndim for p in parts}) != 1 or parts[0].ndim == 0:
        return None
    if len({p.dtype for p in parts}) != 1:
        return None
    axis = int(node.attr("axis", 0))
    axis = axis + parts[0].ndim if axis < 0 else axis
    try:
        return [np.concatenate(parts, axis=axis)]
    except ValueError:
        return None


def reshape_target(in_shape: Sequence[int], target: Sequence[int], allowzero: bool) -> tuple[int, ...] | None:
    """The output shape of ONNX ``Reshape`` (``0`` copies a dim unless ``allowzero``; one ``-1``)."""
    dims = [int(d) for d in target]
    if not allowzero:
        if any(d == 0 and i >= len(in_shape) for i, d in enumerate(dims)):
            return None
        dims = [in_shape[i] if d == 0 else d for i, d in enumerate(dims)]
    total = int(np.prod(in_shape, dtype=np.int64))
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        return None
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            return None
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims, dtype=np.int64)) != total:
        return None
    return tuple(dims)


def _reshape(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x, target = arrays[0], arrays[1] if len(arrays) > 1 else None
    if x is None or target is None:
        return None
    shape = reshape_target(x.shape, target.reshape(-1).tolist(), bool(node.attr("allowzero", 0)))
    return None if shape is None else [x.reshape(shape)]


def _transpose(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    if x is None:
        return None
    perm = node.attr("perm")
    axes = list(reversed(range(x.ndim))) if perm is None else [int(p) for p in perm]
    if sorted(axes) != list(range(x.ndim)):
        return None
    if axes == [1, 0] and x.size >= _BLOCK * _BLOCK:
        return [_blocked_transpose_2d(x)]
    return [np.ascontiguousarray(np.transpose(x, axes))]


#: Tile edge of the blocked 2-D transpose (fits L1/L2 for 4-byte elements).
_BLOCK = 128


def _blocked_transpose_2d(x: np.ndarray) -> np.ndarray:
    """``x.T`` made contiguous tile by tile: several times faster than one strided copy on big weights.

    Same values as ``np.ascontiguousarray(x.T)``; O(size) with cache-sized tiles.
    """
    rows, cols = x.shape
    out = np.empty((cols, rows), dtype=x.dtype)
    for i in range(0, rows, _BLOCK):
        for j in range(0, cols, _BLOCK):
            out[j:j + _BLOCK, i:i + _BLOCK] = x[i:i + _BLOCK, j:j + _BLOCK].T
    return out


def _flatten(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    if x is None:
        return None
    axis = int(node.attr("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        return None
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(outer, -1) if x.size else x.reshape(outer, int(np.prod(x.shape[axis:], dtype=np.int64)))]


def _slice(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x = arrays[0]
    if x is None or len(arrays) < 3 or arrays[1] is None or arrays[2] is None:
        return None  # opset < 10 keeps its bounds in attributes: onnxruntime handles those
    starts, ends = arrays[1].reshape(-1), arrays[2].reshape(-1)
    axes = arrays[3].reshape(-1) if len(arrays) > 3 and arrays[3] is not None else np.arange(len(starts))
    steps = arrays[4].reshape(-1) if len(arrays) > 4 and arrays[4] is not None else np.ones(len(starts), np.int64)
    if not len(starts) == len(ends) == len(axes) == len(steps) or np.any(steps <= 0):
        return None  # negative steps clamp differently from Python slices: leave them to the runtime
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        axis = axis + x.ndim if axis < 0 else axis
        if not 0 <= axis < x.ndim or index[axis] != slice(None):
            return None
        index[axis] = slice(start, end, step)  # for positive steps, ONNX clamping is Python's
    return [np.ascontiguousarray(x[tuple(index)])]


def _int_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
        a, b = arrays[0], arrays[1]
        if not _is_int(a) or not _is_int(b) or a.dtype != b.dtype:  # type: ignore[union-attr]
            return None
        with np.errstate(over="ignore"):
            return [np.asarray(fn(a, b)).astype(a.dtype, copy=False)]  # type: ignore[arg-type]
    return kernel


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise ZeroDivisionError
    q = a // b
    return q + ((a % b != 0) & ((a < 0) ^ (b < 0)))


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
        a, b = arrays[0], arrays[1]
        if not _is_int(a) or not _is_int(b):
            return None
        return [np.asarray(fn(a, b))]  # type: ignore[arg-type]
    return kernel


def _where(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    c, a, b = arrays[0], arrays[1], arrays[2]
    if c is None or a is None or b is None or c.dtype != np.bool_ or a.dtype != b.dtype or not _is_int(a):
        return None
    return [np.where(c, a, b)]


def _constant_of_shape(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    shape = arrays[0]
    if shape is None or not _is_int(shape):
        return None
    value = node.attr("value")
    fill = np.zeros((), np.float32) if value is None else value.numpy()
    if fill.dtype.kind not in "iubf" or fill.size != 1:
        return None
    return [np.full([int(d) for d in shape.reshape(-1)], fill.reshape(()), dtype=fill.dtype)]


def _expand(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    x, shape = arrays[0], arrays[1]
    if x is None or shape is None:
        return None
    out = broadcast_shape(x.shape, [int(d) for d in shape.reshape(-1)])
    return None if out is None else [np.broadcast_to(x, out).copy()]


def _range(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    start, limit, delta = arrays[0], arrays[1], arrays[2]
    if not (_is_int(start) and _is_int(limit) and _is_int(delta)) or int(delta) == 0:  # type: ignore[arg-type]
        return None
    return [np.arange(int(start), int(limit), int(delta), dtype=start.dtype)]  # type: ignore[union-attr, arg-type]


def _unary_int(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def kernel(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
        a = arrays[0]
        if not _is_int(a):
            return None
        return [np.asarray(fn(a)).astype(a.dtype, copy=False)]  # type: ignore[arg-type, union-attr]
    return kernel


def _not(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
    a = arrays[0]
    return None if a is None or a.dtype != np.bool_ else [np.logical_not(a)]


def _variadic_int(fn: Callable[..., np.ndarray]) -> Kernel:
    def kernel(node: Node, arrays: Arrays) -> list[np.ndarray] | None:
        if not arrays or not all(_is_int(a) for a in arrays) or len({a.dtype for a in arrays}) != 1:  # type: ignore[union-attr]
            return None
        out = arrays[0]
        for a in arrays[1:]:
            out = fn(out, a)
        return [np.asarray(out)]
    return kernel


KERNELS: dict[str, Kernel] = {
    "Shape": _shape,                                   # static dims of a (maybe non-constant) input
    "Size": _size,                                     # element count of a static shape
    "Identity": _identity,                             # x -> x
    "Cast": _cast,                                     # integer/bool sources only
    "Gather": _gather,                                 # in-range integer indices
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Reshape": _reshape,
    "Transpose": _transpose,                           # data movement: any dtype
    "Flatten": _flatten,
    "Slice": _slice,                                   # positive steps only
    "Add": _int_binary(np.add),                        # integers: wraps like C
    "Sub": _int_binary(np.subtract),
    "Mul": _int_binary(np.multiply),
    "Div": _int_binary(_trunc_div),                    # integer division truncates toward zero
    "Equal": _compare(np.equal),
    "Less": _compare(np.less),
    "Greater": _compare(np.greater),
    "Not": _not,
    "Where": _where,
    "Min": _variadic_int(np.minimum),
    "Max": _variadic_int(np.maximum),
    "Neg": _unary_int(np.negative),
    "Abs": _unary_int(np.abs),
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Range": _range,                                   # integer ranges only
}


class OutputTooLarge(Exception):
    """An output would take more bytes than the caller allows (raised before allocating it)."""

    def __init__(self, node: Node, nbytes: int, limit: int) -> None:
        super().__init__(f"{node.op}: the output would take {nbytes} bytes (limit {limit})")
        self.nbytes = nbytes
        self.limit = limit


def shape_nbytes(shape: Sequence[int], itemsize: int) -> int:
    """Bytes of a tensor of ``shape``, in Python integers (negative dims count as 0)."""
    return math.prod(max(int(d), 0) for d in shape) * itemsize


def _int_values(a: np.ndarray | None) -> list[int] | None:
    if a is None or not _is_int(a) or a.size > 64:
        return None
    return [int(d) for d in a.reshape(-1)]


def _range_count(start: np.ndarray | None, limit: np.ndarray | None, delta: np.ndarray | None) -> int | None:
    """Elements of ``Range(start, limit, delta)``: ``max(ceil((limit - start) / delta), 0)``."""
    if start is None or limit is None or delta is None or start.size != 1 or limit.size != 1 or delta.size != 1:
        return None
    if all(_is_int(a) for a in (start, limit, delta)):
        s, lim, d = (int(a.reshape(())) for a in (start, limit, delta))
        return None if d == 0 else max(-((s - lim) // d), 0)
    try:
        s_, lim_, d_ = (float(a.reshape(())) for a in (start, limit, delta))
        count = (lim_ - s_) / d_ if d_ else math.inf
        return max(math.ceil(count), 0) if math.isfinite(count) else None
    except (OverflowError, ValueError, TypeError, ZeroDivisionError):
        return None


def output_shape(op: str, arrays: Arrays, data_shape: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """The output shape of a shape-making op (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``) from its
    inputs, or None when they do not say.  ``data_shape`` stands for input 0 when only its shape is known.

    Used to size a result before computing it; the would-be output may be
    astronomically large, nothing is allocated.
    """
    ins = list(arrays) + [None] * 3
    if op == "ConstantOfShape":
        dims = _int_values(ins[0])
        return None if dims is None else tuple(dims)
    if op == "Range":
        count = _range_count(ins[0], ins[1], ins[2])
        return None if count is None else (count,)
    data = data_shape if data_shape is not None else (ins[0].shape if ins[0] is not None else None)
    if op == "Expand":
        dims = _int_values(ins[1])
        if dims is None:
            return None
        if data is None:
            return tuple(max(d, 0) for d in dims)  # at least this large
        return broadcast_shape(list(data), dims)
    if op == "Tile":
        reps = _int_values(ins[1])
        if reps is None:
            return None
        if data is None or len(data) != len(reps):
            return tuple(max(r, 0) for r in reps)  # at least this large
        return tuple(int(a) * max(b, 0) for a, b in zip(data, reps))
    return None


def output_nbytes(node: Node, arrays: Arrays) -> int | None:
    """Bytes of ``node``'s largest output, predicted from its input arrays before running it; None if unknown.

    Exact for the shape-making ops; for ``Concat`` the sum, for ``Gather`` the
    index count times the slice, for other ops the broadcast of the inputs
    (what an element-wise op makes; data-movement ops make no more).
    """
    present = [a for a in arrays if a is not None]
    if not present:
        return None
    if node.op == "ConstantOfShape":
        value = node.attr("value")
        itemsize = 4 if value is None else value.numpy().dtype.itemsize
        shape = output_shape(node.op, arrays)
        return None if shape is None else shape_nbytes(shape, itemsize)
    if node.op in ("Expand", "Tile", "Range"):
        shape = output_shape(node.op, arrays)
        return None if shape is None or arrays[0] is None else shape_nbytes(shape, arrays[0].dtype.itemsize)
    itemsize = max(a.dtype.itemsize for a in present)
    if node.op == "Concat":
        return sum(a.nbytes for a in present)
    if node.op == "Gather" and len(present) == 2 and arrays[0] is not None and arrays[0].ndim:
        data, indices = arrays[0], arrays[1]
        axis = int(node.attr("axis", 0))
        size = data.shape[axis] if -data.ndim <= axis < data.ndim else 1
        return data.nbytes // max(size, 1) * indices.size if indices is not None else None
    shape: tuple[int, ...] | None = ()
    for a in present:
        shape = None if shape is None else broadcast_shape(shape, a.shape)
    return max(sum(a.nbytes for a in present), 0 if shape is None else shape_nbytes(shape, itemsize))


def evaluate(node: Node, arrays: Arrays, *, max_bytes: int | None = None) -> list[np.ndarray] | None:
    """Run ``node`` on NumPy if a kernel here handles it exactly, else None.

    With ``max_bytes``, raises :class:`OutputTooLarge` before running a kernel
    whose output (predicted by :func:`output_nbytes`) would be larger.
    """
    kernel = KERNELS.get(node.op)
    if kernel is None:
        return None
    if max_bytes is not None and node.op not in SHAPE_ONLY:
        predicted = output_nbytes(node, arrays)
        if predicted is not None and predicted > max_bytes:
            raise OutputTooLarge(node, predicted, max_bytes)
    try:
        out = kernel(node, arrays)
    except (ValueError, ZeroDivisionError, IndexError, TypeError, OverflowError):
        return None  # malformed for NumPy: onnxruntime decides (and reports) instead
    if out is None or len(out) != len(node.outputs):
        return None
    return out

