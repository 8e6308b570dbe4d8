"""SVDF, as LiteRT's kernels: float32, hybrid (int8 feature and time weights, the input
quantized per row at run time: :mod:`.hybrid`) and int8 (int16 time weights and state).
One time step per run; the state is a variable tensor, updated in place.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import OpContext, kernel
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from .gemmlowp import saturate16
from .hybrid import _operand, _product, _product_weights, _recovered_weights
from .prepare import OpCheck, Shape, prepare_rule
from .sequence_common import _activation


@kernel("SVDF")
def _svdf(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernels (one time step per run): each filter's memory (the state,
    ``[batch, filters·memory]``, a variable tensor) shifts left by one and takes the new
    feature ``x·Fᵀ`` last; each filter's output is its memory dotted with its time weights,
    ``rank`` filters summed per unit, plus the bias, through the fused activation."""
    x, features, times, state = ctx.x(0), ctx.x(1), ctx.x(2), ctx.x(4)
    integer = (x.dtype, features.dtype, times.dtype, state.dtype) == (np.int8, np.int8, np.int16, np.int16)
    hybrid = (x.dtype, features.dtype, times.dtype, state.dtype) == (np.float32, np.int8, np.int8, np.float32)
    if not integer and not hybrid and any(a.dtype != np.float32 for a in (x, features, times, state)):
        raise ctx.error("only float32, hybrid (int8 feature and time weights) and int8 with int16 time weights "
                        "and state are implemented")
    rank = int(ctx.attr("rank", 1) or 1)
    filters, memory = times.shape
    batch = x.shape[0]
    flat = state.reshape(-1)
    flat[:-1] = flat[1:].copy()  # LiteRT shifts the whole buffer; each filter's last slot is rewritten below
    filled = state.reshape(batch, filters, memory)
    if hybrid:  # EvalHybridSVDF: the feature product from the input quantized per row, time weights recovered
        asymmetric = bool(ctx.attr("asymmetric_quantize_inputs", False))
        filled[:, :, -1] = _product(_operand(x, asymmetric), _product_weights(ctx, 1))
        times = _recovered_weights(ctx, 2)
    if not integer:
        if not hybrid:
            filled[:, :, -1] = x @ features.T
        y = np.einsum("bfm,fm->bf", filled, times).astype(np.float32).reshape(batch, -1, rank).sum(axis=2)
        if ctx.has(3):
            y = y + ctx.x(3)
        return [_activation(ctx, y.astype(np.float32))]
    # EvalIntegerSVDF: features requantized to the state's int16, time products and bias in int32,
    # requantized to the int8 output (no activation is applied)
    (m1, e1), (m2, e2), zp_in, zp_out = _svdf_multipliers(ctx)
    feature = (x.astype(np.int64) - zp_in) @ features.T.astype(np.int64)
    filled[:, :, -1] = saturate16(multiply_by_quantized_multiplier(feature, m1, e1, "double"))
    acc = np.einsum("bfm,fm->bf", filled.astype(np.int64), times.astype(np.int64)).reshape(batch, -1, rank).sum(axis=2)
    if ctx.has(3):
        acc = acc + ctx.x(3).astype(np.int64)
    return [np.clip(multiply_by_quantized_multiplier(acc, m2, e2, "double") + zp_out, -128, 127).astype(np.int8)]


def _svdf_multipliers(ctx: OpContext) -> tuple[tuple[int, int], tuple[int, int], int, int]:
    """The integer SVDF's (multiplier, shift) pairs, as LiteRT's Prepare computes them in float32:
    input·feature scale / state scale, and state·time scale / output scale; its zero points."""
    found = ctx.cache.get("svdf")
    if found is None:
        q = [ctx.in_quant(i) for i in (0, 1, 2, 4)] + [ctx.out_quant()]
        if any(p is None for p in q):
            raise ctx.error("an integer SVDF needs quantized input, weights, state and output")
        s_in, s_feature, s_time, s_state, s_out = (np.float32(p.s) for p in q)  # type: ignore[union-attr]
        found = ctx.cache["svdf"] = (quantize_multiplier(float(s_in * s_feature / s_state)),
                                     quantize_multiplier(float(s_state * s_time / s_out)), q[0].zp, q[4].zp)  # type: ignore[union-attr]
    return found  # type: ignore[no-any-return]


# -- prepare checks ------------------------------------------------------------------------------------


@prepare_rule("SVDF", arity=(5, 5))
def _svdf_shapes(op: OpCheck) -> list[Shape]:
    for i, what in ((0, "input"), (1, "feature weights"), (2, "time weights"), (4, "activation state")):
        op.need(i, what)
    x, features, times = op.rank(0, 2), op.rank(1, 2), op.rank(2, 2)
    rank = op.int_attr("rank", 1, 1)
    if x is None or features is None or times is None:
        return [None]
    filters, memory = times
    if features != (filters, x[1]) or filters % rank:
        raise op.fail(f"feature weights {list(features)}, time weights {list(times)} and rank {rank} do not fit "
                      f"input {list(x)}")
    state = op.shape(4)
    if state is not None and math.prod(state) != x[0] * filters * memory:
        raise op.fail(f"activation state {list(state)} does not hold {x[0]}x{filters}x{memory} values")
    return [(x[0], filters // rank)]
