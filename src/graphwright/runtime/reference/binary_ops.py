"""Binary arithmetic beyond ADD/SUB/MUL (DIV, FLOOR_DIV, FLOOR_MOD, POW, MAXIMUM, MINIMUM,
SQUARED_DIFFERENCE), the comparisons, LOGICAL_AND/OR/NOT, SELECT/SELECT_V2 and CAST, as LiteRT's
reference kernels compute them.

Operands broadcast as numpy does, up to rank 8 (LiteRT's broadcast loop; SELECT_V2 checks
rank 8 in its Prepare).  Float results are computed in float32; integer ones exactly, wrapping
where the C kernels wrap.  The quantized kernels:

* comparisons of 8-bit (and EQUAL / NOT_EQUAL of int16) tensors compare both sides rescaled to
  a common scale: ``MBQM((x − zp)·2^8, scale)`` with each input's own scale as the multiplier;
* SQUARED_DIFFERENCE int8: ``d = MBQM((x1 − zp1)·2^7, s1/t) − MBQM((x2 − zp2)·2^7, s2/t)`` with
  ``t = 2·max(s1, s2)``, then ``y = MBQM(d², t²/(2^14·s_out)) + zp_out``;
* DIV (8-bit, int16): a Q0.31 reciprocal of the divisor times the dividend, then
  ``s1/(s2·s_out)`` (see :func:`_div_quantized`);
* MAXIMUM, MINIMUM, SELECT and SELECT_V2 move stored values (the converter gives operands and
  output one scale).

All O(n) in the output elements.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, OpContext, clamp_cast, kernel, type_range
from .elementwise import _f64, _mbqm
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from .gemmlowp import clz32, one_over_one_plus_x
from .prepare import OpCheck, Shape, broadcast_shape, prepare_rule

#: the highest rank LiteRT's broadcasting loop accepts (a larger one aborts the C kernel)
MAX_BROADCAST_RANK = 8
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _activation_bounds(ctx: OpContext, dtype: np.dtype) -> tuple[float, float]:
    """LiteRT's CalculateActivationRange for an unquantized output: the activation's interval,
    else the type's whole range (±FLT_MAX for float32, so an overflow clamps, never gives inf)."""
    act = int(ctx.attr("fused_activation_function", ACT_NONE) or 0)
    bounds = {ACT_RELU: (0, math.inf), ACT_RELU6: (0, 6), ACT_RELU_N1_TO_1: (-1, 1), ACT_NONE: (-math.inf, math.inf)}
    if act not in bounds:
        raise ctx.error(f"fused activation {act} is not implemented")
    lo, hi = bounds[act]
    tmin, tmax = (-_FLOAT32_MAX, _FLOAT32_MAX) if dtype.kind == "f" else type_range(dtype)
    return max(lo, tmin), min(hi, tmax)


def _wrap(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Two's-complement wrap of exact integers into ``dtype`` (the C kernels' overflow)."""
    return np.asarray(x).astype(np.int64).astype(dtype)


def _operands(ctx: OpContext) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    a, b = ctx.x(0), ctx.x(1)
    if a.dtype != b.dtype:
        raise ctx.error(f"its inputs have types {a.dtype} and {b.dtype}; they must match")
    return a, b, a.dtype


def _nonzero_divisor(ctx: OpContext, b: np.ndarray) -> None:
    if np.any(b == 0):
        raise ctx.error("its divisor holds a zero (LiteRT's kernel fails with 'Division by 0')")


@kernel("DIV", int16=True)
def div(ctx: OpContext) -> list[np.ndarray]:
    """Float32 ``a / b`` (a zero divisor gives ±FLT_MAX, clamped like any result), int32
    ``a / b`` truncated toward zero as C divides, both clamped to the fused activation; 8-bit
    and int16 quantized (:func:`_div_quantized`)."""
    a, b, dtype = _operands(ctx)
    lo, hi = _activation_bounds(ctx, dtype)
    if dtype == np.float32:
        return [np.clip(a / b, lo, hi).astype(dtype)]
    if dtype == np.int32 and ctx.in_quant(0) is None:
        _nonzero_divisor(ctx, b)
        x, y = a.astype(np.int64), b.astype(np.int64)
        q = np.abs(x) // np.abs(y) * np.where((x < 0) == (y < 0), 1, -1)
        return [np.clip(_wrap(q, dtype), lo, hi).astype(dtype)]
    if dtype in (np.int8, np.uint8, np.int16):
        return [_div_quantized(ctx, a, b, dtype)]
    raise ctx.error(f"DIV of {dtype} is not implemented")


def _div_quantized(ctx: OpContext, a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """LiteRT's quantized DIV: with ``x = a − zp1``, ``y = b − zp2`` (signs moved so ``y > 0``),
    ``1/y`` as a Q0.31 reciprocal of ``y`` normalised to [1, 2) (gemmlowp's Newton-Raphson
    ``one_over_one_plus_x``), ``x`` shifted left by its redundant sign bits, multiplied by it,
    then by ``s1/(s2·s_out)`` (float32) with the shifts combined; clamped to the activation.
    Where the combined right shift exceeds 31 (a tiny dividend over a large divisor, with a small
    ``s1/(s2·s_out)``) C's shift is undefined and LiteRT's x86 build gives nonsense; this gives
    the rounded quotient."""
    q1, q2, qo = ctx.in_quant(0), ctx.in_quant(1), ctx.out_quant()
    if q1 is None or q2 is None or qo is None:
        raise ctx.error(f"{dtype} tensors without quantization parameters")
    multiplier = ctx.cache.get("div_multiplier")
    if multiplier is None:
        real = np.float32(np.float32(q1.s) / np.float32(np.float32(q2.s) * np.float32(qo.s)))
        multiplier = ctx.cache["div_multiplier"] = quantize_multiplier(float(real))
    m, shift = multiplier
    x, y = np.broadcast_arrays(a.astype(np.int64) - q1.zp, b.astype(np.int64) - q2.zp)
    if np.any(y == 0):
        raise ctx.error("its divisor holds its zero point (LiteRT's kernel refuses a division by 0)")
    x, y = np.where(y < 0, -x, x), np.abs(y)
    leading = clz32(y)
    reciprocal = one_over_one_plus_x((y << leading) - (1 << 31))
    headroom = clz32(x ^ (x >> 63)) - 1  # redundant sign bits of the int32 x (31 for 0)
    unscaled = multiply_by_quantized_multiplier(x, reciprocal, headroom, ctx.rounding)
    out = multiply_by_quantized_multiplier(unscaled, m, shift - (31 - leading) - headroom, ctx.rounding) + qo.zp
    return clamp_cast(ctx, out, dtype)


@kernel("FLOOR_DIV")
def floor_div(ctx: OpContext) -> list[np.ndarray]:
    """``floor(double(a) / double(b))`` cast back to the type (exact integer floor division
    for the integer types); a zero divisor is refused, as LiteRT's kernel does."""
    a, b, dtype = _operands(ctx)
    if dtype.kind not in "fi":
        raise ctx.error(f"FLOOR_DIV of {dtype} is not implemented")
    _nonzero_divisor(ctx, b)
    if dtype.kind == "f":
        return [np.floor(a.astype(np.float64) / b.astype(np.float64)).astype(dtype)]
    return [_wrap(np.floor_divide(a.astype(np.int64), b.astype(np.int64)), dtype)]


@kernel("FLOOR_MOD")
def floor_mod(ctx: OpContext) -> list[np.ndarray]:
    """The C remainder (``%``, or ``fmodf`` for float32), plus the divisor when it is non-zero
    and its sign differs from the divisor's; a zero divisor is refused."""
    a, b, dtype = _operands(ctx)
    if dtype.kind not in "fi":
        raise ctx.error(f"FLOOR_MOD of {dtype} is not implemented")
    _nonzero_divisor(ctx, b)
    if dtype.kind == "f":
        rem = np.fmod(a, b).astype(dtype)
        return [np.where((rem != 0) & ((b < 0) != (rem < 0)), rem + b, rem).astype(dtype)]
    return [np.mod(a.astype(np.int64), b.astype(np.int64)).astype(dtype)]


@kernel("POW")
def pow_(ctx: OpContext) -> list[np.ndarray]:
    """Float32 ``powf``; int32 through ``std::pow`` in double, cast back (out of range: INT32_MIN,
    what x86 converts), or, for a single integer exponent ≥ 1, by repeated multiplication that
    wraps (LiteRT's IntegerExponentPow, taken when the shapes differ).  Negative int32 exponents
    are refused, as LiteRT does."""
    a, b, dtype = _operands(ctx)
    if dtype == np.float32:
        return [np.power(a, b).astype(dtype)]
    if dtype != np.int32:
        raise ctx.error(f"POW of {dtype} is not implemented (float32 and int32 are)")
    if np.any(b < 0):
        raise ctx.error("a negative int32 exponent (LiteRT's kernel refuses it)")
    if b.size == 1 and a.shape != b.shape and int(b.reshape(-1)[0]) >= 1:  # LiteRT's broadcasting path
        out = np.ones(a.shape, np.int64)
        base, exponent = a.astype(np.int64), int(b.reshape(-1)[0])
        while exponent:
            if exponent & 1:
                out = _wrap(out * base, np.dtype(np.int32)).astype(np.int64)
            base = _wrap(base * base, np.dtype(np.int32)).astype(np.int64)
            exponent >>= 1
        shape = np.broadcast_shapes(a.shape, b.shape)
        return [np.broadcast_to(out.astype(dtype), shape).copy()]
    p = np.power(a.astype(np.float64), b.astype(np.float64))
    inside = (p >= -(2.0**31)) & (p < 2.0**31)
    return [np.where(inside, np.trunc(np.where(inside, p, 0)), -(2**31)).astype(dtype)]


@kernel("MAXIMUM", int16=True)
def maximum(ctx: OpContext) -> list[np.ndarray]:
    """``a > b ? a : b`` on the stored values (a NaN in ``a`` gives ``b``)."""
    a, b, _ = _operands(ctx)
    return [np.where(a > b, a, b)]


@kernel("MINIMUM", int16=True)
def minimum(ctx: OpContext) -> list[np.ndarray]:
    """``a < b ? a : b`` on the stored values."""
    a, b, _ = _operands(ctx)
    return [np.where(a < b, a, b)]


@kernel("SQUARED_DIFFERENCE")
def squared_difference(ctx: OpContext) -> list[np.ndarray]:
    """Float32 and int32 (wrapping) ``(a − b)²``; int8 by the rescaled difference (module docstring)."""
    a, b, dtype = _operands(ctx)
    if dtype == np.float32:
        d = a - b
        return [d * d]
    if dtype == np.int32:
        d = _wrap(a.astype(np.int64) - b.astype(np.int64), dtype).astype(np.int64)
        return [_wrap(d * d, dtype)]
    if dtype != np.int8:
        raise ctx.error(f"SQUARED_DIFFERENCE of {dtype} is not implemented")
    q1, q2, qo = ctx.in_quant(0), ctx.in_quant(1), ctx.out_quant()
    if q1 is None or q2 is None or qo is None:
        raise ctx.error("int8 tensors without quantization parameters")
    twice_max = 2.0 * max(_f64(q1.s), _f64(q2.s))
    x1 = _mbqm(ctx, (a.astype(np.int64) - q1.zp) << 7, _f64(q1.s) / twice_max)
    x2 = _mbqm(ctx, (b.astype(np.int64) - q2.zp) << 7, _f64(q2.s) / twice_max)
    d = x1 - x2
    y = _mbqm(ctx, _wrap(d * d, np.dtype(np.int32)), twice_max * twice_max / ((1 << 14) * _f64(qo.s))) + qo.zp
    return [np.clip(y, *type_range(dtype)).astype(dtype)]


#: comparison -> (numpy function, whether its int16 inputs are compared rescaled when quantized)
_COMPARISONS = {
    "EQUAL": (np.equal, True), "NOT_EQUAL": (np.not_equal, True), "LESS": (np.less, False),
    "LESS_EQUAL": (np.less_equal, False), "GREATER": (np.greater, False), "GREATER_EQUAL": (np.greater_equal, False),
}


def _rescaled(ctx: OpContext, i: int, x: np.ndarray) -> np.ndarray:
    """``MBQM((x − zp)·2^8, scale)``: input ``i`` on the scale both sides of a quantized comparison share."""
    q = ctx.in_quant(i)
    if q is None:
        raise ctx.error(f"{x.dtype} inputs without quantization parameters (LiteRT's kernel needs a scale)")
    return _mbqm(ctx, (x.astype(np.int64) - q.zp) << 8, _f64(q.s))


@kernel(*_COMPARISONS)
def compare(ctx: OpContext) -> list[np.ndarray]:
    """Bool result of the comparison: stored values compared as they are (float32, bool, int32,
    int64, unquantized int16), or rescaled to a common scale (int8, uint8, and quantized int16 for
    EQUAL / NOT_EQUAL)."""
    fn, int16_scaled = _COMPARISONS[ctx.node.op]
    a, b, dtype = _operands(ctx)
    if (dtype.itemsize == 1 and dtype.kind in "iu") or (
            dtype == np.int16 and int16_scaled and ctx.in_quant(0) is not None):
        return [fn(_rescaled(ctx, 0, a), _rescaled(ctx, 1, b))]
    return [fn(a, b)]


@kernel("LOGICAL_AND")
def logical_and(ctx: OpContext) -> list[np.ndarray]:
    return [np.logical_and(ctx.x(0), ctx.x(1))]


@kernel("LOGICAL_OR")
def logical_or(ctx: OpContext) -> list[np.ndarray]:
    return [np.logical_or(ctx.x(0), ctx.x(1))]


@kernel("LOGICAL_NOT")
def logical_not(ctx: OpContext) -> list[np.ndarray]:
    return [np.logical_not(ctx.x(0))]


def _scalar_shape(ctx: OpContext, *arrays: np.ndarray) -> tuple[int, ...] | None:
    """The output's own (file) shape when every operand holds one element: LiteRT keeps it then."""
    if all(x.size == 1 for x in arrays):
        shape = ctx.out_value().meta.get("tflite.shape") or ctx.out_value().shape
        if shape is not None and all(isinstance(d, int) and d == 1 for d in shape):
            return tuple(shape)
    return None


@kernel("SELECT", "SELECT_V2", int16=True)
def select(ctx: OpContext) -> list[np.ndarray]:
    """``condition ? x : y`` element by element.  SELECT: the condition has the operands' shape,
    or is a scalar, or a vector over their first dimension; SELECT_V2 broadcasts all three."""
    cond, x, y = ctx.x(0), ctx.x(1), ctx.x(2)
    if x.dtype != y.dtype:
        raise ctx.error(f"its operands have types {x.dtype} and {y.dtype}; they must match")
    scalar = _scalar_shape(ctx, cond, x, y)
    if scalar is not None:
        return [np.where(cond.reshape(()), x.reshape(()), y.reshape(())).reshape(scalar)]
    if ctx.node.op == "SELECT" and cond.ndim == 1 and x.ndim > 1:
        cond = cond.reshape(-1, *([1] * (x.ndim - 1)))  # one flag per row
    return [np.where(cond.astype(np.bool_), x, y)]


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """LiteRT's saturating conversion: NaN -> the type's maximum, below its minimum -> minimum,
    at or above ``2^(bits−1)`` (or ``2^bits`` unsigned) -> maximum, else truncated toward zero."""
    lo, hi = type_range(dtype)
    inside = (x >= lo) & (x < float(hi) + 1.0)
    t = np.trunc(np.where(inside, x, 0)).astype(np.int64)
    return np.where(np.isnan(x), hi, np.where(inside, t, np.where(x < lo, lo, hi))).astype(dtype)


@kernel("CAST")
def cast(ctx: OpContext) -> list[np.ndarray]:
    """``static_cast`` of each stored value (quantization is ignored, as LiteRT does): integers
    wrap to a narrower type, anything to bool is ``!= 0``, bool is 0 or 1, floats to integers
    saturate (see :func:`_float_to_int`)."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype == np.bool_:
        return [x != 0]
    if x.dtype.kind == "f" and dtype.kind in "iu":
        return [_float_to_int(x, dtype)]
    return [x.astype(dtype)]


# -- prepare ----------------------------------------------------------------------------------------


def _within_rank(op: OpCheck, shape: Shape) -> Shape:
    if shape is not None and len(shape) > MAX_BROADCAST_RANK:
        raise op.fail(f"its output has rank {len(shape)}; LiteRT's kernels broadcast up to rank "
                      f"{MAX_BROADCAST_RANK}")
    return shape


def _same_types(op: OpCheck, *indices: int) -> None:
    types = {op.node.inputs[i].dtype for i in indices if op.has(i)}  # type: ignore[union-attr]
    if len(types) > 1:
        raise op.fail(f"inputs {', '.join(map(str, indices))} have different types "
                      f"({', '.join(sorted(str(t.value) for t in types if t is not None))})")


@prepare_rule("DIV", "FLOOR_DIV", "FLOOR_MOD", "POW", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", *_COMPARISONS,
              "LOGICAL_AND", "LOGICAL_OR", arity=(2, 2))
def _binary(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1)
    _same_types(op, 0, 1)
    return [_within_rank(op, broadcast_shape(op, 0, 1))]


@prepare_rule("LOGICAL_NOT", "CAST", arity=(1, 1))
def _unary(op: OpCheck) -> list[Shape]:
    op.need(0)
    return [op.shape(0)]


@prepare_rule("SELECT", arity=(3, 3))
def _select(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("condition", "x", "y")):
        op.need(i, what)
    _same_types(op, 1, 2)
    cond, x, y = op.shape(0), op.shape(1), op.shape(2)
    if cond is None or x is None or y is None:
        return [None]
    if all(math.prod(s) == 1 for s in (cond, x, y)):
        return [None]  # one element each: LiteRT keeps the output's own shape
    if x != y:
        raise op.fail(f"operands of shapes {list(x)} and {list(y)} differ (SELECT does not broadcast)")
    if cond != x and not (cond == () or (len(cond) == 1 and x and cond[0] == x[0])):
        raise op.fail(f"condition {list(cond)} is neither of the operands' shape {list(x)}, a scalar, "
                      "nor a vector over their first dimension")
    return [x]


@prepare_rule("SELECT_V2", arity=(3, 3))
def _select_v2(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("condition", "x", "y")):
        op.need(i, what)
    _same_types(op, 1, 2)
    return [_within_rank(op, broadcast_shape(op, 0, 1, 2))]
