"""The basic RNN operators, as LiteRT's kernels: RNN (one time step), UNIDIRECTIONAL_SEQUENCE_RNN
and BIDIRECTIONAL_SEQUENCE_RNN — float32 and hybrid (int8 weights, the operands quantized per
row at run time: :mod:`.hybrid`).  Per time step ``h = act(b + x·Wᵀ + h·Rᵀ)``; the hidden state
is a variable tensor, updated in place.
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, apply_activation, kernel
from .hybrid import _Int8Weights, _operand, _product, _product_weights
from .prepare import OpCheck, Shape, prepare_rule


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


def _rnn_pass(ctx: OpContext, first: int, steps: np.ndarray) -> np.ndarray:
    """One basic RNN over the time-major ``steps`` (LiteRT's RnnBatchStep per step): ``h = act(b +
    x·Wᵀ + h·Rᵀ)``, the weights, recurrent weights, bias and hidden state (a variable, updated in
    place) at inputs ``first`` to ``first + 3``.  Float32, or hybrid: int8 weights, each product an
    int32 dot of the float operand quantized per row (symmetric, or asymmetric with
    ``asymmetric_quantize_inputs``), scaled by the row's scale times the weights' scale and added
    in that order (bias, input product, recurrent product), as the hybrid LSTM's."""
    weights, recurrent = _product_weights(ctx, first), _product_weights(ctx, first + 1)
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


# -- prepare checks ------------------------------------------------------------------------------------


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
