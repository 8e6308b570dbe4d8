"""Reductions and selections: SUM, REDUCE_MAX/MIN/PROD/ANY/ALL, ARG_MAX/ARG_MIN, TOPK_V2,
CUMSUM — as TFLite's reference kernels (``BUILTIN_REF``).

Reductions take their axes from input 1 (negative axes count from the end, repeats are
ignored) and keep the reduced dimensions as 1 with ``keep_dims``.

* Plain types (float32, int32, int64, bool, unquantized int8/int16): sums and products
  wrap in the input's integer type as the C loops do; float sums and products are taken
  in float32 in input order, as LiteRT's loops (so they round and overflow where LiteRT's do).
  MAX/MIN start from the type's lowest/highest value, so NaNs never win (when every axis
  is reduced LiteRT starts from the first element instead: a leading NaN stays).
* Quantized SUM (int8, uint8, int16 with zero points 0), as LiteRT's integer
  ``QuantizedMeanOrSum``: ``clamp(MBQM(Σq − zp_in·n, M) + zp_out)``, ``M = s_in/s_out``
  quantized to ``(m, shift)`` in double, ``n`` the number of reduced elements.
  (LiteRT's ``BUILTIN_REF`` SUM reads int8/int16 tensors as uint8 bytes — a bug; its default
  kernels and TFLite Micro compute this formula, see the tests.)
* Quantized REDUCE_MAX/MIN: in and out share scale and zero point (LiteRT refuses others):
  the max/min of the integers.
* Quantized REDUCE_PROD (int8, int16): each product step is rescaled so the accumulator
  cannot overflow, with ``M = s_in / s_out^(1/n)`` (double): ``p = q₀ − zp_in``, then
  ``p = MBQM64(p·(qᵢ − zp_in), M)`` for each further element in input order, and the output
  ``clamp(MBQM64(p, M) + zp_out)`` (MBQM64: TFLite's int64 multiplier, 15-bit rounding).
* ARG_MAX/ARG_MIN: the first index of the extreme along the axis (ties: first); NaNs never
  win, an all-NaN slice gives 0.  Indices int32 or int64.
* TOPK_V2: the k largest along the last axis, sorted descending, ties by lower index,
  NaNs last; indices int32 or int16.
* CUMSUM (float32, int32, int64): running sums along the axis in the input's type (floats
  in float32, input order), ``exclusive`` (shifted by one, starting at 0) and/or ``reverse``.

Costs: O(size of the input) per reduction (REDUCE_PROD quantized: one pass per reduced
element, vectorised over the outputs), TOPK_V2 O(n log n) per row.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import OpContext, Quant, ints, kernel, reduce_in_order, type_range
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_int64,
    quantize_multiplier,
    wrap_int32,
)
from .prepare import OpCheck, Shape, prepare_rule

__all__: list[str] = []

_REDUCERS = ("SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL")


def _axes(ctx: OpContext, x: np.ndarray) -> tuple[int, ...]:
    """The reduced axes of ``x``: input 1 resolved (negative from the end, repeats dropped), sorted."""
    if x.ndim == 0:
        return ()
    axes = ints(ctx.x(1))
    if any(not -x.ndim <= a < x.ndim for a in axes):
        raise ctx.error(f"axes {axes} do not fit a rank-{x.ndim} input")
    return tuple(sorted({a % x.ndim for a in axes}))


def _single_axis(ctx: OpContext, x: np.ndarray) -> int:
    """The one axis input 1 names (negative from the end), of a non-scalar ``x``."""
    axis = ints(ctx.x(1))
    if x.ndim == 0 or len(axis) != 1 or not -x.ndim <= axis[0] < x.ndim:
        raise ctx.error(f"axis {axis} does not fit a rank-{x.ndim} input")
    return axis[0] % x.ndim


def _quantized(ctx: OpContext, x: np.ndarray) -> tuple[Quant, Quant] | None:
    """(input, output) quantization of an integer reduction whose input is quantized, else None."""
    q_in = ctx.in_quant(0)
    if x.dtype.kind not in "iu" or x.dtype.itemsize > 2 or q_in is None:
        return None
    q_out = ctx.out_quant()
    if q_out is None:
        raise ctx.error("a quantized input with an unquantized output")
    return q_in, q_out


@kernel("SUM", "REDUCE_PROD", int16=True)
def sum_or_prod(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    axes = _axes(ctx, x)
    keep = bool(ctx.attr("keep_dims", False))
    dtype = ctx.out_dtype()
    quant = _quantized(ctx, x)
    prod = ctx.node.op == "REDUCE_PROD"
    if quant is not None:
        return [_quantized_prod(ctx, x, axes, keep, quant) if prod else _quantized_sum(ctx, x, axes, keep, quant)]
    reduce = np.prod if prod else np.sum
    if x.dtype.kind == "f":
        return [reduce_in_order(x, axes, keep, product=prod).astype(dtype)]
    if x.dtype == np.bool_:
        raise ctx.error("it does not add or multiply booleans")
    return [np.asarray(reduce(x, axis=axes, keepdims=keep, dtype=x.dtype)).astype(dtype)]  # wraps as C does


def _quantized_sum(ctx: OpContext, x: np.ndarray, axes: tuple[int, ...], keep: bool,
                   quant: tuple[Quant, Quant]) -> np.ndarray:
    q_in, q_out = quant
    n = math.prod(x.shape[a] for a in axes)
    key = ("sum", n)
    derived = ctx.cache.get(key)
    if derived is None:
        m, shift = quantize_multiplier(float(np.float64(np.float32(q_in.s)) / np.float64(np.float32(q_out.s))))
        derived = ctx.cache[key] = (m, shift)
    m, shift = derived
    total = wrap_int32(np.sum(x, axis=axes, keepdims=keep, dtype=np.int64))  # LiteRT's int32 accumulator
    if x.size == 0:  # LiteRT leaves its zeroed output
        return np.zeros(total.shape, x.dtype)
    y = multiply_by_quantized_multiplier(wrap_int32(total - q_in.zp * n), m, shift, ctx.rounding) + q_out.zp
    lo, hi = type_range(x.dtype)
    return np.clip(y, lo, hi).astype(x.dtype)


def _quantized_prod(ctx: OpContext, x: np.ndarray, axes: tuple[int, ...], keep: bool,
                    quant: tuple[Quant, Quant]) -> np.ndarray:
    q_in, q_out = quant
    kept = [a for a in range(x.ndim) if a not in axes]
    rows = np.moveaxis(x, list(axes), list(range(x.ndim - len(axes), x.ndim)))  # reduced axes last, in order
    rows = rows.reshape(*[x.shape[a] for a in kept], -1).astype(np.int64) - q_in.zp
    n = rows.shape[-1]
    out_shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape)) if keep else \
        tuple(x.shape[a] for a in kept)
    if n == 0:
        return np.zeros(out_shape, x.dtype)
    key = ("prod", n)
    derived = ctx.cache.get(key)
    if derived is None:
        scaling = float(np.float32(q_in.s)) / math.pow(float(np.float32(q_out.s)), 1.0 / n)
        derived = ctx.cache[key] = quantize_multiplier(scaling)
    m, shift = derived
    acc = rows[..., 0]
    for i in range(1, n):
        acc = multiply_by_quantized_multiplier_int64(acc * rows[..., i], m, shift)
    y = multiply_by_quantized_multiplier_int64(acc, m, shift) + q_out.zp
    lo, hi = type_range(x.dtype)
    return np.clip(y, lo, hi).astype(x.dtype).reshape(out_shape)


@kernel("REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL", int16=True)
def extreme(ctx: OpContext) -> list[np.ndarray]:
    """Max/min (any/all on booleans) over the axes; quantized tensors compare their integers."""
    x = ctx.x(0)
    axes = _axes(ctx, x)
    keep = bool(ctx.attr("keep_dims", False))
    largest = ctx.node.op in ("REDUCE_MAX", "REDUCE_ANY")
    if x.dtype == np.bool_:
        return [np.asarray(np.any(x, axis=axes, keepdims=keep) if largest else np.all(x, axis=axes, keepdims=keep))]
    if ctx.node.op in ("REDUCE_ANY", "REDUCE_ALL"):
        raise ctx.error(f"its input is {x.dtype}, not bool")
    info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
    start = info.min if largest else info.max  # C's numeric_limits lowest() / max()
    ufunc = np.fmax if largest else np.fmin  # never picks a NaN over a number, as ``in > current`` does
    if len(axes) == x.ndim and x.size:  # LiteRT starts from the first element
        start = x.reshape(-1)[0]
        if x.dtype.kind == "f" and np.isnan(start):
            return [np.full([1] * x.ndim if keep else [], np.nan, x.dtype)]
    return [np.asarray(ufunc.reduce(x, axis=axes, keepdims=keep, initial=start)).astype(x.dtype)]


@kernel("ARG_MAX", "ARG_MIN")
def arg_extreme(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    a = _single_axis(ctx, x)
    dtype = ctx.out_dtype()
    if dtype not in (np.int32, np.int64):
        raise ctx.error(f"its output type is {dtype}, not int32 or int64")
    largest = ctx.node.op == "ARG_MAX"
    if x.dtype.kind != "f":
        return [(np.argmax(x, axis=a) if largest else np.argmin(x, axis=a)).astype(dtype)]  # first of ties
    valid = ~np.isnan(x)
    filled = np.where(valid, x, -np.inf if largest else np.inf)
    best = filled.max(axis=a, keepdims=True) if largest else filled.min(axis=a, keepdims=True)
    return [np.argmax(valid & (x == best), axis=a).astype(dtype)]  # first hit; all-NaN: 0


@kernel("TOPK_V2")
def top_k(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    k = ints(ctx.x(1))
    if x.ndim == 0 or len(k) != 1:
        raise ctx.error(f"k {k} is not one value, or the input is a scalar")
    count = max(k[0], 0)
    if count > x.shape[-1]:
        raise ctx.error(f"k {count} is larger than the last dimension of input {list(x.shape)}")
    index_dtype = ctx.out_dtype(1)
    descending = -x if x.dtype.kind == "f" else ~x  # order-reversing; NaN stays NaN and sorts last
    order = np.argsort(descending, axis=-1, kind="stable")[..., :count]  # stable: ties by index
    return [np.take_along_axis(x, order, axis=-1), order.astype(index_dtype)]


@kernel("CUMSUM")
def cumsum(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    a = _single_axis(ctx, x)
    reverse, exclusive = bool(ctx.attr("reverse", False)), bool(ctx.attr("exclusive", False))
    v = np.flip(x, axis=a) if reverse else x
    out = np.cumsum(v, axis=a, dtype=x.dtype)  # sequential, in the input's type (wraps)
    if exclusive:  # each running sum moves one step on, the first is 0
        shifted = np.zeros_like(out)
        later, earlier = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        later[a], earlier[a] = slice(1, None), slice(None, -1)
        shifted[tuple(later)] = out[tuple(earlier)]
        out = shifted
    return [np.ascontiguousarray(np.flip(out, axis=a) if reverse else out)]


# -- prepare checks ------------------------------------------------------------------------------


def _quant_of(op: OpCheck, i: int | None) -> tuple[float, int] | None:
    """(scale, zero point) of a quantized integer tensor (input i, or the output for None)."""
    value = op.node.outputs[0] if i is None else op.node.inputs[i]
    if value is None or value.quant is None or value.quant.scale.size == 0 or value.dtype is None \
            or value.dtype.numpy is None or np.dtype(value.dtype.numpy).kind not in "iu":
        return None
    zp = value.quant.zero_point
    return float(np.float32(value.quant.scale.reshape(-1)[0])), int(zp.reshape(-1)[0]) if zp.size else 0


def _reduced(op: OpCheck, x: Shape, axes: list[int] | None) -> Shape:
    if x is None or axes is None:
        return None
    if not x:
        return ()
    if any(not -len(x) <= a < len(x) for a in axes):
        raise op.fail(f"axes {axes} do not fit a rank-{len(x)} input")
    reduced = {a % len(x) for a in axes}
    if op.attr("keep_dims", False):
        return tuple(1 if i in reduced else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in reduced)


@prepare_rule(*_REDUCERS, arity=(2, 2))
def _reduction(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "axes")
    q_in, q_out = _quant_of(op, 0), _quant_of(op, None)
    value = op.node.inputs[0]
    dtype = np.dtype(value.dtype.numpy) if value is not None and value.dtype is not None \
        and value.dtype.numpy is not None else None
    if q_in is not None and q_out is None:
        raise op.fail("its input is quantized but its output is not")
    if q_in is not None and q_out is not None:
        if dtype == np.int16 and (q_in[1] or q_out[1]):
            raise op.fail(f"int16 zero points must be 0 (input {q_in[1]}, output {q_out[1]})")
        if op.node.op == "REDUCE_PROD" and dtype == np.uint8:
            raise op.fail("LiteRT's kernel multiplies quantized int8 and int16 only, not uint8")
        if op.node.op in ("REDUCE_MAX", "REDUCE_MIN") and q_in != q_out:
            raise op.fail(f"input (scale {q_in[0]}, zero point {q_in[1]}) and output (scale {q_out[0]}, zero "
                          f"point {q_out[1]}) quantization differ; LiteRT's kernel needs them equal")
    return [_reduced(op, op.shape(0), op.ints(1, "axes"))]


def _axis(op: OpCheck, x: Shape) -> int | None:
    axis = op.ints(1, "axis")
    if x is None or axis is None:
        return None
    if not x or len(axis) != 1 or not -len(x) <= axis[0] < len(x):
        raise op.fail(f"axis {axis} does not fit input {list(x)}")
    return axis[0] % len(x)


def _input_type(op: OpCheck, types: tuple[str, ...]) -> None:
    """Refuse an input 0 of a type LiteRT's kernel does not take."""
    value = op.node.inputs[0]
    if value is not None and value.dtype is not None and value.dtype.value not in types:
        raise op.fail(f"its input is {value.dtype.value}; LiteRT's kernel takes {', '.join(types)}")


@prepare_rule("ARG_MAX", "ARG_MIN", arity=(2, 2))
def _arg_extreme(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "axis")
    _input_type(op, ("float32", "uint8", "int8", "int32", "bool"))
    x = op.shape(0)
    a = _axis(op, x)
    return [None if a is None or x is None else (*x[:a], *x[a + 1:])]


@prepare_rule("CUMSUM", arity=(2, 2))
def _cumsum(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "axis")
    _input_type(op, ("float32", "int32", "int64"))
    x = op.shape(0)
    _axis(op, x)
    return [x]


@prepare_rule("TOPK_V2", arity=(2, 2), outputs=2)  # values, indices
def _top_k(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "k")
    _input_type(op, ("float32", "uint8", "int8", "int16", "int32", "int64"))
    x, k = op.shape(0), op.ints(1, "k")
    if x is not None and not x:
        raise op.fail("its input is a scalar")
    if x is None or k is None:
        return [None, None]
    if len(k) != 1:
        raise op.fail(f"k {k} is not one value")
    if k[0] > x[-1]:
        raise op.fail(f"k {k[0]} is larger than the last dimension of input {list(x)}")
    out = (*x[:-1], max(k[0], 0))
    return [out, out]
