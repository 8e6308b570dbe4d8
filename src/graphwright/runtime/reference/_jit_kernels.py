"""The interpreter's hot loops compiled with numba: requantization and depthwise
convolution, one pass each, integer arithmetic exactly as :mod:`.fixedpoint`.

Imported only through :mod:`.jit` (importing numba costs ~0.3 s and compiling a
loop ~0.5 s per signature; ``cache=True`` keeps the machine code on disk, so
that is paid once per machine).  Every function writes into an ``out`` array the
caller allocated, releases the GIL, and takes its per-channel constants
precomputed (see ``requant.FastRequant``):

* double rounding (reference kernels), ``r`` = right shift ≥ 0::

      h = ((acc + bias)·m + 2^30) >> 31        nudge = bias·m + 2^30
      y = (h + 2^(r−1) + zp·2^r − [h < 0][r > 0]) >> r        half = 2^(r−1) + zp·2^r

  (``zp·2^r`` added before the exact division by ``2^r`` adds ``zp`` after it);
* single rounding (XNNPACK): ``y = ((acc + bias)·m + 2^(30+r)) >> (31+r) + zp``.

Then ``y`` is clamped to ``[lo, hi]``.  ``(acc + bias)·m`` needs ``|acc + bias| <
2^32`` to fit in int64: accumulators are int32 sums (the caller guarantees it).
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@numba.njit(inline="always", **_JIT)
def _double(v, m, nudge, half, right, neg, lo, hi):  # type: ignore[no-untyped-def]
    h = (v * m + nudge) >> 31
    y = (h + half - ((h >> 63) & neg)) >> right
    return min(max(y, lo), hi)


@numba.njit(inline="always", **_JIT)
def _single(v, m, nudge, total, zp, lo, hi):  # type: ignore[no-untyped-def]
    y = ((v * m + nudge) >> total) + zp
    return min(max(y, lo), hi)


@numba.njit(**_JIT)
def requant_double(acc, m, nudge, half, right, neg, lo, hi, out):  # type: ignore[no-untyped-def]
    """``out[i, c] = clamp(double-rounded requantization of acc[i, c] + bias[c])``;
    ``acc`` [rows, C] holds exact integers (float or int)."""
    rows, channels = acc.shape
    for i in range(rows):
        for c in range(channels):
            out[i, c] = _double(np.int64(acc[i, c]), m[c], nudge[c], half[c], right[c], neg[c], lo, hi)


@numba.njit(**_JIT)
def requant_single(acc, m, nudge, total, zp, lo, hi, out):  # type: ignore[no-untyped-def]
    """As :func:`requant_double` with XNNPACK's single rounding."""
    rows, channels = acc.shape
    for i in range(rows):
        for c in range(channels):
            out[i, c] = _single(np.int64(acc[i, c]), m[c], nudge[c], total[c], zp, lo, hi)


@numba.njit(**_JIT)
def _depthwise_sums(x, zp_in, w, sh, sw, dh, dw, pt, pl, n, oy, ox, acc):  # type: ignore[no-untyped-def]
    """``acc[c] = Σ_taps (x[tap, c] − zp_in)·w[tap, c]`` over the in-image taps of
    output pixel (oy, ox): padded taps contribute 0, as padding with ``zp_in`` does."""
    kh, kw, channels = w.shape
    height, width = x.shape[1], x.shape[2]
    acc[:] = 0
    for i in range(kh):
        iy = oy * sh - pt + i * dh
        if iy < 0 or iy >= height:
            continue
        for j in range(kw):
            ix = ox * sw - pl + j * dw
            if ix < 0 or ix >= width:
                continue
            for c in range(channels):
                acc[c] += (np.int32(x[n, iy, ix, c]) - zp_in) * w[i, j, c]


@numba.njit(**_JIT)
def depthwise_double(x, zp_in, w, sh, sw, dh, dw, pt, pl, m, nudge, half, right, neg,  # type: ignore[no-untyped-def]
                     lo, hi, out):
    """Depthwise convolution of ``x`` [N, H, W, C] (8-bit; depth multiplier already
    expanded) with int32 taps ``w`` [KH, KW, C] (weight zero point removed), int32
    accumulators, requantized with double rounding into ``out`` [N, OH, OW, C]."""
    batch, oh, ow, channels = out.shape
    acc = np.empty(channels, np.int32)
    for n in range(batch):
        for oy in range(oh):
            for ox in range(ow):
                _depthwise_sums(x, zp_in, w, sh, sw, dh, dw, pt, pl, n, oy, ox, acc)
                for c in range(channels):
                    out[n, oy, ox, c] = _double(np.int64(acc[c]), m[c], nudge[c], half[c], right[c], neg[c], lo, hi)


@numba.njit(**_JIT)
def depthwise_single(x, zp_in, w, sh, sw, dh, dw, pt, pl, m, nudge, total, zp, lo, hi,  # type: ignore[no-untyped-def]
                     out):
    """As :func:`depthwise_double` with XNNPACK's single rounding."""
    batch, oh, ow, channels = out.shape
    acc = np.empty(channels, np.int32)
    for n in range(batch):
        for oy in range(oh):
            for ox in range(ow):
                _depthwise_sums(x, zp_in, w, sh, sw, dh, dw, pt, pl, n, oy, ox, acc)
                for c in range(channels):
                    out[n, oy, ox, c] = _single(np.int64(acc[c]), m[c], nudge[c], total[c], zp, lo, hi)


@numba.njit(**_JIT)
def dense(x, w, out):  # type: ignore[no-untyped-def]
    """``out[i, n] = Σ_k x[i, k]·w[n, k]`` in int32 for 8-bit ``x`` [M, K] and int16
    ``w`` [N, K]: a dot product along the contiguous axis, which LLVM turns into
    ``vpmaddwd``; for the few-row products of classifiers it reads a quarter of the
    bytes of BLAS's float32 weights."""
    rows, depth = x.shape
    units = w.shape[0]
    for i in range(rows):
        for n in range(units):
            s = np.int32(0)
            for k in range(depth):
                s += np.int32(x[i, k]) * np.int32(w[n, k])
            out[i, n] = s
