"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED, float and integer.

Integer maths (TFLite reference kernels; FULLY_CONNECTED requantizes with single
rounding, as LiteRT's reference kernel does)::

    acc[c] = Σ_taps (w[c,tap] − zp_w)·(x[tap] − zp_in) + bias[c]   (in-image taps only)
    y[c]   = clamp(MBQM(acc[c], m[c], shift[c]) + zp_out)          M[c] = s_in·s_w[c]/s_out

Padding with ``zp_in`` makes padded taps contribute 0, so the input is shifted
by ``−zp_in`` and zero-padded.  Sums of 8-bit products are exact in float32 while
``max|x − zp_in|·Σ_k|w[k,c]| < 2^24`` (else in float64, or as float32 row blocks
each under that bound, added in float64), so they run on BLAS (``matmul``) and
are exact integers.  The requantization runs in floating point with exact int64
fix-ups of the near-ties (:mod:`.requant`), and with constant weights the
convolutions become compiled runners with preallocated buffers (:mod:`.runners`):
1x1 convolutions are one GEMM on the NHWC buffer, other convolutions one strided
im2col copy and one GEMM, depthwise ones one ``einsum`` over a strided view of
the taps.  With the compiled loops (:mod:`.jit`) the requantization and the whole
depthwise convolution are one compiled pass each, and fully connected layers of
at most ``_DENSE_ROWS`` rows are 8-bit dot products (exact integer sums).
Cost: O(N·OH·OW·KH·KW·C·O) arithmetic; memory O(N·OH·OW·KH·KW·C) for the im2col
matrix of the KHxKW convolutions.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    PAD_SAME,
    OpContext,
    Quant,
    activation_range,
    apply_activation,
    clamp_cast,
    kernel,
    output_size,
    padding_before,
)
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multipliers
from .jit import kernels
from .requant import FastRequant, Float32Requant
from .runners import Geometry, compile_runner, depthwise_runner, pointwise_runner, window_runner


def channel_multipliers(s_in: float, w: Quant, s_out: float, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel ``(m, shift)`` of ``M[c] = s_in·s_w[c]/s_out`` (scales as
    float32 promoted to double, per-tensor weights broadcast), as TFLite computes them."""
    sw = w.scale.astype(np.float64).reshape(-1)
    if sw.size == 1:
        sw = np.repeat(sw, channels)
    real = np.float64(np.float32(s_in)) * sw / np.float64(np.float32(s_out))
    return quantize_multipliers(real)


def legacy_multiplier(s_in: float, w: Quant, s_out: float, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (legacy) per-tensor ``(m, shift)``: ``M = float32(s_in·s_w) / s_out`` — the
    product is rounded to float32 before the double division, as TFLite does."""
    product = np.float64(np.float32(np.float32(s_in) * np.float32(w.s)))
    m, s = quantize_multipliers(np.array([product / np.float64(np.float32(s_out))]))
    return np.repeat(m, channels), np.repeat(s, channels)


def _weights(w: np.ndarray, q_w: Quant | None) -> np.ndarray:
    if q_w is None or w.dtype.kind == "f":
        return w.astype(np.float64)
    zp = q_w.zero_point.reshape(-1)
    if zp.size > 1 and np.any(zp != 0):
        raise ValueError("per-channel weight zero points must be 0")
    return w.astype(np.float64) - (zp[0] if zp.size else 0)


class _Plan:
    """What a convolution derives from its constants once: the weight matrix
    (rows = output channels), the compute dtype, the bias and the multipliers."""

    __slots__ = ("bias", "chunks", "dtype", "fast", "in_dtype", "m", "shift", "tiles", "weights")

    def __init__(self, weights: np.ndarray, dtype: type, bias: np.ndarray | None,
                 m: np.ndarray | None, shift: np.ndarray | None,
                 fast: FastRequant | Float32Requant | None = None) -> None:
        self.weights, self.dtype, self.bias, self.m, self.shift = weights, dtype, bias, m, shift
        self.fast = fast
        #: float64 sums too long for float32: K split into row blocks each exact in float32,
        #: [(start, stop, float32 block)], the float32 block products added in float64
        self.chunks: list[tuple[int, int, np.ndarray]] | None = None
        self.in_dtype: type = dtype  # dtype of the shifted input the GEMM reads
        #: depthwise: output width -> weights repeated along it, [KH·KW, OW, C]
        self.tiles: dict[int, np.ndarray] = {}

    def tiled(self, width: int) -> np.ndarray:
        """Per-tap weights repeated ``width`` times, so each tap's multiply runs as one
        long contiguous loop instead of ``width`` short ones."""
        tile = self.tiles.get(width)
        if tile is None:
            tile = self.tiles[width] = np.ascontiguousarray(
                np.broadcast_to(self.weights[:, None, :], (self.weights.shape[0], width, self.weights.shape[1])))
        return tile


def _plan(ctx: OpContext, matrix: np.ndarray, channels: int, rounding: str | None = None) -> _Plan:
    """Plan from the weights as a [K, channels] float64 matrix (cached when constant).

    Integer sums run in float32 when they are provably exact there: every partial
    sum is bounded by ``max|x − zp_in| · Σ_k |w[k, c]| < 2^24``; else float64 (< 2^53).
    """
    cacheable = ctx.in_value(1).const is not None and (not ctx.has(2) or ctx.in_value(2).const is not None)
    if cacheable and "plan" in ctx.cache:
        return ctx.cache["plan"]  # type: ignore[no-any-return]
    q_in, q_w, q_out = ctx.in_quant(0), ctx.in_quant(1), ctx.out_quant()
    x = ctx.x(0)
    if ctx.out_dtype().kind == "f" or x.dtype.kind == "f":
        bias = ctx.x(2).astype(np.float64) if ctx.has(2) else None
        plan = _Plan(matrix.astype(np.float32), np.float32, bias, None, None)
    else:
        if q_in is None or q_w is None or q_out is None:
            raise ctx.error("integer tensors without quantization parameters")
        lo, hi = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
        span = max(q_in.zp - lo, hi - q_in.zp)
        exact32 = float(span) * float(np.abs(matrix).sum(axis=0).max(initial=0.0)) < 2.0**24
        dtype = np.float32 if exact32 else np.float64
        bias = ctx.x(2).astype(np.int64) if ctx.has(2) else None
        legacy = x.dtype == np.uint8 and q_w.scale.size == 1
        m, shift = (legacy_multiplier if legacy else channel_multipliers)(q_in.s, q_w, q_out.s, channels)
        out_dtype = ctx.out_dtype()
        act_lo, act_hi = activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), out_dtype)
        fast: FastRequant | Float32Requant | None
        if ctx.rounding == "single":  # the default kernels' (XNNPACK's) float32 requantization
            fast = Float32Requant.build(bias=bias, s_in=q_in.s, s_w=q_w.scale, s_out=q_out.s, channels=channels,
                                        zp=q_out.zp, lo=int(act_lo), hi=int(act_hi), out_dtype=out_dtype,
                                        native=ctx.jit)
        else:
            fast = FastRequant.build(bias=bias, m=m, shift=shift, zp=q_out.zp, lo=int(act_lo), hi=int(act_hi),
                                     rounding=rounding or ctx.rounding, acc_dtype=dtype, out_dtype=out_dtype,
                                     native=ctx.jit)
        plan = _Plan(np.ascontiguousarray(matrix.astype(dtype)), dtype, bias, m, shift, fast)
        if not exact32:
            plan.chunks = _float32_blocks(matrix, span)
            plan.in_dtype = np.float32 if plan.chunks is not None else dtype
    if cacheable:
        ctx.cache["plan"] = plan
    return plan


def _float32_blocks(matrix: np.ndarray, span: int, most: int = 4) -> list[tuple[int, int, np.ndarray]] | None:
    """Split the rows of a [K, C] integer matrix into at most ``most`` consecutive blocks
    whose sums are exact in float32 (``span · max_c Σ_block |w[k, c]| < 2^24``), or None."""
    limit = 2.0**24 / max(span, 1)
    blocks: list[tuple[int, int, np.ndarray]] = []
    start, running = 0, np.zeros(matrix.shape[1])
    for k, row in enumerate(np.abs(matrix)):
        if (running + row).max(initial=0.0) >= limit:
            if k == start:
                return None
            blocks.append((start, k, np.ascontiguousarray(matrix[start:k].astype(np.float32))))
            start, running = k, np.zeros(matrix.shape[1])
        running += row
    blocks.append((start, matrix.shape[0], np.ascontiguousarray(matrix[start:].astype(np.float32))))
    return blocks if len(blocks) <= most else None


def _gemm(plan: _Plan, x: np.ndarray) -> np.ndarray:
    """``x @ weights`` for the shifted input ``x`` [M, K] (``plan.in_dtype``), exact."""
    if plan.chunks is None:
        return x @ plan.weights
    acc = np.zeros((x.shape[0], plan.weights.shape[1]), np.float64)
    for start, stop, block in plan.chunks:
        acc += x[:, start:stop] @ block  # each block product: exact integers in float32
    return acc


def _shifted_input(x: np.ndarray, q_in: Quant | None, dtype: type, out: np.ndarray | None = None) -> np.ndarray:
    """``x − zp_in`` in the compute dtype (exact: 8-bit values), in one pass; into ``out`` if given."""
    if q_in is None or x.dtype.kind == "f":
        if out is None:
            return x.astype(dtype)
        np.copyto(out, x, casting="unsafe")
        return out
    return np.subtract(x, dtype(q_in.zp), dtype=dtype, out=out, casting="unsafe")


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, padding: int
             ) -> tuple[np.ndarray, int, int]:
    """Zero-padded input taps: ``[N, OH, OW, KH·KW, C]``, plus OH, OW."""
    n, h, w, c = x.shape
    oh = output_size(h, kh, sh, dh, padding)
    ow = output_size(w, kw, sw, dw, padding)
    if kh == kw == sh == sw == 1:
        return x.reshape(n, oh, ow, 1, c), oh, ow
    if padding == PAD_SAME:
        pt, _ = padding_before(h, kh, sh, dh, oh)
        pl, _ = padding_before(w, kw, sw, dw, ow)
    else:
        pt = pl = 0
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    xp = np.zeros((n, max(need_h, h + pt), max(need_w, w + pl), c), dtype=x.dtype)
    xp[:, pt:pt + h, pl:pl + w, :] = x
    taps = np.empty((n, oh, ow, kh * kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            taps[:, :, :, i * kw + j, :] = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                                              j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
    return taps, oh, ow


def _finish(ctx: OpContext, acc: np.ndarray, plan: _Plan, rounding: str | None = None) -> np.ndarray:
    """Bias, requantization (integer) or activation (float) of an accumulator."""
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        acc = acc.astype(np.float64)
        if plan.bias is not None:
            acc = acc + plan.bias
        return apply_activation(ctx, acc.astype(np.float32), dtype)
    if plan.fast is not None:
        return plan.fast(acc, dtype)
    q_out = ctx.out_quant()
    assert q_out is not None and plan.m is not None and plan.shift is not None
    iacc = acc.astype(np.int64)  # exact integers (see _plan)
    if plan.bias is not None:
        iacc += plan.bias
    y = multiply_by_quantized_multiplier(iacc, plan.m, plan.shift, rounding or ctx.rounding) + q_out.zp
    return clamp_cast(ctx, y, dtype)


def _geometry(shape: tuple[int, ...], kernel: tuple[int, int, int], sh: int, sw: int, dh: int, dw: int,
              padding: int) -> Geometry:
    """Output size, padding before and padded input size of a convolution over an
    NHWC input of ``shape`` with a (KH, KW, channels) kernel; TF 'SAME' puts the odd
    extra pixel bottom/right."""
    n, h, wd, _ = shape
    kh, kw, channels = kernel
    oh, ow = output_size(h, kh, sh, dh, padding), output_size(wd, kw, sw, dw, padding)
    pt = padding_before(h, kh, sh, dh, oh)[0] if padding == PAD_SAME else 0
    pl = padding_before(wd, kw, sw, dw, ow)[0] if padding == PAD_SAME else 0
    hp = max((oh - 1) * sh + (kh - 1) * dh + 1, h + pt)
    wp = max((ow - 1) * sw + (kw - 1) * dw + 1, wd + pl)
    return Geometry(n, oh, ow, hp, wp, channels, pt, pl, kh, kw, sh, sw, dh, dw)


def _conv_args(ctx: OpContext) -> tuple[int, int, int, int, int]:
    return (int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1)), int(ctx.attr("dilation_h_factor", 1)),
            int(ctx.attr("dilation_w_factor", 1)), int(ctx.attr("padding", 0)))


def _matrix(ctx: OpContext, w: np.ndarray, q_w: Quant | None, shape: tuple[int, int]) -> np.ndarray:
    try:
        return _weights(w, q_w).reshape(shape)
    except ValueError as e:
        raise ctx.error(str(e)) from None


@kernel("CONV_2D")
def conv_2d(ctx: OpContext) -> list[np.ndarray]:
    x, w = ctx.x(0), ctx.x(1)
    q_in, q_w = ctx.in_quant(0), ctx.in_quant(1)
    if x.ndim != 4 or w.ndim != 4:
        raise ctx.error(f"expected 4-D input and OHWI filter, got {x.shape} and {w.shape}")
    o, kh, kw, ci = w.shape
    if ci != x.shape[3]:
        raise ctx.error(f"filter has {ci} input channels, input has {x.shape[3]} (grouped convolution)")
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (o, -1)).T, o)
    sh, sw, dh, dw, padding = _conv_args(ctx)
    if plan.fast is not None and plan.chunks is None and q_in is not None:
        if kh == kw == sh == sw == 1:
            return [compile_runner(ctx, x, pointwise_runner(plan, x, q_in.zp, ctx.out_dtype()))(x)]
        geometry = _geometry(x.shape, (kh, kw, ci), sh, sw, dh, dw, padding)
        return [compile_runner(ctx, x, window_runner(plan, geometry, q_in.zp, ctx.out_dtype()))(x)]
    taps, oh, ow = _windows(_shifted_input(x, q_in, plan.in_dtype), kh, kw, sh, sw, dh, dw, padding)
    acc = _gemm(plan, taps.reshape(-1, kh * kw * ci))
    return [_finish(ctx, acc.reshape(x.shape[0], oh, ow, o), plan)]


@kernel("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(ctx: OpContext) -> list[np.ndarray]:
    x, w = ctx.x(0), ctx.x(1)
    q_in, q_w = ctx.in_quant(0), ctx.in_quant(1)
    if x.ndim != 4 or w.ndim != 4 or w.shape[0] != 1:
        raise ctx.error(f"expected 4-D input and 1HWC filter, got {x.shape} and {w.shape}")
    _, kh, kw, co = w.shape
    ci = x.shape[3]
    if co % ci:
        raise ctx.error(f"{co} output channels is not a multiple of {ci} input channels")
    mult = co // ci
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (kh * kw, co)), co)
    sh, sw, dh, dw, padding = _conv_args(ctx)
    g = _geometry(x.shape, (kh, kw, co), sh, sw, dh, dw, padding)
    n, h, wd, _ = x.shape
    oh, ow, hp, wp, pt, pl = g.oh, g.ow, g.hp, g.wp, g.pt, g.pl
    if plan.fast is not None and q_in is not None:
        return [compile_runner(ctx, x, depthwise_runner(plan, g, q_in.zp, mult, ctx.out_dtype()))(x)]
    xp = np.zeros((n, hp, wp, co), plan.dtype)
    _shifted_input(np.repeat(x, mult, axis=3) if mult > 1 else x, q_in, plan.dtype,
                   xp[:, pt:pt + h, pl:pl + wd, :])  # output channel c·M + m reads input channel c
    acc = np.zeros((n, oh, ow, co), dtype=plan.dtype)
    for i in range(kh):  # one multiply-add per tap: exact (see _plan)
        for j in range(kw):
            acc += xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :] \
                * plan.weights[i * kw + j]
    return [_finish(ctx, acc, plan)]


#: up to this many rows a fully connected layer runs as compiled int8 dot products
#: (its time is reading the weights: int16 there, float32 for BLAS); beyond, BLAS wins
_DENSE_ROWS = 4


@kernel("FULLY_CONNECTED")
def fully_connected(ctx: OpContext) -> list[np.ndarray]:
    x, w = ctx.x(0), ctx.x(1)
    q_in, q_w = ctx.in_quant(0), ctx.in_quant(1)
    if int(ctx.attr("weights_format", 0) or 0) != 0:
        raise ctx.error("shuffled weights format is not implemented")
    if w.ndim != 2:
        raise ctx.error(f"expected a 2-D weight matrix, got {w.shape}")
    units, depth = w.shape
    if x.size % depth:
        raise ctx.error(f"input of {x.size} elements does not split into rows of {depth}")
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (units, depth)).T, units, "single")
    rows = x.size // depth
    if plan.fast is not None and plan.fast.native is not None and rows <= _DENSE_ROWS and q_in is not None:
        acc = _native_dense(ctx, plan, x.reshape(rows, depth), q_in.zp)
    else:
        acc = _gemm(plan, _shifted_input(x.reshape(-1, depth), q_in, plan.in_dtype))
    # LiteRT's reference FULLY_CONNECTED requantizes with one rounding (verified
    # element by element against BUILTIN_REF, int8 per-channel and uint8).
    y = _finish(ctx, acc, plan, "single")
    if ctx.attr("keep_num_dims", False):
        y = y.reshape(*x.shape[:-1], units)
    return [y]



def _native_dense(ctx: OpContext, plan: _Plan, x: np.ndarray, zp_in: int) -> np.ndarray:
    """``(x − zp_in)·W`` as int32 from the compiled dot products (:mod:`.jit`): the raw
    8-bit input against int16 weights [units, depth], ``zp_in·Σ_k W[k, n]`` subtracted
    after (exact integers either way)."""
    weights = ctx.cache.get("dense")
    if weights is None:
        matrix = plan.weights.T.astype(np.int64)  # exact integers, |w − zp_w| ≤ 255
        weights = (np.ascontiguousarray(matrix.astype(np.int16)), matrix.sum(axis=1))
        if "plan" in ctx.cache:  # constant weights (as the plan): keep them for later runs
            ctx.cache["dense"] = weights
    w16, sums = weights
    acc = np.empty((x.shape[0], w16.shape[0]), np.int32)
    kernels().dense(np.ascontiguousarray(x), w16, acc)
    if zp_in:
        acc -= (zp_in * sums).astype(np.int32)
    return acc
