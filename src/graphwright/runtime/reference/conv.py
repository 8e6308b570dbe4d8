"""CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV, float and integer
(8-bit and 16x8), and CONV_3D, CONV_3D_TRANSPOSE (float, as LiteRT has them).

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
depthwise convolution are one compiled pass each, and the 8-bit CONV_2D and
FULLY_CONNECTED layers with constant weights and int32 accumulators sum on
onnxruntime's integer GEMM (:mod:`._gemm`: exact int32 sums, 3–4x faster than the
float32 BLAS GEMM; a KHxKW convolution's im2col matrix made in uint8) — or, int8 on a CPU with
AVX512-VNNI, on the compiled GEMM with the requantization fused (:class:`._gemm.VnniGemm`); without
onnxruntime, fully connected layers of at most ``_DENSE_ROWS`` rows are 8-bit dot
products and the rest stays on BLAS.  Float32
convolutions run the same runners, ending in a float32 bias and clamp (depthwise: a
compiled float32 loop); their float32 sums run in BLAS's order, so they match LiteRT's
to rounding, not bit for bit.
Cost: O(N·OH·OW·KH·KW·C·O) arithmetic; memory O(N·OH·OW·KH·KW·C) for the im2col
matrix of the KHxKW convolutions.

16x8 (int16 activations, int8 weights, int64 bias): the same exact sums, requantized as
LiteRT's 16x8 reference kernels do — an int64 accumulator scaled by the int64
``MultiplyByQuantizedMultiplier`` (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV) or, for
FULLY_CONNECTED, by ``round(acc·s_in·s_w/s_out)`` in double; an int32 bias makes the
accumulator int32 (see :func:`requantize`).  Transposed convolutions multiply every input
position by every tap in one GEMM and scatter-add the products (:func:`_scatter`); a
FULLY_CONNECTED with int8 weights and float activations quantizes its input rows at run
time as LiteRT's hybrid kernel (:func:`_hybrid_dense`).
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
    kernel,
    output_size,
    padding_before,
    round_half_away,
)
from ._gemm import IntegerGemm, VnniGemm, unsigned
from .fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_int64,
    quantize_multipliers,
)
from .jit import kernels
from .prepare import OpCheck, Shape, check_size, prepare_rule
from .requant import FastRequant, Float32Requant
from .runners import (
    Finish,
    Geometry,
    Runner,
    compile_runner,
    depthwise_runner,
    float_depthwise_runner,
    float_finish,
    integer_pointwise_runner,
    integer_window_runner,
    pointwise_runner,
    window_runner,
)


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


def _integer_gemm(ctx: OpContext, plan: _Plan, x: np.ndarray) -> IntegerGemm | None:
    """The exact integer GEMM (:mod:`._gemm`) of an 8-bit layer with constant weights, an int32
    accumulator and a compiled requantization, built once (None where it does not apply)."""
    if not ctx.jit or "plan" not in ctx.cache or plan.fast is None or plan.fast.native is None \
            or plan.accumulator != "int32" or x.dtype not in _BYTES:
        return None
    gemm = ctx.cache.get("gemm", False)
    if gemm is False:
        q_in = ctx.in_quant(0)
        gemm = ctx.cache["gemm"] = None if q_in is None else IntegerGemm.build(plan.weights, q_in.zp, x.dtype)
    return gemm  # type: ignore[return-value]


def _vnni_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, channels: int) -> Runner | None:
    """A 1x1 stride-1 convolution of int8 ``x`` with constant weights as the compiled VNNI GEMM with the
    requantization fused (:class:`._gemm.VnniGemm`: the int32 sums stay in cache, no unsigned copy of the
    input, no onnxruntime call), or None where it does not apply (no AVX512-VNNI, K not a multiple of 4,
    weights beyond int8, the XNNPACK-style float32 requantization of single rounding, ...)."""
    if not ctx.jit or "plan" not in ctx.cache or not isinstance(plan.fast, FastRequant) or plan.fast.native is None \
            or plan.accumulator != "int32" or x.dtype != np.int8 or plan.chunks is not None:
        return None
    vnni = ctx.cache.get("vnni", False)
    if vnni is False:
        q_in = ctx.in_quant(0)
        vnni = ctx.cache["vnni"] = None if q_in is None else VnniGemm.build(
            np.asarray(plan.weights, np.float64), q_in.zp, plan.fast.native[1])
    if vnni is None:
        return None
    depth, out_dtype = x.shape[3], ctx.out_dtype()
    rows, out_shape = x.size // depth, (*x.shape[:3], channels)

    def run(v: np.ndarray) -> np.ndarray:
        y = np.empty(out_shape, out_dtype)
        vnni(np.ascontiguousarray(v).reshape(rows, depth), y.reshape(rows, channels))  # type: ignore[misc]
        return y

    return run


def _vnni_window_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, g: Geometry, channels: int) -> Runner | None:
    """A KHxKW int8 convolution as an int8 im2col matrix (one compiled pass; padded taps hold ``zp_in``,
    so they add 0) whose rows are padded to a multiple of 4 bytes, then the fused VNNI GEMM
    (:func:`_vnni_runner`'s; the padding columns have zero weights).  None where it does not apply."""
    if not ctx.jit or "plan" not in ctx.cache or not isinstance(plan.fast, FastRequant) or plan.fast.native is None \
            or plan.accumulator != "int32" or x.dtype != np.int8 or plan.chunks is not None:
        return None
    q_in = ctx.in_quant(0)
    span = g.kh * g.kw * g.co
    depth = (span + 3) // 4 * 4
    vnni = ctx.cache.get("vnni", False)
    if vnni is False:
        matrix = np.zeros((depth, channels))
        matrix[:span] = plan.weights
        vnni = ctx.cache["vnni"] = None if q_in is None else VnniGemm.build(matrix, q_in.zp, plan.fast.native[1])
    if vnni is None or q_in is None:
        return None
    im2col, rows = kernels().im2col_rows, g.n * g.oh * g.ow
    matrix_rows = np.zeros((rows, depth), np.int8)  # the padding columns stay 0 (their weights are 0)
    pad, out_dtype, out_shape = np.int8(q_in.zp), ctx.out_dtype(), (g.n, g.oh, g.ow, channels)

    def run(v: np.ndarray) -> np.ndarray:
        im2col(np.ascontiguousarray(v), g.kh, g.kw, pad, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.oh, g.ow, matrix_rows)
        y = np.empty(out_shape, out_dtype)
        vnni(matrix_rows, y.reshape(rows, channels))  # type: ignore[misc]
        return y

    return run


#: the activation dtypes the integer GEMM reads
_BYTES = (np.dtype(np.int8), np.dtype(np.uint8))


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


@kernel("CONV_2D", int16=True)
def conv_2d(ctx: OpContext) -> list[np.ndarray]:
    x, w = ctx.x(0), ctx.x(1)
    q_in, q_w = ctx.in_quant(0), ctx.in_quant(1)
    if x.ndim != 4 or w.ndim != 4:
        raise ctx.error(f"expected 4-D input and OHWI filter, got {x.shape} and {w.shape}")
    o, kh, kw, ci = w.shape
    groups = x.shape[3] // ci if ci else 0
    if not groups or groups * ci != x.shape[3] or o % groups:
        raise ctx.error(f"filter {list(w.shape)} does not divide input {list(x.shape)} into groups")
    if x.dtype.kind == "f" and w.dtype == np.int8:
        return [_hybrid_conv(ctx, w, depthwise=False)]
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (o, -1)).T, o)
    sh, sw, dh, dw, padding = _conv_args(ctx)
    if groups > 1:
        taps, oh, ow = _windows(_shifted_input(x, q_in, plan.in_dtype), kh, kw, sh, sw, dh, dw, padding)
        acc = _grouped(taps.reshape(-1, kh * kw, x.shape[3]), groups, o, lambda t, c: _gemm(plan, t, c))
        return [_finish(ctx, acc.reshape(x.shape[0], oh, ow, o), plan)]
    if kh == kw == sh == sw == 1 and x.size // max(x.shape[3], 1) > _DENSE_ROWS:
        fused = _vnni_runner(ctx, plan, x, o)
        if fused is not None:
            return [compile_runner(ctx, x, fused)(x)]
    elif not (kh == kw == sh == sw == 1):
        fused = _vnni_window_runner(ctx, plan, x, _geometry(x.shape, (kh, kw, ci), sh, sw, dh, dw, padding), o)
        if fused is not None:
            return [compile_runner(ctx, x, fused)(x)]
    gemm = _integer_gemm(ctx, plan, x)
    if gemm is not None:
        finish = functools.partial(plan.fast, out_dtype=ctx.out_dtype())
        if kh == kw == sh == sw == 1:
            few = x.size // x.shape[3] <= _DENSE_ROWS and q_in is not None
            runner = _dense_runner(ctx, plan, x, q_in.zp, finish) if few else None  # type: ignore[union-attr]
            return [compile_runner(ctx, x, runner or integer_pointwise_runner(gemm, x, o, finish))(x)]
        geometry = _geometry(x.shape, (kh, kw, ci), sh, sw, dh, dw, padding)
        return [compile_runner(ctx, x, integer_window_runner(gemm, geometry, o, finish))(x)]
    ending = _ending(ctx, plan)
    if ending is not None:
        finish, zp_in = ending
        if kh == kw == sh == sw == 1:
            return [compile_runner(ctx, x, pointwise_runner(plan, x, zp_in, finish))(x)]
        geometry = _geometry(x.shape, (kh, kw, ci), sh, sw, dh, dw, padding)
        return [compile_runner(ctx, x, window_runner(plan, geometry, zp_in or 0, finish, ctx.jit))(x)]
    taps, oh, ow = _windows(_shifted_input(x, q_in, plan.in_dtype), kh, kw, sh, sw, dh, dw, padding)
    acc = _gemm(plan, taps.reshape(-1, kh * kw * ci))
    return [_finish(ctx, acc.reshape(x.shape[0], oh, ow, o), plan)]


@kernel("DEPTHWISE_CONV_2D", int16=True)
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
    if x.dtype.kind == "f" and w.dtype == np.int8:
        return [_hybrid_conv(ctx, w, depthwise=True)]
    if x.dtype == np.int16 and ctx.has(2) and ctx.x(2).dtype != np.int64:
        raise ctx.error(f"a 16x8 depthwise convolution needs an int64 bias, not {ctx.x(2).dtype} (as LiteRT's)")
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (kh * kw, co)), co)
    sh, sw, dh, dw, padding = _conv_args(ctx)
    g = _geometry(x.shape, (kh, kw, co), sh, sw, dh, dw, padding)
    n, h, wd, _ = x.shape
    oh, ow, hp, wp, pt, pl = g.oh, g.ow, g.hp, g.wp, g.pt, g.pl
    if plan.fast is not None and q_in is not None:
        return [compile_runner(ctx, x, depthwise_runner(plan, g, q_in.zp, mult, ctx.out_dtype()))(x)]
    if ctx.jit and _float_finish(ctx, plan) is not None:
        lo, hi = activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), ctx.out_dtype())
        return [compile_runner(ctx, x, float_depthwise_runner(plan, g, mult, plan.bias, lo, hi))(x)]
    xp = np.zeros((n, hp, wp, co), plan.dtype)
    _shifted_input(np.repeat(x, mult, axis=3) if mult > 1 else x, q_in, plan.dtype,
                   xp[:, pt:pt + h, pl:pl + wd, :])  # output channel c·M + m reads input channel c
    acc = np.zeros((n, oh, ow, co), dtype=plan.dtype)
    for i in range(kh):  # one multiply-add per tap: exact (see _plan)
        for j in range(kw):
            acc += xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :] \
                * plan.weights[i * kw + j]
    return [_finish(ctx, acc, plan)]


#: up to this many rows a fully connected layer runs as compiled 8-bit dot products
#: (its time is reading the weights: int8 there, float32 for BLAS); beyond, the GEMMs win
_DENSE_ROWS = 4


@kernel("FULLY_CONNECTED", int16=True)
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
    if x.dtype.kind == "f" and w.dtype == np.int8:
        y = _hybrid_dense(ctx, x.reshape(-1, depth), w)
        return [y.reshape(*x.shape[:-1], units) if ctx.attr("keep_num_dims", False) else y]
    # LiteRT's reference FULLY_CONNECTED requantizes 8-bit outputs with one rounding (verified
    # element by element against BUILTIN_REF, int8 per-channel and uint8), 16x8 ones in double;
    # TFLM's as the convolutions (ctx.rounding; 16x8: the int64 MultiplyByQuantizedMultiplier).
    litert = ctx.flavor == "litert"
    rounding = "single" if litert else None
    plan = ctx.cache.get("plan") or _plan(ctx, _matrix(ctx, w, q_w, (units, depth)).T, units, rounding,
                                                real_scale=litert)
    rows = x.size // depth
    if ctx.jit and rows <= _DENSE_ROWS:
        runner = _dense_layer(ctx, plan, x, rows, rounding)
        if runner is not None:
            return [compile_runner(ctx, x, runner)(x)]
    gemm = _integer_gemm(ctx, plan, x)
    if gemm is not None:
        scratch = ctx.cache.get("rows")
        if scratch is None or scratch.shape != (rows, depth):
            scratch = ctx.cache["rows"] = np.empty((rows, depth), np.uint8)
        acc = gemm(unsigned(x.reshape(rows, depth), scratch))
    elif plan.fast is not None and plan.fast.native is not None and rows <= _DENSE_ROWS and q_in is not None:
        acc = _native_dense(ctx, plan, x.reshape(rows, depth), q_in.zp)
    else:
        acc = _gemm(plan, _shifted_input(x.reshape(-1, depth), q_in, plan.in_dtype))
    y = _finish(ctx, acc, plan, rounding)
    if ctx.attr("keep_num_dims", False):
        y = y.reshape(*x.shape[:-1], units)
    return [y]



def _dense_weights(ctx: OpContext, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """The weights [units, depth] of :func:`_native_dense` and their per-unit sums: int8 where
    every ``w − zp_w`` fits (half the bytes to read: a layer's time is reading its weights), else int16."""
    weights = ctx.cache.get("dense")
    if weights is None:
        matrix = plan.weights.T.astype(np.int64)  # exact integers, |w − zp_w| ≤ 255
        narrow = np.int8 if matrix.size and matrix.min() >= -128 and matrix.max() <= 127 else np.int16
        weights = (np.ascontiguousarray(matrix.astype(narrow)), matrix.sum(axis=1))
        if "plan" in ctx.cache:  # constant weights (as the plan): keep them for later runs
            ctx.cache["dense"] = weights
    return weights  # type: ignore[no-any-return]


def _dense_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, zp_in: int, finish: Finish) -> Runner | None:
    """A 1x1 convolution of a few 8-bit pixels (squeeze-and-excite's [1, 1, 1, C]) as the compiled
    dot products of :func:`_native_dense`, then ``finish``: no onnxruntime call, whose fixed cost
    (~25 µs inside a model's run) is most of such a layer's time.  None where a raw sum
    ``Σ_k x·w`` could leave int32 (|x| ≤ 255) — then the GEMM runs."""
    w16, sums = _dense_weights(ctx, plan)
    if not _dense_fits(w16):
        return None
    dense, units = kernels().dense, w16.shape[0]
    rows = (x.size // x.shape[-1], x.shape[-1])
    out_shape, offset = (*x.shape[:-1], units), (np.int64(zp_in) * sums).astype(np.int32)

    def run(x: np.ndarray) -> np.ndarray:
        acc = np.empty((rows[0], units), np.int32)
        dense(np.ascontiguousarray(x).reshape(rows), w16, acc)
        acc -= offset
        return finish(acc.reshape(out_shape))

    return run


def _dense_fits(weights: np.ndarray) -> bool:
    """No raw sum ``Σ_k x·w`` of 8-bit ``x`` (|x| ≤ 255) can leave int32."""
    return 255.0 * float(np.abs(weights.astype(np.int64)).sum(axis=1).max(initial=0)) < 2.0**31


def _dense_layer(ctx: OpContext, plan: _Plan, x: np.ndarray, rows: int, rounding: str | None) -> Runner | None:
    """A FULLY_CONNECTED of at most :data:`_DENSE_ROWS` 8-bit rows with constant weights as the compiled
    dot products (:func:`_native_dense`; int8 weights read at memory speed — a 1280x1000 classifier
    ~90 µs with its weights out of cache, where onnxruntime's call took ~160 µs in a model's run), then
    the requantization; kept as the operator's runner.  None where it does not apply."""
    q_in = ctx.in_quant(0)
    if "plan" not in ctx.cache or plan.fast is None or plan.fast.native is None or rows > _DENSE_ROWS \
            or q_in is None or x.dtype not in _BYTES or plan.accumulator != "int32" or plan.real is not None:
        return None
    weights, sums = _dense_weights(ctx, plan)
    if weights.dtype != np.int8 or not _dense_fits(weights):
        return None
    dense, units, depth = kernels().dense, weights.shape[0], weights.shape[1]
    offset, finish, out_dtype = (np.int64(q_in.zp) * sums).astype(np.int32), plan.fast, ctx.out_dtype()
    shape = (*x.shape[:-1], units) if ctx.attr("keep_num_dims", False) else (rows, units)

    def run(v: np.ndarray) -> np.ndarray:
        acc = np.empty((rows, units), np.int32)
        dense(np.ascontiguousarray(v).reshape(rows, depth), weights, acc)
        acc -= offset
        return finish(acc, out_dtype).reshape(shape)

    return run


def _native_dense(ctx: OpContext, plan: _Plan, x: np.ndarray, zp_in: int) -> np.ndarray:
    """``(x − zp_in)·W`` as int32 from the compiled dot products (:mod:`.jit`): the raw
    8-bit input against int16 weights [units, depth], ``zp_in·Σ_k W[k, n]`` subtracted
    after (exact integers either way)."""
    w16, sums = _dense_weights(ctx, plan)
    acc = np.empty((x.shape[0], w16.shape[0]), np.int32)
    kernels().dense(np.ascontiguousarray(x), w16, acc)
    if zp_in:
        acc -= (zp_in * sums).astype(np.int32)
    return acc


# -- transposed and 3-D convolutions ------------------------------------------------------------------


def _same_pads(out: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
               padding: int) -> tuple[int, ...]:
    """Padding before each spatial dim of a transposed convolution, as LiteRT computes it: the
    padding of the forward convolution of the *output* size (the odd pixel goes after)."""
    return tuple(padding_before(o, k, s, d, output_size(o, k, s, d, padding))[0]
                 for o, k, s, d in zip(out, kernel, strides, dilations, strict=True))


def _scatter(products: np.ndarray, kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
             pads: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray:
    """Transposed convolution sums from ``products`` ``[N, *in, *kernel, O]`` (each input
    position times each tap): tap ``t`` of input ``i`` lands on ``i·stride − pad + t·dilation``;
    taps outside the output are dropped, as the reference kernels' bounds check does."""
    n, rank = products.shape[0], len(kernel)
    spatial = products.shape[1:1 + rank]
    canvas = [max((i - 1) * s + (k - 1) * d + 1, p + o)
              for i, k, s, d, p, o in zip(spatial, kernel, strides, dilations, pads, out, strict=True)]
    acc = np.zeros((n, *canvas, products.shape[-1]), products.dtype)
    for tap in np.ndindex(*kernel):
        at = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                   for t, d, i, s in zip(tap, dilations, spatial, strides, strict=True))
        acc[(slice(None), *at)] += products[(slice(None),) * (1 + rank) + tap]
    return acc[(slice(None), *(slice(p, p + o) for p, o in zip(pads, out, strict=True)))]


def exact_dtype(bound: float) -> type:
    """float32 for integer sums whose magnitudes stay below ``bound`` < 2^24 (exact there, and
    BLAS runs it many times faster), else float64 (exact below 2^53)."""
    return np.float32 if bound < 2.0**24 else np.float64


def _tap_matrix(ctx: OpContext, taps: np.ndarray, q_w: Quant | None, x_dtype: np.dtype) -> np.ndarray:
    """Weights ``[*kernel, O, I]`` as the ``[I, taps·O]`` GEMM operand: float32 for float
    activations (LiteRT's kernels sum in float32 too) and wherever every output sum is exact
    there (``max|x − zp_in| · Σ_{taps, I} |w[c]| < 2^24``), else float64 (exact below 2^53)."""
    matrix = _matrix(ctx, taps, q_w, (-1, taps.shape[-1]))  # [taps·O, I], weight zero point removed
    if x_dtype.kind == "f":
        span = 255 if taps.dtype.kind in "iu" else None  # hybrid: the input quantized to int8 at run time
    else:
        span = int(np.iinfo(x_dtype).max) - int(np.iinfo(x_dtype).min)
    per_channel = np.abs(matrix).reshape(-1, taps.shape[-2], taps.shape[-1]).sum(axis=(0, 2))
    dtype = np.float32 if span is None else exact_dtype(span * float(per_channel.max(initial=0.0)))
    return np.ascontiguousarray(matrix.T.astype(dtype))


def _transposed(ctx: OpContext, taps: np.ndarray, kernel: tuple[int, ...], strides: tuple[int, ...],
                dilations: tuple[int, ...]) -> np.ndarray:
    """A transposed convolution (TRANSPOSE_CONV, CONV_3D_TRANSPOSE): output shape from input 0,
    weights ``taps`` as ``[*kernel, O, I]``, data input 2, optional bias input 3.

    Float: float32 sums (as LiteRT's), bias, fused activation.  Hybrid (int8 weights, float activations): as
    LiteRT's, the input quantized per batch item (:func:`_hybrid_input`).  Integer (as LiteRT's reference kernels): exact
    sums of ``(x − zp_in)·(w − zp_w)``, bias, requantized per output channel (int64 sums for
    16-bit activations)."""
    x, out_shape = ctx.x(2), tuple(int(v) for v in ctx.x(0).reshape(-1))
    rank = len(kernel)
    channels, depth = taps.shape[-2], taps.shape[-1]
    if x.ndim != rank + 2 or len(out_shape) != rank + 2 or x.shape[-1] != depth \
            or out_shape[0] != x.shape[0] or out_shape[-1] != channels:
        raise ctx.error(f"input {list(x.shape)}, weights {list(taps.shape)} and output shape {list(out_shape)} "
                        "do not fit together")
    q_in, q_w = ctx.in_quant(2), ctx.in_quant(1)
    integer = ctx.out_dtype().kind != "f"
    hybrid = not integer and taps.dtype == np.int8
    if integer and (q_in is None or q_w is None or ctx.out_quant() is None):
        raise ctx.error("integer tensors without quantization parameters")
    matrix = ctx.cache.get("taps")
    if matrix is None:
        matrix = _tap_matrix(ctx, taps, q_w if integer else None, x.dtype)
        if ctx.in_value(1).const is not None:
            ctx.cache["taps"] = matrix
    if hybrid:
        shifted, factor = _hybrid_input(ctx, 2)
        shifted = shifted.astype(matrix.dtype)
    else:
        shifted = _shifted_input(x, q_in if integer else None, matrix.dtype.type)
    products = (shifted.reshape(-1, depth) @ matrix).reshape(*x.shape[:-1], *kernel, channels)
    pads = _same_pads(out_shape[1:-1], kernel, strides, dilations, int(ctx.attr("padding", PAD_SAME)))
    acc = _scatter(products, kernel, strides, dilations, pads, out_shape[1:-1])
    if hybrid:
        return _hybrid_output(ctx, np.rint(acc), factor, 3)
    if not integer:
        if ctx.has(3):
            acc = acc + ctx.x(3).astype(np.float64)
        return apply_activation(ctx, acc.astype(np.float32), ctx.out_dtype())
    assert q_in is not None and q_w is not None
    params = ctx.cache.get("multipliers")
    if params is None:
        q_out = ctx.out_quant()
        assert q_out is not None
        params = ctx.cache["multipliers"] = multipliers(q_in, q_w, q_out, channels,
                                                        x.dtype == np.uint8 and q_w.scale.size == 1)
    iacc = np.rint(acc).astype(np.int64)  # exact integers below 2^53
    if ctx.has(3):
        iacc += ctx.x(3).astype(np.int64)
    return requantize(ctx, iacc, *params, ctx.rounding, accumulator(ctx, 2, 3))


@kernel("TRANSPOSE_CONV", int16=True)
def transpose_conv(ctx: OpContext) -> list[np.ndarray]:
    """TRANSPOSE_CONV (inputs: output shape, OHWI weights, NHWC input, optional bias)."""
    w = ctx.x(1)
    if w.ndim != 4:
        raise ctx.error(f"expected OHWI weights, got {list(w.shape)}")
    strides = (int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1)))
    return [_transposed(ctx, w.transpose(1, 2, 0, 3), w.shape[1:3], strides, (1, 1))]


def _strides_3d(ctx: OpContext) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return ((int(ctx.attr("stride_d", 1)), int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1))),
            (int(ctx.attr("dilation_d_factor", 1)), int(ctx.attr("dilation_h_factor", 1)),
             int(ctx.attr("dilation_w_factor", 1))))


@kernel("CONV_3D_TRANSPOSE")
def conv_3d_transpose(ctx: OpContext) -> list[np.ndarray]:
    """CONV_3D_TRANSPOSE (inputs: output shape, [KD, KH, KW, O, I] weights, NDHWC input,
    optional bias), float as LiteRT's reference kernel."""
    w = ctx.x(1)
    if w.ndim != 5:
        raise ctx.error(f"expected [KD, KH, KW, O, I] weights, got {list(w.shape)}")
    if ctx.out_dtype().kind != "f":
        raise ctx.error("only float32 is implemented (as LiteRT's reference kernel)")
    strides, dilations = _strides_3d(ctx)
    return [_transposed(ctx, w, w.shape[:3], strides, dilations)]


@kernel("CONV_3D")
def conv_3d(ctx: OpContext) -> list[np.ndarray]:
    """CONV_3D (NDHWC input, [KD, KH, KW, I, O] weights, optional bias), float as LiteRT's
    reference kernel: zero padding, one im2col GEMM (float32, as LiteRT sums), bias, fused activation."""
    x, w = ctx.x(0), ctx.x(1)
    if ctx.out_dtype().kind != "f" or x.dtype.kind != "f":
        raise ctx.error("only float32 is implemented (as LiteRT's reference kernel)")
    if x.ndim != 5 or w.ndim != 5 or w.shape[3] != x.shape[4]:
        raise ctx.error(f"input {list(x.shape)} and [KD, KH, KW, I, O] weights {list(w.shape)} do not fit")
    strides, dilations = _strides_3d(ctx)
    padding = int(ctx.attr("padding", PAD_SAME))
    kernel_size = w.shape[:3]
    spatial = x.shape[1:4]
    out = tuple(output_size(i, k, s, d, padding)
                for i, k, s, d in zip(spatial, kernel_size, strides, dilations, strict=True))
    pads = [padding_before(i, k, s, d, o)[0] if padding == PAD_SAME else 0
            for i, k, s, d, o in zip(spatial, kernel_size, strides, dilations, out, strict=True)]
    canvas = [max((o - 1) * s + (k - 1) * d + 1, i + p)
              for o, s, k, d, i, p in zip(out, strides, kernel_size, dilations, spatial, pads, strict=True)]
    xp = np.zeros((x.shape[0], *canvas, x.shape[4]), np.float32)
    xp[(slice(None), *(slice(p, p + i) for p, i in zip(pads, spatial, strict=True)))] = x
    columns = np.empty((x.shape[0], *out, int(np.prod(kernel_size)), x.shape[4]), np.float32)
    for t, tap in enumerate(np.ndindex(*kernel_size)):
        columns[:, :, :, :, t] = xp[(slice(None), *(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s
                                                     in zip(tap, dilations, out, strides, strict=True)))]
    acc = columns.reshape(-1, columns.shape[-2] * columns.shape[-1]) @ w.reshape(-1, w.shape[4]).astype(np.float32)
    if ctx.has(2):
        acc += ctx.x(2).astype(np.float32)
    return [apply_activation(ctx, acc.reshape(x.shape[0], *out, w.shape[4]), ctx.out_dtype())]


# -- prepare checks of the transposed and 3-D convolutions --------------------------------------------


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


def _transposed_rule(op: OpCheck, layout: str) -> list[Shape]:
    """TRANSPOSE_CONV (``layout`` "OHWI") / CONV_3D_TRANSPOSE ("DHWOI"): shapes from the output-shape input."""
    for i, what in enumerate(("output shape", "weights", "input")):
        op.need(i, what)
    rank = len(layout) - 2
    strides, dilations, padding = _geometry_attrs(op, rank)
    w, x, out = op.rank(1, rank + 2), op.rank(2, rank + 2), op.ints(0, "output shape")
    if w is None:
        return [None]
    channels, depth = (w[0], w[3]) if layout == "OHWI" else (w[3], w[4])
    kernel_size = w[1:3] if layout == "OHWI" else w[:3]
    _bias_count(op, 3, channels)
    if x is None or out is None:
        return [None]
    if len(out) != rank + 2 or any(d < 1 for d in out) or out[0] != x[0] or out[-1] != channels \
            or x[-1] != depth:
        raise op.fail(f"output shape {out}, weights {list(w)} and input {list(x)} do not fit together")
    if rank == 3:  # LiteRT's Prepare: the forward convolution of the output must give the input
        forward = [output_size(o, k, s, d, padding)
                   for o, k, s, d in zip(out[1:-1], kernel_size, strides, dilations, strict=True)]
        if forward != list(x[1:-1]):
            raise op.fail(f"output shape {out} does not give back the input {list(x)} under strides {strides}")
    check_size("its tap products", (*x[:-1], math.prod(kernel_size), channels), 8, op.too_large)
    return [tuple(out)]


@prepare_rule("TRANSPOSE_CONV", arity=(3, 4))
def _transpose_conv_rule(op: OpCheck) -> list[Shape]:
    return _transposed_rule(op, "OHWI")


@prepare_rule("CONV_3D_TRANSPOSE", arity=(3, 4))
def _conv_3d_transpose_rule(op: OpCheck) -> list[Shape]:
    return _transposed_rule(op, "DHWOI")


@prepare_rule("CONV_3D", arity=(2, 3))
def _conv_3d_rule(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "filter")
    strides, dilations, padding = _geometry_attrs(op, 3)
    x, w = op.rank(0, 5), op.rank(1, 5)
    if w is not None:
        _bias_count(op, 2, w[4])
    if x is None or w is None:
        return [None]
    if w[3] != x[4]:
        raise op.fail(f"filter {list(w)} has {w[3]} input channels, the input {list(x)} has {x[4]}")
    out = [output_size(i, k, s, d, padding) for i, k, s, d in zip(x[1:4], w[:3], strides, dilations, strict=True)]
    if any(o < 1 for o in out):
        raise op.fail(f"its {w[0]}x{w[1]}x{w[2]} window does not fit the input {list(x)}")
    check_size("its im2col buffer", (x[0], *out, w[0] * w[1] * w[2], x[4]), 8, op.too_large)
    return [(x[0], *out, w[4])]


def quantized_rows(x: np.ndarray, asymmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of float32 ``x`` [rows, n] quantized to int8 as LiteRT's hybrid kernels do at
    run time: ``(q, scaling factor (float32), offset)`` per row.

    Asymmetric: ``[min(0, lo), max(0, hi)]`` onto [-128, 127],
    the scale and zero point in double (the zero point from whichever end errs less, rounded,
    clamped), then ``q = round(zp + x·float32(1/scale))`` in float32.  Symmetric: ``scale =
    max|x| / 127``, ``q = round(x·(127 / max|x|))`` clamped to ±127, offset 0.  An all-zero row
    quantizes to zeros with scale 1."""
    if asymmetric:
        lo = np.minimum(0.0, x.min(axis=1)).astype(np.float64)
        hi = np.maximum(0.0, x.max(axis=1)).astype(np.float64)
        flat = lo == hi
        scale = np.where(flat, 1.0, (hi - lo) / 255.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            from_min, from_max = -128.0 - lo / scale, 127.0 - hi / scale
            use_min = 128.0 + np.abs(lo / scale) < 127.0 + np.abs(hi / scale)
        zp_real = np.where(use_min, from_min, from_max)
        offset = np.where(zp_real <= -128.0, -128, np.where(zp_real >= 127.0, 127,
                                                             round_half_away(zp_real).astype(np.int64)))
        offset = np.where(flat, 0, offset).astype(np.int64)
        factor = scale.astype(np.float32)
        inverse = np.float32(1.0) / factor
        q = round_half_away(offset[:, None].astype(np.float32) + x * inverse[:, None])
        q = np.clip(q, -128, 127).astype(np.int64)
        return np.where(flat[:, None], 0, q), factor, offset
    bound = np.maximum(np.abs(x.min(axis=1)), np.abs(x.max(axis=1))).astype(np.float32)
    flat = bound == 0
    safe = np.where(flat, np.float32(1), bound)
    factor = np.where(flat, np.float32(1), safe / np.float32(127)).astype(np.float32)
    q = np.clip(round_half_away(x * (np.float32(127) / safe)[:, None]), -127, 127).astype(np.int64)
    return np.where(flat[:, None], 0, q), factor, np.zeros(len(x), np.int64)


def _hybrid_dense(ctx: OpContext, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """FULLY_CONNECTED with int8 weights and float activations (dynamic-range quantization), as
    LiteRT's hybrid kernel: each input row quantized (:func:`quantized_rows`, asymmetric with
    ``asymmetric_quantize_inputs``), exact int32 dot
    products with the weights minus ``offset·Σ_k w[n, k]``, scaled by ``float32(row scale ·
    s_w[n])`` and added to the bias in float32, then the fused activation."""
    q_w = ctx.in_quant(1)
    if q_w is None:
        raise ctx.error("int8 weights without quantization parameters")
    rows = x.astype(np.float32)
    q, factor, offset = quantized_rows(rows, bool(ctx.attr("asymmetric_quantize_inputs", False)))
    weights = w.astype(np.int64)
    dot = q @ weights.T - offset[:, None] * weights.sum(axis=1)[None, :]
    sw = q_w.scale.astype(np.float32).reshape(-1)
    scale = (factor[:, None] * np.broadcast_to(sw, (w.shape[0],))[None, :]).astype(np.float32)
    y = dot.astype(np.int32).astype(np.float32) * scale
    if ctx.has(2):
        y = ctx.x(2).astype(np.float32) + y
    return apply_activation(ctx, y.astype(np.float32), ctx.out_dtype())


def _hybrid_input(ctx: OpContext, i: int, asymmetric: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Input ``i`` of a hybrid convolution quantized per batch item (the whole item at once;
    asymmetric in LiteRT's per-channel hybrid kernels): ``(q − offset)`` (float64, exact
    integers; zero padding then adds nothing, as the kernels skip padded taps) and the
    per-item scaling factors."""
    x = ctx.x(i)
    q, factor, offset = quantized_rows(x.reshape(x.shape[0], -1).astype(np.float32), asymmetric)
    return (q - offset[:, None]).reshape(x.shape).astype(np.float64), factor


def _hybrid_output(ctx: OpContext, acc: np.ndarray, factor: np.ndarray, bias: int) -> np.ndarray:
    """Hybrid convolution sums ``acc`` [N, ..., C] (exact integers) to the float output as
    LiteRT's kernels: ``float32(acc)·s_w[c]·factor[n]`` in float32, plus the bias, then the
    fused activation."""
    q_w = ctx.in_quant(1)
    if q_w is None:
        raise ctx.error("int8 weights without quantization parameters")
    channels = acc.shape[-1]
    scales = np.broadcast_to(q_w.scale.astype(np.float32).reshape(-1), (channels,))
    y = acc.astype(np.int32).astype(np.float32) * scales
    y *= factor.reshape(-1, *[1] * (acc.ndim - 1))
    if ctx.has(bias):
        y += ctx.x(bias).astype(np.float32)
    return apply_activation(ctx, y, ctx.out_dtype())


def _hybrid_conv(ctx: OpContext, w: np.ndarray, depthwise: bool) -> np.ndarray:
    """CONV_2D / DEPTHWISE_CONV_2D with int8 weights and float activations, as LiteRT's
    per-channel hybrid reference kernels: the input quantized per batch item
    (:func:`_hybrid_input`), exact integer sums, then :func:`_hybrid_output`.  A CONV_2D with
    per-tensor weights takes LiteRT's other hybrid kernel: the input quantized symmetrically,
    ``float32(acc)·float32(factor·s_w) + bias``."""
    q_w = ctx.in_quant(1)
    if q_w is None:
        raise ctx.error("int8 weights without quantization parameters")
    per_tensor = not depthwise and q_w.scale.size == 1 and w.shape[3] == ctx.x(0).shape[3]  # not grouped
    shifted, factor = _hybrid_input(ctx, 0, asymmetric=not per_tensor)
    sh, sw, dh, dw, padding = _conv_args(ctx)
    n = shifted.shape[0]
    if depthwise:
        _, kh, kw, channels = w.shape
        mult = channels // shifted.shape[3]
        source = np.repeat(shifted, mult, axis=3) if mult > 1 else shifted  # channel c·M + m reads c
        taps, oh, ow = _windows(source, kh, kw, sh, sw, dh, dw, padding)
        acc = np.einsum("nhwtc,tc->nhwc", taps, w.reshape(kh * kw, channels).astype(np.float64))
    else:
        channels, kh, kw, depth = w.shape
        matrix = w.reshape(channels, -1).T
        dtype = exact_dtype(255.0 * float(np.abs(matrix.astype(np.int64)).sum(axis=0).max(initial=0)))
        matrix = matrix.astype(dtype)
        taps, oh, ow = _windows(shifted.astype(dtype), kh, kw, sh, sw, dh, dw, padding)
        acc = _grouped(taps.reshape(-1, kh * kw, shifted.shape[3]), shifted.shape[3] // depth, channels,
                       lambda t, c: t @ matrix[:, c])
    acc = np.rint(acc).reshape(n, oh, ow, channels)
    if per_tensor:
        scale = (factor * np.float32(q_w.s)).astype(np.float32).reshape(-1, 1, 1, 1)
        y = acc.astype(np.int32).astype(np.float32) * scale
        if ctx.has(2):
            y += ctx.x(2).astype(np.float32)
        return apply_activation(ctx, y, ctx.out_dtype())
    return _hybrid_output(ctx, acc, factor, 2)
