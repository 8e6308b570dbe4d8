"""The remaining BUILTIN_REF operators, as LiteRT's reference kernels:

* ONE_HOT, BROADCAST_ARGS, UNIQUE, MATRIX_DIAG, MATRIX_SET_DIAG, SPARSE_TO_DENSE in the value
  types each LiteRT kernel takes (float32, int8, uint8, int32, int64; bool for ONE_HOT, int16 for
  MATRIX_DIAG and UNIQUE; quantized values are copied as integers);
* FAKE_QUANT, EMBEDDING_LOOKUP_SPARSE in float32; HASHTABLE_LOOKUP (int32 keys, numeric values).

Families of their own: L2_POOL_2D in :mod:`.pool`; REAL, IMAG, COMPLEX_ABS, RFFT2D in
:mod:`.complex_ops`; LSH_PROJECTION in :mod:`.lsh_projection`; RANDOM_UNIFORM,
RANDOM_STANDARD_NORMAL, MULTINOMIAL in :mod:`.random_ops`.

SKIP_GRAM is refused: its tensors are strings, which the interpreter does not compute with.
O(output size), but UNIQUE (O(n log n)).
"""

from __future__ import annotations

import numpy as np

from ._common import REFUSED, OpContext, ints, kernel, round_half_away
from .prepare import OpCheck, Shape, prepare_rule

REFUSED["SKIP_GRAM"] = ("it reads and writes string tensors; graphwright reads them from the file, but the "
                        "reference interpreter computes numeric, bool and complex tensors only")


@kernel("ONE_HOT")
def one_hot(ctx: OpContext) -> list[np.ndarray]:
    """on_value where the index equals the position along the new ``axis`` (out-of-range indices: none)."""
    indices, depth = ctx.x(0), ints(ctx.x(1))
    if len(depth) != 1 or depth[0] < 0:
        raise ctx.error(f"depth {depth} is not one non-negative value")
    axis = int(ctx.attr("axis", -1))
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    if not 0 <= axis <= indices.ndim:
        raise ctx.error(f"axis {ctx.attr('axis')} is out of range for indices of rank {indices.ndim}")
    positions = np.arange(depth[0]).reshape((-1,) + (1,) * (indices.ndim - axis))
    hit = np.expand_dims(indices, axis) == positions
    on, off = ctx.x(2).reshape(-1)[0], ctx.x(3).reshape(-1)[0]
    return [np.where(hit, on, off).astype(ctx.out_dtype())]


@kernel("BROADCAST_ARGS")
def broadcast_args(ctx: OpContext) -> list[np.ndarray]:
    """The broadcast of two shapes (numpy's rule, as LiteRT's kernel)."""
    a, b = ints(ctx.x(0)), ints(ctx.x(1))
    try:
        shape = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        raise ctx.error(f"shapes {a} and {b} do not broadcast") from None
    return [np.asarray(shape, ctx.out_dtype())]


@kernel("UNIQUE")
def unique(ctx: OpContext) -> list[np.ndarray]:
    """The distinct values in order of first appearance, and each element's index among them."""
    x = ctx.x(0)
    if x.ndim != 1:
        raise ctx.error(f"its input has shape {list(x.shape)}; LiteRT's kernel takes a 1-D tensor")
    _, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return [x[np.sort(first)], rank[inverse.reshape(-1)].astype(ctx.out_dtype(1))]


@kernel("MATRIX_DIAG")
def matrix_diag(ctx: OpContext) -> list[np.ndarray]:
    """[..., N] -> [..., N, N] with the input on the diagonal, zeros elsewhere."""
    x = ctx.x(0)
    out = np.zeros((*x.shape, x.shape[-1]), x.dtype)
    n = x.shape[-1]
    out[..., np.arange(n), np.arange(n)] = x
    return [out]


@kernel("MATRIX_SET_DIAG")
def matrix_set_diag(ctx: OpContext) -> list[np.ndarray]:
    """[..., M, N] with its main diagonal replaced by the second input [..., min(M, N)]."""
    x, diagonal = ctx.x(0), ctx.x(1)
    n = min(x.shape[-2:])
    if diagonal.shape != (*x.shape[:-2], n):
        raise ctx.error(f"diagonal {list(diagonal.shape)} does not fit input {list(x.shape)}")
    out = x.copy()
    out[..., np.arange(n), np.arange(n)] = diagonal
    return [out]


@kernel("SPARSE_TO_DENSE")
def sparse_to_dense(ctx: OpContext) -> list[np.ndarray]:
    """default_value everywhere, then each index (a scalar, a vector of 1-D indices or [N, rank] rows)
    set to its value (one value for all, or one each) in order; out-of-range indices refused."""
    indices, shape, values, default = ctx.x(0), ints(ctx.x(1)), ctx.x(2), ctx.x(3)
    out = np.full(shape, default.reshape(-1)[0], ctx.out_dtype())
    rows = indices.reshape(-1, 1) if indices.ndim < 2 else indices
    if rows.shape[1] != len(shape) or values.size not in (1, rows.shape[0]):
        raise ctx.error(f"indices {list(indices.shape)}, values {list(values.shape)} do not fit "
                        f"output shape {shape}")
    if rows.size and (np.any(rows < 0) or np.any(rows >= np.asarray(shape))):
        raise ctx.error(f"an index is out of range for output shape {shape}")
    out[tuple(rows.T)] = np.broadcast_to(values.reshape(-1), (rows.shape[0],))
    return [out]


def _nudged(low: float, high: float, bits: int) -> tuple[np.float32, np.float32, np.float32]:
    """LiteRT's FakeQuant Nudge on the grid 0 .. 2^bits - 1: (min, max, scale) moved so that
    real 0 is a grid point (float32)."""
    f32 = np.float32
    qmin, qmax = f32(0), f32((1 << bits) - 1)
    scale = (f32(high) - f32(low)) / (qmax - qmin)
    zero_from_min = qmin - f32(low) / scale
    zero = qmin if zero_from_min < qmin else qmax if zero_from_min > qmax else f32(round_half_away(zero_from_min))
    return (qmin - zero) * scale, (qmax - zero) * scale, scale


@kernel("FAKE_QUANT")
def fake_quant(ctx: OpContext) -> list[np.ndarray]:
    """Clamp to the nudged range, snap to its grid: round((x - min) / scale) * scale + min (float32)."""
    x = ctx.x(0)
    if x.dtype != np.float32:
        raise ctx.error(f"its input is {x.dtype}; LiteRT's kernel takes float32")
    low, high, scale = _nudged(float(ctx.attr("min", 0.0)), float(ctx.attr("max", 0.0)), int(ctx.attr("num_bits", 8)))
    shifted = np.minimum(high, np.maximum(low, x)) - low
    snapped = round_half_away(shifted * (np.float32(1) / scale))
    return [(snapped * scale + low).astype(np.float32)]


@kernel("EMBEDDING_LOOKUP_SPARSE")
def embedding_lookup_sparse(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: each lookup adds its row of the table times its weight (float32, in
    order) into the output bucket its index row (all but the last index) names; a bucket is
    divided by the sum of its weights (mean) or their root sum of squares (sqrtn) when the
    lookups move on to another bucket — so a bucket met twice apart is divided twice, as LiteRT's."""
    ids, indices, dense, weights, table = (ctx.x(i) for i in range(5))
    combiner = int(ctx.attr("combiner", 0) or 0)
    dense_shape = ints(dense)
    if indices.ndim != 2 or indices.shape[1] != len(dense_shape) or not len(ids) == len(indices) == len(weights):
        raise ctx.error(f"ids {list(ids.shape)}, indices {list(indices.shape)}, dense shape {dense_shape} and "
                        f"weights {list(weights.shape)} do not fit")
    buckets, row = dense_shape[:-1], int(np.prod(table.shape[1:]))
    out = np.zeros((int(np.prod(buckets)), row), np.float32)
    rows = table.reshape(len(table), row)

    def finish(bucket: int, count: int, total: np.float32, squares: np.float32) -> None:
        if combiner != 0 and count:
            out[bucket] /= total if combiner == 1 else np.sqrt(squares)

    current, count, total, squares = 0, 0, np.float32(0), np.float32(0)
    for i, idx in enumerate(ints(ids)):
        where = ints(indices[i, :-1])
        if not 0 <= idx < len(table) or any(not 0 <= v < d for v, d in zip(where, buckets)):
            raise ctx.error(f"lookup {i} (id {idx}, index {ints(indices[i])}) is out of range (LiteRT refuses it)")
        bucket = int(np.ravel_multi_index(where, buckets)) if buckets else 0
        if bucket != current:
            finish(current, count, total, squares)
            current, count, total, squares = bucket, 0, np.float32(0), np.float32(0)
        w = np.float32(weights[i])
        count, total, squares = count + 1, total + w, squares + w * w
        out[bucket] += rows[idx] * w
    finish(current, count, total, squares)
    return [out.reshape(*buckets, *table.shape[1:])]


@kernel("HASHTABLE_LOOKUP")
def hashtable_lookup(ctx: OpContext) -> list[np.ndarray]:
    """Each lookup key found in the sorted ``keys`` by C's ``bsearch`` (glibc's halving, so
    unsorted keys give LiteRT's answers too) -> its value row, hit 1; else zeros, hit 0."""
    lookups, keys, values = ctx.x(0), ints(ctx.x(1)), ctx.x(2)
    out = np.zeros((len(lookups), *values.shape[1:]), values.dtype)
    hits = np.zeros(len(lookups), np.uint8)
    for i, key in enumerate(ints(lookups)):
        low, high = 0, len(keys)
        while low < high:
            mid = (low + high) // 2
            if key < keys[mid]:
                high = mid
            elif key > keys[mid]:
                low = mid + 1
            else:
                out[i], hits[i] = values[mid], 1
                break
    return [out, hits]


# -- prepare checks ---------------------------------------------------------------------------------

#: the value types LiteRT's ONE_HOT and SPARSE_TO_DENSE kernels take (no int16: LiteRT fails on it)
_VALUE_TYPES = ("float32", "int32", "int64", "int8", "uint8")


def _value_type(op: OpCheck, types: tuple[str, ...]) -> None:
    out = op.node.outputs[0]
    if out.dtype is not None and out.dtype.value not in types:
        raise op.fail(f"its values are {out.dtype.value}; LiteRT's kernel takes {', '.join(types)}")


@prepare_rule("ONE_HOT", arity=(4, 4))
def _one_hot_shape(op: OpCheck) -> list[Shape]:
    _value_type(op, (*_VALUE_TYPES, "bool"))
    x, depth = op.shape(0), op.ints(1, "depth")
    if x is None or depth is None:
        return [None]
    axis = op.int_attr("axis", -1, -1, len(x))  # LiteRT: -1 (last) or 0 .. rank
    axis = len(x) if axis < 0 else axis
    return [(*x[:axis], max(depth[0], 0), *x[axis:])]


@prepare_rule("BROADCAST_ARGS", arity=(2, 2))
def _broadcast_args_shape(op: OpCheck) -> list[Shape]:
    a, b = op.rank(0, 1), op.rank(1, 1)
    return [None if a is None or b is None else (max(a[0], b[0]),)]


@prepare_rule("UNIQUE", arity=(1, 1), outputs=2)  # values, indices
def _unique_shape(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    x = op.rank(0, 1)
    return [None, x]


@prepare_rule("MATRIX_DIAG", arity=(1, 1))
def _matrix_diag_shape(op: OpCheck) -> list[Shape]:
    x = op.shape(0)
    if x is not None and not x:
        raise op.fail("its input is a scalar")
    return [None if x is None else (*x, x[-1])]


@prepare_rule("MATRIX_SET_DIAG", arity=(2, 2))
def _matrix_set_diag_shape(op: OpCheck) -> list[Shape]:
    x, d = op.shape(0), op.shape(1)
    if x is not None and (len(x) < 2 or (d is not None and d != (*x[:-2], min(x[-2:])))):
        raise op.fail(f"input {list(x)} and diagonal {list(d or ())} do not fit")
    return [x]


@prepare_rule("SPARSE_TO_DENSE", arity=(4, 4))
def _sparse_to_dense_shape(op: OpCheck) -> list[Shape]:
    _value_type(op, _VALUE_TYPES)
    op.rank(0, 0, 1, 2)
    shape = op.ints(1, "output_shape")
    return [None if shape is None else tuple(shape)]


@prepare_rule("FAKE_QUANT", arity=(1, 1))
def _fake_quant_shape(op: OpCheck) -> list[Shape]:
    op.int_attr("num_bits", 8, 1, 16)
    low, high = float(op.attr("min", 0.0) or 0.0), float(op.attr("max", 0.0) or 0.0)
    if not low < high:
        raise op.fail(f"its range [{low}, {high}] is empty")
    if op.attr("narrow_range"):
        raise op.fail("narrow_range is set, which LiteRT's kernel refuses on activations")
    return [op.shape(0)]


@prepare_rule("EMBEDDING_LOOKUP_SPARSE", arity=(5, 5))
def _embedding_lookup_sparse_shape(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("ids", "indices", "dense shape", "weights", "table")):
        op.need(i, what)
    for i, dtype in ((0, "int32"), (1, "int32"), (2, "int32"), (3, "float32"), (4, "float32")):
        value = op.node.inputs[i]
        if value is not None and value.dtype is not None and value.dtype.value != dtype:
            raise op.fail(f"input {i} is {value.dtype.value}; LiteRT's kernel takes {dtype}")
    op.int_attr("combiner", 0, 0, 2)  # sum, mean, sqrtn
    for i, rank in ((0, 1), (1, 2), (2, 1), (3, 1)):
        op.rank(i, rank)
    table, dense = op.shape(4), op.ints(2, "dense shape")
    if table is not None and len(table) < 2:
        raise op.fail(f"its table {list(table)} is not at least 2-D")
    return [None if table is None or dense is None else (*dense[:-1], *table[1:])]


@prepare_rule("HASHTABLE_LOOKUP", arity=(3, 3), outputs=2)  # values, hits
def _hashtable_lookup_shape(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("lookups", "keys", "values")):
        op.need(i, what)
    lookups, keys, values = op.rank(0, 1), op.rank(1, 1), op.shape(2)
    if keys is not None and values is not None and (not values or values[0] != keys[0]):
        raise op.fail(f"keys {list(keys)} and values {list(values)} do not fit")
    if lookups is None or values is None:
        return [None, None]
    return [(lookups[0], *values[1:]), lookups]
