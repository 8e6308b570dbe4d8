"""What dynamic-range and weight-only TFLite quantization share: which operand of which
operator is a weight, how the converter rounds a float weight to int8, and operator versions.

* :data:`WEIGHT_SLOTS` — the weight operand of each operator the converter quantizes and the
  axis its per-channel scales run along (``None``: per-tensor only), as TFLiteConverter's
  dynamic-range quantizer picks them: CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV filters on
  axis 0, DEPTHWISE_CONV_2D on axis 3, BATCH_MATMUL's right operand and GATHER's table per tensor.
* :func:`symmetric_int8` — symmetric narrow-range int8 (codes in [-127, 127], zero point 0):
  ``scale = max|w| / 127`` per channel in double precision (a range narrower than 1e-6 is
  widened to ±5e-7, so an all-zero channel gets scale 3.937e-9 as the converter writes), and
  ``q = round_half_away(w / scale)`` with the double scale, stored as float32.  O(weights).
* :func:`float16_of` — float32 -> float16, clamped to ±65504, rounding to nearest even.
* :func:`raise_versions` — the converter writes one operator code per operator with the
  highest version any of its uses needs: every node of an operator gets that version.

The rounding rules were read off real converter output (TensorFlow 2.21): ties away from
zero, the division by the double-precision scale (not by its float32 rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ...ir import DType, Graph, Model, Node, QuantParams, Tensor, Value

__all__ = [
    "MIN_ELEMENTS", "WEIGHT_SLOTS", "WeightSlot", "dequantize_node", "float16_of", "float_weight", "has_float_constant",
    "int8_value", "raise_versions", "symmetric_int8",
]

#: Float weights with fewer elements stay float (the converter's ``minimum_elements_for_weights``).
MIN_ELEMENTS = 1024
#: The converter widens a quantization range narrower than this (an all-zero channel).
_MIN_RANGE = 1e-6
_QMAX = 127
_FLOAT16_MAX = 65504.0


@dataclass(frozen=True)
class WeightSlot:
    """The weight operand of an operator and its per-channel axis (None: per-tensor only)."""

    operand: int
    axis: int | None


WEIGHT_SLOTS: Mapping[str, WeightSlot] = {
    "CONV_2D": WeightSlot(1, 0),
    "DEPTHWISE_CONV_2D": WeightSlot(1, 3),
    "FULLY_CONNECTED": WeightSlot(1, 0),
    "TRANSPOSE_CONV": WeightSlot(1, 0),
    "BATCH_MATMUL": WeightSlot(1, None),
    "GATHER": WeightSlot(0, None),
}


def float_weight(node: Node, slot: WeightSlot, minimum: int = MIN_ELEMENTS) -> Value | None:
    """The node's float32 constant weight with at least ``minimum`` elements, else None."""
    if slot.operand >= len(node.inputs):
        return None
    value = node.inputs[slot.operand]
    if value is None or value.const is None or value.dtype is not DType.FLOAT32 or value.quant is not None:
        return None
    if value.meta.get("tflite.sparsity") is not None or value.const.size < minimum:
        return None
    return value


def has_float_constant(node: Node, operand: int) -> bool:
    """Whether the node reads a float32 constant at ``operand`` (quantized or left float)."""
    value = node.inputs[operand] if operand < len(node.inputs) else None
    return value is not None and value.const is not None and value.dtype is DType.FLOAT32


def symmetric_int8(values: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes int8, scales float32)``: symmetric narrow-range int8, per channel along ``axis``."""
    w = np.asarray(values, dtype=np.float64)
    if axis is None:
        absmax = np.abs(w).max(keepdims=True).reshape(1)
        shape = [1] * w.ndim
    else:
        others = tuple(d for d in range(w.ndim) if d != axis)
        absmax = np.abs(w).max(axis=others) if others else np.abs(w)
        shape = [1] * w.ndim
        shape[axis] = -1
    absmax = np.where(2.0 * absmax < _MIN_RANGE, _MIN_RANGE / 2.0, absmax)
    scale = absmax / _QMAX
    scaled = w / scale.reshape(shape)
    codes = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -_QMAX, _QMAX)
    return codes.astype(np.int8), scale.astype(np.float32)


def float16_of(values: np.ndarray) -> np.ndarray:
    """float32 -> float16 as the converter's float16 pass: clamped to ±65504, nearest even."""
    return np.clip(np.asarray(values, dtype=np.float32), -_FLOAT16_MAX, _FLOAT16_MAX).astype(np.float16)


def int8_value(graph: Graph, source: Value, codes: np.ndarray, scales: np.ndarray, axis: int | None,
               name: str) -> Value:
    """A new int8 initializer of ``graph`` holding ``codes`` with symmetric ``scales``."""
    quant = QuantParams(scales, np.zeros(scales.size, np.int64), axis if axis is not None and scales.size > 1 else 0)
    value = Value(name, DType.INT8, source.shape, const=Tensor.from_numpy(codes, DType.INT8, name=name), quant=quant)
    return graph.add_initializer(value)


def dequantize_node(source: Value, output: Value) -> Node:
    """A DEQUANTIZE of ``source`` into ``output`` (float32), with its operator version."""
    node = Node("DEQUANTIZE", [source], dialect="tflite", name=output.name, outputs=[output])
    node.meta["tflite.version"] = dequantize_version(source)
    return node


def dequantize_version(source: Value) -> int:
    """DEQUANTIZE's operator version for its input: 3 float16/int16, 5 per-channel int8, 2 int8."""
    if source.dtype in (DType.FLOAT16, DType.INT16):
        return 3
    if source.dtype is DType.INT8:
        return 5 if source.quant is not None and source.quant.per_channel else 2
    return 1


def raise_versions(model: Model, needed: Mapping[str, int], graphs: Iterable[Graph] | None = None) -> None:
    """Give every node of each operator in ``needed`` at least that version (one code per operator)."""
    nodes = [n for g in (graphs if graphs is not None else model.graphs) for n in g if n.op in needed]
    top: dict[str, int] = dict(needed)
    for node in nodes:
        top[node.op] = max(top[node.op], int(node.meta.get("tflite.version", 1)))
    for node in nodes:
        node.meta["tflite.version"] = top[node.op]
