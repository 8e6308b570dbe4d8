"""Per-operator facts the TFLite full-integer quantizer needs, as the TFLite converter uses them.

For each TFLite builtin the converter quantizes: which inputs are weights (and on which axis
their per-channel scales run), which input is the bias (and which input and weight scales make
its scale), how the output's quantization is chosen (its own calibrated range, the input's
parameters, or a fixed range), the operator version the converter writes for the quantized kernel, and whether LiteRT
has a 16x8 kernel (without one the operator stays float in 16x8, between DEQUANTIZE and QUANTIZE).

The versions are the minimum the converter writes for the quantized kernel; a float operator
already at a higher version (options such as ``keep_num_dims``) keeps its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["FIXED_OUTPUT", "OpSpec", "SHAPE_ONLY", "SPECS", "spec_of"]

#: Operators that read only their input's shape: they take an integer tensor as it is.
SHAPE_ONLY = frozenset({"SHAPE", "RANK"})

#: ``scale`` kinds: the output's range is its own (``own``), the input's (``same``, a
#: requantization-free op such as MAX_POOL_2D or RESHAPE), every input's and the output's
#: (``concat``: inputs are brought to the output's scale), or fixed by the kernel (``fixed``).
SCALES = ("own", "same", "concat", "fixed")

#: Output (scale, zero point) of the fixed-range operators, by activation type.
FIXED_OUTPUT: dict[str, dict[str, tuple[float, int]]] = {
    "LOGISTIC": {"int8": (1.0 / 256, -128), "int16": (1.0 / 32768, 0)},
    "SOFTMAX": {"int8": (1.0 / 256, -128), "int16": (1.0 / 32768, 0)},
    "TANH": {"int8": (1.0 / 128, 0), "int16": (1.0 / 32768, 0)},
    "LOG_SOFTMAX": {"int8": (16.0 / 256, 127)},
    "L2_NORMALIZATION": {"int8": (1.0 / 128, 0)},
}


@dataclass(frozen=True)
class OpSpec:
    """How one operator is quantized (see the module docstring)."""

    scale: str = "own"
    #: input index -> per-channel axis of that weight (None: one scale for the whole weight)
    weights: dict[int, int | None] = field(default_factory=dict)
    #: (bias input, activation input, weight input): the bias scale is s_in * s_w[c]
    bias: tuple[int, int, int] | None = None
    #: the operator version the converter writes for the quantized kernel (int8 and int16 alike)
    version: int = 2
    #: the converter quantizes it in int8 / in 16x8 (LiteRT has the kernel); otherwise it stays float
    int8: bool = True
    int16: bool = False
    #: the version in 16x8 when it differs from ``version``
    version16: int | None = None
    #: attribute values the converter writes in 16x8
    int16_attrs: dict[str, Any] = field(default_factory=dict)


_CONV_BIAS64 = {"quantized_bias_type": 4}  # TensorType INT64

SPECS: dict[str, OpSpec] = {
    "CONV_2D": OpSpec(weights={1: 0}, bias=(2, 0, 1), version=3, int16=True, int16_attrs=_CONV_BIAS64),
    "DEPTHWISE_CONV_2D": OpSpec(weights={1: 3}, bias=(2, 0, 1), version=3, int16=True),
    "FULLY_CONNECTED": OpSpec(weights={1: 0}, bias=(2, 0, 1), version=4, int16=True, int16_attrs=_CONV_BIAS64),
    "TRANSPOSE_CONV": OpSpec(weights={1: 0}, bias=(3, 2, 1), version=3, int16=True, int16_attrs=_CONV_BIAS64),
    "ADD": OpSpec(version=2, int16=True, int16_attrs={"pot_scale_int16": False}),
    "SUB": OpSpec(version=2, int16=True, int16_attrs={"pot_scale_int16": False}),
    "MUL": OpSpec(version=2, int16=True),
    "SQUARED_DIFFERENCE": OpSpec(version=2),
    "BATCH_MATMUL": OpSpec(version=2, int16=True),
    "MEAN": OpSpec(version=2, int16=True),
    "SUM": OpSpec(version=2),
    "RSQRT": OpSpec(version=2, int16=True),
    "GELU": OpSpec(version=2, int16=True),
    "HARD_SWISH": OpSpec(version=1),
    "PRELU": OpSpec(weights={1: None}, version=1),
    "LEAKY_RELU": OpSpec(version=1, int16=True, version16=2),
    "ABS": OpSpec(version=2, int16=True),
    "LOG": OpSpec(version=2, int16=True),
    "EXP": OpSpec(version=2, int16=True),
    "SQRT": OpSpec(version=2),
    "REDUCE_PROD": OpSpec(version=2, int16=True),
    "ARG_MAX": OpSpec(version=2),
    "ARG_MIN": OpSpec(version=2),
    "RESIZE_BILINEAR": OpSpec(scale="same", version=2, int16=True),
    "RESIZE_NEAREST_NEIGHBOR": OpSpec(scale="same", version=2, int16=True),
    "MAX_POOL_2D": OpSpec(scale="same", version=2, int16=True),
    "AVERAGE_POOL_2D": OpSpec(scale="same", version=2, int16=True),
    "REDUCE_MAX": OpSpec(scale="same", version=2, int16=True),
    "REDUCE_MIN": OpSpec(scale="same", version=2, int16=True),
    "SPACE_TO_BATCH_ND": OpSpec(scale="same", version=2, int16=True),
    "BATCH_TO_SPACE_ND": OpSpec(scale="same", version=2, int16=True),
    "SPACE_TO_DEPTH": OpSpec(scale="same", version=2),
    "SPLIT": OpSpec(scale="same", version=2, int16=True),
    "SPLIT_V": OpSpec(scale="same", version=2, int16=True),
    "UNPACK": OpSpec(scale="same", version=1, int8=False, int16=True),
    "MIRROR_PAD": OpSpec(scale="same", version=2, int16=True),
    "PADV2": OpSpec(scale="same", version=2),
    "REVERSE_V2": OpSpec(version=3, int16=True),
    "DEPTH_TO_SPACE": OpSpec(scale="same", version=2),
    "MAXIMUM": OpSpec(scale="concat", version=2),
    "MINIMUM": OpSpec(scale="concat", version=2),
    "DIV": OpSpec(version=1),
    "RELU_0_TO_1": OpSpec(version=1),
    "BROADCAST_TO": OpSpec(scale="same", version=3, int16=True),
    "RESHAPE": OpSpec(scale="same", version=1, int16=True),
    "SQUEEZE": OpSpec(scale="same", version=1, int16=True),
    "EXPAND_DIMS": OpSpec(scale="same", version=1, int16=True),
    "TRANSPOSE": OpSpec(scale="same", version=2, int16=True),
    "PAD": OpSpec(scale="same", version=2, int16=True),
    "SLICE": OpSpec(scale="same", version=2, int16=True),
    "STRIDED_SLICE": OpSpec(scale="same", version=2, int16=True),
    "GATHER": OpSpec(scale="same", version=2, int16=True),
    "RELU": OpSpec(version=2, int16=True),
    "RELU6": OpSpec(version=2, int16=True),
    "CONCATENATION": OpSpec(scale="concat", version=2, int16=True),
    "PACK": OpSpec(scale="concat", version=2, int16=True),
    "LOGISTIC": OpSpec(scale="fixed", version=2, int16=True),
    "TANH": OpSpec(scale="fixed", version=2, int16=True),
    "SOFTMAX": OpSpec(scale="fixed", version=2, int16=True),
    "LOG_SOFTMAX": OpSpec(scale="fixed", version=2),
    "L2_NORMALIZATION": OpSpec(scale="fixed", version=2),
    # comparisons: int8 inputs each at its own scale (the kernel rescales), a bool output;
    # NOT_EQUAL the converter leaves float
    "LESS": OpSpec(version=2),
    "LESS_EQUAL": OpSpec(version=2),
    "GREATER": OpSpec(version=2),
    "GREATER_EQUAL": OpSpec(version=2),
    "EQUAL": OpSpec(version=2),
    # the two selected inputs and the output share one scale; the condition stays bool
    "SELECT_V2": OpSpec(scale="concat", version=1),
    # the values keep their input's scale; the indices are int32
    "TOPK_V2": OpSpec(scale="same", version=2),
}


def spec_of(op: str) -> OpSpec | None:
    """The quantization facts of a TFLite builtin, or None when the converter leaves it float."""
    return SPECS.get(op)
