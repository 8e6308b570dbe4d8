"""Streaming statistics: bins placed as exact float64 arithmetic says, merges identical to one pass
(any split, any order), pickling, and memory independent of the number of batches."""

from __future__ import annotations

import itertools
import pickle
import tracemalloc

import numpy as np
import pytest

from graphwright.quantize.calibration import Statistics, ValueStats


def _batches(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scales = (1e-3, 1.0, 37.0, 0.25, 1e-30, 5e4)
    out = [(rng.standard_normal(3000) * s + s / 3).astype(np.float32) for s in scales]
    out.append(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 2.0 ** -70, -(2.0 ** -70), 2.0 ** 15], np.float32))
    out.append(rng.standard_normal(500).astype(np.float16))
    return out


def test_bins_are_where_exact_arithmetic_puts_them() -> None:
    data = np.concatenate([b.astype(np.float64) for b in _batches()])
    stats = ValueStats(256)
    stats.update(data)
    finite = data[np.isfinite(data)]
    assert stats.count == finite.size and stats.nonfinite == 3
    assert stats.min == finite.min() and stats.max == finite.max()
    assert stats.radius > np.abs(finite).max() >= stats.radius / 2  # the smallest power of two above
    # independent placement: the last edge <= x (edges are exact dyadic numbers)
    index = np.searchsorted(stats.edges, finite, side="right") - 1
    np.testing.assert_array_equal(stats.hist, np.bincount(index, minlength=256))
    assert stats.zeros == int((finite == 0).sum()) == 2


@pytest.mark.parametrize("bins", [8, 2048])
def test_merge_of_any_split_in_any_order_is_one_pass(bins: int) -> None:
    batches = _batches()
    one_pass = ValueStats(bins)
    one_pass.update(np.concatenate([b.astype(np.float32) for b in batches]))
    streamed = ValueStats(bins)
    for b in batches:
        streamed.update(b)
    assert streamed == one_pass
    parts = []
    for b in batches:
        part = ValueStats(bins)
        part.update(b)
        parts.append(part)
    for order in itertools.islice(itertools.permutations(range(len(parts))), 0, None, 997):
        merged = parts[order[0]]
        for k in order[1:]:
            merged = merged.merge(parts[k])
        assert merged == one_pass, order
    for split in ((3,), (2, 5)):  # 2 and 3 shards, each streamed, merged both ways round
        shards = np.split(np.arange(len(batches)), split)
        stats = []
        for shard in shards:
            s = ValueStats(bins)
            for k in shard:
                s.update(batches[k])
            stats.append(s)
        assert stats[0].merge(stats[1]) == stats[1].merge(stats[0]) or len(stats) == 3
        merged = stats[-1]
        for s in reversed(stats[:-1]):
            merged = s.merge(merged)
        assert merged == one_pass


def test_statistics_merge_pickles_and_differs_when_data_differs() -> None:
    a, b = Statistics(64), Statistics(64)
    a.update("x", np.arange(10, dtype=np.float32))
    b.update("x", -np.arange(5, dtype=np.float32))
    b.update("y", np.ones(3, np.float32))
    a.samples, b.samples = 1, 2
    both = a.merge(b)
    assert set(both) == {"x", "y"} and both.samples == 3 and both["x"].count == 15
    assert pickle.loads(pickle.dumps(both)) == both
    assert Statistics.merge_all([b, a]) == both
    other = Statistics(64)
    other.update("x", np.arange(10, dtype=np.float32) + 0.5)
    assert other.merge(b) != both  # same counts and names, different histogram
    with pytest.raises(ValueError, match="power of two"):
        ValueStats(100)


def test_memory_does_not_grow_with_batches() -> None:
    stats = Statistics()
    rng = np.random.default_rng(0)
    batch = rng.standard_normal(50_000).astype(np.float32)

    def run(n: int) -> int:
        tracemalloc.start()
        for k in range(n):
            stats.update(f"v{k % 4}", batch * (k + 1))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return peak

    run(4)  # every value exists
    small, large = run(10), run(100)
    assert large < small * 1.5  # 10x the data, the same peak (one batch's float64 copy)
    assert large < 10 * batch.nbytes  # float64 copy, bin indices and counts of one batch


def test_without_histograms_min_max_and_counts_are_the_histogram_statistics() -> None:
    """``histogram=False`` (min-max calibration): the same min, max, count and non-finite count as
    the full statistics, on every batch (NaN, infinities, float16), streamed or merged; no histogram."""
    batches = _batches()
    full, bare = Statistics(64), Statistics(64, histogram=False)
    for k, b in enumerate(batches):
        full.update(f"v{k % 3}", b)
        bare.update(f"v{k % 3}", b)
    bare.update("empty", np.zeros((0, 4), np.float32))
    assert bare["empty"].count == 0 and "empty" not in bare.minmax()
    for name in full:
        f, b = full[name], bare[name]
        assert (b.min, b.max, b.count, b.nonfinite) == (f.min, f.max, f.count, f.nonfinite), name
        assert b.hist is None and not b.histogram
    assert bare.minmax() == full.minmax()
    halves = [Statistics(64, histogram=False), Statistics(64, histogram=False)]
    for k, b in enumerate(batches):
        halves[k % 2].update("x", b)
    whole = Statistics(64, histogram=False)
    for b in batches:
        whole.update("x", b)
    merged = pickle.loads(pickle.dumps(halves[0].merge(halves[1])))
    assert merged == whole and merged["x"].nonfinite == 3
    with pytest.raises(ValueError, match="with histograms and statistics without"):
        full.merge(bare)
    with pytest.raises(ValueError, match="without histograms"):
        full["v0"].add_extrema(0.0, 1.0, 2)


def test_extrema_added_are_what_the_elements_give() -> None:
    stats = ValueStats(histogram=False)
    stats.add_extrema(-2.0, 3.0, 10)
    stats.add_extrema(np.inf, -np.inf, 0)  # an empty tensor's reductions: nothing
    stats.add_extrema(-1.0, 5.0, 4)
    same = ValueStats(histogram=False)
    same.update(np.array([-2.0, 3.0, *np.zeros(8), -1.0, 5.0, 0.0, 0.0], np.float32))
    assert same == stats and (stats.min, stats.max, stats.count) == (-2.0, 5.0, 14)
