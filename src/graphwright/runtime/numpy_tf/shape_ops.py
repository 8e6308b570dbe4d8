"""TF ops that move, copy or describe data without arithmetic: identities, shapes, reshapes, stacking.

Semantics follow TensorFlow's CPU kernels, including their errors (a bad
axis, a reshape that does not fit, an element count that does not match):
those raise :class:`KernelError` so the node is left unfolded.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ir import Node
from ._common import (
    Kernel,
    KernelError,
    SizeEstimate,
    attr,
    axis_of,
    int_list,
    int_scalar,
    np_dtype,
    require,
    require_same_dtype,
)

__all__ = ["KERNELS", "SIZES", "PASS_THROUGH"]

#: Ops whose outputs are their inputs, unchanged (constant folding forwards the tensors as they are).
PASS_THROUGH = frozenset({"Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient"})


def _identity(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    require(len(inputs) == 1 or node.op == "IdentityN", node, f"expected 1 input, got {len(inputs)}")
    return list(inputs)


def _no_op(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return []


def _check_numerics(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    require(x.dtype.kind == "f", node, f"no kernel for {x.dtype}")
    require(bool(np.isfinite(x).all()), node, "the tensor holds NaN or Inf (TensorFlow raises)")
    return [x]


def _ensure_shape(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    shape = attr(node, "shape")
    if shape is not None:
        ok = len(shape) == x.ndim and all(d is None or d == s for d, s in zip(shape, x.shape))
        require(ok, node, f"shape {list(x.shape)} is not compatible with {list(shape)}")
    return [x]


def _out_type(node: Node, default: str = "int32") -> np.dtype:
    value = attr(node, "out_type")
    return np.dtype(default) if value is None else np_dtype(node, value)


def _as_index(node: Node, values: list[int] | int, dtype: np.dtype) -> np.ndarray:
    out = np.asarray(values, dtype=np.int64)
    if dtype == np.int32:
        require(bool(np.all(out <= np.iinfo(np.int32).max)), node, "a size does not fit in int32 (use out_type=int64)")
    return out.astype(dtype)


def _shape(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    return [_as_index(node, list(x.shape), _out_type(node))]


def _shape_n(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    require_same_dtype(node, inputs)
    dtype = _out_type(node)
    return [_as_index(node, list(x.shape), dtype) for x in inputs]


def _size(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    return [_as_index(node, int(x.size), _out_type(node))]


def _rank(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    return [np.array(x.ndim, dtype=np.int32)]


def _reshape(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, shape_arr = inputs
    shape = int_list(node, shape_arr, "shape")
    unknown = [i for i, d in enumerate(shape) if d == -1]
    require(len(unknown) <= 1, node, "only one dimension can be -1")
    require(all(d >= -1 for d in shape), node, f"invalid dimension in {shape}")
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if unknown:
        require(known > 0 and x.size % known == 0, node, f"cannot reshape {x.size} elements to {shape}")
        shape[unknown[0]] = x.size // known
    require(int(np.prod(shape, dtype=np.int64)) == x.size, node, f"cannot reshape {list(x.shape)} to {shape}")
    return [x.reshape(shape)]


def _squeeze(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    dims = attr(node, "squeeze_dims") or ()
    if not dims:
        return [x.reshape([d for d in x.shape if d != 1])]
    axes = {axis_of(node, int(d), x.ndim) for d in dims}
    for a in axes:
        require(x.shape[a] == 1, node, f"cannot squeeze dimension {a} of size {x.shape[a]}")
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in axes])]


def _expand_dims(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, dim = inputs
    axis = axis_of(node, int_scalar(node, dim, "dim"), x.ndim, extra=1)
    return [np.expand_dims(x, axis)]


def _pack(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    require(len(inputs) >= 1, node, "needs at least one input")
    require_same_dtype(node, inputs)
    require(all(a.shape == inputs[0].shape for a in inputs), node, "inputs have different shapes")
    axis = axis_of(node, int(attr(node, "axis", 0)), inputs[0].ndim, extra=1)
    return [np.stack(inputs, axis=axis)]


def _unpack(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    require(x.ndim >= 1, node, "cannot unpack a scalar")
    axis = axis_of(node, int(attr(node, "axis", 0)), x.ndim)
    num = attr(node, "num")
    require(num is None or int(num) == x.shape[axis], node, f"num={num} but dimension {axis} has {x.shape[axis]}")
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _concat(node: Node, values: list[np.ndarray], axis_arr: np.ndarray) -> list[np.ndarray]:
    require(len(values) >= 1, node, "needs at least one value")
    require_same_dtype(node, values)
    rank = values[0].ndim
    require(rank >= 1, node, "cannot concatenate scalars")
    require(all(v.ndim == rank for v in values), node, "inputs have different ranks")
    axis = axis_of(node, int_scalar(node, axis_arr, "axis"), rank)
    for v in values:
        require(v.shape[:axis] + v.shape[axis + 1:] == values[0].shape[:axis] + values[0].shape[axis + 1:],
                node, "inputs have different shapes outside the concatenation axis")
    return [np.concatenate(values, axis=axis)]


def _concat_v2(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return _concat(node, inputs[:-1], inputs[-1])


def _concat_v1(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return _concat(node, inputs[1:], inputs[0])


def _transpose(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, perm_arr = inputs
    perm = int_list(node, perm_arr, "perm")
    require(sorted(perm) == list(range(x.ndim)), node, f"{perm} is not a permutation of {x.ndim} dimensions")
    return [np.transpose(x, perm)]


def _dims(node: Node, a: np.ndarray, what: str = "dims") -> list[int]:
    dims = int_list(node, a, what)
    require(all(d >= 0 for d in dims), node, f"negative dimension in {what} {dims}")
    return dims


def _fill(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    dims_arr, value = inputs
    require(value.ndim == 0, node, f"value must be a scalar, got shape {list(value.shape)}")
    return [np.full(_dims(node, dims_arr), value, dtype=value.dtype)]


def _zeros_like(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    require(x.dtype.kind in "biufc", node, f"no kernel for {x.dtype}")
    return [np.zeros_like(x)]


def _ones_like(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    require(x.dtype.kind in "biufc", node, f"no kernel for {x.dtype}")
    return [np.ones_like(x)]


def _tile(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, multiples_arr = inputs
    multiples = _dims(node, multiples_arr, "multiples")
    require(len(multiples) == x.ndim, node, f"{len(multiples)} multiples for a tensor of rank {x.ndim}")
    return [np.tile(x, multiples) if multiples else x]


def _broadcast_to(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, shape_arr = inputs
    shape = _dims(node, shape_arr, "shape")
    try:
        return [np.array(np.broadcast_to(x, shape))]
    except ValueError:
        raise KernelError(f"BroadcastTo: cannot broadcast {list(x.shape)} to {shape}") from None


def _range(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    start, limit, delta = (_scalar(node, a, name) for a, name in zip(inputs, ("start", "limit", "delta")))
    dtype = inputs[0].dtype
    require(inputs[1].dtype == dtype and inputs[2].dtype == dtype, node, "start, limit and delta differ in type")
    size = _range_size(node, start, limit, delta)
    if dtype.kind in "iu":
        return [(int(start) + np.arange(size, dtype=np.int64) * int(delta)).astype(dtype)]
    return [start + np.arange(size, dtype=dtype) * delta]  # start + i·delta, in the input's type


def _scalar(node: Node, a: np.ndarray, name: str) -> Any:
    require(a.size == 1 and a.ndim <= 1, node, f"{name} must be a scalar, got shape {list(a.shape)}")
    require(a.dtype.kind in "iuf", node, f"no kernel for {a.dtype}")
    return a.reshape(())[()]


def _range_size(node: Node, start: Any, limit: Any, delta: Any) -> int:
    require(delta != 0, node, "delta must not be zero")
    if delta > 0:
        require(bool(start <= limit), node, f"start ({start}) must be <= limit ({limit}) when delta > 0")
    else:
        require(bool(start >= limit), node, f"start ({start}) must be >= limit ({limit}) when delta < 0")
    if isinstance(start, np.integer):
        span, step = abs(int(limit) - int(start)), abs(int(delta))
        return (span + step - 1) // step
    size = np.ceil(np.abs((limit - start) / delta))  # computed in the input's float type, as TF
    require(bool(np.isfinite(size)), node, "the range is infinite")
    return int(size)


KERNELS: dict[str, Kernel] = {
    **{op: _identity for op in PASS_THROUGH},
    "NoOp": _no_op,
    "CheckNumerics": _check_numerics,
    "EnsureShape": _ensure_shape,
    "Shape": _shape,
    "ShapeN": _shape_n,
    "Size": _size,
    "Rank": _rank,
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "ExpandDims": _expand_dims,
    "Pack": _pack,
    "Unpack": _unpack,
    "ConcatV2": _concat_v2,
    "Concat": _concat_v1,
    "Transpose": _transpose,
    "Fill": _fill,
    "ZerosLike": _zeros_like,
    "OnesLike": _ones_like,
    "Tile": _tile,
    "BroadcastTo": _broadcast_to,
    "Range": _range,
}


# -- output sizes before evaluating ------------------------------------------------------
def _elements(node: Node, a: np.ndarray) -> int:
    try:
        return math.prod(max(int(d), 0) for d in int_list(node, a, "shape"))  # Python ints: no overflow
    except KernelError:
        return 0  # the kernel reports it


def _fill_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    return _elements(node, inputs[0]) * inputs[1].dtype.itemsize


def _tile_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    return inputs[0].nbytes * _elements(node, inputs[1])


def _broadcast_to_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    return _elements(node, inputs[1]) * inputs[0].dtype.itemsize


def _stack_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    return sum(a.nbytes for a in inputs)


def _range_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    try:
        start, limit, delta = (_scalar(node, a, "bound") for a in inputs)
        return _range_size(node, start, limit, delta) * inputs[0].dtype.itemsize
    except (KernelError, OverflowError, ValueError):
        return 0  # the kernel reports it


SIZES: dict[str, SizeEstimate] = {
    "Fill": _fill_bytes,
    "Tile": _tile_bytes,
    "BroadcastTo": _broadcast_to_bytes,
    "Range": _range_bytes,
    "Pack": _stack_bytes,
    "ConcatV2": _stack_bytes,
    "Concat": _stack_bytes,
}
