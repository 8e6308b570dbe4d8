"""The mergeable comparison statistics: the exact sum against Python's fractions, and ErrorStats merged
from any split equal to one pass, including NaN/inf errors, shape failures and ties of the worst error."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from graphwright.verify import ErrorStats, ExactSum


def test_exact_sum_is_the_correctly_rounded_sum_in_any_grouping() -> None:
    rng = np.random.default_rng(0)
    xs = [1e16, 1.0, -1e16] + (rng.standard_normal(400) * 10.0 ** rng.integers(-20, 0, 400)).tolist()
    exact = float(sum(Fraction(x) for x in xs))  # Fraction -> float rounds correctly
    assert sum(xs) != exact  # plain left-to-right addition loses it
    for split in (1, 7, 200):
        parts = [ExactSum() for _ in range(0, len(xs), split)]
        for k, part in enumerate(parts):
            for x in reversed(xs[k * split:(k + 1) * split]):
                part.add(x)
        total = ExactSum()
        for part in parts[::-1]:
            total.merge(part)
        assert total.value() == exact
    infinite = ExactSum()
    infinite.add(1.0)
    infinite.add(math.inf)
    assert infinite.value() == math.inf


def _pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    pairs = []
    for i in range(9):
        a = rng.standard_normal((2, 5)).astype(np.float32)
        b = a + (rng.standard_normal((2, 5)) * 10.0 ** -(i % 4)).astype(np.float32)
        b[0, 0] = a[0, 0]
        pairs.append((a, b))
    pairs[3][1][1, 2] = np.nan
    pairs[5] = (pairs[5][0], pairs[5][1][:, :4])  # a shape failure in sample 5
    pairs[7] = (pairs[7][0], pairs[7][0] + np.float32(5.0))  # ties of the worst error
    pairs[8] = (pairs[8][0], pairs[8][0] + np.float32(5.0))
    return pairs


def _stats(pairs: list[tuple[np.ndarray, np.ndarray]], start: int) -> ErrorStats:
    stats = ErrorStats("y", "y")
    for i, (a, b) in enumerate(pairs):
        stats.add(start + i, a, b, None, None)
    return stats


def _fields(s: ErrorStats) -> str:
    return repr((s.samples, s.elements, s.exact, s.mismatched, s.max_abs, s.max_rel, s.abs_sum.value(),
            s.histogram.tolist(), s.rows, s.top1, s.reason, s.worst))  # repr: NaN equals NaN


def test_error_stats_merged_from_any_split_equal_one_pass() -> None:
    pairs = _pairs()
    one = _stats(pairs, 0)
    for cuts in ([4], [1, 2, 8], [3, 6]):
        bounds = [0, *cuts, len(pairs)]
        merged = _stats(pairs[: bounds[1]], 0)
        for lo, hi in itertools.pairwise(bounds[1:]):
            merged.merge(_stats(pairs[lo:hi], lo))
        assert _fields(merged) == _fields(one)
    assert one.max_abs == math.inf and one.reason == "sample 5: shape differs: [2, 5] vs [2, 4]"
    assert one.elements == 8 * 10 and one.rows == 16 and one.worst is not None and one.worst[1] == 3  # NaN: inf
    row = one.comparison()
    assert not row.ok and row.mean_abs == math.inf and row.samples == 9 and sum(row.histogram) == 80
