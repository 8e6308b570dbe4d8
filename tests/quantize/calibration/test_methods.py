"""Range methods against direct computations on the raw data: exact quantiles (numpy), the
quantization error of real rounding (numpy fake-quantization), and the behaviour entropy
calibration is for (clip rare outliers, keep dense data)."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.quantize.calibration import CalibrationError, Statistics, ValueStats, compute_ranges, value_range
from graphwright.quantize.calibration.methods import ENTROPY_MAX_CLIPPED


def _stats(x: np.ndarray) -> ValueStats:
    s = ValueStats()
    s.update(x)
    return s


def _heavy(n: int = 200_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_t(4, n) * 0.7 + 0.3).astype(np.float32)


def _fake_quant_mse(x: np.ndarray, lo: float, hi: float, steps: int = 255) -> float:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    delta = (hi - lo) / steps
    q = np.clip(np.round((x - lo) / delta), 0, steps) * delta + lo
    return float(np.mean((x - q) ** 2))


@pytest.mark.parametrize("p", [99.0, 99.9, 99.999])
def test_percentile_is_the_exact_quantile_within_one_bin(p: float) -> None:
    x = _heavy()
    s = _stats(x)
    x64 = x.astype(np.float64)
    lo, hi = value_range(s, "percentile", percentile=p)
    cut = (100 - p) / 200
    exact = np.quantile(x64, [cut, 1 - cut])
    assert abs(lo - exact[0]) <= s.width and abs(hi - exact[1]) <= s.width
    neg, pos = value_range(s, "percentile", percentile=p, symmetric=True)
    assert neg == -pos and abs(pos - np.quantile(np.abs(x64), p / 100)) <= s.width
    assert value_range(s, "percentile", percentile=100.0) == (s.min, s.max)


def test_minmax() -> None:
    x = _heavy(1000)
    s = _stats(x)
    assert value_range(s, "minmax") == (float(x.min()), float(x.max()))
    m = float(np.abs(x).max())
    assert value_range(s, "minmax", symmetric=True) == (-m, m)


@pytest.mark.parametrize("dtype,steps", [("int8", 255), ("int16", 65535)])
def test_mse_range_is_near_the_best_real_rounding(dtype: str, steps: int) -> None:
    x = _heavy(50_000).astype(np.float64)
    s = _stats(x)
    neg, pos = value_range(s, "mse", dtype=dtype, symmetric=True)
    grid = np.linspace(0.05, 1.0, 100) * np.abs(x).max()
    brute = min(_fake_quant_mse(x, -t, t, steps) for t in grid)
    assert neg == -pos
    assert _fake_quant_mse(x, neg, pos, steps) <= 1.05 * brute
    lo, hi = value_range(s, "mse", dtype=dtype)
    brute2 = min(_fake_quant_mse(x, a, b, steps) for a in np.linspace(0.1, 1, 25) * x.min()
                 for b in np.linspace(0.1, 1, 25) * x.max())
    assert _fake_quant_mse(x, lo, hi, steps) <= 1.05 * brute2
    if dtype == "int8":  # heavy tails: clipping beats min-max
        assert _fake_quant_mse(x, lo, hi) < _fake_quant_mse(x, float(x.min()), float(x.max()))


def test_entropy_clips_at_most_its_fraction_and_keeps_dense_data() -> None:
    """At most ``ENTROPY_MAX_CLIPPED`` of the elements are clipped (numpy's exact quantile of ``|x|``
    bounds the threshold from below): 10 far outliers in 100k elements (1e-4) are kept; on 2M elements
    of a heavy-tailed (Student t, 3 dof) distribution the KL search clips, but never below that quantile."""
    rng = np.random.default_rng(1)
    gauss = rng.standard_normal(100_000)
    rare = rng.uniform(8, 12, 10) * rng.choice([-1, 1], 10)
    data = np.concatenate([gauss, rare])
    lo, hi = value_range(_stats(data), "entropy")
    assert (lo, hi) == (pytest.approx(data.min(), abs=_stats(data).width), pytest.approx(data.max(), abs=_stats(data).width))
    big = rng.standard_t(3, 2_000_000)
    s = _stats(big)
    lo, hi = value_range(s, "entropy")
    floor = float(np.quantile(np.abs(big), 1.0 - ENTROPY_MAX_CLIPPED))
    assert floor - s.width <= hi and hi - lo < big.max() - big.min() - s.width  # clipped, by no more than 1e-6
    assert lo <= -floor + s.width
    uniform = rng.uniform(-1, 1, 100_000)
    lo, hi = value_range(_stats(uniform), "entropy")
    assert hi > 0.95 and lo < -0.95


def test_entropy_ignores_exact_zeros() -> None:
    rng = np.random.default_rng(2)
    positive = np.abs(rng.standard_t(3, 50_000))
    relu = np.concatenate([positive, np.zeros(70_000)])
    with_zeros, without = value_range(_stats(relu), "entropy"), value_range(_stats(positive), "entropy")
    assert with_zeros[1] == without[1] and with_zeros[0] == 0.0


def test_compute_ranges_options_and_empty_values() -> None:
    stats = Statistics()
    stats.update("a", np.arange(5, dtype=np.float32))
    stats.update("nan", np.array([np.nan], np.float32))
    assert compute_ranges(stats) == {"a": (0.0, 4.0)}  # no finite element: no range
    with pytest.raises(CalibrationError, match="unknown calibration method 'kl'"):
        compute_ranges(stats, "kl")
    with pytest.raises(CalibrationError, match="method 'minmax' has no option 'percentile'"):
        compute_ranges(stats, "minmax", percentile=99.0)
    with pytest.raises(CalibrationError, match="percentile must be in"):
        compute_ranges(stats, "percentile", percentile=0)
    with pytest.raises(CalibrationError, match="dtype must be one of"):
        compute_ranges(stats, "mse", dtype="int4")
    with pytest.raises(CalibrationError, match="no statistics for value 'b'"):
        compute_ranges(stats, names=["b"])


@pytest.mark.parametrize("values", [[0.0] * 4, [3.0] * 4, [-2.5] * 4, [-1.0, 2.0], [1e-30, -1e-30], [3e38, -3e38]])
def test_every_method_keeps_tiny_and_degenerate_data_in_range(values: list[float]) -> None:
    x = np.array(values, np.float32)
    s = _stats(x)
    for method in ("minmax", "percentile", "entropy", "mse"):
        lo, hi = value_range(s, method)
        assert lo <= hi and np.isfinite([lo, hi]).all()
        assert abs(lo - x.min()) <= s.width and abs(hi - x.max()) <= s.width, method  # nothing to clip
        neg, pos = value_range(s, method, symmetric=True)
        assert neg == -pos and abs(pos - np.abs(x).max()) <= s.width, method


@pytest.mark.parametrize("mask", [float(np.finfo(np.float32).min), -1e9, -1e4])
@pytest.mark.parametrize("method", ["percentile", "entropy", "mse"])
def test_a_mask_cluster_is_never_clipped_away(mask: float, method: str) -> None:
    """Attention scores plus a mask: a few masked elements at ``mask``.  Clipping them would give the
    quantizer the scores' range, where masked positions saturate to a small negative and leak
    through the Softmax; the mask's min/max range is kept for the quantizer to leave it float.
    A cluster above -1e4 is ordinary data, clipped as usual (by percentile and mse here; entropy's
    KL keeps these three on this grid)."""
    rng = np.random.default_rng(0)
    scores = rng.standard_normal(100_000).astype(np.float32)
    data = scores.copy()
    data[:3] = (np.float32(mask) + scores[:3]).astype(np.float32)
    stats = ValueStats()
    stats.update(data)
    assert value_range(stats, method) == (float(data.min()), float(data.max()))
    if method == "entropy":
        return
    ordinary = scores.copy()
    ordinary[:3] = -900.0
    plain = ValueStats()
    plain.update(ordinary)
    assert value_range(plain, method)[0] > -900.0


def test_statistics_without_histograms_give_minmax_and_refuse_the_rest() -> None:
    x = _heavy(5000)
    bare = Statistics(histogram=False)
    bare.update("x", x)
    assert compute_ranges(bare, "minmax") == {"x": (float(x.min()), float(x.max()))}
    for method in ("percentile", "entropy", "mse"):
        with pytest.raises(CalibrationError, match=f"method '{method}' reads histograms"):
            compute_ranges(bare, method)
