"""CONV_2D, float and integer (8-bit and 16x8), grouped too; hybrid (int8 weights, float
activations) in :mod:`.hybrid`.

The paths, fastest first (the arithmetic they share is in :mod:`.conv_common`): with constant
8-bit weights and the compiled loops, the fused VNNI GEMM or the integer GEMM, a 1x1
convolution of a few pixels as compiled dot products (:mod:`.conv_fast`); else a compiled
runner over preallocated buffers — one GEMM on the NHWC buffer (1x1) or a strided im2col copy
and one GEMM (:mod:`.runners`); else (grouped, sums too long for one float32 GEMM) numpy's
im2col and GEMM, then :func:`.conv_common._finish`.

The convolutions' quantization helpers (:func:`channel_multipliers`, :func:`accumulator`, ...)
are defined in :mod:`.conv_common` and importable from here, where the other layers find them.
"""

from __future__ import annotations

import functools

import numpy as np

from ._common import OpContext, kernel
from .conv_common import (
    _conv_args,
    _ending,
    _finish,
    _gemm,
    _geometry,
    _grouped,
    _matrix,
    _plan,
    _shifted_input,
    _windows,
    accumulator,
    channel_multipliers,
    channel_scales,
    legacy_multiplier,
    multipliers,
)
from .conv_fast import _DENSE_ROWS, _dense_runner, _integer_gemm, _vnni_runner, _vnni_window_runner
from .hybrid import _hybrid_conv
from .runners import (
    compile_runner,
    integer_pointwise_runner,
    integer_window_runner,
    pointwise_runner,
    window_runner,
)

__all__ = ["accumulator", "channel_multipliers", "channel_scales", "conv_2d", "legacy_multiplier", "multipliers"]


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
