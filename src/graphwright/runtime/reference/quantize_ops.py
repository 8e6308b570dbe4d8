"""QUANTIZE and DEQUANTIZE, as TFLite's reference kernels.

QUANTIZE float -> integer: ``round(x/s_out) + zp_out`` in float32, halves away from zero
(AffineQuantize).  8-bit/16-bit to 8-bit/16-bit: ``clamp(MBQM(x − zp_in, s_in/s_out) + zp_out)``
through a 256-entry table for 8-bit inputs (:func:`.table_lookup._by_byte_table`); with single
rounding, XNNPACK's conversion instead — ``(x·M + zp_out·2^8 − M·zp_in + 2^7) >> 8`` with
``M = rint(256·s_in/s_out)`` in float32 — which LiteRT's default kernels run (measured equal
on every element; the 31-bit MBQM is one LSB off on ~5%).  DEQUANTIZE: ``s·(x − zp)`` per
tensor or per channel; float16 weights widened.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import OpContext, kernel, round_half_away, type_range
from .elementwise import _f64, _mbqm
from .table_lookup import _by_byte_table


@kernel("QUANTIZE", int16=True)
def quantize(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    qo = ctx.out_quant()
    if qo is None:
        raise ctx.error("its output has no quantization parameters")
    if qo.scale.size > 1:
        raise ctx.error("per-channel QUANTIZE is not implemented")
    lo, hi = type_range(dtype)
    if x.dtype.kind == "f":  # the quotient in float32, rounded half away from zero (AffineQuantize)
        q = round_half_away((x.astype(np.float32) / np.float32(qo.s)).astype(np.float32)).astype(np.int64) + qo.zp
        return [np.clip(q, lo, hi).astype(dtype)]

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi = ctx.in_quant(0)
        if qi is None:
            raise ctx.error("its input has no quantization parameters")
        if ctx.rounding == "single" and x.dtype.itemsize == 1:
            # XNNPACK's 8-bit conversion: a multiplier with 8 fractional bits,
            # y = (x·M + (zp_out·2^8 − M·zp_in + 2^7)) >> 8, M = rint(256·float32(s_in/s_out))
            # (matches LiteRT's default kernels on every element where MBQM is off by one)
            m = int(np.rint(np.float32(256.0) * np.float32(np.float32(qi.s) / np.float32(qo.s))))
            bias = (qo.zp << 8) - m * qi.zp + (1 << 7)
            return lambda v: np.clip((v.astype(np.int64) * m + bias) >> 8, lo, hi).astype(dtype)
        real = _f64(qi.s) / _f64(qo.s)
        return lambda v: np.clip(_mbqm(ctx, v.astype(np.int64) - qi.zp, real) + qo.zp, lo, hi).astype(dtype)

    return [_by_byte_table(ctx, x, make)]


@kernel("DEQUANTIZE")
def dequantize(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":  # float16 weights
        return [x.astype(dtype)]
    qi = ctx.in_quant(0)
    if qi is None:
        raise ctx.error("its input has no quantization parameters")
    if qi.scale.size > 1:
        shape = [1] * x.ndim
        shape[qi.axis] = -1
        scale = qi.scale.astype(np.float64).reshape(shape)
        zp = qi.zero_point.reshape(shape)
        return [(scale * (x.astype(np.int64) - zp)).astype(dtype)]
    return [(np.float64(np.float32(qi.s)) * (x.astype(np.int64) - qi.zp)).astype(dtype)]
