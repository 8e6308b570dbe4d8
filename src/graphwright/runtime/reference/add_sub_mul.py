"""ADD, SUB and MUL — float, 8-bit and 16x8, as TFLite's reference kernels.

ADD/SUB (8-bit): with ``t = 2·max(s1, s2)`` and a left shift of 20 bits (``LEFT_SHIFT``)::

    a_i = MBQM((x_i − zp_i)·2^20, s_i/t)        (i = 1, 2)
    y   = clamp(MBQM(a_1 ± a_2, t/(2^20·s_out)) + zp_out)

MUL: ``y = clamp(MBQM((x1 − zp1)(x2 − zp2), s1·s2/s_out) + zp_out)``.
8-bit operators go through a table of the formula's value on all 2^16 input pairs
(:func:`.table_lookup._by_table`); with the compiled loops a MUL of same-shape or per-channel
operands is one compiled pass of the formula instead (:func:`_compiled_mul`), and a MUL of ``x``
by an 8-bit LOGISTIC/TANH of ``x`` (the swish of EfficientNet) one 256-entry table of ``x``
(:func:`_gated_table`).  16x8 (int16 activations, zero points 0), as LiteRT's int16 kernels:

* ADD/SUB: the 8-bit formula with a left shift of 15; or, with ``pot_scale_int16`` (the
  schema's default in the operator's options) and every scale a power of two, ``clamp(RDBPOT(x1, −s1) ± RDBPOT(x2, −s2))``
  with ``s_i = log2(s_i) − log2(s_out)`` (one of them 0, the other ≤ 0);
* MUL: the 8-bit formula; int16 x int16 -> 8-bit: the Q0.15 product, ``RDBPOT(·, 8) + zp_out``.

All O(n) in the elements.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import KERNELS, OpContext, Quant, activation_range, apply_activation, clamp_cast, kernel
from .elementwise import LEFT_SHIFT, _checked_log2, _f64, _mbqm, _quants, _symmetric
from .fixedpoint import quantize_multiplier, rounding_divide_by_pot
from .gemmlowp import srdhm16
from .requant import FastRequant
from .table_lookup import _by_table, _byte_lookup


def _long_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(a', b')`` computing ``a op b`` with long inner loops when one operand is a short vector over
    the other's last axis (``[224, 224, 3] · [3]``: numpy's inner loop would be 3 long): the big one
    seen as rows of ``T·C`` values, the vector tiled ``T`` times; the result is reshaped back.
    None where that does not apply (same shapes, long last axis, other broadcasts)."""
    for big, small, swap in ((a, b, False), (b, a, True)):
        c = big.shape[-1] if big.ndim else 0
        if small.size != c or c >= _LONG_ROW or small.ndim > big.ndim or small.shape[-1:] != big.shape[-1:] \
                or big.size == small.size or not big.flags.c_contiguous:
            continue
        rows, times = big.size // c, 1
        while times * c < _LONG_ROW and rows % (2 * times) == 0:
            times *= 2
        if times == 1:
            return None
        wide, tile = big.reshape(-1, times * c), np.tile(small.reshape(-1), times)
        return (tile, wide) if swap else (wide, tile)
    return None


#: inner loops at least this long keep numpy's vectorized loops busy (see :func:`_long_rows`)
_LONG_ROW = 256


def _float_pair(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ufunc(a, b)`` of two float32 tensors into one fresh buffer (:func:`_long_rows` where it applies)."""
    pair = _long_rows(a, b)
    if pair is None:
        return ufunc(a, b)  # type: ignore[no-any-return]
    return ufunc(*pair).reshape(np.broadcast_shapes(a.shape, b.shape))  # type: ignore[no-any-return]


def _add_sub(ctx: OpContext, sign: int) -> list[np.ndarray]:
    direct = ctx.cache.get("direct_pair")
    if direct is not None and (y := direct(ctx.arrays[0], ctx.arrays[1])) is not None:
        return [y]  # the pair table's compiled lookup an earlier run set up, for these same input shapes
    a, b = ctx.x(0), ctx.x(1)
    dtype = ctx.out_dtype()
    if dtype == np.float32 and a.dtype == b.dtype == np.float32:  # one fresh sum, clamped in place
        y = _float_pair(np.add if sign > 0 else np.subtract, a, b)
        return [np.clip(y, *activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), dtype), out=y)]
    if dtype.kind == "f":
        y = a.astype(np.float32) + sign * b.astype(np.float32)
        return [apply_activation(ctx, y, dtype)]
    if dtype.kind not in "iu":
        raise ctx.error(f"dtype {dtype} is not implemented")
    if dtype.itemsize > 1 and ctx.in_quant(0) is None:  # plain integer arithmetic
        return [(a.astype(np.int64) + sign * b.astype(np.int64)).astype(dtype)]
    if dtype == np.int16:
        return [_add_sub_int16(ctx, a, b, sign)]
    return [_by_table(ctx, a, b, lambda p, q: _add_sub_q(ctx, p, q, sign))]


def _add_sub_q(ctx: OpContext, a: np.ndarray, b: np.ndarray, sign: int, left_shift: int = LEFT_SHIFT) -> np.ndarray:
    dtype = ctx.out_dtype()
    q1, q2, qo = _quants(ctx, 0, 1)
    twice_max = 2.0 * max(_f64(q1.s), _f64(q2.s))
    r1, r2 = _f64(q1.s) / twice_max, _f64(q2.s) / twice_max
    r_out = twice_max / _f64(np.float32((1 << left_shift) * np.float32(qo.s)))
    x1 = _mbqm(ctx, (a.astype(np.int64) - q1.zp) << left_shift, r1)
    x2 = _mbqm(ctx, (b.astype(np.int64) - q2.zp) << left_shift, r2)
    y = _mbqm(ctx, x1 + sign * x2, r_out) + qo.zp
    return clamp_cast(ctx, y, dtype)


def _add_sub_int16(ctx: OpContext, a: np.ndarray, b: np.ndarray, sign: int) -> np.ndarray:
    """16x8 ADD/SUB, as LiteRT picks: with ``pot_scale_int16`` set (the schema's default when the
    operator has options; without options LiteRT leaves it false) and every scale a power of
    two, the operand of the larger scale divided by ``2^(its log2 − the output's)`` (rounding
    half away), added to (subtracted from) the other and clamped; else the 8-bit formula with
    a left shift of 15 (module docstring), which TFLM's kernels always take (``flavor="tflm"``).
    Zero points must be 0."""
    q1, q2, qo = _quants(ctx, 0, 1)
    _symmetric(ctx, q1, q2, qo)
    logs = [_checked_log2(q.s) for q in (q1, q2, qo)]
    if ctx.flavor == "tflm" or ctx.attr("pot_scale_int16") is not True or None in logs:
        return _add_sub_q(ctx, a, b, sign, 15)
    s1, s2 = logs[0] - logs[2], logs[1] - logs[2]  # type: ignore[operator]
    if 0 not in (s1, s2) or max(s1, s2) > 0:
        raise ctx.error(f"power-of-two int16 scales with input shifts {s1} and {s2}: LiteRT's kernel needs one of "
                        "them 0 and the other at most 0")
    if sign > 0 and a.shape != b.shape:
        raise ctx.error("power-of-two int16 ADD of operands of different shapes (LiteRT's kernel does not broadcast it)")
    y = rounding_divide_by_pot(a, -s1) + sign * rounding_divide_by_pot(b, -s2)
    return clamp_cast(ctx, y, ctx.out_dtype())


@kernel("ADD", int16=True)
def add(ctx: OpContext) -> list[np.ndarray]:
    return _add_sub(ctx, 1)


@kernel("SUB", int16=True)
def sub(ctx: OpContext) -> list[np.ndarray]:
    return _add_sub(ctx, -1)


@kernel("MUL", int16=True)
def mul(ctx: OpContext) -> list[np.ndarray]:
    gated = ctx.cache.get("gated")
    if gated:  # x·g(x), decided on an earlier run: one table of x (g(x) is not read, may be None)
        return [gated[1](ctx.x(gated[0]))]
    direct = ctx.cache.get("direct_mul")
    if direct is not None and (y := direct(ctx.arrays[0], ctx.arrays[1])) is not None:
        return [y]  # the compiled MUL an earlier run set up, for these same input shapes
    a, b = ctx.x(0), ctx.x(1)
    dtype = ctx.out_dtype()
    if dtype == np.float32 and a.dtype == b.dtype == np.float32:  # one fresh product, clamped in place
        y = _float_pair(np.multiply, a, b)
        return [np.clip(y, *activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), dtype), out=y)]
    if dtype.kind == "f":
        return [apply_activation(ctx, a.astype(np.float32) * b.astype(np.float32), dtype)]
    plain = ctx.cache.get("plain")
    if plain is None:
        plain = ctx.cache["plain"] = ctx.in_quant(0) is None
    if plain:  # integer arithmetic without quantization
        return [(a.astype(np.int64) * b.astype(np.int64)).astype(dtype)]
    if a.dtype == np.int16 and dtype != np.int16:
        return [_mul_int16_to_8bit(ctx, a, b, dtype)]
    if dtype == np.int16:
        _symmetric(ctx, *_quants(ctx, 0, 1))
    gated = _gated_table(ctx, a, b, lambda p, q: _mul_q(ctx, p, q)) if ctx.jit else None
    if gated is not None:
        side, lookup = gated
        x = ctx.x(side)
        if side == 0:  # a function of the first input: the interpreter may call the lookup directly
            ctx.cache["compiled"] = (x.shape, x.dtype, lookup)
        return [lookup(x)]
    direct = _compiled_mul(ctx, a, b) if ctx.jit else None
    if direct is not None:
        return [direct]
    return [_by_table(ctx, a, b, lambda p, q: _mul_q(ctx, p, q))]


def _compiled_mul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """An 8-bit MUL of two same-shape tensors or of a tensor by a per-channel vector (either order)
    as one compiled pass of :func:`_mul_q`'s integers (the product less the zero points, requantized
    by :class:`.requant.FastRequant`'s compiled int64 formula) — ~0.3 ns per element where the 2^16
    table's gathers take 0.5–0.8; None where that does not apply (other broadcasts, 16-bit, a
    multiplier the compiled formula does not take)."""
    if a.dtype != b.dtype or a.dtype.itemsize != 1 or a.ndim != b.ndim or a.size == 0 or b.size == 0:
        return None
    big, small = (a, b) if a.size >= b.size else (b, a)
    channels = big.shape[-1] if big.ndim else 1
    if not big.flags.c_contiguous or (small.shape != big.shape and small.size != channels) \
            or (small.shape != big.shape and small.shape[-1:] != big.shape[-1:]):
        return None
    fast = ctx.cache.get("mul_requant", False)
    if fast is False:
        q1, q2, qo = _quants(ctx, 0, 1)
        m, shift = quantize_multiplier(_mul_real(ctx, q1, q2, qo))
        lo, hi = activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), ctx.out_dtype())
        fast = ctx.cache["mul_requant"] = FastRequant.build(
            bias=None, m=np.array([m]), shift=np.array([shift]), zp=qo.zp, lo=int(lo), hi=int(hi),
            rounding=ctx.rounding, acc_dtype=np.float64, out_dtype=ctx.out_dtype(), native=True)
    if fast is None or fast.native is None:
        return None
    za, zb = (ctx.in_quant(0).zp, ctx.in_quant(1).zp) if big is a else (ctx.in_quant(1).zp, ctx.in_quant(0).zp)
    run = ctx.cache["direct_mul"] = _direct_mul(fast, a, b, big is a, np.int32(za), np.int32(zb), ctx.out_dtype())
    return run(a, b)


def _direct_mul(fast: FastRequant, a: np.ndarray, b: np.ndarray, big_first: bool, za: np.int32, zb: np.int32,
                out_dtype: np.dtype) -> Callable[[np.ndarray | None, np.ndarray | None], np.ndarray | None]:
    """:func:`_compiled_mul` for inputs of the shapes and dtype of ``a``, ``b`` (None for others), its
    constants bound once: a later run goes from :func:`mul` straight to the compiled pass (the
    zero points, quantization and shape checks cost ~20 µs per operator in a model's run)."""
    assert fast.native is not None
    compiled, constants = fast.native[0].mul_requant, fast.native[1]
    shapes, dtype = (a.shape, b.shape), a.dtype
    big_shape = a.shape if big_first else b.shape
    rows = (-1, big_shape[-1] if big_shape else 1)

    def run(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        if a is None or b is None or (a.shape, b.shape) != shapes or a.dtype != dtype or b.dtype != dtype:
            return None
        big, small = (a, b) if big_first else (b, a)
        if not big.flags.c_contiguous:
            return None
        out = np.empty(big_shape, out_dtype)
        compiled(big.reshape(rows), np.ascontiguousarray(small).reshape(rows), za, zb, constants, out.reshape(rows))
        return out

    return run


def _mul_real(ctx: OpContext, q1: Quant, q2: Quant, qo: Quant) -> float:
    """The MUL's real multiplier ``s1·s2/s_out``: TFLM's Prepare computes it in double, LiteRT's in float32."""
    if ctx.flavor == "tflm":
        return _f64(q1.s) * _f64(q2.s) / _f64(qo.s)
    return float(np.float32(np.float32(q1.s) * np.float32(q2.s)) / np.float32(qo.s))


#: unary operators whose 8-bit output a MUL of it by its own input reads as one table (the swish
#: x·sigmoid(x) of EfficientNet, tanh gates)
_GATES = frozenset({"LOGISTIC", "TANH"})


def _gated_table(ctx: OpContext, a: np.ndarray, b: np.ndarray,
                 fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
                 ) -> tuple[int, Callable[[np.ndarray], np.ndarray]] | None:
    """For ``fn(x, g(x))`` (either order) with ``g`` an 8-bit LOGISTIC/TANH of the other input:
    which input is ``x`` and the lookup (:func:`_byte_lookup`) of the 256-entry table of ``fn`` over every ``x`` — ``g(x)`` computed by
    ``g``'s own kernel, so each entry is the pair table's entry; one read of ``x`` instead of
    two inputs and 2^16 entries.  None otherwise; decided once per operator."""
    found = ctx.cache.get("gated", False)
    if found is not False:
        return found  # type: ignore[no-any-return]
    found = None
    if a.dtype == b.dtype and a.dtype.itemsize == 1 and a.dtype.kind in "iu":
        for side in (0, 1):
            gate = ctx.in_value(1 - side).producer
            if gate is not None and gate.op in _GATES and len(gate.inputs) == 1 \
                    and gate.inputs[0] is ctx.in_value(side):
                x = np.arange(256, dtype=np.uint8).view(a.dtype)
                gx = KERNELS[gate.op](OpContext(gate, [x], ctx.rounding, None, ctx.jit, ctx.flavor))[0]
                if gx.dtype == a.dtype:
                    found = (side, _byte_lookup(np.ascontiguousarray(fn(x, gx) if side == 0 else fn(gx, x)), ctx.jit))
                    ctx.cache["unread"] = 1 - side  # the interpreter may leave the gate out
                break
    ctx.cache["gated"] = found
    return found


def _mul_int16_to_8bit(ctx: OpContext, a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """LiteRT's int16 x int16 -> 8-bit MUL (the LSTM path): the Q0.15 product of the raw values
    (SRDHM on 16 bits), divided by 2^8 rounding half away, clamped, plus the output zero point."""
    qo = ctx.out_quant()
    zp = 0 if qo is None else qo.zp
    lo, hi = activation_range(ctx, int(ctx.attr("fused_activation_function", 0) or 0), dtype)
    prod = srdhm16(a.astype(np.int64), b.astype(np.int64))
    return (np.clip(rounding_divide_by_pot(prod, 8), lo - zp, hi - zp) + zp).astype(dtype)


def _mul_q(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q1, q2, qo = _quants(ctx, 0, 1)
    prod = (a.astype(np.int64) - q1.zp) * (b.astype(np.int64) - q2.zp)
    y = _mbqm(ctx, prod, _mul_real(ctx, q1, q2, qo)) + qo.zp
    return clamp_cast(ctx, y, ctx.out_dtype())
