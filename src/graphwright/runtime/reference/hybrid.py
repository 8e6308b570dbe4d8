"""Hybrid layers, as LiteRT's hybrid kernels: int8 weights with float activations (dynamic-range
quantization), the activations quantized to int8 at run time (:func:`quantized_rows`), summed
exactly against the integer weights and scaled back to float32.

FULLY_CONNECTED quantizes each input row (:func:`_hybrid_dense`); CONV_2D, DEPTHWISE_CONV_2D
(:func:`_hybrid_conv`) and the transposed convolutions (:mod:`.transpose_conv`) each batch item
(:func:`_hybrid_input`, :func:`_hybrid_output`); the hybrid sequence operators (:mod:`.lstm`,
:mod:`.rnn`, :mod:`.svdf`: :func:`_operand`, :func:`_product`) and BATCH_MATMUL quantize their operands'
rows with :func:`quantized_rows` too.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._common import OpContext, apply_activation, round_half_away
from .conv_common import _conv_args, _grouped, _windows, exact_dtype

__all__ = ["quantized_rows"]


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


# -- the products of the hybrid sequence operators (LSTM, RNN, SVDF) -------------------------------------


class _Int8Weights(NamedTuple):
    """A hybrid sequence operator's int8 weight matrix (transposed, as int32) with its scale and row sums."""

    matrix: np.ndarray
    scale: np.float32
    row_sums: np.ndarray


class _Operand(NamedTuple):
    """A float operand of the gate products, with its per-row int8 quantization (scale, offset)
    when some weights are int8."""

    values: np.ndarray
    quantized: np.ndarray
    scale: np.ndarray
    offset: np.ndarray


def _int8_scale(ctx: OpContext, i: int) -> np.float32:
    """The one quantization scale of input ``i``'s int8 weights."""
    q = ctx.in_quant(i)
    if q is None or q.scale.size != 1:
        raise ctx.error(f"input {i} holds int8 weights without one quantization scale")
    return np.float32(q.s)


def _recovered_weights(ctx: OpContext, i: int) -> np.ndarray:
    """Float32 weights, or int8 ones times their scale in float32 (LiteRT's VectorScalarMultiply)."""
    w = ctx.x(i)
    if w.dtype != np.int8:
        return w
    return (w.astype(np.float32) * _int8_scale(ctx, i)).astype(np.float32)


def _product_weights(ctx: OpContext, i: int) -> np.ndarray | _Int8Weights:
    """Input ``i`` ([units, depth] weights) as the right operand of :func:`_product`: float ones
    transposed, int8 ones as :class:`_Int8Weights`."""
    w = ctx.x(i)
    if w.dtype != np.int8:
        return w.T
    return _Int8Weights(w.T.astype(np.int32), _int8_scale(ctx, i), w.astype(np.int32).sum(axis=1))


def _operand(values: np.ndarray, asymmetric: bool | None) -> _Operand:
    """``values`` and, unless ``asymmetric`` is None (float weights only), their per-row int8
    quantization as LiteRT's hybrid kernels do it (:func:`quantized_rows`)."""
    if asymmetric is None:
        return _Operand(values, values, values, values)  # no quantization: only .values is read
    q, scale, offset = quantized_rows(values, asymmetric)
    return _Operand(values, q.astype(np.int32), scale, offset.astype(np.int32))


def _product(operand: _Operand, weights: np.ndarray | _Int8Weights) -> np.ndarray:
    """``operand · weights``: a float product, or, for int8 weights, the int32 dot products of the
    quantized rows (minus offset·row sums) times the row's scale times the weights' scale."""
    if not isinstance(weights, _Int8Weights):
        return operand.values @ weights  # type: ignore[no-any-return]
    dots = operand.quantized @ weights.matrix - operand.offset[:, None] * weights.row_sums
    return dots.astype(np.float32) * (operand.scale * weights.scale)[:, None]
