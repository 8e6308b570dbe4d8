"""The vectorised fixed-point helpers against a scalar transcription of the C definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphwright.runtime.reference.fixedpoint import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_multipliers,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero), exact for any size."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def srdhm(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    return c_div(ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30)), 1 << 31)


def rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    return (x >> e) + (1 if (x & mask) > (mask >> 1) + (1 if x < 0 else 0) else 0)


def mbqm(x: int, m: int, s: int) -> int:
    left, right = max(s, 0), max(-s, 0)
    shifted = ((x * (1 << left) + 2**31) % 2**32) - 2**31
    return rdbpot(srdhm(shifted, m), right)


@pytest.fixture(scope="module")
def samples() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x = rng.integers(INT32_MIN, INT32_MAX, 5000, endpoint=True)
    x[:4] = [INT32_MIN, INT32_MAX, 0, -1]
    m = rng.integers(1 << 30, INT32_MAX, 5000, endpoint=True)
    e = rng.integers(0, 31, 5000)
    return x, m, e


def test_srdhm_matches_scalar_definition(samples) -> None:
    x, m, _ = samples
    got = saturating_rounding_doubling_high_mul(x, m)
    assert got.tolist() == [srdhm(int(a), int(b)) for a, b in zip(x, m)]


def test_srdhm_saturates_the_one_overflow_case() -> None:
    assert saturating_rounding_doubling_high_mul(np.array([INT32_MIN]), INT32_MIN).tolist() == [INT32_MAX]


def test_rounding_divide_by_pot_rounds_half_away_from_zero(samples) -> None:
    x, _, e = samples
    assert rounding_divide_by_pot(x, e).tolist() == [rdbpot(int(a), int(b)) for a, b in zip(x, e)]
    assert rounding_divide_by_pot(np.array([5, -5, 6, -6, 7, -7]), 1).tolist() == [3, -3, 3, -3, 4, -4]


def test_mbqm_double_rounding_matches_scalar(samples) -> None:
    x, m, e = samples
    small = x >> 8  # accumulator-sized values
    shifts = -e
    got = multiply_by_quantized_multiplier(small, m, shifts)
    assert got.tolist() == [mbqm(int(a), int(b), int(s)) for a, b, s in zip(small, m, shifts)]
    left = multiply_by_quantized_multiplier(np.array([1000, -1000]), 1 << 30, 2)  # M = 2
    assert left.tolist() == [2000, -2000]


def test_single_rounding_is_one_rounding_half_up() -> None:
    m, s = quantize_multiplier(0.25)  # x/4: 0.5, -0.5, -1.5
    assert multiply_by_quantized_multiplier(np.array([2, -2, -6]), m, s, "single").tolist() == [1, 0, -1]
    assert multiply_by_quantized_multiplier(np.array([2, -2, -6]), m, s, "double").tolist() == [1, -1, -2]
    with pytest.raises(ValueError, match="rounding"):
        multiply_by_quantized_multiplier(np.array([1]), m, s, "triple")


@pytest.mark.parametrize("real", [0.5, 0.75, 1.0, 1e-3, 3.1415926, 2.0**-31, 0.9999999999])
def test_quantize_multiplier_represents_the_real(real: float) -> None:
    m, s = quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31)
    assert math.isclose(m * 2.0 ** (s - 31), real, rel_tol=2**-30)


def test_quantize_multiplier_edge_cases() -> None:
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(2.0**-40) == (0, 0)  # shift below -31 flushes to zero
    assert quantize_multiplier(1 - 2**-33) == (1 << 30, 1)  # q rounds up to 2^31: halved
    m, s = quantize_multipliers(np.array([0.25, 0.5]))
    assert m.tolist() == [1 << 30, 1 << 30] and s.tolist() == [-1, 0]


@pytest.mark.parametrize("right", [None, 0, 7])
def test_fused_double_rounding_equals_srdhm_then_rdbpot(right: int | None) -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(INT32_MIN, INT32_MAX, 100_000, endpoint=True)
    x[:2000] = rng.integers(-5, 5, 2000)  # ties and signs near zero
    m = rng.integers(0, INT32_MAX, 100_000, endpoint=True)
    r = rng.integers(0, 31, 100_000) if right is None else np.int64(right)
    got = multiply_by_quantized_multiplier(x, m, -r)
    expected = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, m), r)
    np.testing.assert_array_equal(got, expected)
