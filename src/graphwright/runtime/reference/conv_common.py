"""What the convolutions share: the quantization arithmetic, the weight plan and the
numpy steps of CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED (:mod:`.conv`,
:mod:`.depthwise_conv`, :mod:`.fully_connected`), TRANSPOSE_CONV and the 3-D
convolutions (:mod:`.transpose_conv`, :mod:`.conv_3d`).

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
the taps.  The 8-bit layers' compiled fast paths (integer GEMM, VNNI, few-row dot
products) are in :mod:`.conv_fast`; int8 weights with float activations in :mod:`.hybrid`.
Float32 convolutions run the same runners, ending in a float32 bias and clamp (depthwise: a
compiled float32 loop); their float32 sums run in BLAS's order, so they match LiteRT's
to rounding, not bit for bit.
Cost: O(N·OH·OW·KH·KW·C·O) arithmetic; memory O(N·OH·OW·KH·KW·C) for the im2col
matrix of the KHxKW convolutions.

16x8 (int16 activations, int8 weights, int64 bias): the same exact sums, requantized as
LiteRT's 16x8 reference kernels do — an int64 accumulator scaled by the int64
``MultiplyByQuantizedMultiplier`` (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV) or, for
FULLY_CONNECTED, by ``round(acc·s_in·s_w/s_out)`` in double; an int32 bias makes the
accumulator int32 (see :func:`requantize`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ._common import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    ACT_RELU_N1_TO_1,
    PAD_SAME,
    PAD_VALID,
    OpContext,
    Quant,
    activation_range,
    apply_activation,
    clamp_cast,
    output_size,
    padding_before,
    round_half_away,
)
from .fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_int64,
    quantize_multipliers,
)
from .prepare import OpCheck
from .requant import FastRequant, Float32Requant
from .runners import Finish, Geometry, float_finish

__all__ = ["accumulator", "channel_multipliers", "channel_scales", "exact_dtype", "legacy_multiplier", "multipliers",
           "requantize"]


def channel_scales(s_in: float, w: Quant, s_out: float, channels: int) -> np.ndarray:
    """Per-output-channel ``M[c] = s_in·s_w[c]/s_out`` in double (scales as float32 promoted
    to double, per-tensor weights broadcast), as TFLite computes them."""
    sw = w.scale.astype(np.float64).reshape(-1)
    if sw.size == 1:
        sw = np.repeat(sw, channels)
    return np.float64(np.float32(s_in)) * sw / np.float64(np.float32(s_out))


def channel_multipliers(s_in: float, w: Quant, s_out: float, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel ``(m, shift)`` of :func:`channel_scales`."""
    return quantize_multipliers(channel_scales(s_in, w, s_out, channels))


def legacy_multiplier(s_in: float, w: Quant, s_out: float, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (legacy) per-tensor ``(m, shift)``: ``M = float32(s_in·s_w) / s_out`` — the
    product is rounded to float32 before the double division, as TFLite does."""
    product = np.float64(np.float32(np.float32(s_in) * np.float32(w.s)))
    m, s = quantize_multipliers(np.array([product / np.float64(np.float32(s_out))]))
    return np.repeat(m, channels), np.repeat(s, channels)


#: TensorType INT32: the quantized_bias_type of 16x8 operators accumulating in int32
_BIAS_INT32 = 2


def accumulator(ctx: OpContext, data: int, bias: int) -> str:
    """The accumulator LiteRT's kernel sums in: ``"int64"`` for 16-bit activations (the
    16x8 kernels) unless their bias (or ``quantized_bias_type`` without one) is int32;
    ``"int32"`` else."""
    if ctx.x(data).dtype != np.int16:
        return "int32"
    if ctx.has(bias):
        return "int32" if ctx.x(bias).dtype == np.int32 else "int64"
    return "int32" if int(ctx.attr("quantized_bias_type", 0) or 0) == _BIAS_INT32 else "int64"


def requantize(ctx: OpContext, acc: np.ndarray, m: np.ndarray, shift: np.ndarray, rounding: str,
               kind: str, real: np.ndarray | None = None) -> np.ndarray:
    """Exact integer sums (bias added, int64) -> the clamped output, as the reference kernels:
    an int32 accumulator wraps and is scaled by the 32-bit ``MultiplyByQuantizedMultiplier``
    (``rounding``), an int64 one (16x8) by the int64 one; with ``real`` (the 16x8 FULLY_CONNECTED)
    the accumulator is scaled in double, ``round(acc·real)`` (halves away from zero); then
    ``+ zp_out`` and the clamp to the fused activation's range."""
    q_out = ctx.out_quant()
    if q_out is None:
        raise ctx.error("a quantized output without quantization parameters")
    if kind == "int32":
        acc = acc.astype(np.int32).astype(np.int64)
    if real is not None:
        y = np.clip(round_half_away(acc.astype(np.float64) * real), INT32_MIN, INT32_MAX).astype(np.int64)
    elif kind == "int64":
        y = multiply_by_quantized_multiplier_int64(acc, m, shift)
    else:
        y = multiply_by_quantized_multiplier(acc, m, shift, rounding)
    return clamp_cast(ctx, y + q_out.zp, ctx.out_dtype())


def multipliers(q_in: Quant, q_w: Quant, q_out: Quant, channels: int,
                legacy: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel ``(m, shift)`` of a convolution: ``legacy`` (uint8 per-tensor) rounds
    ``s_in·s_w`` to float32 first, as LiteRT's GetQuantizedConvolutionMultipler does."""
    return (legacy_multiplier if legacy else channel_multipliers)(q_in.s, q_w, q_out.s, channels)


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

    __slots__ = ("accumulator", "bias", "chunks", "dtype", "fast", "in_dtype", "m", "real", "shift", "tiles",
                 "weights")

    def __init__(self, weights: np.ndarray, dtype: type, bias: np.ndarray | None,
                 m: np.ndarray | None, shift: np.ndarray | None,
                 fast: FastRequant | Float32Requant | None = None) -> None:
        self.weights, self.dtype, self.bias, self.m, self.shift = weights, dtype, bias, m, shift
        self.fast = fast
        #: what the reference kernel accumulates in (see :func:`accumulator`)
        self.accumulator = "int32"
        #: 16x8 FULLY_CONNECTED: the per-channel scales it requantizes with in double
        self.real: np.ndarray | None = None
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


def _plan(ctx: OpContext, matrix: np.ndarray, channels: int, rounding: str | None = None,
          real_scale: bool = False) -> _Plan:
    """Plan from the weights as a [K, channels] float64 matrix (cached when constant);
    ``real_scale``: 16-bit activations requantize in double (see :func:`requantize`).

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
        m, shift = multipliers(q_in, q_w, q_out, channels, x.dtype == np.uint8 and q_w.scale.size == 1)
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
        plan.accumulator = accumulator(ctx, 0, 2)
        if real_scale and x.dtype == np.int16:
            plan.real = channel_scales(q_in.s, q_w, q_out.s, channels)
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


def _gemm(plan: _Plan, x: np.ndarray, columns: slice = slice(None)) -> np.ndarray:
    """``x @ weights[:, columns]`` for the shifted input ``x`` [M, K] (``plan.in_dtype``), exact."""
    if plan.chunks is None:
        return x @ plan.weights[:, columns]
    acc = np.zeros((x.shape[0], plan.weights[:, columns].shape[1]), np.float64)
    for start, stop, block in plan.chunks:
        acc += x[:, start:stop] @ block[:, columns]  # each block product: exact integers in float32
    return acc


def _grouped(taps: np.ndarray, groups: int, channels: int,
             gemm: Callable[[np.ndarray, slice], np.ndarray]) -> np.ndarray:
    """A grouped convolution's sums from its taps ``[M, KH·KW, groups·Ci]``: group ``g`` reads
    input channels ``[g·Ci, (g+1)·Ci)`` and writes output channels ``[g·Og, (g+1)·Og)`` (as
    LiteRT's reference kernels, the only ones that run groups); ``gemm(x, columns)``."""
    m, window, depth = taps.shape
    parts = taps.reshape(m, window, groups, depth // groups)
    share = channels // groups
    return np.concatenate([gemm(np.ascontiguousarray(parts[:, :, g, :]).reshape(m, -1), slice(g * share, (g + 1) * share))
                           for g in range(groups)], axis=1)


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
    assert plan.m is not None and plan.shift is not None
    iacc = acc.astype(np.int64)  # exact integers (see _plan)
    if plan.bias is not None:
        iacc += plan.bias
    return requantize(ctx, iacc, plan.m, plan.shift, rounding or ctx.rounding, plan.accumulator, plan.real)


def _float_finish(ctx: OpContext, plan: _Plan) -> Finish | None:
    """The in-place bias and clamp ending a float32 convolution's runner (:func:`.runners.float_finish`),
    or None where the kernel's own path runs: other dtypes, TANH/SIGN_BIT activations."""
    act = int(ctx.attr("fused_activation_function", 0) or 0)
    if ctx.x(0).dtype != np.float32 or ctx.out_dtype() != np.float32 or plan.dtype != np.float32 \
            or act not in _FLOAT_CLAMPS:
        return None
    return float_finish(plan.bias, *activation_range(ctx, act, ctx.out_dtype()), plan.weights.shape[-1], ctx.jit)


#: the fused activations that are a clamp
_FLOAT_CLAMPS = frozenset({ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6})


def _ending(ctx: OpContext, plan: _Plan) -> tuple[Finish, int | None] | None:
    """How a convolution runner (:mod:`.runners`) ends and the input zero point it shifts by:
    the fast requantization (8-bit sums exact in one float GEMM), the float bias and clamp
    (zero point None: the float input read as it is), or None for the kernel's own path."""
    q_in = ctx.in_quant(0)
    if plan.fast is not None and plan.chunks is None and q_in is not None:
        return functools.partial(plan.fast, out_dtype=ctx.out_dtype()), q_in.zp
    finish = _float_finish(ctx, plan)
    return None if finish is None else (finish, None)


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


def exact_dtype(bound: float) -> type:
    """float32 for integer sums whose magnitudes stay below ``bound`` < 2^24 (exact there, and
    BLAS runs it many times faster), else float64 (exact below 2^53)."""
    return np.float32 if bound < 2.0**24 else np.float64


# -- the attributes of the transposed and 3-D convolutions (kernels and prepare checks) --------------


def _strides_3d(ctx: OpContext) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return ((int(ctx.attr("stride_d", 1)), int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1))),
            (int(ctx.attr("dilation_d_factor", 1)), int(ctx.attr("dilation_h_factor", 1)),
             int(ctx.attr("dilation_w_factor", 1))))


def _geometry_attrs(op: OpCheck, rank: int) -> tuple[list[int], list[int], int]:
    """(strides, dilations, padding) of a 2-D (H, W) or 3-D (D, H, W) convolution, refusing bad ones."""
    op.int_attr("fused_activation_function", 0, 0, 5)
    axes = ("d", "h", "w")[3 - rank:]
    strides = [op.int_attr(f"stride_{a}", 1, 1) for a in axes]
    dilations = [op.int_attr(f"dilation_{a}_factor", 1, 1) for a in axes] if rank == 3 else [1] * rank
    padding = op.int_attr("padding", PAD_SAME)
    if padding not in (PAD_SAME, PAD_VALID):
        raise op.fail(f"padding {padding} is neither SAME (0) nor VALID (1)")
    return strides, dilations, padding


def _bias_count(op: OpCheck, i: int, channels: int) -> None:
    bias = op.shape(i) if op.has(i) else None
    if bias is not None and math.prod(bias) != channels:
        raise op.fail(f"bias of shape {list(bias)} does not have {channels} values")
