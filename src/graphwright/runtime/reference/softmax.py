"""SOFTMAX — float, 8-bit and int16, as TFLite's reference kernels.

8-bit: a float32 table ``exp(−s_in·β·d)`` of the distance ``d`` to the row max,
``y = round(e/(Σe·s_out)) + zp_out`` (with the compiled loops one pass per run).  int16:
513-entry LUTs of exp on [−10, 0] and of 1/(1+x) on [0, 1], built in double (TFLM: in
float32; :mod:`.luts`), interpolated on the low 7 bits (:func:`_softmax_int16`).
O(n) per row plus a 256-entry table.
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel, type_range
from .elementwise import _f64, _quants, _symmetric
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from .jit import kernels
from .luts import lut16_double, lut16_float32, lut16_lookup


@kernel("SOFTMAX", int16=True)
def softmax(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    beta = np.float32(ctx.attr("beta", 1.0) or 1.0)
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":
        xf = x.astype(np.float32)
        e = np.exp((xf - xf.max(axis=-1, keepdims=True)) * beta).astype(np.float32)
        return [(e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(dtype)]
    if x.dtype == np.int16:
        return [_softmax_int16(ctx, x, beta)]
    constants = ctx.cache.get("softmax8")
    if constants is None:
        qi, qo = _quants(ctx, 0)
        table = np.exp(np.float32(-qi.s) * beta * np.arange(256, dtype=np.float32)).astype(np.float32)
        constants = ctx.cache["softmax8"] = (table, np.float32(qo.s), qo.zp, *type_range(dtype))
    table, s_out, zp, lo, hi = constants
    if ctx.jit and x.ndim >= 1 and x.size and x.shape[-1]:  # one compiled pass, kept for later runs
        compiled, shape, rows = kernels().softmax8, x.shape, (x.size // x.shape[-1], x.shape[-1])
        half32, zp64, lo64, hi64 = dtype == np.uint8, np.int64(zp), np.int64(lo), np.int64(hi)

        def run(v: np.ndarray) -> np.ndarray:
            y = np.empty(shape, dtype)
            compiled(np.ascontiguousarray(v).reshape(rows), table, s_out, zp64, lo64, hi64, half32, y.reshape(rows))
            return y

        ctx.cache["compiled"] = (x.shape, x.dtype, run)
        return [run(x)]
    xi = x.astype(np.int16)  # 8-bit: max − x within [0, 255]
    e = table.take(xi.max(axis=-1, keepdims=True) - xi)
    total = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]  # sequential float32 sum
    prob = e * (np.float32(1) / (total * s_out))  # float32 throughout
    if dtype == np.uint8:  # truncation after +0.5 (x86 build)
        q = np.floor(prob + np.float32(0.5)).astype(np.int64)
    else:  # round half away from zero of prob ≥ 0: ⌊prob + ½⌋, exact in float64
        q = np.floor(prob.astype(np.float64) + 0.5).astype(np.int64)
    q += zp
    return [np.clip(q, lo, hi, out=q).astype(dtype)]


def _softmax_int16(ctx: OpContext, x: np.ndarray, beta: np.float32) -> np.ndarray:
    """LiteRT's int16 SOFTMAX: per row, ``d = x − max`` rescaled so [−65535, 0] spans [−10, 0],
    ``e = LUT_exp(d + 32767)`` (Q0.15), the row sum normalised to its leading bit and mapped
    to [−1, 1) for ``r = LUT_{1/(1+x)}``, then ``e·r`` shifted back, clamped to [0, 32767]."""
    qi, qo = _quants(ctx, 0)
    _symmetric(ctx, qi, qo)
    tables = ctx.cache.get("softmax16")
    if tables is None:
        step = 1.0 / 65535
        if ctx.flavor == "tflm":  # TFLM's Prepare: the tables in float32, the multiplier in double
            exp_lut = lut16_float32(lambda v: np.exp(v.astype(np.float64)).astype(np.float32),
                                    10.0 * step, 32767, 2.0 * step, 0)
            recip_lut = lut16_float32(lambda v: (np.float32(1) / (np.float32(1) + v)).astype(np.float32),
                                      step, -32768, 2.0 * step, 0)
            real = _f64(qi.s) * _f64(beta) / (10.0 / 65535.0)
        else:
            exp_lut = lut16_double(np.exp, 10.0 * step, 32767, 2.0 * step)
            recip_lut = lut16_double(lambda v: 1.0 / (1.0 + v), step, -32768, 2.0 * step)
            real = float(np.float32(np.float32(qi.s) * beta)) / (10.0 / 65535.0)
        tables = ctx.cache["softmax16"] = (exp_lut, recip_lut, *quantize_multiplier(real))
    exp_lut, recip_lut, m, shift = tables
    xi = x.astype(np.int64)
    diff = xi - xi.max(axis=-1, keepdims=True)
    scaled = multiply_by_quantized_multiplier(diff, m, shift, ctx.rounding) + 32767
    e = lut16_lookup(exp_lut, np.clip(scaled, -32768, 32767))
    total = e.sum(axis=-1, keepdims=True)
    headroom = 32 - np.floor(np.log2(np.maximum(total, 1))).astype(np.int64) - 1  # leading zeros of 32 bits
    headroom = np.where(total == 0, 32, headroom)
    shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
    recip = lut16_lookup(recip_lut, np.clip(shifted - (1 << 15) - (1 << 16), -32768, 32767))
    right = 31 - headroom
    out = (e * recip + ((np.int64(1) << right) >> 1)) >> right
    return np.clip(out, 0, 32767).astype(np.int16)
