"""Element-wise operators: ADD, SUB, MUL, RELU*, LOGISTIC, TANH, HARD_SWISH,
SOFTMAX, QUANTIZE, DEQUANTIZE — float, 8-bit and 16x8, as TFLite's reference kernels.

ADD/SUB (8-bit): with ``t = 2·max(s1, s2)`` and a left shift of 20 bits::

    a_i = MBQM((x_i − zp_i)·2^20, s_i/t)        (i = 1, 2)
    y   = clamp(MBQM(a_1 ± a_2, t/(2^20·s_out)) + zp_out)

MUL: ``y = clamp(MBQM((x1 − zp1)(x2 − zp2), s1·s2/s_out) + zp_out)``.
RELU/RELU6/RELU_N1_TO_1: ``clamp(MBQM(x − zp_in, s_in/s_out) + zp_out)``.
LOGISTIC/TANH (8-bit): a 256-entry table of ``round(f(s_in·(q − zp_in))/s_out) + zp_out``
computed in float32.  SOFTMAX (8-bit): float32 table ``exp(−s_in·β·d)`` of the
distance ``d`` to the row max, ``y = round(e/(Σe·s_out)) + zp_out``.
HARD_SWISH (8-bit): TFLite's int16 fixed-point evaluation (see :func:`_hard_swish_q`).
QUANTIZE (8-bit to 8-bit): ``clamp(MBQM(x − zp_in, s_in/s_out) + zp_out)``; with single
rounding, XNNPACK's conversion instead — ``(x·M + zp_out·2^8 − M·zp_in + 2^7) >> 8`` with
``M = rint(256·s_in/s_out)`` in float32 — which LiteRT's default kernels run (measured equal
on every element; the 31-bit MBQM is one LSB off on ~5%).
8-bit ADD/SUB/MUL go through a table of the formula's value on all 2^16 input
pairs, built once per operator by the same code (:func:`_by_table`; operators of
fewer than 256 elements compute their first run directly and build it only if
they run again); unary 8-bit operators likewise through a 256-entry table
(:func:`_by_byte_table`).  With the compiled loops (:mod:`.jit`) each lookup is one pass.
16x8 (int16 activations, zero points 0), as LiteRT's int16 kernels:

* ADD/SUB: the 8-bit formula with a left shift of 15; or, with ``pot_scale_int16`` (the
  schema's default in the operator's options) and every scale a power of two, ``clamp(RDBPOT(x1, −s1) ± RDBPOT(x2, −s2))``
  with ``s_i = log2(s_i) − log2(s_out)`` (one of them 0, the other ≤ 0);
* MUL: the 8-bit formula; int16 x int16 -> 8-bit: the Q0.15 product, ``RDBPOT(·, 8) + zp_out``;
* LOGISTIC/TANH: the input rescaled to 1/(3·4096), a 256-entry sigmoid table interpolated on
  the low 9 (TANH: 8) bits, output Q0.15 (see :func:`_sigmoid_tanh_int16`);
* SOFTMAX: 513-entry LUTs of exp on [−10, 0] and of 1/(1+x) on [0, 1], built in double
  (:func:`_lut16_double`), interpolated on the low 7 bits (:func:`_softmax_int16`);
* RELU/RELU6 and QUANTIZE: the 8-bit formulas on int16.

All O(n) in the elements (SOFTMAX: O(n) per row plus a 256-entry table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._common import (
    KERNELS,
    OpContext,
    Quant,
    activation_range,
    apply_activation,
    clamp_cast,
    kernel,
    round_half_away,
    type_range,
)
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
)
from .gemmlowp import srdhm16
from .jit import kernels
from .luts import lut16_double, lut16_float32, lut16_lookup
from .requant import FastRequant

LEFT_SHIFT = 20


def _quants(ctx: OpContext, *indices: int) -> list[Quant]:
    qs = [ctx.in_quant(i) for i in indices] + [ctx.out_quant()]
    if any(q is None for q in qs):
        raise ctx.error("integer tensors without quantization parameters")
    return [q for q in qs if q is not None]


def _mbqm(ctx: OpContext, x: np.ndarray, real: float) -> np.ndarray:
    m, s = quantize_multiplier(real)
    return multiply_by_quantized_multiplier(x, m, s, ctx.rounding)


def _f64(v: float | np.floating[Any]) -> float:
    """A float32 scale as the double the runtime promotes it to."""
    return float(np.float64(np.float32(v)))


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


def _checked_log2(scale: float) -> int | None:
    """LiteRT's CheckedLog2 in float32: the rounded ``log2(scale)`` when it is within 1e-3 of an integer."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.float32(np.log(np.float32(scale)) * (np.float32(1) / np.log(np.float32(2))))
    if not np.isfinite(x):
        return None
    rounded = np.float32(round_half_away(x))
    return int(rounded) if abs(np.float32(x - rounded)) < np.float32(1e-3) else None


def _symmetric(ctx: OpContext, *quants: Quant) -> None:
    if any(q.zp != 0 for q in quants):
        raise ctx.error("int16 tensors with a non-zero zero point (LiteRT's 16-bit kernel needs symmetric quantization)")


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


#: inputs smaller than this are computed directly on an operator's first run (building the
#: 2^16 table costs more than one small run), through the table from its second run on
TABLE_MIN_SIZE = 256


def _by_table(ctx: OpContext, a: np.ndarray, b: np.ndarray,
              fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn(a, b)`` of two 8-bit tensors (per-tensor quantization) through a table of
    all 2^16 input pairs, built once per operator with ``fn`` itself — so it is the
    same arithmetic, element for element; O(2^16) once, then 3 passes of O(n) (one
    compiled pass with ``ctx.jit``)."""
    if a.dtype != b.dtype or a.dtype.itemsize != 1:
        return fn(a, b)
    table = ctx.cache.get("pair_table")
    if table is None and max(a.size, b.size) < TABLE_MIN_SIZE and not ctx.cache.get("ran_small"):
        ctx.cache["ran_small"] = True  # a small operator builds its table only if it runs again
        return fn(a, b)
    if table is None:
        bits = np.arange(1 << 16, dtype=np.uint16)
        hi_bits = (bits >> 8).astype(np.uint8).view(a.dtype)
        lo_bits = (bits & 0xFF).astype(np.uint8).view(a.dtype)
        table = ctx.cache["pair_table"] = np.ascontiguousarray(fn(hi_bits, lo_bits))
    if ctx.jit and a.ndim == b.ndim >= 1 and a.shape != b.shape:  # one tensor times a per-channel vector
        for x, v, x_first in ((a, b, True), (b, a, False)):
            if v.size == x.shape[-1] == v.shape[-1] > 1 and x.flags.c_contiguous and x.size >= 2048 * v.size:
                out = np.empty(x.shape, table.dtype)
                kernels().channel_lookup(x.reshape(-1, v.size).view(np.uint8), np.ascontiguousarray(v).reshape(-1)
                                         .view(np.uint8), table, x_first, out.reshape(-1, v.size))
                return out
    if ctx.jit:  # one compiled pass over [rows, last axis] views, broadcasting by zero strides
        if a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous:
            ctx.cache["direct_pair"] = run = _direct_pair(table, a)
            return run(a, b)  # type: ignore[return-value]
        shape = np.broadcast_shapes(a.shape, b.shape)
        rows = (-1, shape[-1] if shape else 1)
        a2, b2 = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        out = np.empty(shape, table.dtype)
        if out.size == 0:  # nothing to look up (and no row length to infer)
            return out
        kernels().pair_lookup(a2.reshape(rows).view(np.uint8), b2.reshape(rows).view(np.uint8), table,
                              out.reshape(rows))
        return out
    index = np.left_shift(a.view(np.uint8), 8, dtype=np.uint16)
    index = np.bitwise_or(index, b.view(np.uint8), dtype=np.uint16)  # broadcasts like a op b
    return table.take(index)  # type: ignore[no-any-return]


def _direct_pair(table: np.ndarray, like: np.ndarray
                 ) -> Callable[[np.ndarray | None, np.ndarray | None], np.ndarray | None]:
    """:func:`_by_table`'s compiled lookup of two contiguous 8-bit tensors of the shape and dtype of
    ``like`` (None for other inputs), its views set up once: a later run goes from the kernel straight
    to the compiled pass (its dtype, quantization and shape checks cost ~10 µs per operator in a run)."""
    compiled, shape, dtype = kernels().pair_lookup, like.shape, like.dtype

    def run(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        if a is None or b is None or a.shape != shape or b.shape != shape or a.dtype != dtype or b.dtype != dtype \
                or not (a.flags.c_contiguous and b.flags.c_contiguous):
            return None
        out = np.empty(shape, table.dtype)
        if out.size:
            compiled(a.reshape(1, -1).view(np.uint8), b.reshape(1, -1).view(np.uint8), table, out.reshape(1, -1))
        return out

    return run


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


def _by_byte_table(ctx: OpContext, x: np.ndarray, make: Callable[[], Callable[[np.ndarray], np.ndarray]]
                   ) -> np.ndarray:
    """``fn(x)`` with ``fn = make()`` (an elementwise function; ``make`` derives its
    constants) for an 8-bit tensor through a table of ``fn`` on all 256 input values,
    built once per operator with ``fn`` itself — the same arithmetic, element for
    element; O(256) once, then one gather of O(n) (compiled with ``ctx.jit``)."""
    if x.dtype.itemsize != 1 or x.dtype.kind not in "iu":
        return make()(x)
    lookup = ctx.cache.get("byte_lookup")
    if lookup is None:
        table = np.ascontiguousarray(make()(np.arange(256, dtype=np.uint8).view(x.dtype)))
        lookup = ctx.cache["byte_lookup"] = _byte_lookup(table, ctx.jit)
    if len(ctx.node.inputs) == 1:  # a function of x alone: the interpreter may call it directly
        ctx.cache["compiled"] = (x.shape, x.dtype, lookup)
    return lookup(x)


#: from this many elements on, an 8-bit lookup reads the 128 KB byte-pair table (see :func:`_byte_lookup`)
PAIR_LOOKUP_MIN = 1 << 18


def _byte_lookup(table: np.ndarray, jit: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``table[x]`` for the bytes of an 8-bit ``x``: one compiled pass (``jit``, contiguous
    ``x``) or numpy's gather.  Compiled, with 8-bit results, two bytes at a time where ``x`` has an
    even size of at least :data:`PAIR_LOOKUP_MIN`: a 2^16-entry table of every byte pair's two
    results (128 KB, built here once; half the gathers).  Smaller tensors read the 256-byte table:
    inside a model the convolutions between two lookups evict the pair table, and refetching it
    costs more than the gathers it saves (EfficientNet-B0 int8's swish lookups, measured in the
    run: 7×7×1152 41 → 20 µs, 14×14×480 42 → 32 µs; even at 28×28×240, 2^17.5; 1.7× faster from
    112×112×32 on)."""
    if not jit:
        return lambda x: table[x.view(np.uint8)]  # type: ignore[no-any-return]
    compiled = kernels()
    vector = _vbmi_lookup() if table.dtype.itemsize == 1 and table.size == 256 else None
    if vector is not None:  # 64 bytes per step in registers (see _vbmi_lookup)
        bytes_ = np.ascontiguousarray(table.view(np.uint8))

        def vectored(x: np.ndarray) -> np.ndarray:
            if not x.flags.c_contiguous:
                return table[x.view(np.uint8)]  # type: ignore[no-any-return]
            out = np.empty(x.shape, table.dtype)
            vector(x.reshape(-1).view(np.uint8), bytes_, out.reshape(-1).view(np.uint8))
            return out

        return vectored
    wide = None
    if table.dtype.itemsize == 1:  # 8-bit results: two of them in one uint16 entry
        pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)  # each uint16's two bytes
        wide = np.ascontiguousarray(table.view(np.uint8)[pairs]).reshape(-1).view(np.uint16)

    def lookup(x: np.ndarray) -> np.ndarray:
        if not x.flags.c_contiguous:
            return table[x.view(np.uint8)]  # type: ignore[no-any-return]
        out = np.empty(x.shape, table.dtype)
        if wide is not None and x.size % 2 == 0 and x.size >= PAIR_LOOKUP_MIN:
            compiled.byte_lookup(x.reshape(-1).view(np.uint16), wide, out.reshape(-1).view(np.uint16))
        else:
            compiled.byte_lookup(x.reshape(-1).view(np.uint8), table, out.reshape(-1))
        return out

    return lookup


_VBMI: list[Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None] = []


def _vbmi_lookup() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """``lookup(x, table, out)``: ``out[i] = table[x[i]]`` for flat contiguous uint8 ``x``, ``out`` and a
    256-byte ``table``, 64 bytes per step on AVX512-VBMI: two ``vpermi2b`` (each picks from 128 table
    bytes by the index's low 7 bits) and a select by the index's top bit — the 8-bit swish and sigmoid
    tables of a run at ~0.02 instead of ~0.3 ns per byte.  None where LLVM does not see avx512vbmi on
    the host or the compiled loop differs from numpy's gather on a self-test (once per process)."""
    if _VBMI:
        return _VBMI[0]
    found = None
    try:
        import llvmlite.binding as llvm  # lazy: numba is optional

        features = llvm.get_host_cpu_features()
        if features.get("avx512vbmi") and features.get("avx512bw") and features.get("avx512f"):
            made = _build_vbmi_lookup()
            rng = np.random.default_rng(11)
            ok = True
            for size in (0, 1, 63, 64, 65, 256, 1000, 4099):
                table = rng.integers(0, 256, 256).astype(np.uint8)
                x = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, size).astype(np.uint8)])
                out = np.empty_like(x)
                made(x, table, out)
                ok = ok and np.array_equal(out, table[x])
            found = made if ok else None
    except Exception:  # no VBMI-capable compile here: the scalar gather stays
        found = None
    _VBMI.append(found)
    return found


def _build_vbmi_lookup() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """Compile :func:`_vbmi_lookup`'s loop (numba, an LLVM intrinsic for the 64-byte steps)."""
    import numba  # lazy: numba is optional (the [fast] extra); compiled only where the host has AVX512-VBMI
    from llvmlite import ir  # lazy: as numba
    from numba import types  # lazy: as numba
    from numba.core import cgutils  # lazy: as numba
    from numba.core.extending import intrinsic  # lazy: as numba

    v64 = ir.VectorType(ir.IntType(8), 64)

    @intrinsic
    def steps(typingctx, x, table, out, count):  # type: ignore[no-untyped-def]
        sig = types.void(x, table, out, count)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            def data(i: int) -> object:
                return cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data

            xp, tp, op = data(0), data(1), data(2)
            permute = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v64, [v64, v64, v64]),
                                                     "llvm.x86.avx512.vpermi2var.qi.512")
            quarter = [builder.load(builder.bitcast(builder.gep(tp, [ir.Constant(ir.IntType(64), 64 * j)]),
                                                    v64.as_pointer()), align=1) for j in range(4)]
            with cgutils.for_range(builder, args[3]) as loop:
                at = builder.mul(loop.index, ir.Constant(loop.index.type, 64))
                index = builder.load(builder.bitcast(builder.gep(xp, [at]), v64.as_pointer()), align=1)
                low = builder.call(permute, [quarter[0], index, quarter[1]])  # table[0:128] by bits 0-6
                high = builder.call(permute, [quarter[2], index, quarter[3]])  # table[128:256]
                top = builder.icmp_signed("<", index, ir.Constant(v64, None))  # bit 7 set
                builder.store(builder.select(top, high, low), builder.bitcast(builder.gep(op, [at]), v64.as_pointer()),
                              align=1)
            return context.get_dummy_value()

        return sig, codegen

    @numba.njit(nogil=True, boundscheck=False)
    def lookup(x, table, out):  # type: ignore[no-untyped-def]
        full = x.size // 64
        steps(x, table, out, full)
        for i in range(full * 64, x.size):
            out[i] = table[x[i]]

    return lookup  # type: ignore[no-any-return]


def _relu_x(ctx: OpContext, lo: float, hi: float) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if dtype.kind == "f":
        return [np.clip(x, lo, hi).astype(dtype)]

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)
        tmin, tmax = type_range(dtype)
        scale = np.float32(qo.s)
        qlo = max(tmin, qo.zp + int(round_half_away(np.float32(lo) / scale)))
        qhi = tmax if hi == np.inf else min(tmax, qo.zp + int(round_half_away(np.float32(hi) / scale)))
        # LiteRT divides the scales in float32, then widens; TFLM's CalculateReluOpData divides in double
        real = float(qi.s) / float(qo.s) if ctx.flavor == "tflm" else float(np.float32(qi.s) / np.float32(qo.s))
        return lambda v: np.clip(_mbqm(ctx, v.astype(np.int64) - qi.zp, real) + qo.zp, qlo, qhi).astype(dtype)

    return [_by_byte_table(ctx, x, make)]


@kernel("RELU", int16=True)
def relu(ctx: OpContext) -> list[np.ndarray]:
    return _relu_x(ctx, 0.0, np.inf)


@kernel("RELU6", int16=True)
def relu6(ctx: OpContext) -> list[np.ndarray]:
    """Quantized under ``flavor="tflm"``, as TFLM's kernel: the input's integers clamped to
    ``[zp_in, zp_in + round(6/s_in)]`` (in float32, clamped to the type) and copied out, the
    output's quantization ignored."""
    x = ctx.x(0)
    if ctx.flavor == "tflm" and x.dtype.kind in "iu":
        q = ctx.in_quant(0)
        if q is None:
            raise ctx.error("integer tensors without quantization parameters")
        tmin, tmax = type_range(x.dtype)
        six = min(tmax, max(tmin, q.zp + int(round_half_away(np.float32(6.0) / np.float32(q.s)))))
        return [np.clip(x, q.zp, six).astype(ctx.out_dtype())]
    return _relu_x(ctx, 0.0, 6.0)


@kernel("RELU_N1_TO_1")
def relu_n1_to_1(ctx: OpContext) -> list[np.ndarray]:
    return _relu_x(ctx, -1.0, 1.0)


def _lookup(ctx: OpContext, fn: np.ufunc | object) -> list[np.ndarray]:
    """8-bit table of ``fn`` on the dequantized input, as PopulateLookupTable builds it."""
    x = ctx.x(0)
    dtype = ctx.out_dtype()

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)

        def populate(q: np.ndarray) -> np.ndarray:
            deq = (np.float32(qi.s) * (q.astype(np.int64) - qi.zp).astype(np.float32)).astype(np.float32)
            with np.errstate(over="ignore"):
                out = fn(deq).astype(np.float32)  # type: ignore[operator]
            inv = np.float32(1) / np.float32(qo.s)
            return np.clip(round_half_away((out * inv).astype(np.float32)).astype(np.int64) + qo.zp,
                           *type_range(dtype)).astype(dtype)

        return populate

    return [_by_byte_table(ctx, x, make)]


def _sigmoid_float32(x: np.ndarray) -> np.ndarray:
    """:func:`_sigmoid` of a float32 ``x``, the same arithmetic in one fresh buffer, in place."""
    y = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(y, out=y)
    y += np.float32(1)
    return np.divide(np.float32(1), y, out=y)  # type: ignore[no-any-return]


def _sigmoid(v: np.ndarray) -> np.ndarray:
    one = np.float32(1)
    return (one / (one + np.exp(-v))).astype(np.float32)


@kernel("LOGISTIC", int16=True)
def logistic(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype == np.float32 and ctx.out_dtype() == np.float32:  # the interpreter may call it directly
        ctx.cache["compiled"] = (x.shape, x.dtype, _sigmoid_float32)
        return [_sigmoid_float32(x)]
    if x.dtype.kind == "f":
        with np.errstate(over="ignore"):
            return [_sigmoid(x.astype(np.float32)).astype(ctx.out_dtype())]
    if x.dtype == np.int16:
        return [_sigmoid_tanh_int16(ctx, x, tanh=False)]
    return _lookup(ctx, _sigmoid)


@kernel("TANH", int16=True)
def tanh(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if x.dtype.kind == "f":
        return [np.tanh(x).astype(ctx.out_dtype())]
    if x.dtype == np.int16:
        return [_sigmoid_tanh_int16(ctx, x, tanh=True)]
    return _lookup(ctx, np.tanh)


def sigmoid_table() -> np.ndarray:
    """LiteRT's 256-entry table of ``sigmoid(i/24)`` in unsigned Q0.16 that its int16 LOGISTIC
    and TANH interpolate: ``round(2^16·sigmoid(i/24))`` (at most 2^16 − 1), one more at the
    entries listed (LiteRT's table is biased up there, measured entry by entry)."""
    table = np.minimum(np.round(65536.0 / (1.0 + np.exp(-np.arange(256) / 24.0))), 65535).astype(np.int64)
    table[list(_SIGMOID_TABLE_UP)] += 1
    return table


#: entries of LiteRT's sigmoid table one above the rounded sigmoid
_SIGMOID_TABLE_UP = (4, 8, 12, 14, 15, 16, 17, 19, 20, 21, 22, 25, 27, 28, 29, 30, 31, 33, 34, 35, 37, 39, 40, 41,
                     43, 44, 45, 46, 49, 50, 54, 62, 63, 64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255)


def _int16_input_rescale(qi: Quant, pot_shifts: tuple[int, ...]) -> tuple[int, int]:
    """(multiplier, right shift) that bring int16 LOGISTIC/TANH inputs to the table's scale
    1/(3·4096): for a power-of-two input scale whose shift ``12 + log2(s_in)`` is in
    ``pot_shifts``, ``3·2^shift`` and no shift; else ``s_in·3·4096`` doubled until it exceeds
    32767/2 (at most 31 times), truncated, with that many right shifts (LiteRT's Prepare)."""
    log2 = _checked_log2(qi.s)
    if log2 is not None and 12 + log2 in pot_shifts:
        return 3 << (12 + log2), 0
    multiplier, shift = _f64(qi.s) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def _sigmoid_tanh_int16(ctx: OpContext, x: np.ndarray, tanh: bool) -> np.ndarray:
    """LiteRT's int16 LOGISTIC / TANH: the input rescaled to 1/(3·4096) (or 1/(3·2048) for TANH's
    doubled argument), its magnitude's top bits index the sigmoid table, the low 9 (8) bits
    interpolate linearly; mirrored for negative inputs; output Q0.15 (scale 2^−15, zero point 0)."""
    qi, qo = _quants(ctx, 0)
    _symmetric(ctx, qi, qo)
    if _checked_log2(qo.s) != -15:
        raise ctx.error(f"int16 output scale {qo.s} is not 2^-15, which LiteRT's int16 kernel requires")
    multiplier, shift = _int16_input_rescale(qi, (0, 1) if tanh else (0,))
    table = ctx.cache.get("sigmoid_table")
    if table is None:
        table = ctx.cache["sigmoid_table"] = sigmoid_table()
    return sigmoid_tanh_q15(x, multiplier, shift, tanh, table)


def sigmoid_tanh_q15(x: np.ndarray, multiplier: int, shift: int, tanh: bool, table: np.ndarray) -> np.ndarray:
    """The reference int16 Logistic / Tanh (LiteRT's and TFLM's, its integer LSTM's gates too) on raw
    int16 values ``x``: ``(x·multiplier + round) >> shift`` puts them at the scale of the sigmoid
    ``table`` (:func:`sigmoid_table`), then the table lookup; int16 Q0.15 out."""
    v = (x.astype(np.int64) * multiplier + ((1 << shift) >> 1)) >> shift
    magnitude = np.abs(v)
    bits = 8 if tanh else 9
    top = magnitude >> bits
    inside = top < 255
    index = np.where(inside, top, 0)
    low = table[index]
    interpolated = (low << bits) + (magnitude & ((1 << bits) - 1)) * (table[index + 1] - low)
    r = np.where(inside, interpolated, 0xFFFF << 8 if tanh else 0x7FFF << 10)
    if tanh:
        r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1) >> 8
    else:
        r = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1) >> 10
    return r.astype(np.int16)


def _down16(m: int) -> int:
    """Round a 32-bit multiplier to 16 bits (saturating)."""
    return 32767 if m >= (1 << 31) - 1 - (1 << 15) else (m + (1 << 15)) >> 16


def _hard_swish_q(ctx: OpContext, x: np.ndarray, qi: Quant, qo: Quant, dtype: np.dtype) -> np.ndarray:
    """TFLite's 8-bit hard-swish: int16 fixed point, ``x·relu6(x+3)/6``.

    ``v = (x − zp_in)·2^7`` (scale ``s_in/128``); ``out = SRDHM16(v, m_o)``;
    ``r`` = ``v`` rescaled so that 3.0 -> 2^15 (saturating), mapped to [0, 1] by
    ``(r + 2^15) >> 1``; ``y = RDBPOT(DoublingHighMul(r, out), −e_o) + zp_out``.
    """
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(qi.s))
    m_out, e_out = quantize_multiplier(float(np.float32(hires / np.float32(qo.s))))
    m_rel, e_rel = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    m_out16, m_rel16 = _down16(m_out), _down16(m_rel)
    v = (x.astype(np.int64) - qi.zp) * 128
    pre_out = srdhm16(v, m_out16)
    r = v
    if e_rel > 0:
        r = np.clip(r * (1 << (e_rel - 1)), -32768, 32767)
    r = srdhm16(r, m_rel16)
    if e_rel > 0:
        r = np.clip(r * 2, -32768, 32767)
    if e_rel < 0:
        r = rounding_divide_by_pot(r, -e_rel)
    r = (r + (1 << 15)) >> 1
    prod = r * pre_out
    pre = np.where((r == -32768) & (pre_out == -32768), 32767,
                   np.where(prod >= 0, prod >> 15, -((-prod) >> 15)))
    y = rounding_divide_by_pot(pre, -e_out) + qo.zp
    return np.clip(y, *type_range(dtype)).astype(dtype)


def _hard_swish_float32(x: np.ndarray) -> np.ndarray:
    """``x·clip(x + 3, 0, 6)/6`` in float32, in one fresh buffer."""
    y = np.add(x, np.float32(3))
    np.clip(y, np.float32(0), np.float32(6), out=y)
    y *= x
    y /= np.float32(6)
    return y


def _compiled_hard_swish(x: np.ndarray) -> np.ndarray:
    """:func:`_hard_swish_float32` as one compiled pass (:mod:`.jit`; contiguous ``x``)."""
    out = np.empty(x.shape, np.float32)
    kernels().hard_swish_float(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


@kernel("HARD_SWISH")
def hard_swish(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dtype = ctx.out_dtype()
    if x.dtype.kind == "f":
        if x.dtype == dtype == np.float32:  # the interpreter may call it directly
            fn = _compiled_hard_swish if ctx.jit and x.flags.c_contiguous else _hard_swish_float32
            ctx.cache["compiled"] = (x.shape, x.dtype, fn)
            return [fn(x)]
        return [_hard_swish_float32(x.astype(np.float32, copy=False)).astype(dtype, copy=False)]

    def make() -> Callable[[np.ndarray], np.ndarray]:
        qi, qo = _quants(ctx, 0)
        return lambda v: _hard_swish_q(ctx, v, qi, qo, dtype)

    return [_by_byte_table(ctx, x, make)]


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
