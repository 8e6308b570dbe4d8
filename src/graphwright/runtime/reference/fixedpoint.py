"""TFLite's fixed-point requantization, vectorised and exact in int64.

``real = scale·(q − zero_point)``; a real multiplier ``M`` (e.g. ``s_in·s_w/s_out``)
is stored as a 31-bit significand ``m`` and a power-of-two ``shift``:
``M ≈ m·2^(shift−31)``.  Two requantization modes:

* ``"double"`` (TFLite reference kernels, gemmlowp): ``RoundingDivideByPOT(
  SaturatingRoundingDoublingHighMul(x·2^max(shift,0), m), max(−shift,0))`` — two
  roundings, each half away from zero.
* ``"single"`` (``TFLITE_SINGLE_ROUNDING``; the reference FULLY_CONNECTED uses it, and the
  interpreter's single mode for the operators XNNPACK does not requantize in float32):
  ``(x·m + 2^(30−shift)) >> (31−shift)``,
  one rounding, half towards +∞.

Every function takes numpy arrays (or scalars) and broadcasts ``m``/``shift``
against ``x`` (per-channel parameters on the last axis).  O(n) in the elements.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "ROUNDING_MODES",
    "fold_divisor",
    "multiply_by_quantized_multiplier",
    "multiply_by_quantized_multiplier_int64",
    "quantize_multiplier",
    "quantize_multipliers",
    "rounding_divide_by_pot",
    "saturating_rounding_doubling_high_mul",
    "wrap_int32",
]

ROUNDING_MODES = ("double", "single")
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def _round_half_away(x: float) -> int:
    """C ``std::round``: halves go away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier(M)`` -> ``(m, shift)`` with ``M ≈ m·2^(shift−31)``.

    ``(q, e) = frexp(M)``; ``m = round(q·2³¹)`` (if that is 2³¹: halve it, ``e+1``);
    shifts below −31 flush to zero; above 30 saturate.
    """
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    m = _round_half_away(q * (1 << 31))
    if m == 1 << 31:
        m //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return m, shift


def fold_divisor(m: int, shift: int, n: int) -> tuple[int, int]:
    """``(m, shift)`` of ``M/n`` from those of ``M``, as LiteRT's quantized MEAN folds its
    element count ``n`` into the multiplier: ``k = min(⌊log2 n⌋, 32, 31 + shift)``,
    ``m' = (m·2^k) // n``, ``shift' = shift − k``."""
    k = min(n.bit_length() - 1, 32, 31 + shift)
    return (m << k) // n, shift - k


def quantize_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_multiplier` of each element (float64 in), as int64 arrays."""
    flat = np.asarray(reals, dtype=np.float64).reshape(-1)
    pairs = [quantize_multiplier(float(r)) for r in flat]
    m = np.array([p[0] for p in pairs], dtype=np.int64).reshape(np.shape(reals))
    s = np.array([p[1] for p in pairs], dtype=np.int64).reshape(np.shape(reals))
    return m, s


def _trunc_div_pow2(v: np.ndarray, bits: int) -> np.ndarray:
    """C integer division by ``2**bits`` (truncates toward zero), in place on ``v``."""
    v += (v >> 63) & ((1 << bits) - 1)  # negative: add 2^bits − 1 before the floor shift
    v >>= bits
    return v


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp SRDHM: ``(a·b + nudge) / 2³¹`` truncated, nudge ``2³⁰`` or ``1−2³⁰``;
    ``INT32_MIN·INT32_MIN`` saturates to ``INT32_MAX``."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    ab += (1 << 30) + ((ab >> 63) & (1 - (1 << 31)))  # nudge 2^30, or 1 − 2^30 if negative
    out = _trunc_div_pow2(ab, 31)
    if np.any(b == INT32_MIN):
        out = np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), out)
    return out


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """Arithmetic right shift by ``exponent`` rounding half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    threshold = (mask >> 1) - (x >> 63)  # +1 for negative x
    out = x >> e
    out += (x & mask) > threshold
    return out


def multiply_by_quantized_multiplier(
    x: np.ndarray, m: np.ndarray | int, shift: np.ndarray | int, rounding: str = "double"
) -> np.ndarray:
    """``x·M`` for ``M ≈ m·2^(shift−31)``, as TFLite's ``MultiplyByQuantizedMultiplier``.

    ``rounding="double"``: reference kernels (two roundings); ``"single"``: one rounding.
    Returns int64 holding int32 results.
    """
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if rounding == "double":
        if np.any(shift > 0):
            x = wrap_int32(x << np.maximum(shift, 0))
        if np.any(m == INT32_MIN) or np.any(m < 0):
            return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, m), np.maximum(-shift, 0))
        return _double_rounding(x, m, np.maximum(-shift, 0))
    if rounding == "single":
        total = 31 - shift
        out = (x * m + (np.int64(1) << (total - 1))) >> total
        return np.clip(out, INT32_MIN, INT32_MAX)
    raise ValueError(f"unknown rounding mode {rounding!r}; expected one of {ROUNDING_MODES}")


def multiply_by_quantized_multiplier_int64(
    x: np.ndarray, m: np.ndarray | int, shift: np.ndarray | int
) -> np.ndarray:
    """``x·M`` for an int64 accumulator (the 16x8 kernels), as TFLite's int64
    ``MultiplyByQuantizedMultiplier`` (one formula in both rounding modes): the
    multiplier reduced to 15 bits, ``r = round(m / 2^16)`` (``2^15 − 1`` from
    ``m ≥ 0x7FFF0000``), then ``(x·r + 2^(14−shift)) >> (15−shift)``, one rounding
    half towards +∞; the result wraps to int32 as the C cast does.  Returns int64.
    """
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    total = 15 - np.asarray(shift, dtype=np.int64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    return wrap_int32((x * reduced + (np.int64(1) << (total - 1))) >> total)


def _double_rounding(x: np.ndarray, m: np.ndarray, right: np.ndarray) -> np.ndarray:
    """SRDHM then RDBPOT in one pass, for ``m ≥ 0`` (no saturation case).

    With ``v = x·m``, SRDHM's truncating divide of ``v + 2^30`` (or ``v + 1 − 2^30``
    when negative) equals the floor shift ``(v + 2^30) >> 31`` for both signs; then
    rounding half away from zero by ``2^r`` is ``(h + 2^(r−1) − [h<0 and r>0]) >> r``::

        h = (x·m + 2^30) >> 31
        y = (h + 2^(r−1) − [h < 0][r > 0]) >> r

    Seven in-place int64 operations.
    """
    v = x * m
    v += 1 << 30
    v >>= 31
    neg = v < 0
    if not np.all(right > 0):
        neg &= right > 0
    v += (np.int64(1) << right) >> 1
    v -= neg
    v >>= right
    return v


def wrap_int32(v: np.ndarray) -> np.ndarray:
    """Two's-complement wrap to int32 (what the C ``int32`` multiply does)."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
