"""Normalizations over the last axis, as LiteRT's reference kernels: LOG_SOFTMAX (float, and 8-bit
in gemmlowp's fixed point: :func:`_log_softmax_q`), L2_NORMALIZATION (float, int8 and uint8, with
gemmlowp's inverse square root) and LOCAL_RESPONSE_NORMALIZATION (float32).  SOFTMAX is in
:mod:`.softmax`.  O(n) in the elements.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import OpContext, kernel, type_range
from .elementwise import _quants
from .fixedpoint import INT32_MIN, multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot
from .gemmlowp import exp_on_negative_values_q5, inv_sqrt_multiplier, log_q12_to_q5
from .luts import F32
from .prepare import OpCheck, Shape, prepare_rule

__all__ = ["log_softmax_params"]


@kernel("LOG_SOFTMAX")
def log_softmax(ctx: OpContext) -> list[np.ndarray]:
    """Over the last axis: ``x − max − log(Σ exp(x − max))``.  8-bit (output scale 16/256, zero
    point 127 for int8, 255 for uint8): LiteRT's fixed point — differences to the row max in
    Q5.26, gemmlowp's ``exp_on_negative_values`` summed in Q12.19, its ``log`` in Q5.26, the
    difference rounded to Q4 (see :func:`_log_softmax_q`)."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        xf = x.astype(F32)
        shifted = xf - xf.max(axis=-1, keepdims=True)
        return [(shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True, dtype=F32))).astype(dtype)]
    if dtype not in (np.int8, np.uint8) or x.dtype != dtype:
        raise ctx.error(f"{x.dtype} input with {dtype} output is not implemented")
    params = ctx.cache.get("log_softmax")
    if params is None:
        params = ctx.cache["log_softmax"] = log_softmax_params(_quants(ctx, 0)[0].s)
    return [_log_softmax_q(x, *params, ctx.rounding)]


def log_softmax_params(s_in: float) -> tuple[int, int, int, int, int]:
    """``PreprocessLogSoftmaxScalingExp`` (beta 1, 5 integer bits): the input multiplier and
    left shift into Q5.26, the reverse multiplier and shift, and ``diff_min``."""
    real = min(float(F32(s_in)) * float(1 << 26), float((1 << 31) - 1))
    m, left = quantize_multiplier(real)
    m_rev, s_rev = quantize_multiplier(float(1 << (31 - left)) / m)
    diff_min = -math.floor(31.0 * (1 << 26) / (1 << left))
    return m, left, m_rev, s_rev, diff_min


def _log_softmax_q(x: np.ndarray, m: int, left: int, m_rev: int, s_rev: int, diff_min: int,
                   rounding: str) -> np.ndarray:
    """LiteRT's 8-bit ``LogSoftmax`` over the last axis (rows vectorised): the result lands at
    the type's top (zero point 127 or 255); what the bound cuts off gets the type's bottom."""
    qmin, qmax = type_range(x.dtype)
    diff = x.astype(np.int64) - x.max(axis=-1, keepdims=True).astype(np.int64)
    in_q5 = multiply_by_quantized_multiplier(diff, m, left, rounding)
    exps = rounding_divide_by_pot(exp_on_negative_values_q5(in_q5), 12)  # Q0.31 -> Q12.19
    total = np.where(diff >= diff_min, exps, 0).sum(axis=-1, keepdims=True)
    log_total = log_q12_to_q5(total)
    bound = np.maximum(diff_min - 1, multiply_by_quantized_multiplier(log_total + INT32_MIN, m_rev, s_rev, rounding))
    y = np.clip(rounding_divide_by_pot(in_q5 - log_total, 22) + qmax, qmin, qmax)
    return np.where(diff > bound, y, qmin).astype(x.dtype)



@kernel("L2_NORMALIZATION")
def l2_normalization(ctx: OpContext) -> list[np.ndarray]:
    """Over the last axis.  Float: ``x / max(sqrt(Σx²), 1e-6)``.  int8 (output scale 1/128,
    zero point 0): ``MBQM(x − zp, m, shift + 7)`` with gemmlowp's inverse square root
    ``(m, shift)`` of the row's ``Σ(x − zp)²``; uint8 (zero point 128): ``MBQM(128·(x − zp),
    m, shift) + 128``."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        xf = x.astype(F32)
        norm = np.sqrt(np.cumsum(xf * xf, axis=-1, dtype=F32)[..., -1:])
        return [(xf / np.maximum(norm, F32(1e-6))).astype(dtype)]
    if dtype not in (np.int8, np.uint8) or x.dtype != dtype:
        raise ctx.error(f"{x.dtype} input with {dtype} output is not implemented")
    qi = _quants(ctx, 0)[0]
    d = x.astype(np.int64) - qi.zp
    m, shift = inv_sqrt_multiplier((d * d).sum(axis=-1, keepdims=True))
    if dtype == np.uint8:  # the legacy kernel: 128·d rescaled, plus 128
        y = multiply_by_quantized_multiplier(128 * d, m, shift, ctx.rounding) + 128
    else:
        y = multiply_by_quantized_multiplier(d, m, shift + 7, ctx.rounding)
    return [np.clip(y, *type_range(dtype)).astype(dtype)]


@kernel("LOCAL_RESPONSE_NORMALIZATION")
def local_response_normalization(ctx: OpContext) -> list[np.ndarray]:
    """Over the last axis, LiteRT's reference window ``[c − radius, c + radius)`` (the upper
    end excluded): ``x·(bias + alpha·Σx²)^(−beta)`` (float only)."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind != "f":
        raise ctx.error(f"{dtype} is not implemented (LiteRT computes it in float32 only)")
    radius = int(ctx.attr("radius", 5))
    bias, alpha, beta = (F32(ctx.attr(name, default)) for name, default in
                         (("bias", 1.0), ("alpha", 1.0), ("beta", 0.5)))
    xf = x.astype(F32)
    sq = xf * xf
    depth = xf.shape[-1]
    accum = np.zeros_like(xf)
    for c in range(depth):
        lo, hi = max(0, c - radius), min(depth, c + radius)
        if hi > lo:
            accum[..., c] = np.cumsum(sq[..., lo:hi], axis=-1, dtype=F32)[..., -1]
    multiplier = np.power((bias + alpha * accum).astype(F32), -beta).astype(F32)
    return [(xf * multiplier).astype(dtype)]


# -- prepare checks ------------------------------------------------------------------------------------


@prepare_rule("LOG_SOFTMAX", "L2_NORMALIZATION", arity=(1, 1))
def _last_axis(op: OpCheck) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    if x is not None and not x:
        raise op.fail("its input is a scalar; it normalizes over the last axis")
    if op.node.op == "L2_NORMALIZATION" and op.int_attr("fused_activation_function", 0) != 0:
        raise op.fail("it has a fused activation, which LiteRT's kernel does not apply")
    out = op.node.outputs[0]
    kind = out.dtype.value if out.dtype is not None else None
    if out.quant is not None and out.quant.scale.size and kind in ("int8", "uint8"):
        scale, zp = float(out.quant.scale.reshape(-1)[0]), int(out.quant.zero_point.reshape(-1)[0])
        want = {("L2_NORMALIZATION", "int8"): (1 / 128, 0), ("L2_NORMALIZATION", "uint8"): (1 / 128, 128),
                ("LOG_SOFTMAX", "int8"): (16 / 256, 127), ("LOG_SOFTMAX", "uint8"): (16 / 256, 255)}[op.node.op, kind]
        if (scale, zp) != want:
            raise op.fail(f"its {kind} output has scale {scale} and zero point {zp}; LiteRT's kernel requires "
                          f"{want[0]} and {want[1]}")
    return [x]


@prepare_rule("LOCAL_RESPONSE_NORMALIZATION", arity=(1, 1))
def _lrn(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.int_attr("radius", 5, 0)
    return [op.rank(0, 4)]
