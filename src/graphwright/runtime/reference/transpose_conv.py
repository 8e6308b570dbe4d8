"""TRANSPOSE_CONV (float, hybrid, 8-bit and 16x8) and CONV_3D_TRANSPOSE (float, as LiteRT has it).

Every input position is multiplied by every tap in one GEMM and the products are scatter-added
onto the output (:func:`_scatter`); the padding is the forward convolution's of the output size.
Integer: exact sums of ``(x − zp_in)·(w − zp_w)``, bias, requantized per output channel as the
convolutions (:mod:`.conv_common`; int64 sums for 16-bit activations).  Hybrid (int8 weights,
float activations): the input quantized per batch item at run time (:mod:`.hybrid`).
"""

from __future__ import annotations

import math

import numpy as np

from ._common import PAD_SAME, OpContext, Quant, apply_activation, kernel, output_size, padding_before
from .conv_common import (
    _bias_count,
    _geometry_attrs,
    _matrix,
    _shifted_input,
    _strides_3d,
    accumulator,
    exact_dtype,
    multipliers,
    requantize,
)
from .hybrid import _hybrid_input, _hybrid_output
from .prepare import OpCheck, Shape, check_size, prepare_rule

__all__ = ["conv_3d_transpose", "transpose_conv"]


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


# -- prepare checks -----------------------------------------------------------------------------------


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
