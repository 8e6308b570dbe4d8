"""Activations: RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH, HARD_SWISH — float, 8-bit and 16x8,
as TFLite's reference kernels.

RELU/RELU6/RELU_N1_TO_1: ``clamp(MBQM(x − zp_in, s_in/s_out) + zp_out)`` (8-bit and int16).
LOGISTIC/TANH (8-bit): a 256-entry table of ``round(f(s_in·(q − zp_in))/s_out) + zp_out``
computed in float32.  HARD_SWISH (8-bit): TFLite's int16 fixed-point evaluation (see
:func:`_hard_swish_q`).  Each 8-bit one runs through a 256-entry table of its own formula
(:func:`.table_lookup._by_byte_table`).  LOGISTIC/TANH 16x8: the input rescaled to
1/(3·4096), a 256-entry sigmoid table interpolated on the low 9 (TANH: 8) bits, output Q0.15
(see :func:`_sigmoid_tanh_int16`).  All O(n) in the elements.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import OpContext, Quant, kernel, round_half_away, type_range
from .elementwise import _checked_log2, _f64, _mbqm, _quants, _symmetric
from .fixedpoint import quantize_multiplier, rounding_divide_by_pot
from .gemmlowp import srdhm16
from .jit import kernels
from .table_lookup import _by_byte_table

__all__ = ["sigmoid_table", "sigmoid_tanh_q15"]


def _relu_x(ctx: OpContext, lo: float, hi: float) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.clip(x, lo, hi).astype(dtype)]

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)
        tmin, tmax = type_range(dtype)
        scale = np.float32(qo.s)
        qlo = max(tmin, qo.zp + int(round_half_away(np.float32(lo) / scale)))
        qhi = tmax if hi == np.inf else min(tmax, qo.zp + int(round_half_away(np.float32(hi) / scale)))
        # LiteRT divides the scales in float32, then widens; TFLM's CalculateReluOpData divides in double
        real = float(qi.s) / float(qo.s) if ctx.flavor == "tflm" else float(np.float32(qi.s) / np.float32(qo.s))
        return lambda v: np.clip(_mbqm(ctx, v.astype(np.int64) - qi.zp, real) + qo.zp, qlo, qhi).astype(dtype)

    return [_by_byte_table(ctx, x, make)]


@kernel("RELU", int16=True)
def relu(ctx: OpContext) -> list[np.ndarray]:
    return _relu_x(ctx, 0.0, np.inf)


@kernel("RELU6", int16=True)
def relu6(ctx: OpContext) -> list[np.ndarray]:
    """Quantized under ``flavor="tflm"``, as TFLM's kernel: the input's integers clamped to
    ``[zp_in, zp_in + round(6/s_in)]`` (in float32, clamped to the type) and copied out, the
    output's quantization ignored."""
    x = ctx.x(0)
    if ctx.flavor == "tflm" and x.dtype.kind in "iu":
        q = ctx.in_quant(0)
        if q is None:
            raise ctx.error("integer tensors without quantization parameters")
        tmin, tmax = type_range(x.dtype)
        six = min(tmax, max(tmin, q.zp + int(round_half_away(np.float32(6.0) / np.float32(q.s)))))
        return [np.clip(x, q.zp, six).astype(ctx.out_dtype())]
    return _relu_x(ctx, 0.0, 6.0)


@kernel("RELU_N1_TO_1")
def relu_n1_to_1(ctx: OpContext) -> list[np.ndarray]:
    return _relu_x(ctx, -1.0, 1.0)


def _lookup(ctx: OpContext, fn: np.ufunc | object) -> list[np.ndarray]:
    """8-bit table of ``fn`` on the dequantized input, as PopulateLookupTable builds it."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)

        def populate(q: np.ndarray) -> np.ndarray:
            deq = (np.float32(qi.s) * (q.astype(np.int64) - qi.zp).astype(np.float32)).astype(np.float32)
            with np.errstate(over="ignore"):
                out = fn(deq).astype(np.float32)  # type: ignore[operator]
            inv = np.float32(1) / np.float32(qo.s)
            return np.clip(round_half_away((out * inv).astype(np.float32)).astype(np.int64) + qo.zp,
                           *type_range(dtype)).astype(dtype)

        return populate

    return [_by_byte_table(ctx, x, make)]


def _sigmoid_float32(x: np.ndarray) -> np.ndarray:
    """:func:`_sigmoid` of a float32 ``x``, the same arithmetic in one fresh buffer, in place."""
    y = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(y, out=y)
    y += np.float32(1)
    return np.divide(np.float32(1), y, out=y)  # type: ignore[no-any-return]


def _sigmoid(v: np.ndarray) -> np.ndarray:
    one = np.float32(1)
    return (one / (one + np.exp(-v))).astype(np.float32)


@kernel("LOGISTIC", int16=True)
def logistic(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype == np.float32 and ctx.out_dtype() == np.float32:  # the interpreter may call it directly
        ctx.cache["compiled"] = (x.shape, x.dtype, _sigmoid_float32)
        return [_sigmoid_float32(x)]
    if x.dtype.kind == "f":
        with np.errstate(over="ignore"):
            return [_sigmoid(x.astype(np.float32)).astype(ctx.out_dtype())]
    if x.dtype == np.int16:
        return [_sigmoid_tanh_int16(ctx, x, tanh=False)]
    return _lookup(ctx, _sigmoid)


@kernel("TANH", int16=True)
def tanh(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype.kind == "f":
        return [np.tanh(x).astype(ctx.out_dtype())]
    if x.dtype == np.int16:
        return [_sigmoid_tanh_int16(ctx, x, tanh=True)]
    return _lookup(ctx, np.tanh)


def sigmoid_table() -> np.ndarray:
    """LiteRT's 256-entry table of ``sigmoid(i/24)`` in unsigned Q0.16 that its int16 LOGISTIC
    and TANH interpolate: ``round(2^16·sigmoid(i/24))`` (at most 2^16 − 1), one more at the
    entries listed (LiteRT's table is biased up there, measured entry by entry)."""
    table = np.minimum(np.round(65536.0 / (1.0 + np.exp(-np.arange(256) / 24.0))), 65535).astype(np.int64)
    table[list(_SIGMOID_TABLE_UP)] += 1
    return table


#: entries of LiteRT's sigmoid table one above the rounded sigmoid
_SIGMOID_TABLE_UP = (4, 8, 12, 14, 15, 16, 17, 19, 20, 21, 22, 25, 27, 28, 29, 30, 31, 33, 34, 35, 37, 39, 40, 41,
                     43, 44, 45, 46, 49, 50, 54, 62, 63, 64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255)


def _int16_input_rescale(qi: Quant, pot_shifts: tuple[int, ...]) -> tuple[int, int]:
    """(multiplier, right shift) that bring int16 LOGISTIC/TANH inputs to the table's scale
    1/(3·4096): for a power-of-two input scale whose shift ``12 + log2(s_in)`` is in
    ``pot_shifts``, ``3·2^shift`` and no shift; else ``s_in·3·4096`` doubled until it exceeds
    32767/2 (at most 31 times), truncated, with that many right shifts (LiteRT's Prepare)."""
    log2 = _checked_log2(qi.s)
    if log2 is not None and 12 + log2 in pot_shifts:
        return 3 << (12 + log2), 0
    multiplier, shift = _f64(qi.s) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def _sigmoid_tanh_int16(ctx: OpContext, x: np.ndarray, tanh: bool) -> np.ndarray:
    """LiteRT's int16 LOGISTIC / TANH: the input rescaled to 1/(3·4096) (or 1/(3·2048) for TANH's
    doubled argument), its magnitude's top bits index the sigmoid table, the low 9 (8) bits
    interpolate linearly; mirrored for negative inputs; output Q0.15 (scale 2^−15, zero point 0)."""
    qi, qo = _quants(ctx, 0)
    _symmetric(ctx, qi, qo)
    if _checked_log2(qo.s) != -15:
        raise ctx.error(f"int16 output scale {qo.s} is not 2^-15, which LiteRT's int16 kernel requires")
    multiplier, shift = _int16_input_rescale(qi, (0, 1) if tanh else (0,))
    table = ctx.cache.get("sigmoid_table")
    if table is None:
        table = ctx.cache["sigmoid_table"] = sigmoid_table()
    return sigmoid_tanh_q15(x, multiplier, shift, tanh, table)


def sigmoid_tanh_q15(x: np.ndarray, multiplier: int, shift: int, tanh: bool, table: np.ndarray) -> np.ndarray:
    """The reference int16 Logistic / Tanh (LiteRT's and TFLM's, its integer LSTM's gates too) on raw
    int16 values ``x``: ``(x·multiplier + round) >> shift`` puts them at the scale of the sigmoid
    ``table`` (:func:`sigmoid_table`), then the table lookup; int16 Q0.15 out."""
    v = (x.astype(np.int64) * multiplier + ((1 << shift) >> 1)) >> shift
    magnitude = np.abs(v)
    bits = 8 if tanh else 9
    top = magnitude >> bits
    inside = top < 255
    index = np.where(inside, top, 0)
    low = table[index]
    interpolated = (low << bits) + (magnitude & ((1 << bits) - 1)) * (table[index + 1] - low)
    r = np.where(inside, interpolated, 0xFFFF << 8 if tanh else 0x7FFF << 10)
    if tanh:
        r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1) >> 8
    else:
        r = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1) >> 10
    return r.astype(np.int16)


def _down16(m: int) -> int:
    """Round a 32-bit multiplier to 16 bits (saturating)."""
    return 32767 if m >= (1 << 31) - 1 - (1 << 15) else (m + (1 << 15)) >> 16


def _hard_swish_q(ctx: OpContext, x: np.ndarray, qi: Quant, qo: Quant, dtype: np.dtype) -> np.ndarray:
    """TFLite's 8-bit hard-swish: int16 fixed point, ``x·relu6(x+3)/6``.

    ``v = (x − zp_in)·2^7`` (scale ``s_in/128``); ``out = SRDHM16(v, m_o)``;
    ``r`` = ``v`` rescaled so that 3.0 -> 2^15 (saturating), mapped to [0, 1] by
    ``(r + 2^15) >> 1``; ``y = RDBPOT(DoublingHighMul(r, out), −e_o) + zp_out``.
    """
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(qi.s))
    m_out, e_out = quantize_multiplier(float(np.float32(hires / np.float32(qo.s))))
    m_rel, e_rel = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    m_out16, m_rel16 = _down16(m_out), _down16(m_rel)
    v = (x.astype(np.int64) - qi.zp) * 128
    pre_out = srdhm16(v, m_out16)
    r = v
    if e_rel > 0:
        r = np.clip(r * (1 << (e_rel - 1)), -32768, 32767)
    r = srdhm16(r, m_rel16)
    if e_rel > 0:
        r = np.clip(r * 2, -32768, 32767)
    if e_rel < 0:
        r = rounding_divide_by_pot(r, -e_rel)
    r = (r + (1 << 15)) >> 1
    prod = r * pre_out
    pre = np.where((r == -32768) & (pre_out == -32768), 32767,
                   np.where(prod >= 0, prod >> 15, -((-prod) >> 15)))
    y = rounding_divide_by_pot(pre, -e_out) + qo.zp
    return np.clip(y, *type_range(dtype)).astype(dtype)


def _hard_swish_float32(x: np.ndarray) -> np.ndarray:
    """``x·clip(x + 3, 0, 6)/6`` in float32, in one fresh buffer."""
    y = np.add(x, np.float32(3))
    np.clip(y, np.float32(0), np.float32(6), out=y)
    y *= x
    y /= np.float32(6)
    return y


def _compiled_hard_swish(x: np.ndarray) -> np.ndarray:
    """:func:`_hard_swish_float32` as one compiled pass (:mod:`.jit`; contiguous ``x``)."""
    out = np.empty(x.shape, np.float32)
    kernels().hard_swish_float(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


@kernel("HARD_SWISH")
def hard_swish(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":
        if x.dtype == dtype == np.float32:  # the interpreter may call it directly
            fn = _compiled_hard_swish if ctx.jit and x.flags.c_contiguous else _hard_swish_float32
            ctx.cache["compiled"] = (x.shape, x.dtype, fn)
            return [fn(x)]
        return [_hard_swish_float32(x.astype(np.float32, copy=False)).astype(dtype, copy=False)]

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)
        return lambda v: _hard_swish_q(ctx, v, qi, qo, dtype)

    return [_by_byte_table(ctx, x, make)]
