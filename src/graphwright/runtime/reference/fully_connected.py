"""FULLY_CONNECTED, float and integer (8-bit and 16x8); hybrid (int8 weights, float
activations) as LiteRT's hybrid kernel, the input rows quantized at run time (:mod:`.hybrid`).

LiteRT's reference kernel requantizes 8-bit outputs with one rounding and 16x8 ones in double
(``round(acc·s_in·s_w/s_out)``); TFLite Micro's as the convolutions (``flavor="tflm"``, see
:mod:`.interpreter`).  The sums as the convolutions' (:mod:`.conv_common`); with the compiled
loops, at most ``_DENSE_ROWS`` rows run as compiled 8-bit dot products and more on the integer
GEMM (:mod:`.conv_fast`).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel
from ._gemm import unsigned
from .conv_common import _finish, _gemm, _matrix, _plan, _shifted_input
from .conv_fast import _DENSE_ROWS, _dense_layer, _integer_gemm, _native_dense
from .hybrid import _hybrid_dense
from .runners import compile_runner

__all__ = ["fully_connected"]


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
