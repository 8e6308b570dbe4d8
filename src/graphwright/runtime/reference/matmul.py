"""BATCH_MATMUL, float and integer, as LiteRT's reference kernel.

``out[..., i, j] = Σ_k op(x)[..., i, k]·op(y)[..., k, j]`` with ``op`` the transpose of the
last two dims when ``adj_x`` / ``adj_y`` is set and the batch dims (up to 3, rank ≤ 5)
broadcast.  Integer maths::

    acc = Σ_k (x − zp_x)·(y − zp_y)                 int32 (int8), int64 (int16)
    out = clamp(MBQM(acc, m, shift) + zp_out)         M = float32(s_x·s_y) / s_out

The sums run as one ``matmul``, in float32 where every sum stays below 2^24, else in
float64 (exact integers either way), and
the int32 accumulator wraps as C's does; int16 operands use the int64 requantization.
Cost: O(batch·rows·depth·columns).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel
from .conv_common import exact_dtype, legacy_multiplier, requantize
from .hybrid import quantized_rows
from .prepare import OpCheck, Shape, prepare_rule

#: LiteRT's BATCH_MATMUL handles operands up to rank 5 (3 batch dims)
_MAX_RANK = 5


def _operand(ctx: OpContext, i: int, adjoint: bool) -> np.ndarray:
    a = ctx.x(i)
    return np.swapaxes(a, -1, -2) if adjoint else a


@kernel("BATCH_MATMUL", int16=True)
def batch_matmul(ctx: OpContext) -> list[np.ndarray]:
    a = _operand(ctx, 0, bool(ctx.attr("adj_x", False)))
    b = _operand(ctx, 1, bool(ctx.attr("adj_y", False)))
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        if a.dtype.kind == "f" and b.dtype == np.int8:
            return [_hybrid(ctx, a, b)]
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            raise ctx.error(f"{a.dtype} and {b.dtype} operands with a float output are not implemented")
        return [np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dtype)]
    q_a, q_b, q_out = ctx.in_quant(0), ctx.in_quant(1), ctx.out_quant()
    if q_a is None or q_b is None or q_out is None:
        raise ctx.error("integer tensors without quantization parameters")
    if q_b.scale.size != 1:
        raise ctx.error("per-channel quantized operands are not implemented")
    params = ctx.cache.get("multiplier")
    if params is None:
        params = ctx.cache["multiplier"] = legacy_multiplier(q_a.s, q_b, q_out.s, 1)
    spans = [max(q.zp - int(np.iinfo(v.dtype).min), int(np.iinfo(v.dtype).max) - q.zp) for q, v in ((q_a, a), (q_b, b))]
    dtype = exact_dtype(float(spans[0] * spans[1] * a.shape[-1]))
    acc = np.matmul(a.astype(dtype) - dtype(q_a.zp), b.astype(dtype) - dtype(q_b.zp))
    kind = "int64" if a.dtype == np.int16 else "int32"
    return [requantize(ctx, np.rint(acc).astype(np.int64), *params, ctx.rounding, kind)]


def _hybrid(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float ``a`` times int8 ``b`` (dynamic-range quantization), as LiteRT's hybrid kernel:
    each row of ``a`` quantized at run time (:func:`.hybrid.quantized_rows`, asymmetric with
    ``asymmetric_quantize_inputs``), exact int32 sums minus ``offset·Σ_k b[k, j]``, times
    ``float32(row scale · s_b[j])``."""
    q_b = ctx.in_quant(1)
    if q_b is None:
        raise ctx.error("int8 operand without quantization parameters")
    rows = a.astype(np.float32).reshape(-1, a.shape[-1])
    q, factor, offset = quantized_rows(rows, bool(ctx.attr("asymmetric_quantize_inputs", False)))
    weights = b.astype(np.int64)
    q = q.reshape(a.shape)
    dtype = exact_dtype(255.0 * float(np.abs(weights).sum(axis=-2).max(initial=0)))
    dot = np.matmul(q.astype(dtype), weights.astype(dtype)).astype(np.float64)
    dot -= offset.reshape(*a.shape[:-1], 1) * weights.sum(axis=-2, keepdims=True)
    sb = np.broadcast_to(q_b.scale.astype(np.float32).reshape(-1), (b.shape[-1],))
    scale = (factor.reshape(*a.shape[:-1], 1) * sb).astype(np.float32)
    return (np.rint(dot).astype(np.int32).astype(np.float32) * scale).astype(np.float32)


@prepare_rule("BATCH_MATMUL", arity=(2, 2))
def _batch_matmul_rule(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1)
    a, b = op.shape(0), op.shape(1)
    if a is None or b is None:
        return [None]
    if not 2 <= len(a) <= _MAX_RANK or not 2 <= len(b) <= _MAX_RANK:
        raise op.fail(f"operands {list(a)} and {list(b)} must have rank 2 to {_MAX_RANK}")
    rows, depth = (a[-1], a[-2]) if op.attr("adj_x", False) else (a[-2], a[-1])
    inner, columns = (b[-1], b[-2]) if op.attr("adj_y", False) else (b[-2], b[-1])
    if depth != inner:
        raise op.fail(f"operands {list(a)} and {list(b)} (adj_x={bool(op.attr('adj_x', False))}, "
                      f"adj_y={bool(op.attr('adj_y', False))}) do not share an inner dimension")
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        raise op.fail(f"batch dims of operands {list(a)} and {list(b)} do not broadcast") from None
    return [(*batch, rows, columns)]
