"""quantize_weights on ONNX: large float initializers stored as int8 plus ``DequantizeLinear``.

Before::  W = initializer[float32, >= minimum_size elements]          -> Conv(x, W)
After::   W_quantized = initializer[int8], W_scale = initializer[float32],
          W_zero_point = initializer[int8 zeros]
          W = DequantizeLinear(W_quantized, W_scale, W_zero_point[, axis=0]) -> Conv(x, W)

Symmetric: ``s = max|W| / 127`` and ``q = clamp(round_half_even(W / s), -127, 127)``,
so ``|W - s·q| <= s/2``.  With opset >= 13 and a tensor of rank >= 2 the scale
is per slice along axis 0 (per output channel of a Conv/Gemm weight); before
opset 13 DequantizeLinear has no axis, so one scale per tensor.  The value
``W`` keeps its name, so readers and graph outputs are unchanged.  Initializers
that are graph inputs (overridable) are left alone.  O(N + weights).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Model, Node, Tensor, Value
from .._onnx import opset_version
from ..registry import TransformResult
from .options import QuantOptions

__all__ = ["quantize_onnx_initializers", "symmetric_int8"]

#: First default-domain opset whose DequantizeLinear takes an ``axis``.
PER_CHANNEL_OPSET = 13
_QMAX = 127


def symmetric_int8(values: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scales) of ``values``: one scale, or one per slice along ``axis``."""
    if axis is None:
        peak = np.abs(values).max(initial=0.0)
    else:
        peak = np.abs(values).max(axis=tuple(i for i in range(values.ndim) if i != axis), initial=0.0)
    scale = np.where(peak > 0, peak / _QMAX, 1.0).astype(np.float32)
    shaped = scale if axis is None else scale.reshape([-1 if i == axis else 1 for i in range(values.ndim)])
    codes = np.clip(np.rint(values / shaped), -_QMAX, _QMAX).astype(np.int8)
    return codes, np.asarray(scale, np.float32)


def quantize_onnx_initializers(model: Model, *, minimum_size: int, options: QuantOptions | None = None) -> TransformResult:
    """The ONNX side of ``quantize_weights`` (see the module docstring)."""
    opset = opset_version(model, default=PER_CHANNEL_OPSET)  # none imported: as before, assume 13
    if opset < 10:
        return TransformResult(False, {"initializers_quantized": 0},
                               [f"opset {opset} has no DequantizeLinear (needs 10); nothing quantized"])
    quantized = elements = 0
    for graph in model.graphs:
        first = next(iter(graph), None)
        for value in graph.initializers:
            tensor = value.const
            if tensor is None or tensor.dtype is not DType.FLOAT32 or tensor.size < max(minimum_size, 1):
                continue
            if value.is_graph_input:
                continue
            axis = 0 if opset >= PER_CHANNEL_OPSET and len(tensor.shape) >= 2 else None
            codes, scale = symmetric_int8(tensor.numpy(), axis)
            name = value.name
            q = graph.add_initializer(Value(f"{name}_quantized", const=Tensor.from_numpy(codes, DType.INT8)))
            s = graph.add_initializer(Value(f"{name}_scale", const=Tensor.from_numpy(scale, DType.FLOAT32)))
            zp = graph.add_initializer(
                Value(f"{name}_zero_point", const=Tensor.from_numpy(np.zeros(scale.shape, np.int8), DType.INT8)))
            attrs = {} if axis is None else {"axis": Attr.int(axis)}
            out = Value(name, DType.FLOAT32, tensor.shape)
            node = Node("DequantizeLinear", [q, s, zp], dialect="onnx", name=f"{name}_dequantize",
                        attrs=attrs, outputs=[out])
            value.name = f"{name}_float"
            value.replace_all_uses_with(out)
            graph.remove_initializer(value)
            if first is None:
                graph.append(node)
            else:
                graph.insert_before(first, node)
            quantized += 1
            elements += tensor.size
    return TransformResult(quantized > 0, {"initializers_quantized": quantized, "elements_quantized": elements,
                                           "bytes_saved": 3 * elements})
