"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN, float and integer; L2_POOL_2D (float32).

Average pool (integer): ``y = (Σ x + count/2) / count`` for positive sums,
``(Σ x − count/2) / count`` otherwise (C division truncates: rounding half away
from zero), where ``count`` is the number of in-image taps.  Max pool takes the
max over in-image taps (floats: NaNs never win, as C's ``std::max`` from ``lowest()``).
Both clamp to the fused activation — floats to finite bounds, ``±FLT_MAX`` without one
(LiteRT's CalculateActivationRange), so an infinite average or max comes out as
``±FLT_MAX``.  O(N·OH·OW·KH·KW·C).

MEAN (integer: int8, uint8, int16 with zero points 0), as LiteRT's reference kernels over
any axes, with or without keep_dims, whatever the scales (equal ones too):
``MBQM(Σx − zp_in·n, M/n) + zp_out`` where ``M = s_in/s_out`` and ``1/n`` is folded
into the multiplier (:func:`.fixedpoint.fold_divisor`).  Pooling runs int16 with the
same formulas as int8 (LiteRT's 16x8 pooling kernels are the int8 ones widened).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import (
    PAD_SAME,
    OpContext,
    activation_range,
    apply_activation,
    clamp_cast,
    ints,
    kernel,
    output_size,
    padding_before,
    reduce_in_order,
    type_range,
)
from .fixedpoint import fold_divisor, multiply_by_quantized_multiplier, quantize_multiplier
from .jit import kernels
from .prepare import OpCheck, Shape, prepare_rule
from .requant import FastRequant


def _window(ctx: OpContext, h: int, w: int) -> tuple[int, int, int, int, int, int, int, int]:
    """``(KH, KW, stride_h, stride_w, OH, OW, padding top, padding left)`` of a pool over an ``h``x``w``
    image (TFLite's output size; no padding before with VALID)."""
    kh, kw = int(ctx.attr("filter_height", 1)), int(ctx.attr("filter_width", 1))
    sh, sw = int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1))
    padding = int(ctx.attr("padding", 0))
    oh, ow = output_size(h, kh, sh, 1, padding), output_size(w, kw, sw, 1, padding)
    pt = padding_before(h, kh, sh, 1, oh)[0] if padding == PAD_SAME else 0
    pl = padding_before(w, kw, sw, 1, ow)[0] if padding == PAD_SAME else 0
    return kh, kw, sh, sw, oh, ow, pt, pl


def _pool_taps(ctx: OpContext, x: np.ndarray, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """``[N, OH, OW, KH·KW, C]`` taps (``fill`` outside the image) and the in-image mask."""
    n, h, w, c = x.shape
    kh, kw, sh, sw, oh, ow, pt, pl = _window(ctx, h, w)
    hp, wp = max((oh - 1) * sh + kh, h + pt), max((ow - 1) * sw + kw, w + pl)
    xp = np.full((n, hp, wp, c), fill, dtype=x.dtype)
    xp[:, pt:pt + h, pl:pl + w, :] = x
    inside = np.zeros((hp, wp), dtype=bool)
    inside[pt:pt + h, pl:pl + w] = True
    taps = np.empty((n, oh, ow, kh * kw, c), dtype=x.dtype)
    mask = np.empty((oh, ow, kh * kw), dtype=bool)
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i, i + (oh - 1) * sh + 1, sh), slice(j, j + (ow - 1) * sw + 1, sw)
            taps[:, :, :, i * kw + j, :] = xp[:, rows, cols, :]
            mask[:, :, i * kw + j] = inside[rows, cols]
    return taps, mask


@kernel("AVERAGE_POOL_2D", int16=True)
def average_pool_2d(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":
        taps, mask = _pool_taps(ctx, x.astype(np.float32), 0.0)
        count = mask.sum(axis=-1).astype(np.float32)[None, :, :, None]
        total = taps.sum(axis=3, dtype=np.float32)
        return [_float_activation(ctx, total / count, dtype)]
    taps, mask = _pool_taps(ctx, x.astype(np.int64), 0)
    count = mask.sum(axis=-1).astype(np.int64)[None, :, :, None]
    total = taps.sum(axis=3)
    half = count // 2
    num = np.where(total > 0, total + half, total - half)
    avg = np.sign(num) * (np.abs(num) // count)  # C division truncates
    return [clamp_cast(ctx, avg, dtype)]


def _float_activation(ctx: OpContext, y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Clamp a float pool output to its fused activation, within ``±FLT_MAX``."""
    big = float(np.finfo(np.float32).max)
    lo, hi = activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), dtype)
    return np.clip(y, max(lo, -big), min(hi, big)).astype(dtype)


@kernel("MAX_POOL_2D", int16=True)
def max_pool_2d(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    taps, _ = _pool_taps(ctx, x, low)
    y = np.fmax.reduce(taps, axis=3, initial=low)  # fmax: a NaN tap never wins
    if dtype.kind == "f":
        return [_float_activation(ctx, y, dtype)]
    return [clamp_cast(ctx, y.astype(np.int64), dtype)]


@kernel("MEAN", int16=True)
def mean(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    axes = sorted({a % x.ndim for a in ints(ctx.x(1))}) if x.ndim else []
    keep = bool(ctx.attr("keep_dims", False))
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":  # float32 sum, then one division, as LiteRT (a sum past FLT_MAX is inf there too)
        n_f = np.float32(np.prod([x.shape[a] for a in axes])) if axes else np.float32(1)
        if ctx.jit and x.dtype == dtype == np.float32 and _middle_run(x, axes) and ctx.in_value(1).const is not None:
            runner = _float_mean_runner(x, axes, keep, n_f)  # LiteRT's order of sums, compiled
            ctx.cache["compiled"] = (x.shape, x.dtype, runner)  # see interpreter
            return [runner(x)]
        return [(reduce_in_order(x, axes, keep) / n_f).astype(dtype)]
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    total = _sums(ctx, x, axes, keep)
    key = ("mean", n, dtype)
    derived = ctx.cache.get(key)  # depends on the quantization and n only: once per operator and size
    if derived is None:
        derived = ctx.cache[key] = _mean_requantization(ctx, n, dtype)
    m, shift, zp_in, zp_out, lo, hi, fast = derived
    if fast is not None:
        if _middle_run(x, axes) and ctx.in_value(1).const is not None:  # later runs: two compiled passes
            ctx.cache["compiled"] = (x.shape, x.dtype, _mean_runner(x, axes, keep, fast, dtype))  # see interpreter
        return [fast(total, dtype)]
    y = multiply_by_quantized_multiplier(total - zp_in * n, m, shift, ctx.rounding) + zp_out
    return [np.clip(y, lo, hi).astype(dtype)]


def _middle_run(x: np.ndarray, axes: list[int]) -> bool:
    """``axes`` are a run of middle axes (H, W of NHWC) of a contiguous ``x``."""
    return bool(axes) and axes == list(range(axes[0], axes[-1] + 1)) and axes[-1] < x.ndim - 1 \
        and x.flags.c_contiguous


def _sums(ctx: OpContext, x: np.ndarray, axes: list[int], keep: bool) -> np.ndarray:
    """int64 sums of an integer tensor over ``axes`` — one compiled pass (``ctx.jit``)
    when they are a run of middle axes, else numpy's reduction."""
    if not (ctx.jit and _middle_run(x, axes)):
        return x.sum(axis=tuple(axes), keepdims=keep, dtype=np.int64)  # type: ignore[no-any-return]
    return _mean_runner(x, axes, keep, None, x.dtype)(x)


def _middle_shapes(x: np.ndarray, axes: list[int], keep: bool) -> tuple[tuple[int, int, int], list[int]]:
    """``x`` seen as [outer, middle, inner] for sums over a run of middle ``axes``, and the
    output shape."""
    outer = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
    middle = int(np.prod(x.shape[axes[0]:axes[-1] + 1], dtype=np.int64))
    inner = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64))
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return (outer, middle, inner), shape  # explicit: a zero-size batch leaves nothing to infer -1 from


def _float_mean_runner(x: np.ndarray, axes: list[int], keep: bool, n: np.float32
                       ) -> Callable[[np.ndarray], np.ndarray]:
    """A float32 MEAN over a run of middle axes: float32 sums in LiteRT's order (one compiled
    pass), divided by ``n``."""
    view, shape = _middle_shapes(x, axes, keep)
    middle_sums = kernels().middle_sums

    def run(v: np.ndarray) -> np.ndarray:
        out = np.empty((view[0], view[2]), np.float32)
        middle_sums(v.reshape(view), out)
        out /= n
        return out.reshape(shape)

    return run


def _mean_runner(x: np.ndarray, axes: list[int], keep: bool, fast: FastRequant | None, dtype: np.dtype
                 ) -> Callable[[np.ndarray], np.ndarray]:
    """The compiled sums over a run of middle axes for inputs shaped like ``x``, then
    ``fast``'s requantization when given (else the int64 sums), shapes worked out once."""
    view, shape = _middle_shapes(x, axes, keep)
    middle_sums = kernels().middle_sums
    if fast is not None and fast.native is not None and x.dtype.itemsize == 1 and view[1] < 1 << 23:
        compiled, constants = fast.native[0].mean_requant, fast.native[1]  # sums and requantization in one pass

        def run_fused(v: np.ndarray) -> np.ndarray:
            out = np.empty((view[0], view[2]), dtype)
            compiled(v.reshape(view), constants, out)
            return out.reshape(shape)

        return run_fused

    def run(v: np.ndarray) -> np.ndarray:
        out = np.empty((view[0], view[2]), np.int64)
        middle_sums(v.reshape(view), out)
        total = out.reshape(shape)
        return total if fast is None else fast(total, dtype)

    return run


def _mean_requantization(ctx: OpContext, n: int, dtype: np.dtype
                         ) -> tuple[int, int, int, int, int, int, FastRequant | None]:
    """(m, shift with 1/n folded in, zp_in, zp_out, lo, hi, the compiled requantizer of
    ``total − zp_in·n`` when ``ctx.jit``) of a quantized MEAN."""
    q_in, q_out = ctx.in_quant(0), ctx.out_quant()
    if q_in is None or q_out is None:
        raise ctx.error("integer tensors without quantization parameters")
    if dtype == np.int16 and (q_in.zp or q_out.zp):
        raise ctx.error(f"int16 zero points must be 0 (input {q_in.zp}, output {q_out.zp}), as LiteRT requires")
    lo, hi = type_range(dtype)
    real = float(np.float64(np.float32(q_in.s)) / np.float64(np.float32(q_out.s)))
    m, shift = fold_divisor(*quantize_multiplier(real), n)
    fast = None
    if ctx.jit and abs(n) < 1 << 23:  # |total − zp_in·n| ≤ 255·n < 2^31, as the compiled loop needs
        fast = FastRequant.build(bias=np.array([-q_in.zp * n]), m=np.array([m]), shift=np.array([shift]),
                                 zp=q_out.zp, lo=lo, hi=hi, rounding=ctx.rounding, acc_dtype=np.float64,
                                 out_dtype=dtype, native=True)
    return m, shift, q_in.zp, q_out.zp, lo, hi, fast


@kernel("L2_POOL_2D")
def l2_pool(ctx: OpContext) -> list[np.ndarray]:
    """sqrt(mean of squares) over each window's in-bounds elements (float32), then the activation."""
    x = ctx.x(0)
    if x.dtype != np.float32 or x.ndim != 4:
        raise ctx.error(f"its input is {x.dtype} {list(x.shape)}; LiteRT's kernel takes float32 NHWC")
    n, h, w, c = x.shape
    kh, kw, sh, sw, oh, ow, top, left = _window(ctx, h, w)
    # zero-padded squares: a padded element adds an exact 0 and is not counted
    bottom, right = max((oh - 1) * sh + kh - top - h, 0), max((ow - 1) * sw + kw - left - w, 0)
    squares = np.pad(x * x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    inside = np.pad(np.ones((h, w), np.int32), ((top, bottom), (left, right)))
    total = np.zeros((n, oh, ow, c), np.float32)
    count = np.zeros((oh, ow), np.int32)
    for ky in range(kh):  # LiteRT adds in float32, filter row by row
        for kx in range(kw):
            rows, cols = slice(ky, ky + (oh - 1) * sh + 1, sh), slice(kx, kx + (ow - 1) * sw + 1, sw)
            total += squares[:, rows, cols]
            count += inside[rows, cols]
    out = np.sqrt(total / count[None, :, :, None].astype(np.float32))
    return [apply_activation(ctx, out, np.dtype(np.float32))]


@prepare_rule("L2_POOL_2D", arity=(1, 1))
def _l2_pool_shape(op: OpCheck) -> list[Shape]:
    x = op.rank(0, 4)
    sizes = [op.int_attr(name, 1, 1) for name in ("filter_height", "filter_width", "stride_h", "stride_w")]
    if x is None:
        return [None]
    padding = op.int_attr("padding", 0, 0, 1)
    n, h, w, c = x
    return [(n, output_size(h, sizes[0], sizes[2], 1, padding), output_size(w, sizes[1], sizes[3], 1, padding), c)]
