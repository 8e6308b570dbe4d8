"""The LSTM operators, as LiteRT's kernels (the same in its reference resolver):

* UNIDIRECTIONAL_SEQUENCE_LSTM: float32; hybrid (float activations, int8 weights); full-integer
  (int8 activations and weights, int16 cell state: :mod:`.lstm_integer`);
* BIDIRECTIONAL_SEQUENCE_LSTM: float32 and hybrid, without auxiliary inputs;
* LSTM (the full, one-step operator: the sequence LSTM's step on ``[batch, input]``): float32,
  hybrid and full-integer.

Their state lives in variable tensors, updated in place (see :mod:`.sequence_common`).

LSTM (float): LiteRT's ``lstm_eval`` step, once per time step.  The 24 inputs: 0 the sequence
``[batch, time, input]`` (``[time, batch, input]`` when ``time_major``); 1–4
input-to-{input, forget, cell, output} weights ``[cell, input]``; 5–8 recurrent-to-{...}
weights ``[cell, output]``; 9–11 peephole weights cell-to-{input, forget, output}; 12–15
gate biases; 16–17 projection weights ``[output, cell]`` and bias; 18–19 the output and cell
states; 20–23 layer-norm coefficients.  Optional: the input gate (absent: CIFG,
``i = 1 − f``), peepholes, projection, layer norm.  Hybrid: the products with int8 weights
are int32 dot products of the step's input and output state quantized per row (the projection's
of the hidden state likewise; :mod:`.hybrid`); int8 peephole weights are recovered to float32
by their scale.
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel
from .activations import _sigmoid
from .hybrid import _Int8Weights, _Operand, _operand, _product, _product_weights, _recovered_weights
from .lstm_integer import _cell_exponent, _integer_lstm, _tflm_integer_lstm
from .prepare import OpCheck, Shape, prepare_rule
from .sequence_common import (
    _BACKWARD,
    _CELL_STATE,
    _FORWARD,
    _GATES,
    _INPUT,
    _OUTPUT_STATE,
    _PROJECTION,
    _UNIDIRECTIONAL,
    _W_INPUT,
    _W_RECURRENT,
    _activation,
    _Layout,
)

__all__ = ["lstm"]

#: variance epsilon of LiteRT's MeanStddevNormalization
_NORM_EPSILON = np.float32(1e-8)


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


def _float_lstm(ctx: OpContext, x: np.ndarray, at: _Layout) -> np.ndarray:
    """One float LSTM over the time-major sequence ``x`` (LiteRT's LstmStepWithAuxInput per
    step), its weights where ``at`` says; the state tensors are updated in place."""
    h, c = ctx.x(at.output_state), ctx.x(at.cell_state)

    def optional(i: int | None) -> np.ndarray | None:
        return ctx.x(i) if i is not None and ctx.has(i) else None

    cifg = not ctx.has(at.w_input)
    w_in = [None if cifg and g == 0 else _product_weights(ctx, at.w_input + g) for g in range(4)]
    w_rec = [None if cifg and g == 0 else _product_weights(ctx, at.w_recurrent + g) for g in range(4)]
    hybrid = any(isinstance(w, _Int8Weights) for w in w_in + w_rec)
    asymmetric = bool(ctx.attr("asymmetric_quantize_inputs", False)) if hybrid else None
    bias = [optional(at.bias + g) for g in range(4)]
    norm = [optional(None if at.layer_norm is None else at.layer_norm + g) for g in range(4)]
    # int8 peephole weights are recovered to float32 (times their scale) as LiteRT's hybrid step does
    peephole = {g: _recovered_weights(ctx, at.peephole + i) for i, g in enumerate((0, 1, 3)) if ctx.has(at.peephole + i)}
    projection = _product_weights(ctx, at.projection) if ctx.has(at.projection) else None
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


# -- prepare checks ------------------------------------------------------------------------------------


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
