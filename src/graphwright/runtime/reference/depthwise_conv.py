"""DEPTHWISE_CONV_2D, float and integer (8-bit and 16x8, which needs an int64 bias as
LiteRT's), with a channel multiplier; hybrid (int8 weights, float activations) in :mod:`.hybrid`.

Output channel ``c·M + m`` reads input channel ``c``.  With a quantized plan the whole
convolution is one runner (:func:`.runners.depthwise_runner`: with the compiled loops one pass
that sums and requantizes, else an ``einsum`` over a strided view of the taps); float32 with the
compiled loops a compiled float32 loop; else one multiply-add per tap on the zero-padded input
(exact, see :mod:`.conv_common`), then :func:`.conv_common._finish`.
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, activation_range, kernel
from .conv_common import _conv_args, _finish, _float_finish, _geometry, _matrix, _plan, _shifted_input
from .hybrid import _hybrid_conv
from .runners import compile_runner, depthwise_runner, float_depthwise_runner

__all__ = ["depthwise_conv_2d"]


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
