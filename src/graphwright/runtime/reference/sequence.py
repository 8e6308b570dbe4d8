"""Fused sequence operators (UNIDIRECTIONAL_SEQUENCE_LSTM and the other recurrent ops the converter
emits) — as TFLite's reference kernels.

UNIDIRECTIONAL_SEQUENCE_LSTM (float32): LiteRT's ``lstm_eval`` step, once per time step.
Its 24 inputs: 0 the sequence ``[batch, time, input]`` (``[time, batch, input]`` when
``time_major``); 1–4 input-to-{input, forget, cell, output} weights ``[cell, input]``;
5–8 recurrent-to-{...} weights ``[cell, output]``; 9–11 peephole weights cell-to-{input,
forget, output} ``[cell]``; 12–15 gate biases; 16–17 projection weights ``[output, cell]``
and bias; 18–19 the output and cell states (variable tensors, updated in place so they
carry over to the next run, as in LiteRT); 20–23 layer-norm coefficients.  Optional:
the input gate (absent: CIFG, ``i = 1 − f``), peepholes, projection, layer norm.
"""

from __future__ import annotations

import numpy as np

from ._common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, OpContext, kernel
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


def _activation(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """The cell's activation (``fused_activation_function``), as ApplyActivationToVector."""
    act = int(ctx.attr("fused_activation_function", ACT_TANH) or 0)
    if act == ACT_TANH:
        return np.tanh(x)
    if act == ACT_NONE:
        return x
    bounds = {ACT_RELU: (0.0, np.inf), ACT_RELU6: (0.0, 6.0), ACT_RELU_N1_TO_1: (-1.0, 1.0)}
    if act == 6:  # kTfLiteActSigmoid
        return _sigmoid(x)
    if act not in bounds:
        raise ctx.error(f"cell activation {act} is not implemented")
    return np.clip(x, *bounds[act]).astype(np.float32)


def _layer_norm(x: np.ndarray) -> np.ndarray:
    """Per row ``(x − mean) / sqrt(variance + 1e-8)`` (MeanStddevNormalization)."""
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    variance = (x * x).mean(axis=-1, keepdims=True, dtype=np.float32) - mean * mean
    return ((x - mean) / np.sqrt(variance + _NORM_EPSILON)).astype(np.float32)


@kernel("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _unidirectional_lstm(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(_INPUT)
    if x.dtype != np.float32 or ctx.x(_W_INPUT + 1).dtype != np.float32:
        raise ctx.error(f"{x.dtype} input with {ctx.x(_W_INPUT + 1).dtype} weights is not implemented "
                        "(float32 only)")
    if not bool(ctx.attr("time_major", False)):
        x = x.transpose(1, 0, 2)  # [time, batch, input]
    h, c = ctx.x(_OUTPUT_STATE), ctx.x(_CELL_STATE)
    present = [ctx.has(_W_INPUT + g) for g in range(4)]
    cifg = not present[0]
    w_in = [ctx.x(_W_INPUT + g).T if present[g] else None for g in range(4)]
    w_rec = [ctx.x(_W_RECURRENT + g).T if ctx.has(_W_RECURRENT + g) else None for g in range(4)]
    bias = [ctx.x(_BIAS + g) if ctx.has(_BIAS + g) else None for g in range(4)]
    norm = [ctx.x(_LAYER_NORM + g) if ctx.has(_LAYER_NORM + g) else None for g in range(4)]
    peephole = {g: ctx.x(_PEEPHOLE + i) for i, g in enumerate((0, 1, 3)) if ctx.has(_PEEPHOLE + i)}
    projection = ctx.x(_PROJECTION).T if ctx.has(_PROJECTION) else None
    projection_bias = ctx.x(_PROJECTION_BIAS) if ctx.has(_PROJECTION_BIAS) else None
    cell_clip, proj_clip = float(ctx.attr("cell_clip", 0.0) or 0.0), float(ctx.attr("proj_clip", 0.0) or 0.0)
    state_h, state_c = h.reshape(h.shape[0], -1), c.reshape(c.shape[0], -1)
    outputs = []

    def gate(g: int, step: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """Pre-activation of gate ``g``: biases (after layer norm when there is one), products, peephole."""
        acc = (step @ w_in[g] + state_h @ w_rec[g]).astype(np.float32)
        if g in peephole:
            acc = acc + peephole[g] * cell
        if norm[g] is not None:
            acc = _layer_norm(acc) * norm[g]
        return acc + bias[g] if bias[g] is not None else acc

    for step in x:
        forget = _sigmoid(gate(1, step, state_c))
        update = _activation(ctx, gate(2, step, state_c))
        input_gate = np.float32(1) - forget if cifg else _sigmoid(gate(0, step, state_c))
        cell = forget * state_c + update * input_gate
        if cell_clip > 0:
            cell = np.clip(cell, -cell_clip, cell_clip)
        out = _sigmoid(gate(3, step, cell)) * _activation(ctx, cell)
        if projection is not None:
            out = out @ projection
            if projection_bias is not None:
                out = out + projection_bias
            if proj_clip > 0:
                out = np.clip(out, -proj_clip, proj_clip)
        state_c, state_h = cell.astype(np.float32), out.astype(np.float32)
        outputs.append(state_h)
    c[...] = state_c.reshape(c.shape)  # the variable tensors keep the last state, as LiteRT's
    h[...] = state_h.reshape(h.shape)
    y = np.stack(outputs)
    return [y if ctx.attr("time_major", False) else np.ascontiguousarray(y.transpose(1, 0, 2))]


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
    return [(steps, batch, units) if time_major else (batch, steps, units)]
