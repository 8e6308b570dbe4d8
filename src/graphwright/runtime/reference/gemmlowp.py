"""gemmlowp's fixed-point functions, vectorised and exact in int64, as TFLite's integer kernels
call them: 32-bit (Q-format raws in int32) for LOG_SOFTMAX, L2_NORMALIZATION, RSQRT and the
integer divisions of :mod:`.binary_ops`; 16-bit for the integer LSTM's gates and the 8-bit
HARD_SWISH.  The requantization primitives they build on (SRDHM, RDBPOT) are in :mod:`.fixedpoint`.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)
from .luts import wrap16

__all__ = ["clz32", "constant16", "exp_negative16", "exp_on_negative_values_q5", "half_sum", "inv_sqrt_multiplier",
           "log_q12_to_q5", "logistic16_table", "newton_reciprocal16", "one_over_one_plus_x", "saturate16",
           "shift16", "shift_left_sat", "srdhm16", "tanh16_table"]

# -- 32-bit --------------------------------------------------------------------------------------------


def shift_left_sat(raw: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT`` for exponents ``≥ 0``."""
    return np.clip(np.asarray(raw, np.int64) << exponent, INT32_MIN, INT32_MAX)


def half_sum(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``RoundingHalfSum``: ``(a + b ± 1) / 2``, truncated."""
    total = np.asarray(a, np.int64) + b
    total = total + np.where(total >= 0, 1, -1)
    return np.where(total >= 0, total // 2, -((-total) // 2))


def clz32(v: np.ndarray) -> np.ndarray:
    """Leading zeros of ``v`` as an unsigned 32-bit integer."""
    u = np.asarray(v, np.int64) & 0xFFFFFFFF
    bits = np.zeros(u.shape, np.int64)
    for b in (16, 8, 4, 2, 1):
        high = u >= (1 << b)
        u = np.where(high, u >> b, u)
        bits += high * b
    return 32 - (bits + (u > 0))


def exp_on_negative_values_q5(a: np.ndarray) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` of Q5.26 raws ``a ≤ 0``, in Q0.31: a Taylor polynomial
    on ``[−1/4, 0)`` times ``exp(−2^k)`` for each bit of the remainder."""
    srdhm = saturating_rounding_doubling_high_mul
    quarter = 1 << 24
    a = np.asarray(a, np.int64)
    mod = (a & (quarter - 1)) - quarter
    x = shift_left_sat(mod, 5) + (1 << 28)  # Q0.31, around −1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = rounding_divide_by_pot(srdhm(x2, x2), 2)
    poly = rounding_divide_by_pot(srdhm(x4 + x3, 715827883) + x2, 1)
    result = 1895147668 + srdhm(1895147668, x + poly)
    remainder = mod - a
    for exponent, multiplier in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                                 (2, 39332535), (3, 720401), (4, 242)):
        result = np.where(remainder & (1 << (26 + exponent)), srdhm(result, multiplier), result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Q0.31 in and out): Newton–Raphson division."""
    srdhm = saturating_rounding_doubling_high_mul
    half_denominator = half_sum(a, INT32_MAX)
    x = 1515870810 + srdhm(half_denominator, -1010580540)  # Q2.29
    for _ in range(3):
        x = x + shift_left_sat(srdhm(x, (1 << 29) - srdhm(half_denominator, x)), 2)
    return shift_left_sat(x, 1)


def log_q12_to_q5(z: np.ndarray) -> np.ndarray:
    """LiteRT's ``log_x_for_x_greater_than_or_equal_to_1<5>`` of Q12.19 raws ``z ≥ 1``, in Q5.26."""
    srdhm = saturating_rounding_doubling_high_mul
    sqrt_half, sqrt_sqrt_half, log_2 = 1518500250, 1805811301, 1488522236
    quarter = 1 << 23  # 1/4 in Q6.25
    headroom_a = clz32(z)
    r_a = shift_left_sat(srdhm(shift_left_sat(z, headroom_a - 1), sqrt_half), 1)
    pow_a = np.clip(shift_left_sat(12 - headroom_a, 25) + quarter, INT32_MIN, INT32_MAX)
    headroom_b = clz32(srdhm(z, sqrt_half)) - 1
    r_b = shift_left_sat(z, headroom_b)
    pow_b = np.clip(shift_left_sat(12 - headroom_b, 25) - quarter, INT32_MIN, INT32_MAX)
    r = np.minimum(r_a, r_b)
    pow_adj = np.maximum(pow_a, pow_b)
    p = half_sum(r, sqrt_sqrt_half)
    q = wrap_int32(2 * (r - sqrt_sqrt_half))
    q_sq = srdhm(q, q)
    num = srdhm(q, r) + srdhm(srdhm(q, q_sq), 117049297)
    denominator = srdhm(p, 1057819769 + q + srdhm(127690142, q_sq)) + srdhm(638450708, q)
    total = srdhm(pow_adj, log_2) + srdhm(rounding_divide_by_pot(num, 6), one_over_one_plus_x(denominator))
    return shift_left_sat(total, 1)


def inv_sqrt_multiplier(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``GetInvSqrtQuantizedMultiplierExp(value, kReverseShift)``: ``(m, shift)`` with
    ``1/sqrt(value) ≈ m·2^(shift−31)``, by five Newton–Raphson steps in Q3.28 (vectorised;
    ``value ≤ 1`` gives ``(INT32_MAX, 0)``)."""
    v = np.asarray(value, np.int64).copy()
    shift = np.full(v.shape, 11, np.int64)
    while np.any(big := v >= (1 << 29)):
        v = np.where(big, v // 4, v)
        shift += big
    pairs = (clz32(v) - 1) // 2 - 1
    shift -= pairs
    v = v << (2 * np.maximum(pairs, 0))
    x_in = v >> 1
    half_in = rounding_divide_by_pot(x_in, 1)
    x = np.full(v.shape, 1 << 28, np.int64)
    srdhm = saturating_rounding_doubling_high_mul
    for _ in range(5):
        x3 = shift_left_sat(srdhm(srdhm(x, x), x), 6)
        x = shift_left_sat(wrap_int32(srdhm(np.int64((1 << 28) + (1 << 27)), x) - srdhm(half_in, x3)), 3)
    x = srdhm(x, 1518500250)
    left = np.maximum(-shift, 0)
    x = x << left
    shift = np.where(shift < 0, 0, shift)
    small = np.asarray(value) <= 1
    return np.where(small, INT32_MAX, x), np.where(small, 0, -shift)


# -- 16-bit --------------------------------------------------------------------------------------------


def saturate16(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -32768, 32767)


def srdhm16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp's 16-bit SaturatingRoundingDoublingHighMul: ``(a·b ± 2^14) / 2^15`` truncated."""
    ab = a * b
    q = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    out = np.where(q >= 0, q >> 15, -((-q) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, out)


def shift16(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingMultiplyByPOT on int16: a saturating left shift, or a
    rounding right shift."""
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    limit = (1 << (15 - exponent)) - 1
    return np.where(x > limit, 32767, np.where(x < -limit, -32768, x << exponent))


def constant16(raw32: int) -> int:
    """A gemmlowp constant given as its 32-bit raw value, rounded to 16 bits."""
    return int(rounding_divide_by_pot(np.int64(raw32), 16))


def _exp_quarter16(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [−1/4, 0), Q0.15: gemmlowp's Taylor expansion around −1/8."""
    x = wrap16(a + (1 << 12))
    x2 = srdhm16(x, x)
    x3, x4 = srdhm16(x2, x), srdhm16(x2, x2)
    inner = wrap16(srdhm16(wrap16(rounding_divide_by_pot(x4, 2) + x3), constant16(715827883)) + x2)
    term = constant16(1895147668)
    return saturate16(term + srdhm16(term, wrap16(x + rounding_divide_by_pot(inner, 1))))


#: gemmlowp's exp barrel shifter: (power of two, exp(−2^power) as a 32-bit raw Q0.31 value)
_EXP_STEPS = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
              (3, 720401), (4, 242))


def exp_negative16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp(a) for a ≤ 0 in Q``integer_bits``, to Q0.15 (gemmlowp's exp_on_negative_values)."""
    fractional = 15 - integer_bits
    quarter = 1 << (fractional - 2)
    rest = wrap16((a & (quarter - 1)) - quarter)
    result = _exp_quarter16(shift16(rest, integer_bits))
    remainder = wrap16(rest - a)
    for power, multiplier in _EXP_STEPS:
        if integer_bits > power:
            bit = (remainder & (1 << (fractional + power))) != 0
            result = np.where(bit, srdhm16(result, constant16(multiplier)), result)
    if integer_bits > 5:
        result = np.where(a < constant16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, 32767, result)


def newton_reciprocal16(a: np.ndarray) -> np.ndarray:
    """``1 / ((1 + a) / 2)`` in Q2.13 for a in (0, 1): three Newton-Raphson steps from 48/17 − 32/17·d."""
    total = a + 32767
    half = np.where(total >= 0, total + 1, total - 1)
    half = np.where(half >= 0, half >> 1, -((-half) >> 1))
    x = wrap16(constant16(1515870810) + srdhm16(half, constant16(-1010580540)))
    for _ in range(3):
        x = wrap16(x + shift16(srdhm16(x, wrap16((1 << 13) - srdhm16(half, x))), 2))
    return x


@cache
def logistic16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp's logistic of every int16 in Q``integer_bits``, to Q0.15 (index: raw + 32768)."""
    a = np.arange(-32768, 32768, dtype=np.int64)
    positive = a > 0
    magnitude = np.where(positive, a, wrap16(-a))
    on_positive = shift16(newton_reciprocal16(exp_negative16(wrap16(-magnitude), integer_bits)), 1)
    table = np.where(a == 0, 1 << 14, np.where(positive, on_positive, wrap16(32767 - on_positive)))
    return table.astype(np.int16)


@cache
def tanh16_table(integer_bits: int) -> np.ndarray:
    """gemmlowp's tanh of every int16 in Q``integer_bits``, to Q0.15 (index: raw + 32768)."""
    a = np.arange(-32768, 32768, dtype=np.int64)
    negative = a < 0
    minus_magnitude = np.where(negative, a, wrap16(-a))
    t = shift16(wrap16(newton_reciprocal16(exp_negative16(minus_magnitude, integer_bits + 1)) - (1 << 13)), 2)
    table = np.where(a == 0, 0, np.where(negative, wrap16(-t), t))
    return table.astype(np.int16)
