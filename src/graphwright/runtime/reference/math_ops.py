"""Unary math and parametric activations: EXP, LOG, SQRT, RSQRT, SQUARE, ABS, NEG, SIN, COS,
FLOOR, CEIL, ROUND, SIGN, BUCKETIZE, PRELU, LEAKY_RELU, ELU, GELU, RELU_0_TO_1, and the float
math ATAN2 and ADD_N — float and integer, as LiteRT's reference kernels.  (LOG_SOFTMAX,
L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION are in :mod:`.normalization`.)

Quantized, LiteRT computes most of them through tables built once from the quantization
parameters with float32 arithmetic and the C library's float functions (``expf``, ``logf``,
``erfcf``, ``tanhf``...), which this module calls too (:func:`_libm`), so the tables are the
same bit for bit:

* 8-bit (``LUTPopulate<int8_t>``): for each of the 256 inputs ``q``,
  ``clamp(int(round(f(s_in·(q − zp_in)) · (1/s_out)) + zp_out))``, rounding half away from
  zero (EXP, LOG, ELU, GELU);
* int16 (``LUTPopulate<int16_t>``, symmetric): 513 samples of ``f`` over the input range,
  each biased by half the error of linear interpolation at the midpoint of its step, then
  ``y = lut[256 + (x >> 7)] + ((slope·(x & 127) + 64) >> 7)`` (EXP, LOG, RSQRT, GELU).

The others requantize in fixed point: ABS, LEAKY_RELU and PRELU with one or two
``MultiplyByQuantizedMultiplier`` multipliers (positive and negative side), int8 RSQRT
through gemmlowp's Newton–Raphson inverse square root (:func:`.gemmlowp.inv_sqrt_multiplier`),
SQRT in float32 truncated toward zero.  NEG negates the stored integers (no requantization).
uint8 where LiteRT has it: PRELU, LEAKY_RELU, GELU, RELU_0_TO_1.  SQUARE, SIN, COS, FLOOR,
CEIL, ROUND, ATAN2 are float only in LiteRT; SIGN, ADD_N also plain int32.
O(n) in the elements; tables O(256) or O(513) once per operator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from functools import cache

import numpy as np

from ._common import OpContext, Quant, kernel, type_range
from .activations import _relu_x
from .elementwise import _mbqm, _quants
from .fixedpoint import INT32_MIN, multiply_by_quantized_multiplier, quantize_multiplier
from .gemmlowp import inv_sqrt_multiplier
from .luts import F32, FloatFn, lut16_float32, lut16_lookup, round_f32
from .normalization import log_softmax_params  # noqa: F401  (graphwright.extract imports it from here)
from .prepare import MANY, OpCheck, Shape, broadcast_shape, prepare_rule
from .table_lookup import _by_byte_table

# -- the C library's float functions ------------------------------------------------------------------

@cache
def _libm(name: str) -> FloatFn:
    """The C library's float function ``name`` (``expf``...) over a float32 array, as LiteRT's
    tables call it (numpy's own float32 functions may differ in the last bit)."""
    path = ctypes.util.find_library("m")
    fn = getattr(ctypes.CDLL(path), name) if path else None
    if fn is None:  # no C library to call: the double result rounded to float32 (correctly rounded)
        ufunc = {"expf": np.exp, "logf": np.log, "expm1f": np.expm1, "tanhf": np.tanh, "sqrtf": np.sqrt,
                 "erfcf": np.vectorize(math.erfc, otypes=[np.float64])}[name]
        return lambda v: np.asarray(ufunc(np.asarray(v, np.float64))).astype(F32)
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda v: np.array([fn(float(e)) for e in np.asarray(v, F32).reshape(-1)], F32).reshape(np.shape(v))


def _exp(v: np.ndarray) -> np.ndarray:
    return _libm("expf")(v)


def _elu(v: np.ndarray) -> np.ndarray:
    return np.where(v < 0, _libm("expm1f")(v), v).astype(F32)


#: sqrt(2/pi) as LiteRT's constexpr float (M_2_SQRTPI·M_SQRT1_2 in double, then rounded)
_SQRT_2_OVER_PI = F32((2.0 / math.sqrt(math.pi)) * math.sqrt(0.5))


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    """``0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))``, float32 left to right (GeluTransformApproximate)."""
    v = np.asarray(v, F32)
    cube = ((F32(0.044715) * v).astype(F32) * v).astype(F32) * v
    inner = (_SQRT_2_OVER_PI * (v + cube.astype(F32)).astype(F32)).astype(F32)
    return ((F32(0.5) * v).astype(F32) * (F32(1) + _libm("tanhf")(inner)).astype(F32)).astype(F32)


def _gelu_erfc(v: np.ndarray) -> np.ndarray:
    """``0.5·x·erfc(−x/√2)``, float32 (GeluTransform)."""
    v = np.asarray(v, F32)
    return ((F32(0.5) * v).astype(F32) * _libm("erfcf")((v * F32(-math.sqrt(0.5))).astype(F32))).astype(F32)


#: coefficients of the erfc approximation of :func:`_erfc`, highest power of ``t`` first
_ERFC_POLY = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223)


def _erfc(v: np.ndarray) -> np.ndarray:
    """erfc in float64, vectorised (Chebyshev fit, relative error below 1.2e-7 everywhere):
    ``t = 1/(1 + |x|/2)``, ``erfc(|x|) = t·exp(−x² + P(t))``, ``erfc(−x) = 2 − erfc(x)``."""
    z = np.abs(v)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(t)
    for c in _ERFC_POLY:
        poly = poly * t + c
    tail = t * np.exp(-z * z + poly)
    return np.where(v >= 0, tail, 2.0 - tail)


# -- LiteRT's lookup tables ---------------------------------------------------------------------------

def _lut8(fn: FloatFn, s_in: float, zp_in: int, s_out: float, zp_out: int, dtype: np.dtype) -> FloatFn:
    """``LUTPopulate<int8_t/uint8_t>``: the 8-bit output of ``fn`` on the inputs ``q`` given
    (float32; a result out of int32's range becomes INT32_MIN, as x86's conversion makes it)."""
    qmin, qmax = type_range(dtype)
    inverse = F32(1) / F32(s_out)

    def populate(q: np.ndarray) -> np.ndarray:
        real = (F32(s_in) * (q.astype(np.int64) - zp_in).astype(F32)).astype(F32)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = round_f32((fn(real) * inverse).astype(F32)) + F32(zp_out)
            quantized = scaled.astype(np.float64)
            quantized = np.where(np.isfinite(quantized) & (np.abs(quantized) < 2**31), quantized, INT32_MIN)
        return np.clip(np.trunc(quantized).astype(np.int64), qmin, qmax).astype(dtype)

    return populate


def _by_lut(ctx: OpContext, fn: FloatFn) -> list[np.ndarray]:
    """A quantized unary operator through LiteRT's table of ``fn``: 8-bit or int16."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    qi, qo = _quants(ctx, 0)
    if dtype == np.int16:
        table = ctx.cache.get("lut16")
        if table is None:
            table = ctx.cache["lut16"] = lut16_float32(fn, qi.s, qi.zp, qo.s, qo.zp)
        return [lut16_lookup(table, x).astype(np.int16)]
    if dtype.itemsize != 1 or x.dtype != dtype:
        raise ctx.error(f"{x.dtype} input with {dtype} output is not implemented")
    return [_by_byte_table(ctx, x, lambda: _lut8(fn, qi.s, qi.zp, qo.s, qo.zp, dtype))]


def _log_of(ctx: OpContext) -> FloatFn:
    """LiteRT's LOG table function: ``log(x)``, and for ``x ≤ 0`` the output's lowest real."""
    qo = _quants(ctx, 0)[1]
    lowest = F32(F32(type_range(ctx.out_dtype())[0] - qo.zp) * F32(qo.s))
    return lambda v: np.where(v <= 0, lowest, _libm("logf")(np.where(v > 0, v, F32(1)))).astype(F32)


def _rsqrt_of(ctx: OpContext) -> FloatFn:
    """LiteRT's int16 RSQRT table function: ``1/sqrt(x)``, and for ``x ≤ 0`` ``32767·s_out``."""
    qo = _quants(ctx, 0)[1]
    top = F32(F32(32767) * F32(qo.s))
    return lambda v: np.where(v <= 0, top, F32(1) / np.sqrt(np.where(v > 0, v, F32(1)))).astype(F32)


# -- float-only and plain integer operators ----------------------------------------------------------

def _float_only(ctx: OpContext, fn: FloatFn, integer: FloatFn | None = None) -> list[np.ndarray]:
    """``fn`` in float32; ``integer`` on plain (unquantized) integers where LiteRT has it; else refused."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.asarray(fn(x.astype(F32))).astype(dtype)]
    if integer is not None and dtype.kind in "iu" and ctx.in_quant(0) is None:
        return [np.asarray(integer(x)).astype(dtype)]
    raise ctx.error(f"{dtype} is not implemented (LiteRT computes it in float32 only)")


@kernel("SIN")
def sin(ctx: OpContext) -> list[np.ndarray]:
    return _float_only(ctx, np.sin)


@kernel("COS")
def cos(ctx: OpContext) -> list[np.ndarray]:
    return _float_only(ctx, np.cos)


@kernel("SQUARE")
def square(ctx: OpContext) -> list[np.ndarray]:
    return _float_only(ctx, np.square)


@kernel("FLOOR")
def floor(ctx: OpContext) -> list[np.ndarray]:
    return _float_only(ctx, np.floor)


@kernel("CEIL")
def ceil(ctx: OpContext) -> list[np.ndarray]:
    return _float_only(ctx, np.ceil)


@kernel("ROUND")
def round_(ctx: OpContext) -> list[np.ndarray]:
    """Halves to even (banker's rounding), as TensorFlow's ``tf.round``."""
    return _float_only(ctx, np.rint)


@kernel("SIGN")
def sign(ctx: OpContext) -> list[np.ndarray]:
    """−1, 0 or 1 (NaN stays NaN); float32 and int32."""
    return _float_only(ctx, np.sign, np.sign)


@kernel("ATAN2")
def atan2(ctx: OpContext) -> list[np.ndarray]:
    """``atan2(y, x)`` element by element (float only; equal shapes, see the prepare check)."""
    y, x = ctx.x(0), ctx.x(1)
    dtype = ctx.out_dtype()
    if dtype.kind != "f":
        raise ctx.error(f"{dtype} is not implemented (LiteRT computes it in float only)")
    return [np.arctan2(y, x).astype(dtype)]


@kernel("ADD_N")
def add_n(ctx: OpContext) -> list[np.ndarray]:
    """The sum of all inputs (same shapes), float32 or int32 (wrapping), as LiteRT's kernel."""
    dtype = ctx.out_dtype()
    if dtype not in (np.float32, np.int32):
        raise ctx.error(f"{dtype} is not implemented (LiteRT sums float32 and int32 only)")
    total = ctx.x(0).astype(np.int64 if dtype == np.int32 else F32)
    for i in range(1, len(ctx.arrays)):
        total = total + ctx.x(i)
    return [total.astype(dtype)]


@kernel("BUCKETIZE")
def bucketize(ctx: OpContext) -> list[np.ndarray]:
    """int32 index of the first boundary above each value (``upper_bound``), comparing in
    float32 (float64 for float64 inputs), as C++ compares the value with a float boundary."""
    x = ctx.x(0)
    boundaries = np.asarray(ctx.attr("boundaries", ()) or (), F32)
    common = np.float64 if x.dtype == np.float64 else F32
    return [np.searchsorted(boundaries.astype(common), x.astype(common), side="right").astype(np.int32)]


@kernel("NEG", int16=True)
def neg(ctx: OpContext) -> list[np.ndarray]:
    """``−x`` on the stored values, whatever their type (integers wrap, zero points are not used)."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.negative(x).astype(dtype)]
    return [np.negative(x.astype(np.int64)).astype(dtype)]


@kernel("ABS", int16=True)
def abs_(ctx: OpContext) -> list[np.ndarray]:
    """Quantized: ``clamp(|x − zp_in| + zp_out)``, requantized by ``s_in/s_out`` when the scales differ."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.abs(x).astype(dtype)]
    if ctx.in_quant(0) is None:  # int16/int32 without quantization
        return [np.abs(x.astype(np.int64)).astype(dtype)]
    qi, qo = _quants(ctx, 0)

    def make() -> FloatFn:
        same = F32(qi.s) == F32(qo.s)
        real = float(F32(qi.s) / F32(qo.s))

        def fn(v: np.ndarray) -> np.ndarray:
            mag = np.abs(v.astype(np.int64) - qi.zp)
            y = mag if same else _mbqm(ctx, mag, real)
            return np.clip(y + qo.zp, *type_range(dtype)).astype(dtype)

        return fn

    return [_by_byte_table(ctx, x, make)]


@kernel("EXP", int16=True)
def exp(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype.kind == "f":
        return [np.exp(x).astype(ctx.out_dtype())]
    return _by_lut(ctx, _exp)


@kernel("LOG", int16=True)
def log(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype.kind == "f":
        return [np.log(x).astype(ctx.out_dtype())]
    return _by_lut(ctx, _log_of(ctx))


@kernel("ELU")
def elu(ctx: OpContext) -> list[np.ndarray]:
    """``expm1(x)`` below zero, ``x`` above; int8 through LiteRT's table."""
    x = ctx.x(0)
    if x.dtype.kind == "f":
        return [np.where(x < 0, np.expm1(x), x).astype(ctx.out_dtype())]
    if ctx.out_dtype() != np.int8:
        raise ctx.error(f"{ctx.out_dtype()} is not implemented (LiteRT computes ELU in float32 and int8)")
    return _by_lut(ctx, _elu)


@kernel("GELU", int16=True)
def gelu(ctx: OpContext) -> list[np.ndarray]:
    """``approximate``: the tanh form; else ``0.5·x·erfc(−x/√2)``; quantized through LiteRT's table."""
    x = ctx.x(0)
    approximate = bool(ctx.attr("approximate", False))
    if x.dtype.kind == "f":
        v = x.astype(np.float64)
        if approximate:
            y = 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
        else:
            y = 0.5 * v * _erfc(-v * math.sqrt(0.5))
        return [y.astype(ctx.out_dtype())]
    return _by_lut(ctx, _gelu_tanh if approximate else _gelu_erfc)


@kernel("SQRT", int16=True)
def sqrt(ctx: OpContext) -> list[np.ndarray]:
    """Quantized: ``int(sqrt(s_in·(x − zp_in)) / s_out) + zp_out`` in float32, truncated toward zero;
    a negative input is an error, as in LiteRT."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.sqrt(x).astype(dtype)]
    qi, qo = _quants(ctx, 0)
    real = (F32(qi.s) * (x.astype(np.int64) - qi.zp).astype(F32)).astype(F32)
    if np.any(real < 0):
        raise ctx.error("its input has negative values (LiteRT: Sqrt is only defined for non-negative values)")
    y = np.trunc((np.sqrt(real) / F32(qo.s)).astype(F32)).astype(np.int64) + qo.zp
    return [np.clip(y, *type_range(dtype)).astype(dtype)]


@kernel("RSQRT", int16=True)
def rsqrt(ctx: OpContext) -> list[np.ndarray]:
    """int8: gemmlowp's inverse square root of ``x − zp_in`` (Q20), rescaled by
    ``1/(sqrt(s_in)·s_out)``; 0 gives the largest output; int16: LiteRT's table (under
    ``flavor="tflm"``: the 8-bit formula, as TFLM's kernel).
    An input below its zero point is an error, as in LiteRT."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [(F32(1) / np.sqrt(x.astype(F32))).astype(dtype)]
    qi, qo = _quants(ctx, 0)
    if np.any(x.astype(np.int64) < qi.zp):
        raise ctx.error("its input has values below its zero point (LiteRT: Rsqrt is only defined for positive "
                        "values)")
    if dtype == np.int16:
        if ctx.flavor == "tflm":
            return [_rsqrt_q(ctx, x.astype(np.int64) - qi.zp, qi, qo, dtype)]
        return _by_lut(ctx, _rsqrt_of(ctx))

    table = ctx.cache.get("rsqrt_table")
    if table is None:  # its own table, not a compiled runner: every run checks its input
        value = np.arange(256, dtype=np.uint8).view(dtype).astype(np.int64) - qi.zp
        table = ctx.cache["rsqrt_table"] = _rsqrt_q(ctx, value, qi, qo, dtype)
    return [table[x.view(np.uint8)]]


def _rsqrt_q(ctx: OpContext, value: np.ndarray, qi: Quant, qo: Quant, dtype: np.dtype) -> np.ndarray:
    """Quantized RSQRT of ``value = x − zp_in`` (≥ 0): gemmlowp's inverse square root in Q20,
    rescaled by ``1/(sqrt(s_in)·s_out)``, plus ``zp_out``, clamped; 0 gives the largest output."""
    m_out, s_out = quantize_multiplier(1.0 / float(F32(np.sqrt(F32(qi.s)) * F32(qo.s))))
    qmin, qmax = type_range(dtype)
    m, shift = inv_sqrt_multiplier(np.maximum(value, 0))
    q20 = multiply_by_quantized_multiplier(np.ones_like(value), m, shift + 20, ctx.rounding)
    y = multiply_by_quantized_multiplier(q20, m_out, s_out - 20, ctx.rounding) + qo.zp
    return np.where(value == 0, qmax, np.clip(y, qmin, qmax)).astype(dtype)


# -- parametric activations ---------------------------------------------------------------------------

@kernel("RELU_0_TO_1")
def relu_0_to_1(ctx: OpContext) -> list[np.ndarray]:
    """``clamp(x, 0, 1)``; 8-bit as RELU's requantization, clamped to the quantized 0 and 1."""
    return _relu_x(ctx, 0.0, 1.0)


@kernel("LEAKY_RELU", int16=True)
def leaky_relu(ctx: OpContext) -> list[np.ndarray]:
    """Quantized: ``x − zp_in`` times ``s_in/s_out`` (≥ 0) or ``s_in·alpha/s_out`` (< 0, its
    multiplier's sign taken out first), plus ``zp_out``."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    alpha = F32(ctx.attr("alpha", 0.2))
    if dtype.kind == "f":
        xf = x.astype(F32)
        return [np.where(xf > 0, xf, xf * alpha).astype(dtype)]
    qi, qo = _quants(ctx, 0)

    def make() -> FloatFn:
        m_id, s_id = quantize_multiplier(float(F32(qi.s) / F32(qo.s)))
        m_alpha, s_alpha = quantize_multiplier(float(F32(F32(qi.s) * alpha) / F32(qo.s)))

        def fn(v: np.ndarray) -> np.ndarray:
            d = v.astype(np.int64) - qi.zp
            pos = multiply_by_quantized_multiplier(d, m_id, s_id, ctx.rounding)
            neg_side = multiply_by_quantized_multiplier(d, abs(m_alpha), s_alpha, ctx.rounding)
            y = np.where(d >= 0, pos, -neg_side if m_alpha < 0 else neg_side) + qo.zp
            return np.clip(y, *type_range(dtype)).astype(dtype)

        return fn

    if dtype.itemsize == 1:
        return [_by_byte_table(ctx, x, make)]
    fn = ctx.cache.get("fn")
    if fn is None:
        fn = ctx.cache["fn"] = make()
    return [fn(x)]


@kernel("PRELU", int16=True)
def prelu(ctx: OpContext) -> list[np.ndarray]:
    """``x`` where ``x ≥ 0``, else ``x·alpha`` (alpha broadcast against x).  Quantized, two
    multipliers: ``s_in/s_out`` on ``x − zp_in`` and ``s_in·s_alpha/s_out`` on
    ``(x − zp_in)(alpha − zp_alpha)``, plus ``zp_out`` (int16 x with int8 alpha in 16x8)."""
    x, alpha = ctx.x(0), ctx.x(1)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        xf = x.astype(F32)
        return [np.where(xf >= 0, xf, xf * alpha.astype(F32)).astype(dtype)]
    qi, qa, qo = _quants(ctx, 0, 1)
    params = ctx.cache.get("prelu")
    if params is None:
        s_in, s_alpha, s_out = F32(qi.s), F32(qa.s), F32(qo.s)
        params = ctx.cache["prelu"] = (quantize_multiplier(float(s_in / s_out)),
                                       quantize_multiplier(float(F32(s_in * s_alpha) / s_out)))
    (m1, s1), (m2, s2) = params
    d = x.astype(np.int64) - qi.zp
    pos = multiply_by_quantized_multiplier(np.maximum(d, 0), m1, s1, ctx.rounding)
    neg_side = multiply_by_quantized_multiplier(np.minimum(d, 0) * (alpha.astype(np.int64) - qa.zp), m2, s2,
                                                ctx.rounding)
    y = np.where(d >= 0, pos, neg_side) + qo.zp
    return [np.clip(y, *type_range(dtype)).astype(dtype)]


# -- prepare checks ------------------------------------------------------------------------------------

_UNARY = ("EXP", "LOG", "SQRT", "RSQRT", "SQUARE", "ABS", "NEG", "SIN", "COS", "FLOOR", "CEIL", "ROUND", "SIGN",
          "LEAKY_RELU", "ELU", "GELU", "RELU_0_TO_1")


#: int16-quantized operators whose LiteRT Prepare requires zero points of 0
_SYMMETRIC_INT16 = frozenset({"ABS", "LOG", "SQRT", "RSQRT", "EXP", "LEAKY_RELU"})


@prepare_rule(*_UNARY, arity=(1, 1))
def _unary(op: OpCheck) -> list[Shape]:
    op.need(0)
    if op.node.op in _SYMMETRIC_INT16:
        for role, value in (("input", op.node.inputs[0]), ("output", op.node.outputs[0])):
            if value is not None and value.dtype is not None and value.dtype.value == "int16" \
                    and value.quant is not None and np.any(value.quant.zero_point != 0):
                raise op.fail(f"int16 {role} {value.name!r} has zero point "
                              f"{int(value.quant.zero_point.reshape(-1)[0])}; LiteRT's 16x8 kernel requires 0")
    return [op.shape(0)]


@prepare_rule("ATAN2", arity=(2, 2))
def _atan2(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1)
    y, x = op.shape(0), op.shape(1)
    if y is not None and x is not None and tuple(y) != tuple(x):
        raise op.fail(f"inputs of shapes {list(y)} and {list(x)}; LiteRT's kernel reads both element by element, "
                      "so their shapes must be equal")
    return [y]


@prepare_rule("ADD_N", arity=(2, MANY))
def _add_n(op: OpCheck) -> list[Shape]:
    shapes = [op.shape(i) for i in range(len(op.node.inputs))]
    for i in range(len(shapes)):
        op.need(i)
    known = {tuple(s) for s in shapes if s is not None}
    if len(known) > 1:
        raise op.fail(f"inputs of shapes {' and '.join(str(list(s)) for s in sorted(known))}; all must be equal")
    return [shapes[0]]


@prepare_rule("BUCKETIZE", arity=(1, 1))
def _bucketize(op: OpCheck) -> list[Shape]:
    op.need(0)
    boundaries = np.asarray(op.attr("boundaries", ()) or (), np.float32)
    if np.any(np.diff(boundaries) < 0) or np.any(np.isnan(boundaries)):
        raise op.fail("its boundaries are not sorted, as LiteRT requires")
    return [op.shape(0)]


@prepare_rule("PRELU", arity=(2, 2))
def _prelu(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1, "alpha")
    alpha = op.node.inputs[1]
    if alpha is not None and alpha.quant is not None and alpha.quant.scale.size > 1:
        raise op.fail(f"alpha {alpha.name!r} is quantized per channel; LiteRT's kernel reads one scale and zero point")
    shape = broadcast_shape(op, 0, 1)
    x = op.shape(0)
    if shape is not None and x is not None and tuple(shape) != tuple(x):
        raise op.fail(f"alpha of shape {list(op.shape(1) or [])} broadcasts the input {list(x)} to {list(shape)}; "
                      "the output must keep the input's shape")
    return [x]
