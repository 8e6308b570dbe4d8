"""Comparison over many samples, as statistics that merge exactly (for sharding).

``compare_samples(A, B, samples)`` loads both models once, runs them on each sample (a dict of
feeds; inputs it lacks get seeded random values, seed ``seed + index``) and accumulates, per
output, a :class:`ErrorStats`: element, exact and out-of-tolerance counts, the largest absolute
and relative errors, the sum of absolute errors, a histogram of absolute errors over fixed bins
(:data:`HISTOGRAM_EDGES`) and, for classifier scores, top-1 agreement counts.  Every field merges
exactly — counts add, maxima take the max, the histogram adds, the sum is kept as an exact
expansion (:class:`ExactSum`) of the per-sample correctly rounded sums — so the statistics of
consecutive runs of samples, merged in order (:meth:`SampleComparison.merge`), are equal, field for
field, to one pass over all of them, whatever the split.  :meth:`SampleComparison.report` turns
them into the :class:`CompareReport` ``compare`` prints (with the mean absolute error and the
histogram).  Cost: one run of each model per sample, O(output elements) per sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runtime.base import ModelSource, resolve_backend
from ..runtime.execute import Job, ModelLike, complete_feeds, prepare
from .compare import looks_like_scores, match_outputs, tolerances_for
from .report import HISTOGRAM_EDGES, CompareReport, OutputComparison

__all__ = ["ErrorStats", "ExactSum", "SampleComparison", "compare_samples", "seeded_samples"]

class ExactSum:
    """A sum of floats kept exactly (non-overlapping partials, Shewchuk's expansion), so adding
    the same numbers in any grouping or order gives the same :meth:`value` (correctly rounded)."""

    __slots__ = ("partials", "infinite")

    def __init__(self) -> None:
        self.partials: list[float] = []
        self.infinite = False

    def add(self, x: float) -> None:
        if math.isinf(x):
            self.infinite = True
            return
        kept = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                self.partials[kept] = low
                kept += 1
            x = high
        self.partials[kept:] = [x]

    def merge(self, other: ExactSum) -> None:
        for x in other.partials:
            self.add(x)
        self.infinite |= other.infinite

    def value(self) -> float:
        return math.inf if self.infinite else math.fsum(self.partials)


@dataclass(slots=True)
class ErrorStats:
    """One output pair's error statistics over the samples seen so far (A is the reference)."""

    name: str
    name_b: str
    dtype_a: str = ""
    dtype_b: str = ""
    shape_a: tuple[int, ...] | None = None
    shape_b: tuple[int, ...] | None = None
    rtol: float = 0.0
    atol: float = 0.0
    samples: int = 0
    elements: int = 0
    exact: int = 0
    mismatched: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    abs_sum: ExactSum = field(default_factory=ExactSum)
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(len(HISTOGRAM_EDGES) + 2, np.int64))
    #: Classifier scores: rows compared and rows whose argmax agrees (None: not scores).
    rows: int | None = None
    top1: int = 0
    #: The first failure that is not a number (a missing output, a shape or dtype difference).
    reason: str = ""
    #: The largest out-of-tolerance error: (error, sample, element index, a, b); earliest on ties.
    worst: tuple[float, int, tuple[int, ...], float, float] | None = None

    def add(self, sample: int, a: np.ndarray | None, b: np.ndarray | None, rtol: float | None,
            atol: float | None) -> None:
        """Accumulate one sample's pair of arrays (``None``: the output is missing on that side)."""
        self.samples += 1
        if a is None or b is None:
            self.reason = self.reason or f"output {(self.name or self.name_b)!r} exists only in model " + (
                "A" if b is None else "B")
            return
        a, b = np.asarray(a), np.asarray(b)
        if self.samples == 1:
            self.dtype_a, self.dtype_b = str(a.dtype), str(b.dtype)
            self.shape_a, self.shape_b = tuple(a.shape), tuple(b.shape)
            self.rtol, self.atol = tolerances_for(a.dtype, rtol, atol)
        if a.shape != b.shape:
            self.reason = self.reason or f"sample {sample}: shape differs: {list(a.shape)} vs {list(b.shape)}"
            return
        if a.dtype != b.dtype:
            self.reason = self.reason or f"dtype differs: {a.dtype} vs {b.dtype}"
        self.elements += int(a.size)
        if a.dtype.kind in "biufc" and b.dtype.kind in "biufc":
            self._add_numbers(sample, a, b)
        else:
            same = int(np.count_nonzero(a == b))
            self.exact += same
            self.mismatched += int(a.size) - same

    def _add_numbers(self, sample: int, a: np.ndarray, b: np.ndarray) -> None:
        if a.size == 0:
            return
        wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
        a64, b64 = a.astype(wide), b.astype(wide)
        equal = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a64 - b64)
        diff = np.where(equal, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)  # one side NaN, or inf - inf
        tiny = float(np.finfo(a.dtype).tiny) if a.dtype.kind in "fc" else 1.0
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            rel = np.where(equal, 0.0, diff / np.maximum(np.abs(a64), tiny))
        close = np.isclose(b64, a64, rtol=self.rtol, atol=self.atol, equal_nan=True)
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.max_rel = max(self.max_rel, float(np.nan_to_num(rel, nan=np.inf).max()))
        self.abs_sum.add(math.fsum(diff.ravel().tolist()))
        self.exact += int(np.count_nonzero(equal))
        outside = int(a.size - np.count_nonzero(close))
        self.mismatched += outside
        self.histogram += histogram(diff)
        if outside:
            at = int(np.argmax(np.where(close, -1.0, diff)))
            index = tuple(int(i) for i in np.unravel_index(at, a.shape))
            self._keep_worst((float(diff.flat[at]), sample, index, a.flat[at].item(), b.flat[at].item()))
        if looks_like_scores(a) and looks_like_scores(b):
            self.rows = (self.rows or 0) + a.shape[0]
            self.top1 += int(np.count_nonzero(np.argmax(a, axis=1) == np.argmax(b, axis=1)))

    def _keep_worst(self, candidate: tuple[float, int, tuple[int, ...], float, float]) -> None:
        if self.worst is None or candidate[0] > self.worst[0]:  # ties keep the earlier sample
            self.worst = candidate

    def merge(self, later: ErrorStats) -> None:
        """Add the statistics of the samples that come after these."""
        if not self.samples:
            self.dtype_a, self.dtype_b, self.shape_a, self.shape_b = later.dtype_a, later.dtype_b, \
                later.shape_a, later.shape_b
            self.rtol, self.atol = later.rtol, later.atol
        self.samples += later.samples
        self.elements += later.elements
        self.exact += later.exact
        self.mismatched += later.mismatched
        self.max_abs = max(self.max_abs, later.max_abs)
        self.max_rel = max(self.max_rel, later.max_rel)
        self.abs_sum.merge(later.abs_sum)
        self.histogram = self.histogram + later.histogram  # not in place: a Ray result is read-only
        if later.rows is not None:
            self.rows = (self.rows or 0) + later.rows
        self.top1 += later.top1
        self.reason = self.reason or later.reason
        if later.worst is not None:
            self._keep_worst(later.worst)

    def comparison(self) -> OutputComparison:
        """The report row: maxima, shares, the mean absolute error and the histogram."""
        numeric = bool(self.dtype_a) and np.dtype(self.dtype_a).kind in "biufc" \
            and np.dtype(self.dtype_b).kind in "biufc"
        measured = self.elements > 0 or (numeric and not self.reason)
        result = OutputComparison(
            name=self.name, name_b=self.name_b, shape_a=self.shape_a, shape_b=self.shape_b,
            dtype_a=self.dtype_a, dtype_b=self.dtype_b, ok=False, rtol=self.rtol, atol=self.atol,
            elements=self.elements, samples=self.samples)
        if measured:
            result.exact = self.exact / self.elements if self.elements else 1.0
            result.mismatched = self.mismatched
        if measured and numeric:
            result.max_abs, result.max_rel = self.max_abs, self.max_rel
            result.mean_abs = self.abs_sum.value() / self.elements if self.elements else 0.0
            result.histogram = [int(c) for c in self.histogram]
            result.top1 = None if not self.rows else self.top1 / self.rows
        result.ok = measured and not self.reason and self.mismatched == 0
        result.reason = self.reason or self._tolerance_reason(numeric)
        return result

    def _tolerance_reason(self, numeric: bool) -> str:
        if not self.mismatched:
            return ""
        if not numeric or self.worst is None:
            return f"{self.mismatched} elements differ"
        _, sample, index, a, b = self.worst
        return (f"{self.mismatched} of {self.elements} elements outside atol={self.atol:g} + rtol={self.rtol:g}*|a| "
                f"(worst in sample {sample} at {list(index)}: {a:.7g} vs {b:.7g})")


def histogram(diff: np.ndarray) -> np.ndarray:
    """Counts of ``diff`` (absolute errors, inf allowed) over the bins of :data:`HISTOGRAM_EDGES`."""
    flat = diff.ravel()
    positive = flat[flat > 0]
    counts = np.zeros(len(HISTOGRAM_EDGES) + 2, np.int64)
    counts[0] = flat.size - positive.size
    counts[1:] = np.bincount(np.searchsorted(HISTOGRAM_EDGES, positive, side="right"),
                             minlength=len(HISTOGRAM_EDGES) + 1)
    return counts


@dataclass(slots=True)
class SampleComparison:
    """Every output's :class:`ErrorStats` over a run of consecutive samples, plus what the report needs."""

    outputs: list[ErrorStats] = field(default_factory=list)
    samples: int = 0
    matched_by: str = "name"
    notes: list[str] = field(default_factory=list)
    backend_a: str = ""
    backend_b: str = ""
    inputs: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, later: SampleComparison) -> SampleComparison:
        """These statistics followed by ``later``'s samples (in place; returns self)."""
        if not self.samples:
            self.matched_by, self.backend_a, self.backend_b = later.matched_by, later.backend_a, later.backend_b
            self.inputs = list(later.inputs)
        by_key = {(o.name, o.name_b): o for o in self.outputs}
        for stats in later.outputs:
            mine = by_key.get((stats.name, stats.name_b))
            if mine is None:
                self.outputs.append(stats)
            else:
                mine.merge(stats)
        self.notes += [n for n in later.notes if n not in self.notes]
        self.samples += later.samples
        return self

    def report(self, model_a: str = "", model_b: str = "", seed: int = 0) -> CompareReport:
        return CompareReport(
            outputs=[o.comparison() for o in self.outputs], matched_by=self.matched_by, notes=list(self.notes),
            model_a=model_a, model_b=model_b, backend_a=self.backend_a, backend_b=self.backend_b, seed=seed,
            inputs=list(self.inputs), samples=self.samples)


def seeded_samples(start: int, stop: int) -> Iterable[tuple[int, dict[str, np.ndarray]]]:
    """Samples ``start..stop-1`` with no data: every input random (seed ``seed + index``)."""
    return ((i, {}) for i in range(start, stop))


def compare_samples(
    model_a: ModelLike,
    model_b: ModelLike,
    samples: Iterable[tuple[int, Mapping[str, np.ndarray]]],
    *,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    backend_a: str | None = None,
    backend_b: str | None = None,
    outputs: Sequence[str] | None = None,
    dim_values: Mapping[str, int] | None = None,
    on_sample: Callable[[int], None] | None = None,
) -> SampleComparison:
    """Run A and B (each loaded once) on every ``(index, feeds)`` sample; the merged statistics.

    Inputs a sample lacks get random values seeded ``seed + index``, so sample ``i`` is the same
    whichever process runs it.  ``on_sample(count)`` after each sample."""
    names = None if outputs is None else list(outputs)
    result = SampleComparison()
    with prepare(model_a, backend=backend_a) as run_a, prepare(model_b, backend=backend_b) as run_b:
        result.backend_a, result.backend_b = _backend(model_a, backend_a), _backend(model_b, backend_b)
        by_key: dict[tuple[str, str], ErrorStats] = {}
        for index, sample in samples:
            notes: list[str] = []
            dims = dict(dim_values or {})
            feeds_a = complete_feeds(run_a.inputs, sample, Job(seed=seed + index, dim_values=dims), notes)
            out_a = run_a.run(feeds_a, names)
            feeds_b = complete_feeds(run_b.inputs, feeds_a, Job(seed=seed + index, dim_values=dims,
                                                                 feed_by_position=True), notes)
            out_b = run_b.run(feeds_b, names)
            pairs, result.matched_by, match_notes = match_outputs(list(out_a), list(out_b))
            if not result.samples:
                result.inputs = [{"name": n, "dtype": str(a.dtype), "shape": [int(d) for d in a.shape]}
                                 for n, a in feeds_a.items()]
            for key in pairs:
                stats = by_key.get((key[0] or "", key[1] or ""))
                if stats is None:
                    stats = by_key[(key[0] or "", key[1] or "")] = ErrorStats(key[0] or "", key[1] or "")
                    result.outputs.append(stats)
                stats.add(index, None if key[0] is None else out_a[key[0]],
                          None if key[1] is None else out_b[key[1]], rtol, atol)
            result.notes += [n for n in [*notes, *match_notes] if n not in result.notes]
            result.samples += 1
            if on_sample is not None:
                on_sample(result.samples)
    return result


def _backend(model: ModelLike, backend: str | None) -> str:
    return resolve_backend(ModelSource.of(model), backend).name
