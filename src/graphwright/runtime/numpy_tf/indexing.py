"""TF ops that select, split or pad elements: StridedSlice, Slice, Gather, OneHot, Split, Pad, Reverse, Where.

**StridedSlice** follows TF's own two-step rule.  The *sparse* spec (one entry
per element of ``begin``/``end``/``strides``, with the five bit masks) is
first made *dense* (one entry per input dimension): an ellipsis (bit ``i`` of
``ellipsis_mask``; an implicit one is appended when none is given) covers as
many dimensions as the entries after it leave, ``new_axis`` entries add a
size-1 output dimension and use no input dimension, the other entries map to
the next input dimension.  Then, per dimension of stride ``s`` and size ``d``::

    masked begin/end  -> the first/last index in the direction of s
                         (s > 0: 0 and d; s < 0: d-1 and -1, "one before the start")
    otherwise         -> x + d if x < 0, clamped to [0, d] (s > 0) or [-1, d-1] (s < 0)
    shrink_axis       -> just index begin (+d if negative), which must lie in [0, d); s must be > 0
    size              -> ceil((end - begin) / s), or 0 if that is negative

and the output drops shrunk dimensions and inserts the new axes.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import Node
from ._common import Kernel, SizeEstimate, attr, axis_of, int_list, int_scalar, require, require_same_dtype

__all__ = ["KERNELS", "SIZES", "strided_slice"]

_NEW_AXIS = -1
_SHRINK = -2


def _dense_spec(
    node: Node, rank: int, begin: list[int], end: list[int], strides: list[int], masks: dict[str, int]
) -> tuple[list[tuple[int, int, int, bool, bool, bool]], list[int]]:
    """Per input dimension ``(begin, end, stride, begin_masked, end_masked, shrink)``, and the output layout."""
    ellipsis, new_axis = masks["ellipsis_mask"], masks["new_axis_mask"]
    require(ellipsis & (ellipsis - 1) == 0, node, "multiple ellipses in slice spec are not allowed")
    k = len(begin)
    if not ellipsis:  # an implicit ellipsis at the end keeps the remaining dimensions
        ellipsis = 1 << k
        begin, end, strides = begin + [0], end + [0], strides + [1]
        k += 1
    at = ellipsis.bit_length() - 1
    new_after = sum(1 for i in range(at + 1, k) if new_axis >> i & 1)
    dense: list[tuple[int, int, int, bool, bool, bool]] = []
    layout: list[int] = []
    for i in range(k):
        if ellipsis >> i & 1:
            covered = min(rank - (k - i) + 1 + new_after, rank)
            while len(dense) < covered:
                layout.append(len(dense))
                dense.append((0, 0, 1, True, True, False))
        elif new_axis >> i & 1:
            layout.append(_NEW_AXIS)
        else:
            require(len(dense) < rank, node, f"index {i} of the slice spec is out of range for rank {rank}")
            shrink = bool(masks["shrink_axis_mask"] >> i & 1)
            layout.append(_SHRINK if shrink else len(dense))
            dense.append((begin[i], end[i], strides[i], bool(masks["begin_mask"] >> i & 1),
                          bool(masks["end_mask"] >> i & 1), shrink))
    return dense, layout


def _dimension(node: Node, i: int, dim: int, spec: tuple[int, int, int, bool, bool, bool]) -> tuple[slice, int]:
    """The NumPy slice and the size of one dense dimension."""
    b, e, s, b_masked, e_masked, shrink = spec
    require(s != 0, node, "strides must be non-zero")
    if shrink:
        require(s > 0, node, "only stride 1 allowed on non-range indexing")
        fwd = b + dim if b < 0 else b
        require(0 <= fwd < dim, node, f"slice index {b} of dimension {i} out of bounds")
        return slice(fwd, fwd + 1), 1
    lo, hi = (0, dim) if s > 0 else (-1, dim - 1)

    def canonical(x: int, masked: bool, first: bool) -> int:
        if masked:
            return (lo if first else hi) if s > 0 else (hi if first else lo)
        fwd = x + dim if x < 0 else x
        return min(max(fwd, lo), hi)

    b, e = canonical(b, b_masked, True), canonical(e, e_masked, False)
    length = e - b
    if length == 0 or (length < 0) != (s < 0):
        return slice(0, 0), 0
    size = -(-abs(length) // abs(s))
    return slice(b, None if e < 0 else e, s), size


def strided_slice(
    node: Node, x: np.ndarray, begin: list[int], end: list[int], strides: list[int], masks: dict[str, int]
) -> np.ndarray:
    """``x[begin:end:strides]`` with TF's masks (see the module docstring)."""
    require(len(begin) == len(end) == len(strides), node, "begin, end and strides differ in length")
    dense, layout = _dense_spec(node, x.ndim, list(begin), list(end), list(strides), masks)
    picks = [_dimension(node, i, x.shape[i], spec) for i, spec in enumerate(dense)]
    sliced = x[tuple(p for p, _ in picks)]
    sizes = [size for _, size in picks]
    final = [1 if j == _NEW_AXIS else sizes[j] for j in layout if j != _SHRINK]
    return sliced.reshape(final)


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _strided_slice(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, b, e, s = inputs
    masks = {m: int(attr(node, m, 0)) for m in _MASKS}
    return [strided_slice(node, x, int_list(node, b, "begin"), int_list(node, e, "end"),
                          int_list(node, s, "strides"), masks)]


def _slice(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, begin_arr, size_arr = inputs
    begin, size = int_list(node, begin_arr, "begin"), int_list(node, size_arr, "size")
    require(len(begin) == len(size) == x.ndim, node, f"begin and size must have {x.ndim} elements")
    picks = []
    for i, (b, n, d) in enumerate(zip(begin, size, x.shape)):
        n = d - b if n == -1 else n
        require(0 <= b <= d and 0 <= n and b + n <= d, node, f"slice [{b}, {b}+{n}) out of range in dimension {i}")
        picks.append(slice(b, b + n))
    return [x[tuple(picks)]]


def _gather_axis0(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    params, indices = inputs
    return [_gather(node, params, indices, 0, 0)]


def _gather_v2(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    params, indices, axis = inputs
    return [_gather(node, params, indices, int_scalar(node, axis, "axis"), int(attr(node, "batch_dims", 0)))]


def _gather(node: Node, params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    require(indices.dtype.kind in "iu", node, f"indices must be integers, got {indices.dtype}")
    require(params.ndim >= 1, node, "params must be at least 1-D")
    axis = axis_of(node, axis, params.ndim)
    if batch_dims < 0:
        batch_dims += indices.ndim
    require(0 <= batch_dims <= indices.ndim and batch_dims <= axis, node,
            f"batch_dims={batch_dims} must be in [0, min(rank(indices), axis)]")
    require(params.shape[:batch_dims] == indices.shape[:batch_dims], node,
            "params and indices differ in their batch dimensions")
    limit = params.shape[axis]
    require(bool(np.all((indices >= 0) & (indices < limit))), node, f"an index is outside [0, {limit})")
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    batch = params.shape[:batch_dims]
    n = int(np.prod(batch, dtype=np.int64))
    p = params.reshape((n,) + params.shape[batch_dims:])
    ind = indices.reshape((n,) + indices.shape[batch_dims:])
    out_shape = batch + params.shape[batch_dims:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]
    if n == 0:
        return np.zeros(out_shape, dtype=params.dtype)
    parts = [np.take(p[k], ind[k], axis=axis - batch_dims) for k in range(n)]
    return np.stack(parts).reshape(out_shape)


def _one_hot(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    indices, depth_arr, on, off = inputs
    require(indices.dtype.kind in "iu", node, f"indices must be integers, got {indices.dtype}")
    depth = int_scalar(node, depth_arr, "depth")
    require(depth >= 0, node, f"depth must be non-negative, got {depth}")
    require(on.ndim == 0 and off.ndim == 0, node, "on_value and off_value must be scalars")
    require_same_dtype(node, [on, off])
    axis = int(attr(node, "axis", -1))
    require(-1 <= axis <= indices.ndim, node, f"axis {axis} is out of range")
    hot = indices[..., None] == np.arange(depth, dtype=np.int64)  # out-of-range indices: all off
    out = np.where(hot, on, off)
    return [out if axis == -1 else np.moveaxis(out, -1, axis)]


def _split(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    dim_arr, x = inputs
    axis = axis_of(node, int_scalar(node, dim_arr, "split_dim"), x.ndim)
    n = int(attr(node, "num_split", 1))
    require(n >= 1 and x.shape[axis] % n == 0, node, f"dimension {axis} of size {x.shape[axis]} does not split in {n}")
    return list(np.split(x, n, axis=axis))


def _split_v(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, sizes_arr, dim_arr = inputs
    axis = axis_of(node, int_scalar(node, dim_arr, "split_dim"), x.ndim)
    sizes = int_list(node, sizes_arr, "size_splits")
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    require(len(unknown) <= 1 and all(s >= -1 for s in sizes), node, f"invalid size_splits {sizes}")
    if unknown:
        sizes[unknown[0]] = x.shape[axis] - (sum(sizes) + 1)
    require(sum(sizes) == x.shape[axis] and all(s >= 0 for s in sizes), node,
            f"size_splits {sizes} do not add up to {x.shape[axis]}")
    require(attr(node, "num_split") is None or int(attr(node, "num_split")) == len(sizes), node,
            "num_split differs from the number of sizes")
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _paddings(node: Node, x: np.ndarray, pads: np.ndarray) -> list[tuple[int, int]]:
    require(pads.dtype.kind in "iu", node, f"paddings must be integers, got {pads.dtype}")
    require(pads.shape == (x.ndim, 2), node, f"paddings must have shape [{x.ndim}, 2], got {list(pads.shape)}")
    pairs = [(int(a), int(b)) for a, b in pads.tolist()]
    require(all(a >= 0 and b >= 0 for a, b in pairs), node, "paddings must be non-negative")
    return pairs


def _pad(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, pads = inputs[0], inputs[1]
    value = inputs[2] if len(inputs) > 2 else np.zeros((), dtype=x.dtype)
    require(value.size == 1, node, "constant_values must be a scalar")
    require_same_dtype(node, [x, value])
    return [np.pad(x, _paddings(node, x, pads), mode="constant", constant_values=value.reshape(())[()])]


def _mirror_pad(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, pads = inputs
    mode = attr(node, "mode", b"REFLECT")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    require(mode in ("REFLECT", "SYMMETRIC"), node, f"unknown mode {mode!r}")
    pairs = _paddings(node, x, pads)
    slack = 1 if mode == "REFLECT" else 0
    for i, (a, b) in enumerate(pairs):
        require(max(a, b) <= x.shape[i] - slack, node, f"padding of dimension {i} is too large for mode {mode}")
    return [np.pad(x, pairs, mode="reflect" if mode == "REFLECT" else "symmetric")]


def _reverse_v2(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, axes_arr = inputs
    require(axes_arr.ndim == 1, node, "axis must be a vector")
    axes = [axis_of(node, a, x.ndim) for a in int_list(node, axes_arr, "axis")]
    require(len(set(axes)) == len(axes), node, f"axis {axes} repeats a dimension")
    return [np.flip(x, tuple(axes)) if axes else x]


def _where(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    require(x.dtype.kind in "biuf", node, f"no kernel for {x.dtype}")
    return [np.argwhere(x).astype(np.int64)]


KERNELS: dict[str, Kernel] = {
    "StridedSlice": _strided_slice,
    "Slice": _slice,
    "Gather": _gather_axis0,
    "GatherV2": _gather_v2,
    "OneHot": _one_hot,
    "Split": _split,
    "SplitV": _split_v,
    "Pad": _pad,
    "PadV2": _pad,
    "MirrorPad": _mirror_pad,
    "ReverseV2": _reverse_v2,
    "Where": _where,
}


# -- output sizes before evaluating --------------------------------------------------------
def _gather_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    params, indices = inputs[0], inputs[1]
    if params.ndim == 0 or (len(inputs) > 2 and (inputs[2].size != 1 or inputs[2].dtype.kind not in "iu")):
        return 0  # the kernel reports it
    axis = int(inputs[2].reshape(-1)[0]) if len(inputs) > 2 else 0
    if not -params.ndim <= axis < params.ndim:
        return 0
    batch_dims = int(attr(node, "batch_dims", 0)) if len(inputs) > 2 else 0
    batch_dims = batch_dims + indices.ndim if batch_dims < 0 else batch_dims
    shared = int(np.prod(params.shape[:max(batch_dims, 0)], dtype=np.int64)) * params.shape[axis]
    return int(indices.size) * (params.nbytes // shared if shared else 0)


def _one_hot_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    depth = inputs[1]
    n = int(depth.reshape(-1)[0]) if depth.size == 1 and depth.dtype.kind in "iu" else 0
    return int(inputs[0].size) * max(n, 0) * inputs[2].dtype.itemsize


def _pad_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    x, pads = inputs[0], inputs[1]
    if pads.dtype.kind not in "iu" or pads.shape != (x.ndim, 2):
        return 0
    dims = [d + max(int(a), 0) + max(int(b), 0) for d, (a, b) in zip(x.shape, pads.tolist())]
    return math.prod(dims) * x.dtype.itemsize  # Python ints: no overflow on hostile pads


SIZES: dict[str, SizeEstimate] = {
    "Gather": _gather_bytes,
    "GatherV2": _gather_bytes,
    "OneHot": _one_hot_bytes,
    "Pad": _pad_bytes,
    "PadV2": _pad_bytes,
    "MirrorPad": _pad_bytes,
}
