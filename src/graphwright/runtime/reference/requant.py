"""Fast, still bit-exact requantization of convolution accumulators in floating point
(:class:`FastRequant`, the reference kernels' integer formulas), and XNNPACK's own
float32 requantization (:class:`Float32Requant`, for single rounding).

The exact path (:func:`.fixedpoint.multiply_by_quantized_multiplier`) needs about
ten int64 passes per element.  Here the accumulator stays in the float dtype the
GEMM produced (its values are exact integers, see ``conv_common._plan``) and::

    S_c  = m_c·2^(shift_c−31)                         (the exact real multiplier)
    U    = (acc + bias_c)·S_c + zp_out + ½            (exact real)
    y    = clamp(⌊U⌋, lo, hi)                         whenever dist(U, ℤ) > τ

is evaluated with one multiply, one add and one floor per element.  ``τ`` is the
rounding slack of the integer formula: single rounding computes ``⌊U⌋`` exactly
(τ = 0); double rounding first rounds to ``h = round(acc·m/2^31)`` and then divides
``h`` by ``2^r`` (r = −shift), which moves the value by at most ``τ = 2^−(r+1)``
(τ = 0 for r = 0).  The float evaluation adds an error ``e``, bounded at
preparation (with unit roundoff ``u``, offsets ``O = max|bias_c·S_c + zp + ½|``,
and ``|U| ≤ 2^10`` for every element that the clamp does not decide alone)::

    e ≤ 8·u·(2^10 + O + 1)

With ``t = τ + e`` the kernel computes ``u' = acc·S + (bias·S + zp + ½ + t)``,
clips it to ``[lo + ½, hi + ½]`` (below ``lo + ½`` every candidate result clamps to
``lo``, above ``hi + ½`` to ``hi``; both land mid-interval, far from any tie) and
takes ``f = ⌊u'⌋``: if ``u' − f > 2t`` then ``U`` lies strictly inside
``(f + τ, f + 1 − τ)`` and ``f`` is the exact answer.  The remaining elements
(about ``2^−r`` of them, under 1% for typical layers) are recomputed with the
exact int64 formula.  Layers where this does not pay (positive shifts, shifts
below −31, negative multipliers, ``2t ≥ ¼``, non-8-bit outputs) keep the exact
path.  O(n) per call: 7 float passes (multiply, add, clip, floor, fraction,
compare, cast) + the fix-ups (one gather of the per-channel constants, with the
bias and zero point folded in, then ~7 int64 operations on the flagged elements).

With ``native`` (numba installed, see :mod:`.jit`) the same object requantizes
with the exact int64 formula in one compiled pass instead (~0.55 ns per element
against ~2.5 for the float passes), and also takes the layers the float path
declines for its slack (r = 1 with double rounding).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from .jit import kernels

__all__ = ["FastRequant", "Float32Requant"]

#: |U| beyond which an 8-bit output is clamped whatever the rounding
_CLAMP_DECIDES = 2.0**10
#: accumulators the compiled float32 pass reads (exact there when the layer's sums stay below 2^24,
#: which an accumulator dtype of float32 at :meth:`FastRequant.build` promises)
_EXACT_IN_FLOAT32 = (np.dtype(np.int32), np.dtype(np.float32))
#: below this many sums the one int64 pass costs less than the float32 pass and its flags
_FLAGGED_MIN = 4096


class FastRequant:
    """Accumulator (float, exact integers, channels last) -> clamped 8-bit output.

    Holds only read-only arrays after construction (the per-width tiles are
    added once and never changed), so one instance may serve several threads.
    """

    __slots__ = ("bias", "channels", "dtype", "flagged", "half", "hi", "limit", "lo", "m", "native", "offset",
                 "params", "right", "right_pos", "rounding", "scale", "shift", "tiles", "zp")

    def __init__(self, *, bias: np.ndarray, m: np.ndarray, shift: np.ndarray, zp: int, lo: int, hi: int,
                 rounding: str, acc_dtype: type, slack: float, scale: np.ndarray, offset: np.ndarray) -> None:
        self.channels = int(m.size)
        self.bias, self.m, self.shift, self.zp, self.lo, self.hi = bias, m, shift, zp, lo, hi
        self.rounding, self.dtype = rounding, acc_dtype
        self.limit = acc_dtype(2.0 * slack)  # fractions at or below this are recomputed exactly
        self.scale, self.offset = scale, offset
        self.right = -shift
        self.half = (np.int64(1) << self.right) >> 1
        self.right_pos = self.right > 0
        #: what a fix-up gathers per channel, in one go, with the bias and zp folded in:
        #: double [m, bias·m + 2^30, 2^(r−1) + zp·2^r, r, r > 0]; single [m, bias·m + 2^(30+r), 31 + r]
        if rounding == "double":
            scaled_zp = np.int64(zp) * (np.int64(1) << self.right)
            self.params = np.stack([m, bias * m + (1 << 30), self.half + scaled_zp, self.right,
                                    self.right_pos.astype(np.int64)], axis=1)
        else:
            self.params = np.stack([m, bias * m + (np.int64(1) << (30 + self.right)), 31 + self.right], axis=1)
        #: width -> (scale, offset) repeated ``width`` times: one long inner loop for numpy
        self.tiles: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: (the compiled kernels' module, their per-channel constants) once :meth:`compile` ran
        self.native: tuple[ModuleType, np.ndarray] | None = None
        #: the float32 constants [5, C] of the compiled float pass with exact fix-ups (see :meth:`compile`)
        self.flagged: np.ndarray | None = None

    @classmethod
    def build(cls, *, bias: np.ndarray | None, m: np.ndarray, shift: np.ndarray, zp: int,
              lo: int, hi: int, rounding: str, acc_dtype: type, out_dtype: np.dtype,
              native: bool = False) -> FastRequant | None:
        """The requantizer of one layer, or None when the exact int64 path must be kept.

        ``native``: requantize with the compiled loop (:mod:`.jit`) — exact for every
        layer this class accepts, so the float slack bound does not apply."""
        m = np.asarray(m, np.int64).reshape(-1)
        shift = np.asarray(shift, np.int64).reshape(-1)
        if out_dtype.itemsize != 1 or out_dtype.kind not in "iu" or m.size == 0:
            return None
        if np.any(m < 0) or np.any(shift > 0) or np.any(shift < -31) or rounding not in ("double", "single"):
            return None
        b = np.zeros(m.size, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
        if b.size != m.size:
            return None
        exact = m.astype(np.float64) * np.exp2(shift.astype(np.float64) - 31.0)  # exact: m < 2^31
        right = -shift
        tau = 0.0
        if rounding == "double" and np.any(right > 0):
            tau = float(2.0 ** -(int(right[right > 0].min()) + 1))
        base = b.astype(np.float64) * exact + (zp + 0.5)
        unit = float(np.finfo(acc_dtype).eps) / 2
        error = 8.0 * unit * (_CLAMP_DECIDES + float(np.abs(base).max()) + 1.0)
        slack = tau + error
        if 2.0 * slack >= 0.25 and not native:
            return None
        made = cls(bias=b, m=m, shift=shift, zp=zp, lo=lo, hi=hi, rounding=rounding,
                   acc_dtype=acc_dtype, slack=slack, scale=exact.astype(acc_dtype),
                   offset=(base + slack).astype(acc_dtype))
        if native:
            made.compile()
        return made

    def compile(self) -> None:
        """Requantize with the compiled loops from now on (numba must be installed)."""
        if self.rounding == "double":  # the fix-ups' constants are exactly the kernel's
            m, nudge, half, right, neg = self.params.T
        else:  # one floor shift by 31 + r = a floor shift by 31, then by r
            m, nudge, right = self.params[:, 0], self.params[:, 1], self.right
            half, neg = np.int64(self.zp) * (np.int64(1) << right), np.zeros_like(right)
        ones = np.ones(self.channels, np.int64)
        rows = (m, nudge, half, right, neg, self.lo * ones, self.hi * ones)
        self.native = (kernels(), np.ascontiguousarray(np.stack([np.asarray(r, np.int64) for r in rows])))
        if self.dtype is np.float32 and float(self.limit) < 0.25:  # sums below 2^24, slack bounded (see build)
            ones32 = np.ones(self.channels, np.float32)
            self.flagged = np.ascontiguousarray(np.stack([
                np.asarray(self.scale, np.float32), np.asarray(self.offset, np.float32),
                np.float32(self.lo + 0.5) * ones32, np.float32(self.hi + 0.5) * ones32, np.float32(self.limit) * ones32]))

    def _tiled(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        tile = self.tiles.get(width)
        if tile is None:
            tile = self.tiles[width] = (np.tile(self.scale, (width, 1)), np.tile(self.offset, (width, 1)))
        return tile

    def __call__(self, acc: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
        """``clamp(MBQM(acc + bias, m, shift) + zp)`` as ``out_dtype``; ``acc`` is not modified."""
        if self.native is not None:
            compiled, constants = self.native
            y = np.empty(acc.shape, out_dtype)
            if self.flagged is not None and acc.size >= _FLAGGED_MIN and acc.dtype in _EXACT_IN_FLOAT32 \
                    and acc.flags.c_contiguous:
                compiled.requantize_flagged(acc.reshape(-1, self.channels), self.flagged, constants,
                                            y.reshape(-1, self.channels), np.empty((acc.size // self.channels, self.channels), np.uint8))
            else:
                compiled.requantize(acc.reshape(-1, self.channels), constants, y.reshape(-1, self.channels))
            return y
        scale, offset = self._tiled(acc.shape[-2]) if acc.ndim >= 2 else (self.scale, self.offset)
        u = np.multiply(acc, scale)
        u += offset
        np.clip(u, self.lo + 0.5, self.hi + 0.5, out=u)  # the clamp, before rounding (see build)
        f = np.floor(u)
        u -= f  # the fraction, exactly
        flagged = np.flatnonzero(u <= self.limit)
        y = f.astype(out_dtype)
        if flagged.size:
            q = self._exact(acc.reshape(-1)[flagged].astype(np.int64), flagged % self.channels)
            np.clip(q, self.lo, self.hi, out=q)
            y.reshape(-1)[flagged] = q
        return y

    def _exact(self, v: np.ndarray, ch: np.ndarray) -> np.ndarray:
        """The int64 formula (m ≥ 0 and shift ≤ 0 here) of ``v + bias``, plus ``zp``, in
        place on ``v``, for the channels ``ch`` (see :mod:`.fixedpoint`); ``(v + b)·m =
        v·m + b·m < 2^62`` and ``zp·2^r`` added before the exact division by ``2^r``
        adds ``zp`` after it."""
        if self.rounding == "double":  # h = (v·m + 2^30) >> 31, then round half away by 2^r
            m, nudge, half, right, right_pos = self.params[ch].T
            v *= m
            v += nudge
            v >>= 31
            v += half
            v -= (v < half) & (right_pos == 1)  # h was negative: half away from zero
            v >>= right
        else:  # (v·m + 2^(30+r)) >> (31+r)
            m, nudge, total = self.params[ch].T
            v *= m
            v += nudge
            v >>= total
            v += self.zp
        return v


class Float32Requant:
    """XNNPACK's requantization of convolution and fully connected accumulators, which
    LiteRT's default kernels run (``rounding="single"``)::

        y = clamp(rint(float32(acc + bias) · S_c) + zp_out)     S_c = float32(s_in·s_w[c]/s_out)

    ``S_c`` evaluated in float32 (two roundings, left to right), the product rounded
    to float32, then to the nearest integer, ties to even.  Measured equal to LiteRT's
    default kernels on every element of 1.7 M convolution outputs of EfficientNet-B0,
    where the integer single rounding (``(acc·m + 2^(30+r)) >> (31+r)``) differs on 4.
    Six numpy passes per element, or one compiled pass (:meth:`compile`).
    """

    __slots__ = ("bias", "hi", "lo", "native", "scale", "zp")

    def __init__(self, bias: np.ndarray, scale: np.ndarray, zp: int, lo: int, hi: int) -> None:
        self.bias, self.scale, self.zp, self.lo, self.hi = bias, scale, zp, lo, hi
        #: (the compiled kernels' module, their per-channel constants) once :meth:`compile` ran
        self.native: tuple[ModuleType, tuple[object, ...]] | None = None

    @classmethod
    def build(cls, *, bias: np.ndarray | None, s_in: float, s_w: np.ndarray, s_out: float, channels: int, zp: int,
              lo: int, hi: int, out_dtype: np.dtype, native: bool = False) -> Float32Requant | None:
        """The requantizer of one layer, or None for outputs that are not 8-bit;
        ``native``: with the compiled loop (:mod:`.jit`)."""
        if out_dtype.itemsize != 1 or out_dtype.kind not in "iu":
            return None
        sw = np.asarray(s_w, np.float32).reshape(-1)
        if sw.size == 1:
            sw = np.repeat(sw, channels)
        scale = (np.float32(s_in) * sw / np.float32(s_out)).astype(np.float32)
        b = np.zeros(channels, np.float64) if bias is None else np.asarray(bias, np.float64).reshape(-1)
        made = cls(b, scale, zp, lo, hi)
        if native:
            made.compile()
        return made

    def compile(self) -> None:
        """Requantize with the compiled loop from now on (numba must be installed)."""
        self.native = (kernels(), (np.ascontiguousarray(self.bias), np.ascontiguousarray(self.scale),
                                   np.int64(self.zp), np.int64(self.lo), np.int64(self.hi)))

    def __call__(self, acc: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
        """``clamp(rint(float32(acc + bias)·S) + zp)`` as ``out_dtype``; ``acc`` is not modified."""
        if self.native is not None:
            compiled, constants = self.native
            channels = self.scale.size
            y = np.empty(acc.shape, out_dtype)
            compiled.requantize_float32(acc.reshape(-1, channels), *constants, y.reshape(-1, channels))
            return y
        total = np.add(acc, self.bias, dtype=np.float64)  # exact: integers below 2^53
        u = total.astype(np.float32)  # rounds as the int32 -> float32 conversion does
        u *= self.scale
        np.rint(u, out=u)
        u += np.float32(self.zp)
        np.clip(u, self.lo, self.hi, out=u)
        return u.astype(out_dtype)
