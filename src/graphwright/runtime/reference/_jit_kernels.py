"""The interpreter's hot loops compiled with numba, one pass each, integer arithmetic
exactly as the numpy path: requantization (as :mod:`.fixedpoint`), depthwise
convolution (integer and float32), few-row dense products, 8-bit table lookups (unary and pairwise,
broadcasting) and MEAN's sums.

Imported only through :mod:`.jit` (importing numba costs ~0.3 s and compiling a
loop ~0.5 s per signature; ``cache=True`` keeps the machine code on disk, so
that is paid once per machine).  Every function writes into an ``out`` array the
caller allocated and releases the GIL.  Both roundings are one formula over
per-channel constants, the rows of one int64 array ``p = [m, nudge, half, r, neg, lo, hi]``
of shape [7, C] (made by ``requant.FastRequant.compile``; one array, not a tuple of them:
numba types an array argument several times faster, and these kernels run ~100 times per
inference)::

    h = ((acc + bias)·m + nudge') >> 31          nudge = bias·m + nudge'
    y = clamp((h + half − [h < 0]·neg) >> r, lo, hi)

* double rounding (reference kernels): ``nudge' = 2^30``, ``half = 2^(r−1) + zp·2^r``,
  ``neg = [r > 0]`` — SRDHM, then a division by ``2^r`` rounding half away from zero;
* single rounding (``TFLITE_SINGLE_ROUNDING``): ``nudge' = 2^(30+r)``, ``half = zp·2^r``, ``neg = 0`` —
  two floor shifts by 31 and r are one floor shift by 31 + r.

``zp·2^r`` added before the exact division by ``2^r`` adds ``zp`` after it.
``(acc + bias)·m + nudge'`` fits in int64 because accumulators are int32 sums
(``|acc + bias| < 2^31``, ``m < 2^31``, ``nudge' ≤ 2^61``).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


@numba.njit(inline="always", **_JIT)
def _rows(p):  # type: ignore[no-untyped-def]
    """The constants ``p`` [7, C] as ``(m, nudge, half, r, neg, lo, hi)``: five 1-D rows and two scalars,
    taken once per kernel call (LLVM vectorizes the channel loops over separate rows, not over ``p[k, c]``)."""
    return p[0], p[1], p[2], p[3], p[4], p[5, 0], p[6, 0]


@numba.njit(inline="always", **_JIT)
def _u(i):  # type: ignore[no-untyped-def]
    """An array offset known to be >= 0, as unsigned: numba indexes without the wrap-around test."""
    return np.uint64(i)


@numba.njit(inline="always", **_JIT)
def _requantized(v, c, q):  # type: ignore[no-untyped-def]
    """Accumulator ``v`` of channel ``c`` requantized and clamped (see the module docstring); ``q``:
    :func:`_rows` of the constants."""
    m, nudge, half, right, neg, lo, hi = q
    h = (v * m[c] + nudge[c]) >> 31
    y = (h + half[c] - ((h >> 63) & neg[c])) >> right[c]
    return min(max(y, lo), hi)


@numba.njit(**_JIT)
def requantize(acc, p, out):  # type: ignore[no-untyped-def]
    """``out[i, c]`` = ``acc[i, c]`` requantized; ``acc`` [rows, C] holds exact integers (float or int)."""
    rows, channels = acc.shape
    q = _rows(p)
    for i in range(rows):
        for c in range(channels):
            out[i, c] = _requantized(np.int64(acc[i, c]), c, q)


@numba.njit(**_JIT)
def requantize_flagged(acc, q, p, out, flags):  # type: ignore[no-untyped-def]
    """:func:`requantize` for sums below 2^24 (exact in float32), in float32 (16 lanes) as
    ``requant.FastRequant``'s numpy path, with ``q`` [5, C] float32 (scale, offset, the output
    range's ends ∓ ½, the fix-up limit): ``u = acc·scale[c] + offset[c]`` clamped to the range,
    ``out = ⌊u⌋``, and the elements whose fraction ``u − ⌊u⌋`` is at most the limit flagged in
    ``flags`` (uint8, same shape) — then recomputed with the exact int64 formula (``p``) in a
    second pass that skips eight unflagged bytes at a time."""
    rows, channels = acc.shape
    scale, offset, lo, hi, limit = q[0], q[1], q[2, 0], q[3, 0], q[4, 0]
    for i in range(rows):
        a = acc[i]
        o = out[i]
        f = flags[i]
        for c in range(channels):
            u = np.float32(a[c]) * scale[c]
            u = u + offset[c]
            u = min(max(u, lo), hi)
            whole = np.floor(u)
            o[c] = np.int32(whole)
            f[c] = (u - whole) <= limit
    flat = flags.reshape(-1)
    total = flat.size
    words = total // 8
    packed = flat[:words * 8].view(np.uint64)
    sums = acc.reshape(-1)
    outs = out.reshape(-1)
    exact = _rows(p)
    for j in range(words):
        if packed[j] != 0:
            for k in range(j * 8, j * 8 + 8):
                if flat[k]:
                    outs[k] = _requantized(np.int64(sums[k]), k % channels, exact)
    for k in range(words * 8, total):
        if flat[k]:
            outs[k] = _requantized(np.int64(sums[k]), k % channels, exact)


@numba.njit(**_JIT)
def requantize_float32(acc, bias, scale, zp, lo, hi, out):  # type: ignore[no-untyped-def]
    """XNNPACK's requantization (see ``requant.Float32Requant``): ``out[i, c] =
    clamp(rint(float32(acc[i, c] + bias[c])·scale[c]) + zp)``, the product in float32."""
    rows, channels = acc.shape
    for i in range(rows):
        for c in range(channels):
            u = np.float32(np.float64(acc[i, c]) + bias[c]) * scale[c]
            out[i, c] = min(max(np.int64(np.rint(u)) + zp, lo), hi)


@numba.njit(**_JIT)
def depthwise_padded(xp, w, offset, sh, sw, dh, dw, p, out, acc, pairs=False):  # type: ignore[no-untyped-def]
    """Depthwise convolution over ``xp`` [N, HP, WP, C], the 8-bit input inside a border of its
    zero point (depth multiplier already expanded), with integer taps ``w`` [KH, KW, C] (int16: LLVM
    multiplies them with ``vpmaddwd`` instead of ``vpmulld``): each output row's int32 sums
    ``Σ_taps x·w`` gathered in ``acc`` [OW, C] — 3x3 kernels all nine taps of a pixel in one channel
    loop (12–20% faster than row by row on MobileNetV2's layers), others one kernel row at a time (3-
    and 5-wide rows in one channel loop; with ``pairs``, which the caller sets only where every
    ``max|x|·(|w_a| + |w_b|)`` of the tap pairs — 3x3: (0, 1), (2, 3), (4, 5), (6, 7) in row-major tap
    order; 5-wide rows: columns (0, 1), (2, 3) — and every single tap's ``max|x|·|w|`` is below 2^15,
    the products and pair sums in int16 lanes, widened once per pair: ~20% faster) — then ``Σ − offset[c]`` (``offset = zp_in·Σ_taps w``: the sums of
    ``(x − zp_in)·w``, border taps 0) requantized into ``out`` [N, OH, OW, C] — or with ``p`` None
    stored as they are (int32 ``out``).  The arrays are read flat at unsigned offsets: numba then
    emits no negative-index fix-up and LLVM vectorizes the channel loops without making an array
    view per pixel (23% faster on MobileNetV2's 112x112x32 layer than views per tap)."""
    batch, oh, ow, channels = out.shape
    hp, wp = xp.shape[1], xp.shape[2]
    kh, kw = w.shape[0], w.shape[1]
    x, taps, sums, y = xp.reshape(-1), w.reshape(-1), acc.reshape(-1), out.reshape(-1)
    row, step, c1, c2 = wp * channels, sw * channels, dw * channels, 2 * dw * channels
    r1, r2 = dh * row, 2 * dh * row
    for n in range(batch):
        for oy in range(oh):
            if kh == 3 and kw == 3 and pairs:  # int16 products, pairs of them summed in int16 (exact, see above)
                top = ((n * hp) + oy * sh) * row
                for ox in range(ow):
                    a, s = top + ox * step, ox * channels
                    b, d = a + r1, a + r2
                    for c in range(channels):
                        p01 = np.int16(np.int16(x[_u(a + c)]) * taps[_u(c)]
                                       + np.int16(x[_u(a + c1 + c)]) * taps[_u(channels + c)])
                        p23 = np.int16(np.int16(x[_u(a + c2 + c)]) * taps[_u(2 * channels + c)]
                                       + np.int16(x[_u(b + c)]) * taps[_u(3 * channels + c)])
                        p45 = np.int16(np.int16(x[_u(b + c1 + c)]) * taps[_u(4 * channels + c)]
                                       + np.int16(x[_u(b + c2 + c)]) * taps[_u(5 * channels + c)])
                        p67 = np.int16(np.int16(x[_u(d + c)]) * taps[_u(6 * channels + c)]
                                       + np.int16(x[_u(d + c1 + c)]) * taps[_u(7 * channels + c)])
                        p8 = np.int16(np.int16(x[_u(d + c2 + c)]) * taps[_u(8 * channels + c)])
                        sums[_u(s + c)] = np.int32(p01) + np.int32(p23) + np.int32(p45) + np.int32(p67) + np.int32(p8)
            elif kh == 3 and kw == 3:  # the 9 taps of a pixel in one channel loop: each sum stored once
                top = ((n * hp) + oy * sh) * row
                for ox in range(ow):
                    a, s = top + ox * step, ox * channels
                    b, d = a + r1, a + r2
                    for c in range(channels):
                        sums[_u(s + c)] = (np.int32(x[_u(a + c)]) * np.int32(taps[_u(c)])
                                           + np.int32(x[_u(a + c1 + c)]) * np.int32(taps[_u(channels + c)])
                                           + np.int32(x[_u(a + c2 + c)]) * np.int32(taps[_u(2 * channels + c)])
                                           + np.int32(x[_u(b + c)]) * np.int32(taps[_u(3 * channels + c)])
                                           + np.int32(x[_u(b + c1 + c)]) * np.int32(taps[_u(4 * channels + c)])
                                           + np.int32(x[_u(b + c2 + c)]) * np.int32(taps[_u(5 * channels + c)])
                                           + np.int32(x[_u(d + c)]) * np.int32(taps[_u(6 * channels + c)])
                                           + np.int32(x[_u(d + c1 + c)]) * np.int32(taps[_u(7 * channels + c)])
                                           + np.int32(x[_u(d + c2 + c)]) * np.int32(taps[_u(8 * channels + c)]))
            for i in range(kh if kh != 3 or kw != 3 else 0):
                start = ((n * hp) + oy * sh + i * dh) * row
                wi = i * kw * channels
                if kw == 3:
                    w1, w2 = wi + channels, wi + 2 * channels
                    for ox in range(ow):
                        a, s = start + ox * step, ox * channels
                        if i == 0:
                            for c in range(channels):
                                sums[_u(s + c)] = (np.int32(x[_u(a + c)]) * taps[_u(wi + c)]
                                                   + np.int32(x[_u(a + c1 + c)]) * taps[_u(w1 + c)]
                                                   + np.int32(x[_u(a + c2 + c)]) * taps[_u(w2 + c)])
                        else:
                            for c in range(channels):
                                sums[_u(s + c)] += (np.int32(x[_u(a + c)]) * taps[_u(wi + c)]
                                                    + np.int32(x[_u(a + c1 + c)]) * taps[_u(w1 + c)]
                                                    + np.int32(x[_u(a + c2 + c)]) * taps[_u(w2 + c)])
                elif kw == 5 and pairs:  # int16 products, taps (0, 1) and (2, 3) summed in int16 (exact, see above)
                    w1, w2, w3, w4 = wi + channels, wi + 2 * channels, wi + 3 * channels, wi + 4 * channels
                    c3, c4 = 3 * dw * channels, 4 * dw * channels
                    for ox in range(ow):
                        a, s = start + ox * step, ox * channels
                        if i == 0:
                            for c in range(channels):
                                p01 = np.int16(np.int16(x[_u(a + c)]) * taps[_u(wi + c)]
                                               + np.int16(x[_u(a + c1 + c)]) * taps[_u(w1 + c)])
                                p23 = np.int16(np.int16(x[_u(a + c2 + c)]) * taps[_u(w2 + c)]
                                               + np.int16(x[_u(a + c3 + c)]) * taps[_u(w3 + c)])
                                p4 = np.int16(np.int16(x[_u(a + c4 + c)]) * taps[_u(w4 + c)])
                                sums[_u(s + c)] = np.int32(p01) + np.int32(p23) + np.int32(p4)
                        else:
                            for c in range(channels):
                                p01 = np.int16(np.int16(x[_u(a + c)]) * taps[_u(wi + c)]
                                               + np.int16(x[_u(a + c1 + c)]) * taps[_u(w1 + c)])
                                p23 = np.int16(np.int16(x[_u(a + c2 + c)]) * taps[_u(w2 + c)]
                                               + np.int16(x[_u(a + c3 + c)]) * taps[_u(w3 + c)])
                                p4 = np.int16(np.int16(x[_u(a + c4 + c)]) * taps[_u(w4 + c)])
                                sums[_u(s + c)] += np.int32(p01) + np.int32(p23) + np.int32(p4)
                elif kw == 5:
                    w1, w2, w3, w4 = wi + channels, wi + 2 * channels, wi + 3 * channels, wi + 4 * channels
                    c3, c4 = 3 * dw * channels, 4 * dw * channels
                    for ox in range(ow):
                        a, s = start + ox * step, ox * channels
                        if i == 0:
                            for c in range(channels):
                                sums[_u(s + c)] = (np.int32(x[_u(a + c)]) * taps[_u(wi + c)]
                                                   + np.int32(x[_u(a + c1 + c)]) * taps[_u(w1 + c)]
                                                   + np.int32(x[_u(a + c2 + c)]) * taps[_u(w2 + c)]
                                                   + np.int32(x[_u(a + c3 + c)]) * taps[_u(w3 + c)]
                                                   + np.int32(x[_u(a + c4 + c)]) * taps[_u(w4 + c)])
                        else:
                            for c in range(channels):
                                sums[_u(s + c)] += (np.int32(x[_u(a + c)]) * taps[_u(wi + c)]
                                                    + np.int32(x[_u(a + c1 + c)]) * taps[_u(w1 + c)]
                                                    + np.int32(x[_u(a + c2 + c)]) * taps[_u(w2 + c)]
                                                    + np.int32(x[_u(a + c3 + c)]) * taps[_u(w3 + c)]
                                                    + np.int32(x[_u(a + c4 + c)]) * taps[_u(w4 + c)])
                else:
                    for ox in range(ow):
                        a, s = start + ox * step, ox * channels
                        if i == 0:
                            for c in range(channels):
                                sums[_u(s + c)] = 0
                        for j in range(kw):
                            aj, wj = a + j * c1, wi + j * channels
                            for c in range(channels):
                                sums[_u(s + c)] += np.int32(x[_u(aj + c)]) * taps[_u(wj + c)]
            o = ((n * oh) + oy) * ow * channels
            if p is None:  # the int32 sums themselves (numba prunes the branch not taken)
                for ox in range(ow):
                    s = ox * channels
                    for c in range(channels):
                        y[_u(o + s + c)] = sums[_u(s + c)] - offset[c]
            else:
                q = _rows(p)
                for ox in range(ow):
                    s = ox * channels
                    for c in range(channels):
                        y[_u(o + s + c)] = _requantized(np.int64(sums[_u(s + c)]) - offset[c], c, q)


@numba.njit(**_JIT)
def depthwise_float(x, w, bias, sh, sw, dh, dw, pt, pl, lo, hi, out):  # type: ignore[no-untyped-def]
    """Float32 depthwise convolution of ``x`` [N, H, W, C] (depth multiplier already expanded)
    with taps ``w`` [KH, KW, C], as LiteRT's reference kernel: float32 sums of the in-image
    taps in tap order, ``+ bias[c]``, clamped to ``[lo, hi]``, into ``out`` [N, OH, OW, C]."""
    batch, oh, ow, channels = out.shape
    kh, kw = w.shape[0], w.shape[1]
    height, width = x.shape[1], x.shape[2]
    acc = np.empty(channels, np.float32)
    for n in range(batch):
        for oy in range(oh):
            for ox in range(ow):
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
                            acc[c] += x[n, iy, ix, c] * w[i, j, c]
                for c in range(channels):
                    out[n, oy, ox, c] = min(max(acc[c] + bias[c], lo), hi)


@numba.njit(**_JIT)
def shift(x, zp, out):  # type: ignore[no-untyped-def]
    """``out = x − zp`` for an 8-bit ``x`` [N, H, W, C] into a float ``out`` of that shape
    (any strides: the interior of a padded buffer): a GEMM's exact input, in one pass."""
    batch, height, width, channels = x.shape
    for n in range(batch):
        for i in range(height):
            for j in range(width):
                for c in range(channels):
                    out[n, i, j, c] = np.int32(x[n, i, j, c]) - zp


@numba.njit(**_JIT)
def im2col(x, zp, sh, sw, dh, dw, pt, pl, out):  # type: ignore[no-untyped-def]
    """The im2col matrix of a KHxKW convolution, ``out`` [N, OH, OW, KH, KW·C] (float):
    ``x[n, oy·sh − pt + i·dh, ox·sw − pl + j·dw, c] − zp`` in the image, 0 (the shifted zero
    point) outside — shift, padding and window copy in one pass over ``x`` [N, H, W, C]
    (contiguous); a window row wholly inside an undilated row is one run of KW·C values."""
    batch, oh, ow, kh, span = out.shape
    height, width, channels = x.shape[1], x.shape[2], x.shape[3]
    kw = span // channels
    for n in range(batch):
        for oy in range(oh):
            for i in range(kh):
                iy = oy * sh - pt + i * dh
                if iy < 0 or iy >= height:
                    out[n, oy, :, i, :] = 0
                    continue
                row = x[n, iy].reshape(-1)
                for ox in range(ow):
                    left = ox * sw - pl
                    dest = out[n, oy, ox, i]
                    if dw == 1 and left >= 0 and left + kw <= width:
                        src = row[left * channels:left * channels + span]  # a slice: no negative-index checks
                        for k in range(span):
                            dest[k] = src[k] - zp
                        continue
                    for j in range(kw):
                        ix = left + j * dw
                        for c in range(channels):
                            dest[j * channels + c] = row[ix * channels + c] - zp if 0 <= ix < width else 0


@numba.njit(**_JIT)
def im2col_bytes(x, flip, pad, sh, sw, dh, dw, pt, pl, out):  # type: ignore[no-untyped-def]
    """:func:`im2col` for the integer GEMM (``_gemm``): ``out`` [N, OH, OW, KH, KW·C] (uint8) holds
    ``x[n, oy·sh − pt + i·dh, ox·sw − pl + j·dw, c] ^ flip`` in the image (``x``: the 8-bit input's
    bytes, contiguous; ``flip`` 0x80 makes int8 values unsigned, ``x + 128``) and ``pad`` (the
    GEMM's activation zero point: the tap adds 0) outside."""
    batch, oh, ow, kh, span = out.shape
    height, width, channels = x.shape[1], x.shape[2], x.shape[3]
    kw = span // channels
    for n in range(batch):
        for oy in range(oh):
            for i in range(kh):
                iy = oy * sh - pt + i * dh
                if iy < 0 or iy >= height:
                    out[n, oy, :, i, :] = pad
                    continue
                row = x[n, iy].reshape(-1)
                for ox in range(ow):
                    left = ox * sw - pl
                    dest = out[n, oy, ox, i]
                    if dw == 1 and left >= 0 and left + kw <= width:
                        src = row[left * channels:left * channels + span]  # a slice: no negative-index checks
                        for k in range(span):
                            dest[k] = src[k] ^ flip
                        continue
                    for j in range(kw):
                        ix = left + j * dw
                        for c in range(channels):
                            dest[j * channels + c] = row[ix * channels + c] ^ flip if 0 <= ix < width else pad


@numba.njit(**_JIT)
def bias_clamp(acc, bias, lo, hi):  # type: ignore[no-untyped-def]
    """In place on float32 sums ``acc`` [rows, C]: ``min(max(acc + bias[c], lo), hi)`` in float32
    (a float convolution's bias and fused activation in one pass)."""
    rows, channels = acc.shape
    for i in range(rows):
        for c in range(channels):
            acc[i, c] = min(max(acc[i, c] + bias[c], lo), hi)


@numba.njit(**_JIT)
def hard_swish_float(x, out):  # type: ignore[no-untyped-def]
    """``out[i] = x[i]·min(max(x[i] + 3, 0), 6)/6`` in float32, in that order (flat arrays)."""
    for i in range(x.size):
        v = x[i]
        out[i] = min(max(v + np.float32(3), np.float32(0)), np.float32(6)) * v / np.float32(6)


@numba.njit(**_JIT)
def dense(x, w, out):  # type: ignore[no-untyped-def]
    """``out[i, n] = Σ_k x[i, k]·w[n, k]`` for 8-bit ``x`` [M, K] and int8 or int16 ``w`` [N, K]:
    a dot product along the contiguous axis, exact (numba widens the sums; the callers check that
    none can leave TFLite's int32 accumulator).  For the few-row products of classifiers it reads an eighth
    (int8) or a quarter (int16) of the bytes of BLAS's float32 weights (LLVM vectorizes it
    with ``vpmaddwd``; int8 weights: a 1280x1000 classifier ~90 µs with its weights out of cache)."""
    rows, depth = x.shape
    units = w.shape[0]
    for i in range(rows):
        for n in range(units):
            s = np.int32(0)
            for k in range(depth):
                s += np.int32(x[i, k]) * np.int32(w[n, k])
            out[i, n] = s


@numba.njit(**_JIT)
def pair_lookup(a, b, table, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = table[a[i, j]·256 + b[i, j]]`` for the bytes (uint8 views, any
    strides: broadcast inputs have zero ones) of two 8-bit tensors: an elementwise op
    of two 8-bit inputs read from its table of all 2^16 pairs, in one pass."""
    rows, columns = out.shape
    for i in range(rows):
        for j in range(columns):
            out[i, j] = table[(np.int32(a[i, j]) << 8) | np.int32(b[i, j])]


@numba.njit(**_JIT)
def mul_requant(a, b, za, zb, p, out):  # type: ignore[no-untyped-def]
    """The 8-bit MUL's integers: ``out[i, c]`` = ``(a[i, c] − za)·(b[j, c] − zb)`` requantized with the
    per-tensor constants ``p`` [7, 1] (:func:`_requantized`), ``j = i`` or, for a per-channel vector
    ``b`` [1, C], 0; ``a`` [rows, C]."""
    rows, channels = a.shape
    q = _rows(p)
    for i in range(rows):
        ai = a[i]
        bi = b[i if b.shape[0] > 1 else 0]
        oi = out[i]
        for c in range(channels):
            oi[c] = _requantized(np.int64((np.int32(ai[c]) - za) * (np.int32(bi[c]) - zb)), 0, q)


@numba.njit(**_JIT)
def channel_lookup(x, v, table, x_first, out):  # type: ignore[no-untyped-def]
    """``out[i, c] = table[x[i, c]·256 + v[c]]`` (``x_first``) or ``table[v[c]·256 + x[i, c]]`` for the
    bytes of ``x`` [rows, C] (contiguous) and of a per-channel vector ``v`` [C] (the broadcast MUL of
    squeeze-and-excite blocks): the pair table's C columns taken once per call into a [C, 256] table
    (C·256 gathers), then one gather per element from that small table."""
    rows, channels = x.shape
    tables = np.empty((channels, 256), table.dtype)
    for c in range(channels):
        for k in range(256):
            tables[c, k] = table[(k << 8) | np.int32(v[c])] if x_first else table[(np.int32(v[c]) << 8) | k]
    flat = tables.reshape(-1)
    for i in range(rows):
        xi = x[i]
        oi = out[i]
        for c in range(channels):
            oi[c] = flat[c * 256 + np.int32(xi[c])]


@numba.njit(**_JIT)
def byte_lookup(x, table, out):  # type: ignore[no-untyped-def]
    """``out[i] = table[x[i]]`` for the bytes (uint8 view) of an 8-bit tensor: a unary op
    read from its 256-entry table, in one pass (numpy widens the index to intp first)."""
    for i in range(x.size):
        out[i] = table[x[i]]


@numba.njit(**_JIT)
def middle_sums(x, out):  # type: ignore[no-untyped-def]
    """``out[i, k] = Σ_j x[i, j, k]`` in ``out``'s dtype, j in order (a MEAN over a run of middle axes,
    e.g. H, W of NHWC: int64 sums of integers, float32 ones of floats as LiteRT's kernel adds them)."""
    outer, middle, inner = x.shape
    for i in range(outer):
        for k in range(inner):
            out[i, k] = 0
        for j in range(middle):
            for k in range(inner):
                out[i, k] += x[i, j, k]


@numba.njit(**_JIT)
def softmax8(x, table, s_out, zp, lo, hi, half32, out):  # type: ignore[no-untyped-def]
    """8-bit SOFTMAX of the rows of ``x`` [R, N] into ``out`` as LiteRT's reference kernel (and the
    numpy path of ``softmax.softmax``): ``e[j] = table[max − x[j]]`` (float32), their sequential
    float32 sum ``t``, ``p = e·(1/(t·s_out))`` in float32, rounded half up: ``⌊p + ½⌋`` in float32
    (``half32``, uint8 outputs: truncation after + 0.5 in float32) or in float64 (exact), ``+ zp``,
    clamped to [lo, hi]."""
    rows, n = x.shape
    e = np.empty(n, np.float32)
    for i in range(rows):
        xi = x[i]
        top = np.int32(xi[0])
        for j in range(1, n):
            top = max(top, np.int32(xi[j]))
        total = np.float32(0)
        for j in range(n):
            v = table[top - np.int32(xi[j])]
            e[j] = v
            total = np.float32(total + v)
        inverse = np.float32(np.float32(1) / np.float32(total * s_out))
        oi = out[i]
        for j in range(n):
            p = np.float32(e[j] * inverse)
            if half32:
                q = np.int64(np.floor(np.float32(p + np.float32(0.5))))
            else:
                q = np.int64(np.floor(np.float64(p) + 0.5))
            oi[j] = min(max(q + zp, lo), hi)


@numba.njit(**_JIT)
def mean_requant(x, p, out):  # type: ignore[no-untyped-def]
    """An 8-bit MEAN over a run of middle axes in one pass: ``out[i, k]`` = the int32 sum
    ``Σ_j x[i, j, k]`` (exact: at most 255·2^23 in magnitude, which the caller checks) requantized
    with the per-tensor constants ``p`` [7, 1] (:func:`_requantized`; ``−zp_in·n`` folded into the
    nudge as a bias), for ``x`` [outer, middle, inner]."""
    outer, middle, inner = x.shape
    q = _rows(p)
    sums = np.empty(inner, np.int32)
    for i in range(outer):
        xi = x[i]
        for k in range(inner):
            sums[k] = 0
        for j in range(middle):
            row = xi[j]
            for k in range(inner):
                sums[k] += np.int32(row[k])
        oi = out[i]
        for k in range(inner):
            oi[k] = _requantized(np.int64(sums[k]), 0, q)


@numba.njit(**_JIT)
def bordered(x, fill, pt, pl, out):  # type: ignore[no-untyped-def]
    """``out`` [N, HP, WP, C] = ``x`` [N, H, W, C] (contiguous) at rows ``pt``.., columns ``pl``.., inside a
    border of ``fill`` — the depthwise loop's input, border and interior written once, in one call."""
    batch, hp, wp, channels = out.shape
    height, width = x.shape[1], x.shape[2]
    src, dst = x.reshape(-1), out.reshape(-1)
    span, row = width * channels, wp * channels
    left, right = pl * channels, (wp - pl - width) * channels
    for n in range(batch):
        for r in range(hp):
            o = (n * hp + r) * row
            iy = r - pt
            if iy < 0 or iy >= height:
                for k in range(row):
                    dst[_u(o + k)] = fill
                continue
            for k in range(left):
                dst[_u(o + k)] = fill
            a = (n * height + iy) * span
            o += left
            for k in range(span):
                dst[_u(o + k)] = src[_u(a + k)]
            o += span
            for k in range(right):
                dst[_u(o + k)] = fill



# -- 8-bit GEMM with the requantization fused, on AVX512-VNNI ``vpdpbusd`` ------------------------------
# (used only where ``_gemm.vnni_exact()`` found the CPU has the instruction and the kernel exact)

_I32 = ir.IntType(32)
_V16 = ir.VectorType(_I32, 16)
#: xor of four int8 bytes that makes them the unsigned ``x + 128`` ``vpdpbusd`` reads
_FLIP = 0x80808080 - (1 << 32)


def _data(context, builder, arrty, arr):  # type: ignore[no-untyped-def]
    return cgutils.create_struct_proxy(arrty)(context, builder, value=arr).data


def _vnni_tile(rows: int, vectors: int):  # type: ignore[no-untyped-def]
    """An intrinsic ``tile(c, c_off, ldc, a, a_off, lda, b, b_off, k4)``: int32 sums of ``rows`` rows of
    int8 ``a`` (flat, row ``r`` at ``a_off + r·lda``, read as ``x + 128``) times ``16·vectors`` columns of
    int8 weights ``b`` (flat from ``b_off``, [k4, 16·vectors, 4]: four consecutive k of a column per
    32-bit lane), over ``4·k4`` k, stored at ``c[c_off + r·ldc + n]``.  The ``rows × vectors``
    accumulators stay in registers; each step of four k is one ``vpdpbusd`` per accumulator (exact:
    unsigned × signed byte products summed in int32 without saturation)."""

    @intrinsic
    def tile(typingctx, c, c_off, ldc, a, a_off, lda, b, b_off, k4):  # type: ignore[no-untyped-def]
        sig = types.void(c, c_off, ldc, a, a_off, lda, b, b_off, k4)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            c_arr, c_at, c_step, a_arr, a_at, a_step, b_arr, b_at, steps = args
            cp = builder.gep(_data(context, builder, signature.args[0], c_arr), [c_at])
            ap = builder.gep(_data(context, builder, signature.args[3], a_arr), [a_at])
            bp = builder.gep(_data(context, builder, signature.args[6], b_arr), [b_at])
            dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V16, [_V16, _V16, _V16]),
                                                 "llvm.x86.avx512.vpdpbusd.512")
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(_V16, None)) for _ in range(vectors)]
                    for _ in range(rows)]
            zero = ir.Constant(_V16, None)
            with cgutils.for_range(builder, steps) as loop:
                k = loop.index
                splats = []
                for r in range(rows):
                    at = builder.add(builder.mul(a_step, ir.Constant(a_step.type, r)),
                                     builder.mul(k, ir.Constant(k.type, 4)))
                    word = builder.load(builder.bitcast(builder.gep(ap, [at]), _I32.as_pointer()), align=1)
                    lane = builder.insert_element(zero, builder.xor(word, ir.Constant(_I32, _FLIP)),
                                                  ir.Constant(_I32, 0))
                    splats.append(builder.shuffle_vector(lane, zero, ir.Constant(_V16, [0] * 16)))
                base = builder.mul(k, ir.Constant(k.type, 64 * vectors))
                columns = [builder.load(builder.bitcast(builder.gep(bp, [builder.add(base, ir.Constant(k.type, 64 * j))]),
                                                        _V16.as_pointer()), align=1) for j in range(vectors)]
                for r in range(rows):
                    for j in range(vectors):
                        builder.store(builder.call(dot, [builder.load(accs[r][j]), splats[r], columns[j]]), accs[r][j])
            for r in range(rows):
                for j in range(vectors):
                    at = builder.add(builder.mul(c_step, ir.Constant(c_step.type, r)), ir.Constant(c_step.type, 16 * j))
                    builder.store(builder.load(accs[r][j]), builder.bitcast(builder.gep(cp, [at]), _V16.as_pointer()),
                                  align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_T41, _T42, _T43, _T44 = (_vnni_tile(4, v) for v in (1, 2, 3, 4))
_T11, _T12, _T13, _T14 = (_vnni_tile(1, v) for v in (1, 2, 3, 4))


@numba.njit(inline="always", **_JIT)
def _tile(rows, vectors, c, c_off, ldc, a, a_off, lda, b, b_off, k4):  # type: ignore[no-untyped-def]
    if rows == 4:
        if vectors == 4:
            _T44(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
        elif vectors == 3:
            _T43(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
        elif vectors == 2:
            _T42(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
        else:
            _T41(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
    elif vectors == 4:
        _T14(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
    elif vectors == 3:
        _T13(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
    elif vectors == 2:
        _T12(c, c_off, ldc, a, a_off, lda, b, b_off, k4)
    else:
        _T11(c, c_off, ldc, a, a_off, lda, b, b_off, k4)


@numba.njit(**_JIT)
def gemm_vnni(a, packed, units, offset4, p4, out):  # type: ignore[no-untyped-def]
    """``out[m, n]`` = the requantized ``Σ_k (a[m, k] − zp_in)·W[k, n]`` of int8 ``a`` [M, K] (K a multiple
    of 4, contiguous): four rows at a time, every column block's sums (:func:`_vnni_tile`, raw sums of
    ``(a + 128)·W``) into a scratch of four output rows, then those rows less ``offset`` (``(zp_in + 128)·Σ_k
    W[k, n]``) requantized (:func:`_requantized`) in one flat loop — the int32 sums never leave the cache.
    ``packed`` [blocks, K/4, 64, 4] int8: 64-column blocks (the last one as wide as it needs, 16·vectors,
    laid out compactly); ``offset4`` [4·N] and ``p4`` [7, 4·N]: the per-column offsets and constants
    repeated for four rows.  The caller checks no raw sum can leave int32 (255·Σ_k |W[k, n]| < 2^31)."""
    rows, depth = a.shape
    k4 = depth // 4
    blocks = packed.shape[0]
    x, w, y = a.reshape(-1), packed.reshape(-1), out.reshape(-1)
    scratch = np.empty(4 * units + 64, np.int32)
    block_bytes = k4 * 256
    q = _rows(p4)
    m0 = 0
    while m0 < rows:
        step = 4 if m0 + 4 <= rows else 1
        for nb in range(blocks - 1, -1, -1):  # the last block's spare columns land in the next row's first block
            _tile(step, min(4, (units - nb * 64 + 15) // 16), scratch, nb * 64, units, x, m0 * depth, depth,
                  w, nb * block_bytes, k4)
        o = m0 * units
        for e in range(step * units):
            y[_u(o + e)] = _requantized(np.int64(scratch[e]) - offset4[e], e, q)
        m0 += step


def _copy_bytes(size: int):  # type: ignore[no-untyped-def]
    """An intrinsic ``copy(dst, d_off, src, s_off)``: ``size`` bytes from ``src[s_off:]`` to ``dst[d_off:]``
    (flat uint8/int8 arrays, in bounds: the caller checks) as one ``llvm.memcpy`` of constant size —
    LLVM moves them as a few word loads and stores where a byte loop moves one at a time."""

    @intrinsic
    def copy(typingctx, dst, d_off, src, s_off):  # type: ignore[no-untyped-def]
        sig = types.void(dst, d_off, src, s_off)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            d_arr, d_at, s_arr, s_at = args
            dp = builder.gep(_data(context, builder, signature.args[0], d_arr), [d_at])
            sp = builder.gep(_data(context, builder, signature.args[2], s_arr), [s_at])
            i8p = ir.IntType(8).as_pointer()
            cgutils.memcpy(builder, builder.bitcast(dp, i8p), builder.bitcast(sp, i8p), ir.Constant(ir.IntType(64), size))
            return context.get_dummy_value()

        return sig, codegen

    return copy


_COPY9 = _copy_bytes(9)


@numba.njit(**_JIT)
def im2col_rows(x, kh, kw, pad, sh, sw, dh, dw, pt, pl, oh, ow, out):  # type: ignore[no-untyped-def]
    """The int8 im2col matrix of a KHxKW convolution for the fused GEMM: row ``(n, oy, ox)`` of ``out``
    [N·OH·OW, depth] (depth ≥ KH·KW·C; the columns beyond are left as they are) holds the window's taps
    in (i, j, c) order, ``pad`` (the input zero point: the tap adds 0) outside the image; ``x``
    [N, H, W, C] int8, contiguous.  A window row wholly inside an undilated image row is one copy of
    KW·C bytes — 9 bytes (a first layer's 3x3x3) as one constant-size copy, word moves instead of a
    byte loop."""
    batch, height, width, channels = x.shape
    depth = out.shape[1]
    span = kw * channels
    src, dst = x.reshape(-1), out.reshape(-1)
    row = width * channels
    for n in range(batch):
        for oy in range(oh):
            for i in range(kh):
                iy = oy * sh - pt + i * dh
                base = ((n * oh + oy) * ow) * depth + i * span
                if iy < 0 or iy >= height:
                    for ox in range(ow):
                        o = base + ox * depth
                        for k in range(span):
                            dst[_u(o + k)] = pad
                    continue
                r = (n * height + iy) * row
                for ox in range(ow):
                    left = ox * sw - pl
                    o = base + ox * depth
                    if dw == 1 and left >= 0 and left + kw <= width:
                        if span == 9:
                            _COPY9(dst, o, src, r + left * channels)
                        else:
                            a = r + left * channels
                            for k in range(span):
                                dst[_u(o + k)] = src[_u(a + k)]
                        continue
                    for j in range(kw):
                        ix = left + j * dw
                        if 0 <= ix < width:
                            a = r + ix * channels
                            for c in range(channels):
                                dst[_u(o + j * channels + c)] = src[_u(a + c)]
                        else:
                            for c in range(channels):
                                dst[_u(o + j * channels + c)] = pad
