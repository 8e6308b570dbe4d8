"""Clip ranges from statistics: min-max, percentile, entropy (KL) and MSE-optimal.

Before: a :class:`~.stats.Statistics` (per value: min, max, a histogram on the grid of
:mod:`.stats`).  After: ``{value name: (lo, hi)}``, the ranges the quantizing transforms read
(:mod:`graphwright.transforms.quantize.options`).  Every method reads the statistics only (minmax
its min and max, so it also takes statistics collected without histograms; the others the
histogram), so it costs O(bins) per value (entropy O(bins**2 / stride) in the worst case),
whatever the dataset.

Notation: the histogram has ``B`` bins of width ``w`` over ``[-R, R)``; ``h_k`` counts bin ``k``;
``|x|``-histogram ``a_j = h[B/2 + j] + h[B/2 - 1 - j]`` counts ``w j <= |x| < w (j + 1)``
(an exact fold of the grid).  ``N`` = finite elements.  Results never leave ``[min, max]`` of the
data, except that ``symmetric=True`` returns ``(-T, T)``.  A value that saw no finite element
gets no range (the quantizer then reports it missing).  A value whose min/max range is an
attention mask's (``finfo.min`` or ``-1e4`` added to scores: ``unusable_range`` of the QDQ
planner says "mask-like") keeps that range whatever the method: clipping the mask cluster away
would hand the quantizer a small range that lets masked positions through the Softmax; the
quantizer leaves such a tensor float.

``dtype`` is the integer type the range is for (``int8``, ``uint8``, ``int16``): ``L = 2**bits - 1``
quantization steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ...transforms.quantize.static_onnx import unusable_range
from .errors import CalibrationError
from .stats import Statistics, ValueStats

__all__ = [
    "DEFAULT_PERCENTILE", "DTYPE_BITS", "METHODS", "compute_ranges", "entropy_range", "entropy_threshold",
    "minmax_range", "mse_range", "percentile_range", "value_range",
]

#: Bits of each integer type a range can be computed for.
DTYPE_BITS = {"int8": 8, "uint8": 8, "int16": 16}
#: The default percentile (onnxruntime's PercentileCalibrater default).
DEFAULT_PERCENTILE = 99.999
#: The largest fraction of a tensor's non-zero elements the entropy method may clip: the KL search
#: only considers thresholds at or above the ``1 - ENTROPY_MAX_CLIPPED`` quantile of ``|x|``.
#: Unrestricted, the KL minimum cut MobileNetV3's pooled features (a few large values that decide
#: the logits) to half their range (2.8 dB output SQNR on MobileNetV3-Large against 6.3 for no
#: clipping).  The previous rule, the KL minimum raised to the 99.99 % quantile, lost to
#: onnxruntime's Entropy (whose candidates never go below the first batch's max |x|) on
#: MobileNetV3-Large (6.26 vs 6.46 dB), EfficientNet-B0 (2.01 vs 4.22) and MobileNetV3-Small; the
#: search restricted to thresholds clipping at most 1e-6 beats it on those and on ResNet50 (7.46,
#: 4.28, 29.9, 4.33 vs 4.31).  The price: BERT-base's outputs lose 0.8 dB against the 1e-4 rule
#: (16.57 vs 17.41, min-max 16.56), whose clipping of GELU/Softmax/LayerNorm tails helped there
#: while the same clipping of SiLU/HardSwish tails halves EfficientNet-B0's SQNR (no per-tensor
#: rule tried separated the two: fixed fractions 1e-4/1e-5, a floor at 0.8-0.95 of max |x|, ...).
ENTROPY_MAX_CLIPPED = 1e-6


Range = tuple[float, float]


def _folded(stats: ValueStats) -> np.ndarray:
    """The |x| histogram ``a_j`` (``B/2`` bins of width ``w`` from 0)."""
    half = stats.bins // 2
    return stats.hist[half:] + stats.hist[half - 1:: -1]


def _absmax(stats: ValueStats) -> float:
    return max(-stats.min, stats.max)


def _finish(stats: ValueStats, threshold: float, symmetric: bool) -> Range:
    """``(-T, T)`` when symmetric, else ``[-T, T]`` clipped to the data's ``[min, max]``."""
    t = min(threshold, _absmax(stats))
    if symmetric:
        return (-t, t)
    return (max(stats.min, -t), min(stats.max, t))


def _quantile(counts: np.ndarray, left_edge: float, width: float, fraction: float) -> float:
    """The ``fraction`` quantile of a histogram, linear inside the bin where the CDF crosses it."""
    cum = np.cumsum(counts)
    target = fraction * float(cum[-1])
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(k, counts.size - 1)
    below = float(cum[k - 1]) if k else 0.0
    inside = float(counts[k])
    part = (target - below) / inside if inside else 0.0
    return left_edge + width * (k + min(max(part, 0.0), 1.0))


def minmax_range(stats: ValueStats, *, symmetric: bool = False) -> Range:
    """``(min, max)`` of the data; symmetric: ``(-m, m)`` with ``m = max(|min|, |max|)``."""
    return (-_absmax(stats), _absmax(stats)) if symmetric else (stats.min, stats.max)


def percentile_range(stats: ValueStats, *, percentile: float = DEFAULT_PERCENTILE,
                     symmetric: bool = False) -> Range:
    """Cut the tails holding ``100 - p`` percent of the elements.

    Asymmetric: ``lo = Q((100 - p) / 200)``, ``hi = Q(1 - (100 - p) / 200)`` on the signed
    histogram (half of the cut on each side, as onnxruntime's PercentileCalibrater does), then
    clipped to ``[min, max]``.  Symmetric: ``T = Q_|x|(p / 100)`` on the |x| histogram, ``(-T, T)``
    (onnxruntime clips that pair to ``[min, max]`` too; a symmetric quantizer reads ``T`` either way).
    ``Q`` interpolates linearly inside the bin where the cumulative count crosses the target, so
    the result is within one bin width ``w`` of the exact empirical quantile.
    """
    if not 0.0 < percentile <= 100.0:
        raise CalibrationError(f"percentile must be in (0, 100], got {percentile}")
    if symmetric:
        return _finish(stats, _quantile(_folded(stats), 0.0, stats.width, percentile / 100.0), True)
    cut = (100.0 - percentile) / 200.0
    lo = _quantile(stats.hist, -stats.radius, stats.width, cut)
    hi = _quantile(stats.hist, -stats.radius, stats.width, 1.0 - cut)
    return (min(max(lo, stats.min), stats.max), max(min(hi, stats.max), stats.min))


def entropy_threshold(counts: np.ndarray, quantized_bins: int, *, stride: int = 1, lowest: int = 0) -> int:
    """How many leading bins of ``counts`` (an |x| histogram) to keep, minimizing KL(P || Q).

    TensorRT's entropy calibration: for each candidate ``i`` (``quantized_bins <= i <= n``, ``n``
    the last non-empty bin + 1), ``P`` = the first ``i`` bins with the clipped outliers
    ``sum(counts[i:])`` added to bin ``i - 1``; ``Q`` = the first ``i`` bins merged into
    ``quantized_bins`` equal groups (boundaries ``floor(g i / quantized_bins)``), each group's
    total spread evenly over its bins where ``P`` is non-zero.  Both normalized;
    ``KL = sum_{P>0} P log(P / Q)`` (a candidate with ``Q = 0`` where ``P > 0`` is refused).
    Returns the best ``i``, the largest among equal minima (``n`` when ``n <= quantized_bins``:
    nothing to clip).

    Candidates also start no lower than the bin holding the median of ``|x|``: below it ``P``
    piles most elements into its last bin, and when the kept bins hold a single non-empty one
    ``P == Q`` (KL 0) however much was clipped — a degenerate minimum on sparse or offset data
    (a few hundred hard-sigmoid gates all in ``[0.19, 0.88]``) that TensorRT's algorithm has too,
    and no lower than ``lowest`` (:func:`entropy_range` passes the bin of its clipping floor).
    """
    nonzero = np.flatnonzero(counts)
    n = int(nonzero[-1]) + 1 if nonzero.size else 0
    if n <= quantized_bins:
        return max(n, 1)
    counts = counts[:n].astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(counts)])  # cum[i] = sum(counts[:i])
    median = int(np.searchsorted(cum, 0.5 * cum[-1], side="left"))
    i = np.arange(max(quantized_bins, median, lowest, 1), n + 1, stride)
    if i.size == 0:
        return n
    kl = _kl_candidates(counts, cum, i, quantized_bins)
    if not np.isfinite(kl).any():
        return n
    ties = np.flatnonzero(kl <= kl.min() + 1e-12)  # sparse data: KL 0 wherever each bin is its own group
    return int(i[ties[-1]])  # the widest of equally good thresholds


def _kl_candidates(counts: np.ndarray, cum: np.ndarray, i: np.ndarray, quantized_bins: int) -> np.ndarray:
    """KL(P || Q) of :func:`entropy_threshold` for every candidate ``i`` at once, from prefix sums.

    With ``N`` all elements, ``S = cum[i]`` the kept ones, ``o = N - S`` the outliers, group
    totals ``t_g`` and non-empty bin counts ``z_g`` (``q_g = t_g / z_g`` on each of them)::

        KL = (sum_k p_k log p_k - sum_g t_g log q_g - o log q_last) / N + log(S / N)

    O(candidates x quantized_bins).
    """
    total = cum[-1]
    xlogx = np.concatenate([[0.0], np.cumsum(np.where(counts > 0, counts * np.log(np.maximum(counts, 1.0)), 0.0))])
    nonzero = np.concatenate([[0.0], np.cumsum(counts > 0)])
    bounds = (np.arange(quantized_bins + 1)[None, :] * i[:, None]) // quantized_bins  # (candidates, groups + 1)
    totals = np.diff(cum[bounds], axis=1)
    filled = np.diff(nonzero[bounds], axis=1)
    outliers = total - cum[i]
    last = counts[i - 1] + outliers
    filled[:, -1] += (outliers > 0) & (counts[i - 1] == 0)  # the outliers make the last bin non-empty
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(totals > 0, totals / np.maximum(filled, 1.0), 0.0)
        log_q = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)), 0.0)
        p_log_p = xlogx[i - 1] + np.where(last > 0, last * np.log(np.maximum(last, 1.0)), 0.0)
        cross = (totals * log_q).sum(axis=1) + outliers * log_q[:, -1]
        kl = (p_log_p - cross) / total + np.log(cum[i] / total)
    kl[(outliers > 0) & (q[:, -1] <= 0)] = np.inf  # Q = 0 where P > 0
    return kl


def entropy_range(stats: ValueStats, *, dtype: str = "int8", symmetric: bool = False,
                  num_quantized_bins: int | None = None, stride: int = 1) -> Range:
    """The threshold ``T`` minimizing the KL divergence between the |x| distribution and its
    quantized version (:func:`entropy_threshold`, TensorRT's calibrator), ``T = i w``, searched only
    among thresholds at or above the floor ``F``, the ``1 - ENTROPY_MAX_CLIPPED`` quantile of the
    non-zero ``|x|`` (see that constant), and ``T >= F`` (the candidate in ``F``'s bin becomes ``F``).

    ``num_quantized_bins`` defaults to ``2**(bits - 1)`` (128 for 8-bit types: the levels on one
    side of zero, TensorRT's choice), and to ``2**bits`` for asymmetric quantization of one-signed
    data (a ReLU output: every level lies on its side of zero).  Elements exactly 0 (``stats.zeros``, the spike a ReLU
    makes) are left out of the |x| histogram: any grid holding 0 represents them exactly, while
    merging their spike with its neighbours into ``Q`` would make every wide range look bad.  Symmetric: ``(-T, T)``; else ``[-T, T]`` clipped to the
    data's ``[min, max]`` (so a ReLU output keeps ``lo = min >= 0``).  For int16, 32768 quantized
    bins exceed the histogram's ``B/2``, so nothing is clipped unless ``num_quantized_bins`` is given.
    """
    one_sided = not symmetric and (stats.min >= 0.0 or stats.max <= 0.0)
    quantized = num_quantized_bins or 2 ** (_bits(dtype) - (0 if one_sided else 1))
    if quantized < 2:
        raise CalibrationError(f"num_quantized_bins must be at least 2, got {quantized}")
    counts = _folded(stats)
    counts[0] -= stats.zeros  # exact zeros are quantized exactly: not part of the distribution to match
    floor = _quantile(counts, 0.0, stats.width, 1.0 - ENTROPY_MAX_CLIPPED) if counts.sum() > 0 else 0.0
    lowest = math.floor(floor / stats.width)  # candidates from the floor's bin on (its left edge: T = F)
    keep = entropy_threshold(counts, quantized, stride=max(1, int(stride)), lowest=lowest)
    threshold = max(keep * stats.width, floor)  # never clip more than ENTROPY_MAX_CLIPPED of the (non-zero) elements
    return _finish(stats, threshold, symmetric)


def _outside_cost(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """``sum h (c - edge)**2`` from the sums ``s0 = sum h``, ``s1 = sum h c``, ``s2 = sum h c**2``."""
    return s2 - 2.0 * edge * s1 + edge * edge * s0


def mse_range(stats: ValueStats, *, dtype: str = "int8", symmetric: bool = False) -> Range:
    """The clip range minimizing the expected squared quantization error on the histogram.

    With ``L = 2**bits - 1`` steps over ``[lo, hi]`` (``Delta = (hi - lo) / L``), bin centres
    ``c_k`` and ``h_k`` counts, the error model is::

        E(lo, hi) = sum_{lo <= c_k <= hi} h_k Delta**2 / 12            (rounding, uniform noise)
                  + sum_{c_k < lo} h_k ((c_k - lo)**2 + w**2 / 12)      (clipping, plus the spread
                  + sum_{c_k > hi} h_k ((c_k - hi)**2 + w**2 / 12)       of values inside a bin)

    Symmetric: ``lo = -T, hi = T`` on the |x| histogram, ``T`` over every bin edge up to
    ``max |x|``.  Asymmetric: ``lo`` over the edges in ``[min, 0]`` and ``hi`` over the edges in
    ``[0, max]`` (quantizers keep zero in range), every pair evaluated at once from prefix sums
    (O(bins**2) memory at worst, typically a quarter of it).  Ties go to the wider range; a bound
    within one bin of the data's extreme becomes the extreme.
    """
    steps = 2 ** _bits(dtype) - 1
    w = stats.width
    if symmetric:
        return _mse_symmetric(stats, steps, w)
    centres = (np.arange(stats.bins) - stats.bins // 2 + 0.5) * w
    h = stats.hist.astype(np.float64)
    lo_c = _edge_candidates(stats.min, w, negative=True)
    hi_c = _edge_candidates(stats.max, w, negative=False)
    s0, s1, s2 = (np.concatenate([[0.0], np.cumsum(h * centres ** k)]) for k in range(3))
    # bins with centre < lo: indices below first(lo) = searchsorted(centres, lo)
    below = np.searchsorted(centres, lo_c, side="left")
    above = np.searchsorted(centres, hi_c, side="right")
    spread = w * w / 12.0
    low_cost = _outside_cost(s0[below], s1[below], s2[below], lo_c) + spread * s0[below]
    n0, n1, n2 = s0[-1] - s0[above], s1[-1] - s1[above], s2[-1] - s2[above]
    high_cost = _outside_cost(n0, n1, n2, hi_c) + spread * n0
    inside = s0[above][None, :] - s0[below][:, None]
    delta = (hi_c[None, :] - lo_c[:, None]) / steps
    total = low_cost[:, None] + high_cost[None, :] + inside * delta * delta / 12.0
    i, j = _argmin_widest(total)
    lo = _snap(max(float(lo_c[i]), stats.min), stats.min, w)
    hi = _snap(min(float(hi_c[j]), stats.max), stats.max, w)
    return (min(lo, stats.max), max(hi, stats.min))


def _snap(bound: float, extreme: float, w: float) -> float:
    """The data's ``extreme`` when ``bound`` is within one bin of it (the error model reads bin
    centres, so it cannot tell those bounds apart), else ``bound``."""
    return extreme if abs(extreme - bound) <= w else bound


def _mse_symmetric(stats: ValueStats, steps: int, w: float) -> Range:
    a = _folded(stats).astype(np.float64)
    centres = (np.arange(a.size) + 0.5) * w
    t = _edge_candidates(_absmax(stats), w, negative=False)
    s0, s1, s2 = (np.concatenate([[0.0], np.cumsum(a * centres ** k)]) for k in range(3))
    above = np.searchsorted(centres, t, side="right")
    n0, n1, n2 = s0[-1] - s0[above], s1[-1] - s1[above], s2[-1] - s2[above]
    delta = 2.0 * t / steps
    total = _outside_cost(n0, n1, n2, t) + w * w / 12.0 * n0 + s0[above] * delta * delta / 12.0
    k = int(np.flatnonzero(total <= total.min())[-1])
    return _finish(stats, _snap(min(float(t[k]), _absmax(stats)), _absmax(stats), w), True)


def _edge_candidates(limit: float, w: float, *, negative: bool) -> np.ndarray:
    """Bin edges from 0 towards ``limit`` (inclusive of ``limit`` itself); ``[0]`` if ``limit``
    lies on the other side of zero."""
    span = -limit if negative else limit
    if span <= 0:
        return np.zeros(1)
    edges = np.arange(1, math.floor(span / w) + 1, dtype=np.float64) * w
    edges = np.append(edges[edges < span], span)
    return -edges if negative else edges


def _argmin_widest(total: np.ndarray) -> tuple[int, int]:
    """The minimum's position; among ties the widest range (largest ``|lo|`` index and ``hi``)."""
    flat = np.flatnonzero(total.ravel() <= total.min())
    i, j = np.unravel_index(flat, total.shape)
    pick = int(np.argmax(i * total.shape[1] + j))  # last in row-major order: widest lo, then hi
    return int(i[pick]), int(j[pick])


def _bits(dtype: str) -> int:
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise CalibrationError(f"dtype must be one of {', '.join(DTYPE_BITS)}, got {dtype!r}") from None


METHODS: dict[str, Callable[..., Range]] = {
    "minmax": minmax_range,
    "percentile": percentile_range,
    "entropy": entropy_range,
    "mse": mse_range,
}
_OPTIONS = {
    "minmax": {"symmetric"},
    "percentile": {"symmetric", "percentile"},
    "entropy": {"symmetric", "dtype", "num_quantized_bins", "stride"},
    "mse": {"symmetric", "dtype"},
}


def _method(method: str, options: dict[str, object]) -> Callable[..., Range]:
    fn = METHODS.get(method)
    if fn is None:
        raise CalibrationError(f"unknown calibration method {method!r}; use one of {', '.join(METHODS)}")
    unknown = sorted(set(options) - _OPTIONS[method])
    if unknown:
        raise CalibrationError(f"method {method!r} has no option {unknown[0]!r}; "
                               f"its options are {', '.join(sorted(_OPTIONS[method]))}")
    return fn


def value_range(stats: ValueStats, method: str = "minmax", **options: object) -> Range | None:
    """One value's range by ``method`` (None when it saw no finite element)."""
    fn = _method(method, options)
    if not stats.count:
        return None
    if stats.hist is None and method != "minmax":
        raise CalibrationError(f"method {method!r} reads histograms, and these statistics have none "
                               f"(collected with histogram=False, for minmax)")
    if unusable_range(stats.min, stats.max) is not None:
        return (stats.min, stats.max)  # a mask's range: the quantizer leaves it float, no clipping hides it
    lo, hi = fn(stats, **options)
    return (float(lo), float(max(lo, hi)))


def compute_ranges(stats: Statistics, method: str = "minmax", *, names: Iterable[str] | None = None,
                   **options: object) -> dict[str, Range]:
    """``{name: (lo, hi)}`` for every value of ``stats`` (or ``names``) by ``method``.

    Methods and their options: ``minmax(symmetric)``, ``percentile(percentile=99.999, symmetric)``,
    ``entropy(dtype="int8", symmetric, num_quantized_bins, stride=1)``,
    ``mse(dtype="int8", symmetric)``; see each ``*_range`` function for its formula.
    Values that saw no finite element are left out.
    """
    _method(method, options)
    wanted = list(stats.values) if names is None else list(names)
    missing = [n for n in wanted if n not in stats.values]
    if missing:
        raise CalibrationError(f"no statistics for value {missing[0]!r}; collect it first")
    out: dict[str, Range] = {}
    for name in wanted:
        r = value_range(stats.values[name], method, **options)
        if r is not None:
            out[name] = r
    return out
