"""Fused sequence operators — as LiteRT's kernels (the same in its reference resolver).

* UNIDIRECTIONAL_SEQUENCE_LSTM: float32; hybrid (float activations, int8 weights); full-integer
  (int8 activations and weights, int16 cell state);
* BIDIRECTIONAL_SEQUENCE_LSTM: float32 and hybrid, without auxiliary inputs;
* SVDF: float32, hybrid (int8 feature and time weights) and int8 (int16 time weights and state);
* LSTM (the full, one-step operator: the sequence LSTM's step on ``[batch, input]``): float32,
  hybrid and full-integer;
* RNN (the basic RNN's one step), UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN:
  float32 and hybrid (int8 weights).

Their recurrent state lives in variable tensors, which the kernels update in place, so it
carries over to the next run as in LiteRT (see ``Interpreter.reset_variables``).

LSTM (float): LiteRT's ``lstm_eval`` step, once per time step.  The 24 inputs: 0 the sequence
``[batch, time, input]`` (``[time, batch, input]`` when ``time_major``); 1–4
input-to-{input, forget, cell, output} weights ``[cell, input]``; 5–8 recurrent-to-{...}
weights ``[cell, output]``; 9–11 peephole weights cell-to-{input, forget, output}; 12–15
gate biases; 16–17 projection weights ``[output, cell]`` and bias; 18–19 the output and cell
states; 20–23 layer-norm coefficients.  Optional: the input gate (absent: CIFG,
``i = 1 − f``), peepholes, projection, layer norm.  Hybrid: the products with int8 weights
are int32 dot products of the step's input and output state quantized per row (the projection's
of the hidden state likewise); int8 peephole weights are recovered to float32 by their scale.

LSTM (full-integer): LiteRT's ``LstmStepInteger8x8_16``.  Each gate is two requantized int32
products (input and recurrent, zero points folded into the biases) summed in Q3.12, then
gemmlowp's 16-bit fixed-point sigmoid or tanh (to Q0.15, here as tables over the 65536 raw
values); the cell state (scale ``2^cell_scale``) is ``f·c >> 15`` plus
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

LSTM (full-integer, ``flavor="tflm"``): TFLM's own step (micro/kernels/lstm_eval.h), built
from its reference kernels.  Each gate is two int16 FULLY_CONNECTED outputs (scale 2^-12,
multipliers ``s_x·s_w/2^-12`` in double, zero points as offsets, each saturated) added with
saturation, then the int16 LOGISTIC / TANH of the interpolated sigmoid table; the cell
state is ``MUL(f, c) + MUL(i, g)`` (int16 MULs requantized to the cell scale, saturated and
clipped); the hidden state is ``MUL(o, TANH(c))`` to int8 at the output state's own scale and
zero point (not the fifth intermediate's).  TFLM needs the input gate (no CIFG) and a TANH
cell activation.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ._common import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    ACT_RELU_N1_TO_1,
    ACT_TANH,
    OpContext,
    apply_activation,
    kernel,
    quant_of,
    round_half_away,
)
from .elementwise import sigmoid_table, sigmoid_tanh_q15
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier, rounding_divide_by_pot, wrap_int32
from .gemmlowp import inv_sqrt_multiplier, logistic16_table, saturate16, tanh16_table
from .luts import wrap16
from .prepare import OpCheck, Shape, prepare_rule

__all__: list[str] = []

#: input indices of the LSTM operators
_INPUT, _W_INPUT, _W_RECURRENT, _PEEPHOLE, _BIAS = 0, 1, 5, 9, 12
_PROJECTION, _PROJECTION_BIAS, _OUTPUT_STATE, _CELL_STATE, _LAYER_NORM = 16, 17, 18, 19, 20
#: gates in the order of the weight, bias and layer-norm inputs
_GATES = ("input", "forget", "cell", "output")
#: variance epsilon of LiteRT's MeanStddevNormalization
_NORM_EPSILON = np.float32(1e-8)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)


#: TfLiteFusedActivation's sigmoid (not in the schema's ActivationFunctionType)
_ACT_SIGMOID = 6
_BOUNDS = {ACT_RELU: (0.0, np.inf), ACT_RELU6: (0.0, 6.0), ACT_RELU_N1_TO_1: (-1.0, 1.0)}


def _activation(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """The operator's ``fused_activation_function`` on float values, as ApplyActivationToVector."""
    act = int(ctx.attr("fused_activation_function", ACT_TANH) or 0)
    if act == ACT_TANH:
        return np.tanh(x)
    if act == ACT_NONE:
        return x
    if act == _ACT_SIGMOID:
        return _sigmoid(x)
    if act not in _BOUNDS:
        raise ctx.error(f"activation {act} is not implemented")
    return np.clip(x, *_BOUNDS[act]).astype(np.float32)


def _layer_norm(x: np.ndarray) -> np.ndarray:
    """Per row ``(x − mean) / sqrt(variance + 1e-8)`` (MeanStddevNormalization)."""
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    variance = (x * x).mean(axis=-1, keepdims=True, dtype=np.float32) - mean * mean
    return ((x - mean) / np.sqrt(variance + _NORM_EPSILON)).astype(np.float32)


@kernel("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _unidirectional_lstm(ctx: OpContext) -> list[np.ndarray]:
    x, weights = ctx.x(_INPUT), ctx.x(_W_INPUT + 1)
    if x.dtype == np.int8 and weights.dtype == np.int8 and ctx.x(_CELL_STATE).dtype == np.int16:
        return _tflm_integer_lstm(ctx) if ctx.flavor == "tflm" else _integer_lstm(ctx)
    if x.dtype != np.float32 or weights.dtype not in (np.float32, np.int8):
        raise ctx.error(f"{x.dtype} input with {weights.dtype} weights is not implemented (float32, float32 "
                        "with int8 weights, or int8 with an int16 cell state)")
    time_major = bool(ctx.attr("time_major", False))
    y = _float_lstm(ctx, x if time_major else x.transpose(1, 0, 2), _UNIDIRECTIONAL)
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2))]


class _Layout(NamedTuple):
    """Where one direction's operands are among an LSTM operator's inputs (None: it has none)."""

    w_input: int
    w_recurrent: int
    peephole: int
    bias: int
    projection: int
    projection_bias: int
    output_state: int
    cell_state: int
    layer_norm: int | None


_UNIDIRECTIONAL = _Layout(_W_INPUT, _W_RECURRENT, _PEEPHOLE, _BIAS, _PROJECTION, _PROJECTION_BIAS, _OUTPUT_STATE,
                          _CELL_STATE, _LAYER_NORM)
#: BIDIRECTIONAL_SEQUENCE_LSTM: forward operands at 1–17, backward at 18–34, states at 35–38
_FORWARD = _Layout(1, 5, 9, 12, 16, 17, 35, 36, None)
_BACKWARD = _Layout(18, 22, 26, 29, 33, 34, 37, 38, None)


def _float_lstm(ctx: OpContext, x: np.ndarray, at: _Layout) -> np.ndarray:
    """One float LSTM over the time-major sequence ``x`` (LiteRT's LstmStepWithAuxInput per
    step), its weights where ``at`` says; the state tensors are updated in place."""
    h, c = ctx.x(at.output_state), ctx.x(at.cell_state)

    def optional(i: int | None) -> np.ndarray | None:
        return ctx.x(i) if i is not None and ctx.has(i) else None

    cifg = not ctx.has(at.w_input)
    w_in = [None if cifg and g == 0 else _weights(ctx, at.w_input + g) for g in range(4)]
    w_rec = [None if cifg and g == 0 else _weights(ctx, at.w_recurrent + g) for g in range(4)]
    hybrid = any(isinstance(w, _Int8Weights) for w in w_in + w_rec)
    asymmetric = bool(ctx.attr("asymmetric_quantize_inputs", False)) if hybrid else None
    bias = [optional(at.bias + g) for g in range(4)]
    norm = [optional(None if at.layer_norm is None else at.layer_norm + g) for g in range(4)]
    # int8 peephole weights are recovered to float32 (times their scale) as LiteRT's hybrid step does
    peephole = {g: _recovered(ctx, at.peephole + i) for i, g in enumerate((0, 1, 3)) if ctx.has(at.peephole + i)}
    projection = _weights(ctx, at.projection) if ctx.has(at.projection) else None
    projection_bias = optional(at.projection_bias)
    cell_clip, proj_clip = float(ctx.attr("cell_clip", 0.0) or 0.0), float(ctx.attr("proj_clip", 0.0) or 0.0)
    state_h, state_c = h.reshape(x.shape[1], -1), c.reshape(x.shape[1], -1)
    outputs = []

    def gate(g: int, step: _Operand, cell: np.ndarray) -> np.ndarray:
        """Pre-activation of gate ``g``: biases (after layer norm when there is one), products, peephole."""
        acc = (_product(step, w_in[g]) + _product(recurrent, w_rec[g])).astype(np.float32)
        if g in peephole:
            acc = acc + peephole[g] * cell
        if norm[g] is not None:
            acc = _layer_norm(acc) * norm[g]
        return acc + bias[g] if bias[g] is not None else acc

    for row in x:
        step, recurrent = _operand(row, asymmetric), _operand(state_h, asymmetric)
        forget = _sigmoid(gate(1, step, state_c))
        update = _activation(ctx, gate(2, step, state_c))
        input_gate = np.float32(1) - forget if cifg else _sigmoid(gate(0, step, state_c))
        cell = forget * state_c + update * input_gate
        if cell_clip > 0:
            cell = np.clip(cell, -cell_clip, cell_clip)
        out = _sigmoid(gate(3, step, cell)) * _activation(ctx, cell)
        if projection is not None:
            out = _product(_operand(out, asymmetric), projection)
            if projection_bias is not None:
                out = out + projection_bias
            if proj_clip > 0:
                out = np.clip(out, -proj_clip, proj_clip)
        state_c, state_h = cell.astype(np.float32), out.astype(np.float32)
        outputs.append(state_h)
    c[...] = state_c.reshape(c.shape)  # the variable tensors keep the last state, as LiteRT's
    h[...] = state_h.reshape(h.shape)
    return np.stack(outputs)


class _Int8Weights(NamedTuple):
    """A hybrid LSTM's int8 weight matrix (transposed, as int32) with its scale and row sums."""

    matrix: np.ndarray
    scale: np.float32
    row_sums: np.ndarray


class _Operand(NamedTuple):
    """A float operand of the gate products, with its per-row int8 quantization (scale, offset)
    when some weights are int8."""

    values: np.ndarray
    quantized: np.ndarray
    scale: np.ndarray
    offset: np.ndarray


def _recovered(ctx: OpContext, i: int) -> np.ndarray:
    """Float32 weights, or int8 ones times their scale in float32 (LiteRT's VectorScalarMultiply)."""
    w = ctx.x(i)
    if w.dtype != np.int8:
        return w
    q = ctx.in_quant(i)
    if q is None or q.scale.size != 1:
        raise ctx.error(f"input {i} holds int8 weights without one quantization scale")
    return (w.astype(np.float32) * np.float32(q.s)).astype(np.float32)


def _weights(ctx: OpContext, i: int) -> np.ndarray | _Int8Weights:
    w = ctx.x(i)
    if w.dtype != np.int8:
        return w.T
    q = ctx.in_quant(i)
    if q is None or q.scale.size != 1:
        raise ctx.error(f"input {i} holds int8 weights without one quantization scale")
    return _Int8Weights(w.T.astype(np.int32), np.float32(q.s), w.astype(np.int32).sum(axis=1))


def _operand(values: np.ndarray, asymmetric: bool | None) -> _Operand:
    """``values`` and, unless ``asymmetric`` is None (float weights only), their per-row int8
    quantization as LiteRT's hybrid kernels do it: symmetric (``scale = max|v|/127``,
    ``round(v·(127/max|v|))`` in float32, clamped to ±127), or asymmetric (``(max − min)/255``
    over a range holding 0, the zero point from the nearer end nudged into [−128, 127],
    ``round(offset + v·(1/scale))`` in float32); an all-zero row quantizes to zeros, scale 1."""
    if asymmetric is None:
        return _Operand(values, values, values, values)  # no quantization: only .values is read
    if asymmetric:
        rows = values.astype(np.float64)
        low, high = np.minimum(rows.min(axis=1), 0.0), np.maximum(rows.max(axis=1), 0.0)
        empty = low == high
        scale = np.where(empty, 1.0, (high - low) / 255.0)
        from_min, from_max = -128.0 - low / scale, 127.0 - high / scale
        zp = np.where(128.0 + np.abs(low / scale) < 127.0 + np.abs(high / scale), from_min, from_max)
        offset = np.where(empty, 0, np.where(zp <= -128, -128, np.where(zp >= 127, 127, round_half_away(zp))))
        scale32 = scale.astype(np.float32)
        q = round_half_away(offset[:, None].astype(np.float32) + values * (np.float32(1) / scale32)[:, None])
        q, qmin = np.where(empty[:, None], 0, q), -128
    else:
        high = np.abs(values).max(axis=1)
        empty = high == 0
        safe = np.where(empty, np.float32(1), high)
        scale32, offset = np.where(empty, np.float32(1), safe / np.float32(127)), np.zeros(len(values))
        q, qmin = np.where(empty[:, None], 0, round_half_away(values * (np.float32(127) / safe)[:, None])), -127
    return _Operand(values, np.clip(q, qmin, 127).astype(np.int32), scale32.astype(np.float32),
                    offset.astype(np.int32))


def _product(operand: _Operand, weights: np.ndarray | _Int8Weights) -> np.ndarray:
    """``operand · weights``: a float product, or, for int8 weights, the int32 dot products of the
    quantized rows (minus offset·row sums) times the row's scale times the weights' scale."""
    if not isinstance(weights, _Int8Weights):
        return operand.values @ weights  # type: ignore[no-any-return]
    dots = operand.quantized @ weights.matrix - operand.offset[:, None] * weights.row_sums
    return dots.astype(np.float32) * (operand.scale * weights.scale)[:, None]


@kernel("BIDIRECTIONAL_SEQUENCE_LSTM")
def _bidirectional_lstm(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's float and hybrid kernels: a forward LSTM over the sequence and a backward one
    over it reversed (its outputs put back in sequence order), concatenated along the features
    with ``merge_outputs``, else two outputs.  Auxiliary inputs (39–47) are refused."""
    x = ctx.x(_INPUT)
    if x.dtype != np.float32 or ctx.x(_FORWARD.w_input + 1).dtype not in (np.float32, np.int8):
        raise ctx.error("only float32 input with float32 or int8 weights is implemented")
    if any(ctx.has(i) for i in range(39, 48)):
        raise ctx.error("auxiliary inputs are not implemented")
    time_major = bool(ctx.attr("time_major", True))
    x = x if time_major else x.transpose(1, 0, 2)
    forward = _float_lstm(ctx, x, _FORWARD)
    backward = _float_lstm(ctx, x[::-1], _BACKWARD)[::-1]
    outputs = [np.concatenate([forward, backward], axis=-1)] if ctx.attr("merge_outputs", False) \
        else [forward, backward]
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2)) for y in outputs]


@prepare_rule("UNIDIRECTIONAL_SEQUENCE_LSTM", arity=(24, 24))
def _lstm_shapes(op: OpCheck) -> list[Shape]:
    for i, what in ((_INPUT, "input"), (_W_INPUT + 1, "input-to-forget weights"),
                    (_W_INPUT + 2, "input-to-cell weights"), (_W_INPUT + 3, "input-to-output weights"),
                    (_W_RECURRENT + 1, "recurrent-to-forget weights"), (_W_RECURRENT + 2, "recurrent-to-cell weights"),
                    (_W_RECURRENT + 3, "recurrent-to-output weights"), (_OUTPUT_STATE, "output state"),
                    (_CELL_STATE, "cell state")):
        op.need(i, what)
    x = op.rank(_INPUT, 3)
    w = op.rank(_W_INPUT + 1, 2)
    if op.has(_W_INPUT) != op.has(_W_RECURRENT):
        raise op.fail("it has only one of the input gate's input and recurrent weights")
    if x is None or w is None:
        return [None]
    cells, depth = w
    if x[2] != depth:
        raise op.fail(f"input {list(x)} has depth {x[2]}, its weights {list(w)} take {depth}")
    for g in range(4):
        for base, cols in ((_W_INPUT, depth), (_W_RECURRENT, None)):
            shape = op.shape(base + g)
            if shape is not None and (len(shape) != 2 or shape[0] != cells or (cols is not None and shape[1] != cols)):
                raise op.fail(f"{_GATES[g]} gate weights {list(shape)} do not fit {cells} cells")
    units = op.shape(_PROJECTION)[0] if op.has(_PROJECTION) and op.shape(_PROJECTION) is not None else cells
    time_major = bool(op.attr("time_major", False))
    batch, steps = (x[1], x[0]) if time_major else (x[0], x[1])
    for i, size, what in ((_OUTPUT_STATE, units, "output state"), (_CELL_STATE, cells, "cell state")):
        shape = op.shape(i)
        if shape is not None and int(np.prod(shape)) != batch * size:
            raise op.fail(f"{what} {list(shape)} does not hold {batch}x{size} values")
    cell = op.node.inputs[_CELL_STATE]
    if cell is not None and cell.dtype is not None and cell.dtype.value == "int16" and cell.quant is not None \
            and cell.quant.scale.size:
        _cell_exponent(float(cell.quant.scale.reshape(-1)[0]), op.fail)
    return [(steps, batch, units) if time_major else (batch, steps, units)]




@prepare_rule("BIDIRECTIONAL_SEQUENCE_LSTM")  # one output, or two without merge_outputs
def _bidirectional_shapes(op: OpCheck) -> list[Shape]:
    outputs = 1 if op.attr("merge_outputs", False) else 2
    if (len(op.node.inputs), len(op.node.outputs)) != (48, outputs):
        raise op.fail(f"it has {len(op.node.inputs)} inputs and {len(op.node.outputs)} outputs, where 48 and "
                      f"{outputs} are expected")
    op.need(_INPUT, "input")
    x = op.rank(_INPUT, 3)
    shapes: list[Shape] = []
    for name, at in (("forward", _FORWARD), ("backward", _BACKWARD)):
        for i in (at.w_input + 1, at.w_recurrent + 1, at.output_state, at.cell_state):
            op.need(i, f"{name} weights and states")
        w, r = op.rank(at.w_input + 1, 2), op.rank(at.w_recurrent + 1, 2)
        if x is None or w is None or r is None:
            return [None] * len(op.node.outputs)
        if w[1] != x[2] or r[0] != w[0]:
            raise op.fail(f"{name} weights {list(w)} and {list(r)} do not fit input {list(x)}")
        shapes.append((x[0], x[1], r[1]))
    cells = [op.shape(at.w_input + 1)[0] for at in (_FORWARD, _BACKWARD)]  # type: ignore[index]
    if cells[0] != cells[1]:
        raise op.fail(f"its forward LSTM has {cells[0]} cells, its backward one {cells[1]}: LiteRT needs as many")
    if op.attr("merge_outputs", False):
        return [(*shapes[0][:2], shapes[0][2] + shapes[1][2])]  # type: ignore[index]
    return shapes

# -- UNIDIRECTIONAL_SEQUENCE_RNN, SVDF (float32) ------------------------------------------------------

@kernel("UNIDIRECTIONAL_SEQUENCE_RNN")
def _unidirectional_rnn(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: per time step ``h = act(b + x·Wᵀ + h·Rᵀ)``; inputs: the sequence,
    weights ``[units, input]``, recurrent weights ``[units, units]``, bias, the hidden state
    (a variable tensor, updated in place).  Float32, or hybrid (int8 weights, see ``_rnn_pass``)."""
    _check_rnn_types(ctx, (1,))
    time_major = bool(ctx.attr("time_major", False))
    x = ctx.x(0)
    y = _rnn_pass(ctx, 1, x if time_major else x.transpose(1, 0, 2))
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2))]


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
        filled[:, :, -1] = _product(_operand(x, asymmetric), _weights(ctx, 1))
        times = _recovered(ctx, 2)
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


@prepare_rule("UNIDIRECTIONAL_SEQUENCE_RNN", arity=(5, 5))
def _rnn_shapes(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("input", "weights", "recurrent weights", "bias", "hidden state")):
        op.need(i, what)
    x, w, r = op.rank(0, 3), op.rank(1, 2), op.rank(2, 2)
    if x is None or w is None:
        return [None]
    if w[1] != x[2] or (r is not None and r != (w[0], w[0])):
        raise op.fail(f"input {list(x)}, weights {list(w)} and recurrent weights {list(r or ())} do not fit")
    return [(x[0], x[1], w[0])]  # [batch, time, units], or [time, batch, units] when time-major


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

# -- the integer LSTM (8x8_16) -------------------------------------------------------------------------

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
    exponent = np.log(np.float32(scale)) * (np.float32(1) / np.log(np.float32(2)))
    rounded = int(np.round(exponent))
    if abs(float(exponent) - rounded) >= 1e-3 or not -15 <= rounded <= -9:
        raise fail(f"its int16 cell state's scale {scale} is not a power of two from 2^-15 to 2^-9")
    return rounded


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


# -- the full (one-step) LSTM and the bidirectional RNN ------------------------------------------------

@kernel("LSTM")
def lstm(ctx: OpContext) -> list[np.ndarray]:
    """The full (non-sequence) LSTM, float32, hybrid (int8 weights) or full-integer (int8, int16
    cell state): one step of the sequence operator's LSTM on ``[batch, input]`` (LiteRT runs the
    same lstm_eval step, the integer one as a time-major step of the whole batch), the states
    updated in place."""
    x, weights = ctx.x(0), ctx.x(_W_INPUT + 1)
    if x.dtype == np.int8 and weights.dtype == np.int8 and ctx.x(_CELL_STATE).dtype == np.int16 \
            and ctx.flavor != "tflm" and not int(ctx.attr("kernel_type", 0) or 0):
        return [_integer_lstm(ctx)[0][0]]  # LiteRT's integer step, the batch as one time-major step
    if x.dtype != np.float32 or weights.dtype not in (np.float32, np.int8) or int(ctx.attr("kernel_type", 0) or 0):
        raise ctx.error(f"{x.dtype} input with {weights.dtype} weights (kernel type {ctx.attr('kernel_type')}) is "
                        "not implemented (float32 input, float32 or int8 weights, the full kernel)")
    return [_float_lstm(ctx, x[None], _UNIDIRECTIONAL)[0]]


def _rnn_pass(ctx: OpContext, first: int, steps: np.ndarray) -> np.ndarray:
    """One basic RNN over the time-major ``steps`` (LiteRT's RnnBatchStep per step): ``h = act(b +
    x·Wᵀ + h·Rᵀ)``, the weights, recurrent weights, bias and hidden state (a variable, updated in
    place) at inputs ``first`` to ``first + 3``.  Float32, or hybrid: int8 weights, each product an
    int32 dot of the float operand quantized per row (symmetric, or asymmetric with
    ``asymmetric_quantize_inputs``), scaled by the row's scale times the weights' scale and added
    in that order (bias, input product, recurrent product), as the hybrid LSTM's."""
    weights, recurrent = _weights(ctx, first), _weights(ctx, first + 1)
    bias, state = ctx.x(first + 2), ctx.x(first + 3)
    hybrid = isinstance(weights, _Int8Weights) or isinstance(recurrent, _Int8Weights)
    asymmetric = bool(ctx.attr("asymmetric_quantize_inputs", False)) if hybrid else None
    h = state.reshape(steps.shape[1], -1)
    outputs = []
    for step in steps:
        acc = bias + _product(_operand(step, asymmetric), weights) + _product(_operand(h, asymmetric), recurrent)
        h = apply_activation(ctx, acc, np.dtype(np.float32))
        outputs.append(h)
    state[...] = h.reshape(state.shape)
    return np.stack(outputs)


def _check_rnn_types(ctx: OpContext, firsts: tuple[int, ...]) -> None:
    """Float32 input, bias and state with float32 or int8 (hybrid) weights, as LiteRT's RNN kernels."""
    if ctx.x(0).dtype != np.float32 or any(ctx.x(i).dtype not in (np.float32, np.int8)
                                           for first in firsts for i in (first, first + 1)):
        raise ctx.error("only float32 input with float32 or int8 weights is implemented")
    if any(ctx.x(first + k).dtype != np.float32 for first in firsts for k in (2, 3)):
        raise ctx.error("its bias and hidden state must be float32")


@kernel("RNN")
def rnn(ctx: OpContext) -> list[np.ndarray]:
    """LiteRT's basic RNN, one time step: ``h = act(b + x·Wᵀ + h·Rᵀ)`` on ``[batch, input]``;
    inputs: the step, weights ``[units, input]``, recurrent weights ``[units, units]``, bias,
    the hidden state ``[batch, units]`` (a variable tensor, updated in place); the output is the
    new hidden state.  Float32, or hybrid (int8 weights, see ``_rnn_pass``)."""
    _check_rnn_types(ctx, (1,))
    return [_rnn_pass(ctx, 1, ctx.x(0)[None])[0]]


@kernel("BIDIRECTIONAL_SEQUENCE_RNN")
def bidirectional_rnn(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: ``h = act(b + x·Wᵀ + h·Rᵀ)`` forward over the sequence and backward over
    it reversed (outputs in sequence order), concatenated along the features with
    ``merge_outputs``, else two outputs; inputs 0 the sequence, 1–4 forward weights, recurrent
    weights, bias, hidden state (variable), 5–8 the same backward.  Float32, or hybrid: int8
    weights, each product an int32 dot of the operand quantized per row (as the hybrid LSTM's);
    LiteRT's time-major hybrid kernel runs both directions once per time step, the states going
    on from pass to pass, and so does this one.  Auxiliary inputs refused."""
    _check_rnn_types(ctx, (1, 5))
    if any(ctx.has(i) for i in range(9, 12)):
        raise ctx.error("auxiliary inputs are not implemented")
    time_major = bool(ctx.attr("time_major", True))
    x = ctx.x(0)
    x = x if time_major else x.transpose(1, 0, 2)
    passes = len(x) if time_major and ctx.x(1).dtype == np.int8 else 1
    for _ in range(passes):
        forward, backward = _rnn_pass(ctx, 1, x), _rnn_pass(ctx, 5, x[::-1])[::-1]
    outputs = [np.concatenate([forward, backward], axis=-1)] if ctx.attr("merge_outputs", False) \
        else [forward, backward]
    return [y if time_major else np.ascontiguousarray(y.transpose(1, 0, 2)) for y in outputs]


@prepare_rule("RNN", arity=(5, 5))
def _rnn_step_shape(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("input", "weights", "recurrent weights", "bias", "hidden state")):
        op.need(i, what)
    x, w, r, b, h = op.rank(0, 2), op.rank(1, 2), op.rank(2, 2), op.rank(3, 1), op.rank(4, 2)
    if x is None or w is None:
        return [None]
    if w[1] != x[1] or (r is not None and r != (w[0], w[0])) or (b is not None and b != (w[0],)) \
            or (h is not None and h != (x[0], w[0])):
        raise op.fail(f"input {list(x)}, weights {list(w)}, recurrent weights {list(r or ())}, bias "
                      f"{list(b or ())} and hidden state {list(h or ())} do not fit")
    return [(x[0], w[0])]


@prepare_rule("LSTM", arity=(20, 24))
def _lstm_shape(op: OpCheck) -> list[Shape]:
    for i, what in ((0, "input"), (_W_INPUT + 1, "input-to-forget weights"), (18, "output state"),
                    (19, "cell state")):
        op.need(i, what)
    x, w = op.rank(0, 2), op.rank(_W_INPUT + 1, 2)
    units = op.shape(16)[0] if op.has(16) and op.shape(16) is not None else None  # type: ignore[index]
    if x is None or w is None:
        return [None]
    if w[1] != x[1]:
        raise op.fail(f"input {list(x)} does not fit its weights {list(w)}")
    return [(x[0], w[0] if units is None else units)]


@prepare_rule("BIDIRECTIONAL_SEQUENCE_RNN")  # one output, or two without merge_outputs
def _bidirectional_rnn_shapes(op: OpCheck) -> list[Shape]:
    outputs = 1 if op.attr("merge_outputs", False) else 2
    if not 9 <= len(op.node.inputs) <= 12 or len(op.node.outputs) != outputs:
        raise op.fail(f"it has {len(op.node.inputs)} inputs and {len(op.node.outputs)} outputs, where 9 to 12 "
                      f"and {outputs} are expected")
    for i in range(9):
        op.need(i)
    x = op.rank(0, 3)
    shapes: list[Shape] = []
    for name, first in (("forward", 1), ("backward", 5)):
        w, r = op.rank(first, 2), op.rank(first + 1, 2)
        if x is None or w is None or r is None:
            return [None] * outputs
        if w[1] != x[2] or r != (w[0], w[0]):
            raise op.fail(f"{name} weights {list(w)} and {list(r)} do not fit input {list(x)}")
        shapes.append((x[0], x[1], w[0]))
    if outputs == 1:
        return [(x[0], x[1], shapes[0][2] + shapes[1][2])]  # type: ignore[index]
    return shapes
