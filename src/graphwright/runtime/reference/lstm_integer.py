"""The full-integer LSTM (int8 activations and weights, int16 cell state) of
UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM (:mod:`.lstm` dispatches here), as LiteRT's kernel and,
with ``flavor="tflm"``, as TensorFlow Lite Micro's.

LiteRT's ``LstmStepInteger8x8_16``: each gate is two requantized int32 products (input and
recurrent, zero points folded into the biases) summed in Q3.12, then gemmlowp's 16-bit
fixed-point sigmoid or tanh (to Q0.15, here as tables over the 65536 raw values,
:mod:`.gemmlowp`); the cell state (scale ``2^cell_scale``) is ``f·c >> 15`` plus
``i·g >> (30 + cell_scale)``, saturated and clipped; the hidden state is ``o·tanh(c)``
requantized to int8 by the effective hidden scale (the operator's fifth intermediate tensor).
Peepholes (int16 weights) add their requantized product with the cell state to the gate,
saturated — over the first ``outputs`` cells of each batch row (batch-major: LiteRT steps one
row at a time) or of the flattened batch (time-major), as LiteRT walks them; layer norm
(LiteRT's ApplyLayerNorm: integer mean and variance in 2^10 fixed point, gemmlowp's inverse
square root, the coefficients and the gate bias, back to Q3.12) runs on each gate before its
activation, the gates then at their intermediates' scales; a projection (int8 weights, bias
less ``zp_hidden·Σ_row w``) maps the hidden state to the output state, clipped to
``proj_clip``.  The converter emits none of these from Keras layers (tests build them with the
schema's object API); it refuses 16x8 LSTMs.

``flavor="tflm"``: TFLM's own step (micro/kernels/lstm_eval.h), built from its reference
kernels.  Each gate is two int16 FULLY_CONNECTED outputs (scale 2^-12, multipliers
``s_x·s_w/2^-12`` in double, zero points as offsets, each saturated) added with saturation,
then the int16 LOGISTIC / TANH of the interpolated sigmoid table; the cell state is
``MUL(f, c) + MUL(i, g)`` (int16 MULs requantized to the cell scale, saturated and clipped);
the hidden state is ``MUL(o, TANH(c))`` to int8 at the output state's own scale and zero point
(not the fifth intermediate's).  TFLM needs the input gate (no CIFG) and a TANH cell activation.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._common import ACT_TANH, OpContext, quant_of
from .activations import sigmoid_table, sigmoid_tanh_q15
from .elementwise import _checked_log2
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot, wrap_int32
from .gemmlowp import inv_sqrt_multiplier, logistic16_table, saturate16, tanh16_table
from .luts import wrap16
from .sequence_common import (
    _BIAS,
    _CELL_STATE,
    _INPUT,
    _LAYER_NORM,
    _OUTPUT_STATE,
    _PEEPHOLE,
    _PROJECTION,
    _PROJECTION_BIAS,
    _W_INPUT,
    _W_RECURRENT,
)


def _lookup(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    return table[x.astype(np.int64) + 32768].astype(np.int64)


#: the gates' pre-activations are Q3.12 without layer norm
_GATE_SCALE = 2.0 ** -12
#: gate -> its peephole weights' place among inputs 9-11 (the cell gate has none)
_PEEPHOLE_SLOT = {0: 0, 1: 1, 3: 2}


class _IntegerGate(NamedTuple):
    """One gate of the integer LSTM as LiteRT's Prepare leaves it: the input and recurrent weights
    (transposed, int64) with their zero-point-folded biases and multipliers; the peephole weights
    and multiplier; the layer-norm coefficients, gate bias, multiplier and variance guard."""

    w_in: np.ndarray
    b_in: np.ndarray
    m_in: tuple[int, int]
    w_rec: np.ndarray
    b_rec: np.ndarray
    m_rec: tuple[int, int]
    peephole: tuple[np.ndarray, tuple[int, int]] | None
    norm: tuple[np.ndarray, np.ndarray, tuple[int, int], int] | None


def _integer_plan(ctx: OpContext) -> dict[str, Any]:
    """What LiteRT's Prepare derives from the constants and scales (PopulateQuantizedLstmParams8x8_16,
    PopulatePrecomputedZPTimesWeightsWithBias): per gate the input and recurrent weights, the biases
    with the zero points folded in (the gate bias goes to layer norm instead when there is one), the
    requantization multipliers to the gate's scale (Q3.12, or the gate's intermediate with layer norm),
    the peephole and layer-norm parameters; the cell scale's exponent; the hidden multiplier; the
    projection (weights, bias less ``zp_hidden·Σ_row w``, multiplier); the quantized clips."""
    intermediates = ctx.node.meta.get("tflite.intermediates") or []
    hidden = quant_of(intermediates[4]) if len(intermediates) == 5 else None
    if hidden is None:
        raise ctx.error("an integer LSTM needs its five intermediate tensors (the fifth quantized)")
    q_in, q_state, q_cell = ctx.in_quant(_INPUT), ctx.in_quant(_OUTPUT_STATE), ctx.in_quant(_CELL_STATE)
    q_out = ctx.out_quant()
    if q_in is None or q_state is None or q_cell is None or q_out is None:
        raise ctx.error("an integer LSTM needs quantized input, output and states")
    cell_exponent = _cell_exponent(q_cell.s, ctx.error)
    layer_norm = ctx.has(_LAYER_NORM + 1)
    gate_scales = [np.float32(_GATE_SCALE)] * 4
    if layer_norm:
        gate_q = [quant_of(v) for v in intermediates[:4]]
        if any(q is None for q in gate_q):
            raise ctx.error("a layer-norm integer LSTM needs its four gate intermediates quantized")
        gate_scales = [np.float32(q.s) for q in gate_q]  # type: ignore[union-attr]
    if ctx.has(_PEEPHOLE + 2) and ctx.x(_W_RECURRENT + 1).shape[1] > ctx.x(_W_INPUT + 1).shape[0]:
        raise ctx.error("a peephole integer LSTM with more outputs than cells is not implemented (LiteRT reads "
                        "past its peephole weights there)")

    def scale(i: int) -> np.float32:
        q = ctx.in_quant(i)
        if q is None:
            raise ctx.error(f"input {i} of an integer LSTM has no quantization")
        return np.float32(q.s)

    def multiplier(real: float) -> tuple[int, int]:
        m, e = quantize_multiplier(real)
        return int(m), int(e)

    gates: list[_IntegerGate | None] = []
    for g in range(4):
        if not ctx.has(_W_INPUT + g):
            gates.append(None)  # CIFG: no input gate
            continue
        w_in, w_rec = (ctx.x(i + g).astype(np.int64) for i in (_W_INPUT, _W_RECURRENT))
        bias = ctx.x(_BIAS + g).astype(np.int64) if ctx.has(_BIAS + g) else np.zeros(w_in.shape[0], np.int64)
        peephole = None
        index = _PEEPHOLE + _PEEPHOLE_SLOT.get(g, 0)
        if g in _PEEPHOLE_SLOT and ctx.has(index):
            peephole = (ctx.x(index).astype(np.int64), multiplier(float(np.float32(
                2.0 ** cell_exponent * np.float64(scale(index)) / np.float64(gate_scales[g])))))
        norm = None
        if layer_norm:
            s_norm = scale(_LAYER_NORM + g)
            norm = (ctx.x(_LAYER_NORM + g).astype(np.int64), bias, multiplier(float(s_norm)),
                    max(1, int(np.float32(10000) * s_norm)))
        folded = np.zeros_like(bias) if layer_norm else bias
        gates.append(_IntegerGate(
            w_in.T, folded - q_in.zp * w_in.sum(axis=1),
            multiplier(float(np.float32(scale(_W_INPUT + g) * np.float32(q_in.s)) / gate_scales[g])),
            w_rec.T, -q_state.zp * w_rec.sum(axis=1),
            multiplier(float(np.float32(scale(_W_RECURRENT + g) * np.float32(q_state.s)) / gate_scales[g])),
            peephole, norm))
    projection = None
    if ctx.has(_PROJECTION):
        w = ctx.x(_PROJECTION).astype(np.int64)
        bias = ctx.x(_PROJECTION_BIAS).astype(np.int64) if ctx.has(_PROJECTION_BIAS) else np.zeros(w.shape[0], np.int64)
        projection = (w.T, bias - hidden.zp * w.sum(axis=1),
                      multiplier(float(np.float32(np.float32(scale(_PROJECTION) * np.float32(hidden.s))
                                                  / np.float32(q_state.s)))))
    clip = float(ctx.attr("cell_clip", 0.0) or 0.0)
    proj_clip = float(ctx.attr("proj_clip", 0.0) or 0.0)
    return {
        "gates": gates, "cell_exponent": cell_exponent, "projection": projection,
        "hidden": multiplier(float(np.float32(2.0 ** -15 / np.float64(np.float32(hidden.s)) * 2.0 ** -15))),
        "hidden_zp": hidden.zp, "state_zp": q_state.zp,
        "cell_clip": int(min(max(np.float32(clip) / np.float32(q_cell.s), -32768.0), 32767.0)) if clip > 0 else 0,
        "proj_clip": int(min(max(np.float32(proj_clip) / np.float32(q_out.s), -128.0), 127.0)) if proj_clip > 0 else 0,
    }


def _cell_exponent(scale: float, fail: Any) -> int:
    """The integer LSTM's cell scale as a power of two (LiteRT's CheckedLog2), from 2^-15 to 2^-9:
    LiteRT refuses coarser ones, and leaves ``tanh(cell)`` unwritten (undefined outputs) for finer
    ones, whose Q(15 + exponent) format has no integer bits."""
    exponent = _checked_log2(scale)
    if exponent is None or not -15 <= exponent <= -9:
        raise fail(f"its int16 cell state's scale {scale} is not a power of two from 2^-15 to 2^-9")
    return exponent


def _integer_steps(ctx: OpContext, zp_in: int) -> tuple[np.ndarray, bool, tuple[np.ndarray, np.ndarray],
                                                       tuple[np.ndarray, np.ndarray]]:
    """What both integer LSTM steps start from: the input less ``zp_in`` as int64, time-major;
    whether the file's layout is; the output and cell state variables with their values as int64
    ``[batch, units]``."""
    x = ctx.x(_INPUT).astype(np.int64) - zp_in
    if x.ndim == 2:  # the one-step LSTM operator: one time step of the whole batch, as time-major
        x, time_major = x[None], True
    else:
        time_major = bool(ctx.attr("time_major", False))
        if not time_major:
            x = x.transpose(1, 0, 2)
    h_var, c_var = ctx.x(_OUTPUT_STATE), ctx.x(_CELL_STATE)
    h = h_var.reshape(h_var.shape[0] if h_var.ndim > 1 else x.shape[1], -1).astype(np.int64)
    return x, time_major, (h_var, h), (c_var, c_var.reshape(h.shape[0], -1).astype(np.int64))


def _layer_norm_integer(x: np.ndarray, norm: tuple[np.ndarray, np.ndarray, tuple[int, int], int]) -> np.ndarray:
    """LiteRT's ApplyLayerNorm on int16 gates ``[batch, cells]``: mean and variance in 2^10
    fixed point (integer divisions truncating), the inverse standard deviation as gemmlowp's
    (a variance below 1 replaced by the guard), times the coefficients plus the gate bias (int32
    arithmetic), rounded back by 2^10, requantized to Q3.12, saturated to int16."""
    coefficients, bias, (m, e), guard = norm
    n = x.shape[-1]
    total, squares = x.sum(axis=-1, keepdims=True), (x * x).sum(axis=-1, keepdims=True)
    mean = _trunc_div(total * 1024, n)
    variance = _trunc_div(squares * ((1 << 20) // n) - mean * mean, 1 << 20)
    variance = np.where(variance < 1, guard, variance)
    inv_m, inv_e = inv_sqrt_multiplier(variance)
    rescaled = multiply_by_quantized_multiplier(1024 * x - mean, inv_m, inv_e)
    scaled = wrap_int32(wrap_int32(rescaled * coefficients) + bias)
    rounded = _trunc_div(np.where(scaled > 0, scaled + 512, scaled - 512), 1024)
    return saturate16(multiply_by_quantized_multiplier(rounded, m, e + 12))


def _trunc_div(a: np.ndarray, b: int) -> np.ndarray:
    """C integer division (truncating toward zero) of int64 values by a positive ``b``."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def _integer_lstm(ctx: OpContext) -> list[np.ndarray]:
    """LiteRT's LstmStepInteger8x8_16 over the time steps (see the module docstring): per gate the
    two requantized products summed with saturation, the peephole product added (LiteRT walks the
    first ``outputs`` cells of each batch row there), layer norm, the Q3.12 sigmoid or tanh; the
    cell update; the hidden state, projected when there is a projection."""
    plan = ctx.cache.get("integer")
    if plan is None:
        plan = ctx.cache["integer"] = _integer_plan(ctx)
    x, time_major, (h_var, h), (c_var, c) = _integer_steps(ctx, 0)
    sigmoid, tanh_gate, tanh_cell = logistic16_table(3), tanh16_table(3), tanh16_table(15 + plan["cell_exponent"])
    m_hidden, s_hidden = plan["hidden"]
    clip, cell_shift = plan["cell_clip"], 30 + plan["cell_exponent"]

    def gate(g: int, step: np.ndarray, cell: np.ndarray, table: np.ndarray) -> np.ndarray:
        p: _IntegerGate = plan["gates"][g]
        acc = saturate16(multiply_by_quantized_multiplier(step @ p.w_in + p.b_in, *p.m_in))
        acc = saturate16(multiply_by_quantized_multiplier(h @ p.w_rec + p.b_rec, *p.m_rec) + acc)
        if p.peephole is not None:  # LiteRT walks n_output (not n_cell) cells per batch row here
            weights, (m, e) = p.peephole
            n = h.shape[1]
            if time_major:  # one call for the whole batch: the first batch·n_output cells, flat
                flat, cells = acc.reshape(-1).copy(), cell.reshape(-1)
                span = n * acc.shape[0]
                flat[:span] = saturate16(multiply_by_quantized_multiplier(np.tile(weights[:n], acc.shape[0])
                                                                           * cells[:span], m, e) + flat[:span])
                acc = flat.reshape(acc.shape)
            else:  # batch-major: one call per batch row, its first n_output cells
                acc = acc.copy()
                acc[:, :n] = saturate16(multiply_by_quantized_multiplier(weights[:n] * cell[:, :n], m, e)
                                         + acc[:, :n])
        if p.norm is not None:
            acc = _layer_norm_integer(acc, p.norm)
        return _lookup(table, acc)

    outputs = []
    for step in x:
        forget = gate(1, step, c, sigmoid)
        update = gate(2, step, c, tanh_gate)
        keep = 32767 - forget if plan["gates"][0] is None else gate(0, step, c, sigmoid)
        c = wrap16(rounding_divide_by_pot(forget * c, 15))
        c = saturate16(c + wrap16(rounding_divide_by_pot(keep * update, cell_shift)))
        if clip > 0:
            c = np.clip(c, -clip, clip)
        out = gate(3, step, c, sigmoid)
        hidden = multiply_by_quantized_multiplier(out * _lookup(tanh_cell, c), m_hidden, s_hidden) + plan["hidden_zp"]
        h = np.clip(hidden, -128, 127)
        if plan["projection"] is not None:
            w, bias, (m, e) = plan["projection"]
            h = np.clip(multiply_by_quantized_multiplier(h @ w + bias, m, e) + plan["state_zp"], -128, 127)
            if plan["proj_clip"] > 0:
                h = np.clip(h, -plan["proj_clip"], plan["proj_clip"])
        outputs.append(h.astype(np.int8))
    c_var[...] = c.reshape(c_var.shape)  # the variable tensors keep the last state, as LiteRT's
    h_var[...] = h.reshape(h_var.shape)
    y = np.stack(outputs)
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2))]


# -- TFLM's integer LSTM (flavor="tflm") ---------------------------------------------------------------


def _tflm_integer_plan(ctx: OpContext) -> dict[str, Any]:
    """What TFLM's Prepare derives (PrepareGateParametersInteger): per gate the weights, bias and
    the two FULLY_CONNECTED multipliers; the three inter-gate MUL multipliers; the cell scale's
    exponent and the quantized cell clip."""
    for index, what in ((_PEEPHOLE + 2, "peephole weights"), (_PROJECTION, "a projection"),
                        (_LAYER_NORM + 1, "layer normalization")):
        if ctx.has(index):
            raise ctx.error(f"an integer LSTM with {what} is not implemented")
    if not ctx.has(_W_INPUT):
        raise ctx.error("TFLM's integer LSTM needs the input gate (CIFG is not implemented there)")
    if int(ctx.attr("fused_activation_function", ACT_TANH) or 0) != ACT_TANH:
        raise ctx.error("TFLM's integer LSTM runs a TANH cell activation only")
    q_in, q_state, q_cell = ctx.in_quant(_INPUT), ctx.in_quant(_OUTPUT_STATE), ctx.in_quant(_CELL_STATE)
    if q_in is None or q_state is None or q_cell is None:
        raise ctx.error("an integer LSTM needs quantized input and states")
    gates = []
    for g in range(4):
        w_in, w_rec = (ctx.x(i + g).astype(np.int64) for i in (_W_INPUT, _W_RECURRENT))
        s_in, s_rec = (float(ctx.in_quant(i + g).s) for i in (_W_INPUT, _W_RECURRENT))  # type: ignore[union-attr]
        bias = ctx.x(_BIAS + g).astype(np.int64) if ctx.has(_BIAS + g) else np.zeros(w_in.shape[0], np.int64)
        gates.append((w_in.T, bias, quantize_multiplier(q_in.s * s_in / _GATE_SCALE),
                      w_rec.T, quantize_multiplier(q_state.s * s_rec / _GATE_SCALE)))
    clip = float(np.float32(ctx.attr("cell_clip", 0.0) or 0.0))
    return {
        "gates": gates, "cell_exponent": _cell_exponent(q_cell.s, ctx.error), "table": sigmoid_table(),
        "forget_cell": quantize_multiplier(2.0 ** -15 * q_cell.s / q_cell.s),
        "input_cell": quantize_multiplier(2.0 ** -30 / q_cell.s),
        "hidden": quantize_multiplier(2.0 ** -30 / q_state.s),
        "cell_clip": int(min(max(clip / q_cell.s, -32768.0), 32767.0)) if clip > 0 else 0,
    }


def _tflm_integer_lstm(ctx: OpContext) -> list[np.ndarray]:
    """TFLM's integer LSTM step over the time steps (see the module docstring)."""
    plan = ctx.cache.get("tflm_integer")
    if plan is None:
        plan = ctx.cache["tflm_integer"] = _tflm_integer_plan(ctx)
    zp_in, zp_state = ctx.in_quant(_INPUT).zp, ctx.in_quant(_OUTPUT_STATE).zp  # type: ignore[union-attr]
    x, time_major, (h_var, h), (c_var, c) = _integer_steps(ctx, zp_in)
    table, clip = plan["table"], plan["cell_clip"]
    # TANH of the cell state: its Q(15 + exponent) values brought to the table's Q3.12 by 3·2^k
    left = 12 + plan["cell_exponent"]
    cell_tanh = (3 << left, 0) if left >= 0 else (3, -left)

    def mul(a: np.ndarray, b: np.ndarray, multiplier: tuple[int, int]) -> np.ndarray:
        return multiply_by_quantized_multiplier(a * b, *multiplier, ctx.rounding)

    def gate(g: int, step: np.ndarray, tanh: bool) -> np.ndarray:
        w_in, bias, m_in, w_rec, m_rec = plan["gates"][g]
        from_input = saturate16(multiply_by_quantized_multiplier(step @ w_in + bias, *m_in, ctx.rounding))
        from_state = saturate16(multiply_by_quantized_multiplier((h - zp_state) @ w_rec, *m_rec, ctx.rounding))
        return sigmoid_tanh_q15(saturate16(from_input + from_state), 3, 0, tanh, table).astype(np.int64)

    outputs = []
    for step in x:
        forget, keep, update = gate(1, step, False), gate(0, step, False), gate(2, step, True)
        c = saturate16(saturate16(mul(forget, c, plan["forget_cell"]))
                        + saturate16(mul(keep, update, plan["input_cell"])))
        if clip > 0:
            c = np.clip(c, -clip, clip)
        out = gate(3, step, False)
        squashed = sigmoid_tanh_q15(c, *cell_tanh, True, table).astype(np.int64)
        h = np.clip(mul(squashed, out, plan["hidden"]) + zp_state, -128, 127)
        outputs.append(h.astype(np.int8))
    c_var[...] = c.reshape(c_var.shape)
    h_var[...] = h.reshape(h_var.shape)
    y = np.stack(outputs)
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2))]
