"""CONV_3D (NDHWC input, [KD, KH, KW, I, O] weights), float as LiteRT's reference kernel."""

from __future__ import annotations

import numpy as np

from ._common import PAD_SAME, OpContext, apply_activation, kernel, output_size, padding_before
from .conv_common import _bias_count, _geometry_attrs, _strides_3d
from .prepare import OpCheck, Shape, check_size, prepare_rule

__all__ = ["conv_3d"]


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


# -- prepare checks -----------------------------------------------------------------------------------


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
