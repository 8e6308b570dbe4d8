"""What the fused sequence operators share (:mod:`.lstm`, :mod:`.lstm_integer`, :mod:`.rnn`,
:mod:`.svdf`): where the LSTM operators' operands are among their inputs, and the float
activation LiteRT applies to their cell and hidden values (``ApplyActivationToVector``).

Their recurrent state lives in variable tensors, which the kernels update in place, so it
carries over to the next run as in LiteRT (see ``Interpreter.reset_variables``).  Products
with int8 weights and float activations (hybrid) are :mod:`.hybrid`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, OpContext
from .activations import _sigmoid

#: input indices of the LSTM operators
_INPUT, _W_INPUT, _W_RECURRENT, _PEEPHOLE, _BIAS = 0, 1, 5, 9, 12
_PROJECTION, _PROJECTION_BIAS, _OUTPUT_STATE, _CELL_STATE, _LAYER_NORM = 16, 17, 18, 19, 20
#: gates in the order of the weight, bias and layer-norm inputs
_GATES = ("input", "forget", "cell", "output")


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
