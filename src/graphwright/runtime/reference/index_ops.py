"""Index and layout operators: slicing, splitting, gathering and scattering, depth/space
rearrangements, padding by mirror, broadcasting and filling — as TFLite's reference kernels.

Values are moved, never requantized: a quantized tensor keeps its integers (LiteRT's
kernels copy bytes by element size, whatever the type).  The exceptions are
EMBEDDING_LOOKUP from 8-bit rows into a float output (``q·scale`` in float32, per
tensor or per row; uint8 bytes read as int8, as LiteRT does), SCATTER_ND, which adds
the updates that land on one element (wrapping integers, in index order), and RANGE,
which accumulates ``start + delta + delta …`` in its type, as the reference loop does.
Indices out of range (GATHER, GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP) are refused at
run time, as LiteRT refuses them.  All O(output size), WHERE O(input size).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from ...ir import Value
from ._common import OpContext, ints, kernel
from .prepare import OpCheck, Shape, check_size, prepare_rule

Fail = Callable[[str], Exception]

#: MirrorPadMode: REFLECT excludes the edge element, SYMMETRIC repeats it
MIRROR_REFLECT, MIRROR_SYMMETRIC = 0, 1


def _axis(axis: int, rank: int, fail: Fail) -> int:
    """``axis`` in ``[-rank, rank)`` as a non-negative index, or ``fail(...)``."""
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} does not fit a rank-{rank} input")
    return axis % rank


def _check_indices(ctx: OpContext, indices: np.ndarray, sizes: np.ndarray | int, what: str) -> None:
    """Refuse an index outside ``[0, size)``, as LiteRT's kernel returns an error on it."""
    bad = (indices < 0) | (indices >= sizes)
    if bad.any():
        at = np.argwhere(bad)[0]
        value = int(indices[tuple(at)])
        size = int(np.broadcast_to(sizes, indices.shape)[tuple(at)])
        raise ctx.error(f"{what} {value} is out of range [0, {size}) (LiteRT refuses it too)")


def _same_quant(a: Value | None, b: Value) -> bool:
    """Both unquantized, or with equal scales and zero points (what LiteRT's Prepare demands
    of the operators that copy quantized values)."""
    qa, qb = (None if v is None or v.quant is None or not v.quant.scale.size else v.quant for v in (a, b))
    if qa is None or qb is None:
        return qa is qb
    return np.array_equal(qa.scale, qb.scale) and np.array_equal(qa.zero_point, qb.zero_point)


def _multi_output(op: OpCheck, inputs: int, outputs: int) -> None:
    """Arity of the operators that write several outputs (prepare's table holds one-output ones)."""
    if len(op.node.inputs) != inputs:
        raise op.fail(f"it has {len(op.node.inputs)} inputs, where {inputs} are expected")
    for i in range(inputs):
        op.need(i)
    if len(op.node.outputs) != outputs:
        raise op.fail(f"it has {len(op.node.outputs)} outputs, where {outputs} are expected")


# -- SLICE ------------------------------------------------------------------------------------------

def _slice_bounds(shape: tuple[int, ...], begin: list[int], size: list[int], fail: Fail) -> list[slice]:
    """LiteRT's SLICE: ``size`` −1 runs to the end; else ``begin + size`` must fit the dimension."""
    if len(begin) != len(shape) or len(size) != len(shape):
        raise fail(f"begin {begin} and size {size} do not fit input {list(shape)}")
    bounds = []
    for b, s, d in zip(begin, size, shape):
        if b < 0 or s < -1 or (s != -1 and b + s > d) or b > d:
            raise fail(f"begin {begin} and size {size} lie outside input {list(shape)}")
        bounds.append(slice(b, d if s == -1 else b + s))
    return bounds


@kernel("SLICE", int16=True)
def slice_(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    bounds = _slice_bounds(x.shape, ints(ctx.x(1)), ints(ctx.x(2)), ctx.error)
    return [np.ascontiguousarray(x[tuple(bounds)])]


@prepare_rule("SLICE", arity=(3, 3))
def _slice_rule(op: OpCheck) -> list[Shape]:
    x, begin, size = op.shape(0), op.ints(1, "begin"), op.ints(2, "size")
    if x is None or begin is None or size is None:
        return [None]
    return [tuple(b.stop - b.start for b in _slice_bounds(x, begin, size, op.fail))]


# -- SPLIT, SPLIT_V, UNPACK -------------------------------------------------------------------------

def _split_sizes(dim: int, sizes: list[int], fail: Fail) -> list[int]:
    """SPLIT_V's sizes, one of them −1 for what the others leave; they must add up to ``dim``."""
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise fail(f"size_splits {sizes} are not sizes (one −1 at most)")
    if -1 in sizes:
        rest = dim - sum(s for s in sizes if s != -1)
        if rest < 0:
            raise fail(f"size_splits {sizes} exceed the {dim} elements of the axis")
        sizes = [rest if s == -1 else s for s in sizes]
    if sum(sizes) != dim:
        raise fail(f"size_splits {sizes} do not add up to the {dim} elements of the axis")
    return sizes


def _split_at(x: np.ndarray, sizes: list[int], axis: int) -> list[np.ndarray]:
    return [np.ascontiguousarray(part) for part in np.split(x, np.cumsum(sizes)[:-1], axis=axis)]


@kernel("SPLIT", int16=True)
def split(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(1)
    axis = _axis(ints(ctx.x(0))[0], x.ndim, ctx.error)
    count = len(ctx.node.outputs)
    if x.shape[axis] % count:
        raise ctx.error(f"axis {axis} of input {list(x.shape)} does not split in {count}")
    return _split_at(x, [x.shape[axis] // count] * count, axis)


@prepare_rule("SPLIT")
def _split_rule(op: OpCheck) -> list[Shape]:
    count = op.int_attr("num_splits", 0, 1)
    _multi_output(op, 2, count)
    x, axis = op.shape(1), op.ints(0, "axis")
    if x is None or axis is None:
        return [None] * count
    if len(axis) != 1:
        raise op.fail(f"axis {axis} is not one value")
    a = _axis(axis[0], len(x), op.fail)
    if x[a] % count:
        raise op.fail(f"axis {axis[0]} of input {list(x)} does not split in {count}")
    return [(*x[:a], x[a] // count, *x[a + 1:])] * count


@kernel("SPLIT_V", int16=True)
def split_v(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    axis = _axis(ints(ctx.x(2))[0], x.ndim, ctx.error)
    return _split_at(x, _split_sizes(x.shape[axis], ints(ctx.x(1)), ctx.error), axis)


@prepare_rule("SPLIT_V")
def _split_v_rule(op: OpCheck) -> list[Shape]:
    count = op.int_attr("num_splits", 0, 1)
    _multi_output(op, 3, count)
    x, sizes, axis = op.shape(0), op.ints(1, "size_splits"), op.ints(2, "axis")
    if x is None or sizes is None or axis is None:
        return [None] * count
    if len(axis) != 1 or len(sizes) != count:
        raise op.fail(f"axis {axis} and size_splits {sizes} do not make {count} outputs")
    a = _axis(axis[0], len(x), op.fail)
    return [(*x[:a], s, *x[a + 1:]) for s in _split_sizes(x[a], sizes, op.fail)]


@kernel("UNPACK", int16=True)
def unpack(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    axis = _axis(int(ctx.attr("axis", 0) or 0), x.ndim, ctx.error)
    return [np.ascontiguousarray(np.take(x, i, axis=axis)) for i in range(x.shape[axis])]


@prepare_rule("UNPACK")
def _unpack_rule(op: OpCheck) -> list[Shape]:
    count = op.int_attr("num", 0, 1)
    _multi_output(op, 1, count)
    if any(not _same_quant(op.node.inputs[0], out) for out in op.node.outputs):
        raise op.fail("its outputs are quantized differently from its input, which LiteRT refuses")
    x = op.shape(0)
    if x is None:
        return [None] * count
    a = _axis(op.int_attr("axis", 0), len(x), op.fail)
    if x[a] != count:
        raise op.fail(f"axis {a} of input {list(x)} does not hold {count} slices")
    return [x[:a] + x[a + 1:]] * count


# -- GATHER, GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP ------------------------------------------------

def _gather_axes(attr: Callable[..., object], rank: int, index_rank: int, fail: Fail) -> tuple[int, int]:
    """GATHER's (axis, batch_dims), negative ones counted from the end (batch_dims over the
    indices' rank), with LiteRT's constraints ``batch_dims <= axis < rank``."""
    axis = int(attr("axis", 0) or 0)
    batch_dims = int(attr("batch_dims", 0) or 0)
    a = _axis(axis, rank, fail)
    b = batch_dims + index_rank if batch_dims < 0 else batch_dims
    if not 0 <= b <= min(a, index_rank):
        raise fail(f"batch_dims {batch_dims} does not fit axis {axis} and rank-{index_rank} indices")
    return a, b


@kernel("GATHER", int16=True)
def gather(ctx: OpContext) -> list[np.ndarray]:
    params, indices = ctx.x(0), ctx.x(1).astype(np.int64)
    axis, batch = _gather_axes(ctx.attr, params.ndim, indices.ndim, ctx.error)
    _check_indices(ctx, indices, params.shape[axis], "index")
    # (batch, outer, axis, inner) params and (batch, coords) indices -> (batch, outer, coords, inner)
    b = math.prod(params.shape[:batch])
    p = params.reshape(b, math.prod(params.shape[batch:axis]), params.shape[axis], -1)
    i = indices.reshape(b, -1)
    out = p[np.arange(b)[:, None, None], np.arange(p.shape[1])[None, :, None], i[:, None, :]]
    return [out.reshape(params.shape[:axis] + indices.shape[batch:] + params.shape[axis + 1:])]


@prepare_rule("GATHER", arity=(2, 2))
def _gather_rule(op: OpCheck) -> list[Shape]:
    x, idx = op.shape(0), op.shape(1)
    if x is None or idx is None:
        return [None]
    axis, batch = _gather_axes(op.attr, len(x), len(idx), op.fail)
    if x[:batch] != idx[:batch]:
        raise op.fail(f"the first {batch} dimensions of input {list(x)} and indices {list(idx)} differ")
    return [x[:axis] + idx[batch:] + x[axis + 1:]]


@kernel("GATHER_ND", int16=True)
def gather_nd(ctx: OpContext) -> list[np.ndarray]:
    params, indices = ctx.x(0), ctx.x(1).astype(np.int64)
    depth = indices.shape[-1]
    flat = indices.reshape(-1, depth)
    _check_indices(ctx, flat, np.asarray(params.shape[:depth]), "index")
    out = params[tuple(flat.T)]
    return [out.reshape(indices.shape[:-1] + params.shape[depth:])]


@prepare_rule("GATHER_ND", arity=(2, 2))
def _gather_nd_rule(op: OpCheck) -> list[Shape]:
    x, idx = op.shape(0), op.shape(1)
    if x is None or idx is None:
        return [None]
    if not x or not idx or idx[-1] > len(x):
        raise op.fail(f"indices {list(idx)} do not index input {list(x)}")
    return [idx[:-1] + x[idx[-1]:]]


@kernel("SCATTER_ND")
def scatter_nd(ctx: OpContext) -> list[np.ndarray]:
    indices, updates, shape = ctx.x(0).astype(np.int64), ctx.x(1), ints(ctx.x(2))
    check_size("its output", shape, updates.itemsize, ctx.error)
    depth = indices.shape[-1]
    flat = indices.reshape(-1, depth)
    _check_indices(ctx, flat, np.asarray(shape[:depth]), "index")
    out = np.zeros(shape, updates.dtype)
    rows = updates.reshape(len(flat), *shape[depth:])
    # in index order, as the reference loop: floats add in that order, integers wrap, bools or
    (np.logical_or if out.dtype == np.bool_ else np.add).at(out, tuple(flat.T), rows)
    return [out]


@prepare_rule("SCATTER_ND", arity=(3, 3))
def _scatter_nd_rule(op: OpCheck) -> list[Shape]:
    idx, upd, shape = op.shape(0), op.shape(1), op.ints(2, "shape")
    if shape is not None and any(d < 0 for d in shape):
        raise op.fail(f"shape {shape} has a negative dimension")
    if idx is None or upd is None or shape is None:
        return [None]
    outer = len(idx) - 1
    if not idx or idx[-1] > len(shape) or upd[:outer] != idx[:outer] or upd[outer:] != tuple(shape[idx[-1]:]):
        raise op.fail(f"indices {list(idx)} and updates {list(upd)} do not scatter into shape {shape}")
    return [tuple(shape)]


@kernel("EMBEDDING_LOOKUP", int16=True)
def embedding_lookup(ctx: OpContext) -> list[np.ndarray]:
    ids, table = ctx.x(0), ctx.x(1)
    _check_indices(ctx, ids, table.shape[0], "id")
    rows = table[ids]
    dtype = ctx.out_dtype()
    if dtype == table.dtype:
        return [rows]
    # hybrid: 8-bit rows times their scale (per tensor or per row), in float32
    q = ctx.in_quant(1)
    if dtype.kind != "f" or table.dtype.itemsize != 1 or q is None:
        raise ctx.error(f"{table.dtype} rows into a {dtype} output are not implemented")
    scale = q.scale.reshape(-1)
    scale = scale[ids] if scale.size > 1 else scale
    # LiteRT reads uint8 rows as int8 bytes too (its hybrid path takes the data as int8_t)
    return [rows.view(np.int8).astype(np.float32) * scale.reshape(-1, *[1] * (table.ndim - 1))]


@prepare_rule("EMBEDDING_LOOKUP", arity=(2, 2))
def _embedding_lookup_rule(op: OpCheck) -> list[Shape]:
    ids, table = op.rank(0, 1), op.shape(1)
    value = op.node.inputs[1]
    q = value.quant if value is not None else None
    if q is not None and q.scale.size and np.any(np.asarray(q.zero_point) != 0) \
            and op.node.outputs[0].dtype != value.dtype:
        raise op.fail("its 8-bit rows have a non-zero zero point, which LiteRT refuses")
    if ids is None or table is None:
        return [None]
    if len(table) < 2:
        raise op.fail(f"its table {list(table)} is not at least 2-D")
    if q is not None and q.scale.size > 1 and (q.scale.size != table[0] or q.axis != 0):
        raise op.fail(f"its table has {q.scale.size} scales along axis {q.axis} for {table[0]} rows")
    return [(ids[0], *table[1:])]


# -- DEPTH_TO_SPACE, SPACE_TO_DEPTH -----------------------------------------------------------------

@kernel("DEPTH_TO_SPACE")  # LiteRT has no int16 kernel
def depth_to_space(ctx: OpContext) -> list[np.ndarray]:
    x, b = ctx.x(0), int(ctx.attr("block_size"))
    n, h, w, c = x.shape
    y = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(n, h * b, w * b, c // (b * b))]


@kernel("SPACE_TO_DEPTH")  # LiteRT has no int16 kernel
def space_to_depth(ctx: OpContext) -> list[np.ndarray]:
    x, b = ctx.x(0), int(ctx.attr("block_size"))
    n, h, w, c = x.shape
    y = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(n, h // b, w // b, b * b * c)]


@prepare_rule("DEPTH_TO_SPACE", "SPACE_TO_DEPTH", arity=(1, 1))
def _depth_space_rule(op: OpCheck) -> list[Shape]:
    b = op.int_attr("block_size", 0, 1)
    x = op.rank(0, 4)
    if x is None:
        return [None]
    n, h, w, c = x
    if op.node.op == "DEPTH_TO_SPACE":
        if c % (b * b):
            raise op.fail(f"input {list(x)} has channels not a multiple of {b}x{b}")
        return [(n, h * b, w * b, c // (b * b))]
    if h % b or w % b:
        raise op.fail(f"input {list(x)} is not a whole number of {b}x{b} blocks")
    return [(n, h // b, w // b, c * b * b)]


# -- MIRROR_PAD, REVERSE_V2, REVERSE_SEQUENCE -------------------------------------------------------

def _mirror_pads(shape: tuple[int, ...], pads: list[int], mode: int, fail: Fail) -> list[tuple[int, int]]:
    """Each side at most the dimension (SYMMETRIC) or the dimension − 1 (REFLECT)."""
    if mode not in (MIRROR_REFLECT, MIRROR_SYMMETRIC):
        raise fail(f"mode {mode} is neither REFLECT (0) nor SYMMETRIC (1)")
    if len(pads) != 2 * len(shape):
        raise fail(f"paddings {pads} do not fit a rank-{len(shape)} input")
    pairs = list(zip(pads[::2], pads[1::2]))
    limit = [d - (mode == MIRROR_REFLECT) for d in shape]
    if any(not 0 <= p <= m for pair, m in zip(pairs, limit) for p in pair):
        raise fail(f"paddings {pads} exceed what input {list(shape)} can mirror "
                   f"({'REFLECT' if mode == MIRROR_REFLECT else 'SYMMETRIC'})")
    return pairs


@kernel("MIRROR_PAD", int16=True)
def mirror_pad(ctx: OpContext) -> list[np.ndarray]:
    x, mode = ctx.x(0), int(ctx.attr("mode", MIRROR_REFLECT) or 0)
    pairs = _mirror_pads(x.shape, ints(ctx.x(1)), mode, ctx.error)
    check_size("its output", [d + a + b for d, (a, b) in zip(x.shape, pairs)], x.itemsize, ctx.error)
    return [np.pad(x, pairs, mode="reflect" if mode == MIRROR_REFLECT else "symmetric")]


@prepare_rule("MIRROR_PAD", arity=(2, 2))
def _mirror_pad_rule(op: OpCheck) -> list[Shape]:
    if not _same_quant(op.node.inputs[0], op.node.outputs[0]):
        raise op.fail("its output is quantized differently from its input, which LiteRT refuses")
    x, pads = op.shape(0), op.ints(1, "paddings")
    if x is None or pads is None:
        return [None]
    pairs = _mirror_pads(x, pads, op.int_attr("mode", MIRROR_REFLECT), op.fail)
    return [tuple(d + a + b for d, (a, b) in zip(x, pairs))]


@kernel("REVERSE_V2", int16=True)
def reverse_v2(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    return [np.flip(x, _reverse_axes(ints(ctx.x(1)), x.ndim, ctx.error)).copy()]


def _reverse_axes(axes: list[int], rank: int, fail: Fail) -> tuple[int, ...]:
    """LiteRT reverses along distinct, contiguous axes only (after sorting)."""
    found = sorted(_axis(a, rank, fail) for a in axes)
    if any(b != a + 1 for a, b in itertools.pairwise(found)):
        raise fail(f"axes {axes} are not contiguous, which LiteRT does not implement")
    return tuple(found)


@prepare_rule("REVERSE_V2", arity=(2, 2))
def _reverse_rule(op: OpCheck) -> list[Shape]:
    x, axes = op.shape(0), op.ints(1, "axis")
    if x is not None and axes is not None:
        _reverse_axes(axes, len(x), op.fail)
    return [x]


@kernel("REVERSE_SEQUENCE", int16=True)
def reverse_sequence(ctx: OpContext) -> list[np.ndarray]:
    x, lengths = ctx.x(0), ctx.x(1).astype(np.int64)
    seq, batch = int(ctx.attr("seq_dim", 0) or 0), int(ctx.attr("batch_dim", 0) or 0)
    if np.any(lengths > x.shape[seq]):
        raise ctx.error(f"sequence lengths {lengths.tolist()} exceed axis {seq} of input {list(x.shape)}")
    # the first length[b] steps reversed; lengths <= 0 leave the row unchanged
    steps = np.arange(x.shape[seq])[None, :]
    src = np.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)  # (batch, seq)
    grid = src if batch < seq else src.T  # its two axes in the input's order
    shape = [x.shape[d] if d in (batch, seq) else 1 for d in range(x.ndim)]
    index = np.broadcast_to(grid.reshape(shape), x.shape)
    return [np.take_along_axis(x, index, axis=seq)]


@prepare_rule("REVERSE_SEQUENCE", arity=(2, 2))
def _reverse_sequence_rule(op: OpCheck) -> list[Shape]:
    x, lengths = op.shape(0), op.rank(1, 1)
    if x is None:
        return [None]
    seq, batch = op.int_attr("seq_dim", 0, 0, len(x) - 1), op.int_attr("batch_dim", 0, 0, len(x) - 1)
    if seq == batch:
        raise op.fail(f"seq_dim and batch_dim are both {seq}")
    if lengths is not None and lengths[0] != x[batch]:
        raise op.fail(f"{lengths[0]} sequence lengths for the {x[batch]} rows of input {list(x)}")
    return [x]


# -- BROADCAST_TO, FILL, ZEROS_LIKE, RANGE, RANK, WHERE (no ONES_LIKE: ones are FILL or BROADCAST_TO) ----------

def _broadcast_target(x: tuple[int, ...], shape: list[int], fail: Fail) -> tuple[int, ...]:
    if len(x) > len(shape) or len(shape) > 8 or any(d < 0 for d in shape):
        raise fail(f"input {list(x)} does not broadcast to {shape}")
    for have, want in zip(reversed(x), reversed(shape)):
        if have not in (1, want):
            raise fail(f"input {list(x)} does not broadcast to {shape}")
    return tuple(shape)


@kernel("BROADCAST_TO", int16=True)
def broadcast_to(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    shape = _broadcast_target(x.shape, ints(ctx.x(1)), ctx.error)
    check_size("its output", shape, x.itemsize, ctx.error)
    return [np.ascontiguousarray(np.broadcast_to(x, shape))]


@prepare_rule("BROADCAST_TO", arity=(2, 2))
def _broadcast_to_rule(op: OpCheck) -> list[Shape]:
    x, shape = op.shape(0), op.ints(1, "shape")
    return [None if x is None or shape is None else _broadcast_target(x, shape, op.fail)]


@kernel("FILL", int16=True)
def fill(ctx: OpContext) -> list[np.ndarray]:
    dims, value = ints(ctx.x(0)), ctx.x(1)
    if any(d < 0 for d in dims):
        raise ctx.error(f"dimensions {dims} hold a negative one")
    check_size("its output", dims, value.itemsize, ctx.error)
    return [np.full(dims, value.reshape(-1)[0], value.dtype)]


@prepare_rule("FILL", arity=(2, 2))
def _fill_rule(op: OpCheck) -> list[Shape]:
    op.rank(0, 1)
    op.rank(1, 0)
    if not _same_quant(op.node.inputs[1], op.node.outputs[0]):
        raise op.fail("its value and output are quantized differently, which LiteRT refuses")
    dims = op.ints(0, "dimensions")
    if dims is not None and any(d < 0 for d in dims):
        raise op.fail(f"dimensions {dims} hold a negative one")
    return [None if dims is None else tuple(dims)]


@kernel("ZEROS_LIKE")
def zeros_like(ctx: OpContext) -> list[np.ndarray]:
    return [np.zeros_like(ctx.x(0))]


@prepare_rule("ZEROS_LIKE", arity=(1, 1))
def _like_rule(op: OpCheck) -> list[Shape]:
    return [op.shape(0)]


@kernel("RANGE")
def range_(ctx: OpContext) -> list[np.ndarray]:
    dtype = ctx.out_dtype()
    start, limit, delta = (ctx.x(i).reshape(-1)[0].astype(dtype) for i in range(3))
    if delta == 0 or not ((start >= limit and delta < 0) or (start <= limit and delta > 0)):
        raise ctx.error(f"start {start}, limit {limit} and delta {delta} make no range")
    if dtype.kind == "f":
        count = int(np.ceil(np.abs((limit - start) / delta)))
    else:
        count = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    check_size("its output", [count], dtype.itemsize, ctx.error)
    # start, start + delta, (start + delta) + delta, ... accumulated in the output type
    steps = np.full(count, delta, dtype)
    steps[:1] = start
    with np.errstate(over="ignore"):
        return [np.add.accumulate(steps, dtype=dtype)]


@prepare_rule("RANGE", arity=(3, 3))
def _range_rule(op: OpCheck) -> list[Shape]:
    for i in range(3):
        op.rank(i, 0)
    return [None]


@kernel("RANK")
def rank(ctx: OpContext) -> list[np.ndarray]:
    return [np.asarray(ctx.x(0).ndim, ctx.out_dtype())]


@prepare_rule("RANK", arity=(1, 1))
def _rank_rule(op: OpCheck) -> list[Shape]:
    return [()]


@kernel("WHERE")
def where(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.ndim == 0:
        raise ctx.error("its condition is a scalar, which LiteRT refuses")
    return [np.argwhere(x != 0).astype(ctx.out_dtype())]


@prepare_rule("WHERE", arity=(1, 1))
def _where_rule(op: OpCheck) -> list[Shape]:
    x = op.shape(0)
    if x is not None and not x:
        raise op.fail("its condition is a scalar, which LiteRT refuses")
    return [None]

