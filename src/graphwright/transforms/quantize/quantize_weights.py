"""quantize_weights: store large float constants as eight bits plus a float range.

Before::  W = Const[float32, >= minimum_size elements]             -> Conv2D(x, W)
After::   W_quantized_const = Const[quint8]
          W_quantized_min = Const[float32 scalar lo]
          W_quantized_max = Const[float32 scalar hi]
          W = Dequantize(W_quantized_const, W_quantized_min, W_quantized_max,
                         T=quint8, mode=MIN_FIRST)                 -> Conv2D(x, W)

The Dequantize keeps the constant's name, so readers (and ``^W`` control edges)
are unchanged.  The range is the tensor's own, widened to include zero:
``lo = min(min(W), 0)``, ``hi = max(max(W), 0)`` (``hi = lo + 1`` for an
all-zero tensor).  Each value is quantized as TensorFlow's ``FloatToQuantized``
does for quint8, in double precision::

    range = float32(hi - lo) * 256 / 255
    q = clamp(round(v * 256 / range) - round(lo * 256 / range), 0, 255)

with ``round`` half away from zero, so the stored bytes equal the original
Graph Transform Tool's.  At run time ``MIN_FIRST`` dequantization gives back
``v ~= lo + q * (hi - lo) / 255``: at most half a step, ``(hi - lo) / 510``,
from the original.  O(N + weights).

For ONNX models (see :mod:`.quantize_weights_onnx`) the same transform stores
large float initializers as int8 with a ``DequantizeLinear`` — or, with ``bits=4``, MatMul
weights as int4 blocks of ``block_size`` (``DequantizeLinear(block_size=…)`` at opset 21, or
onnxruntime's ``MatMulNBits`` with ``target=onnxruntime``).  For TFLite models (see
:mod:`.weights_tflite`) it stores weights as int8 (or float16) with the converter's conventions.
"""

from __future__ import annotations

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, Tensor, constant_value
from ..context import TransformContext
from ..registry import TransformResult, transform
from .options import QuantOptions
from .quantize_weights_onnx import quantize_onnx_initializers
from .weights_tflite import quantize_weights_float16_tflite, quantize_weights_tflite

__all__ = ["DEFAULT_MINIMUM_SIZE", "quantize_min_first", "quantize_weights", "weight_range"]

#: Float constants with fewer elements are left alone (biases, shapes, scalars).
DEFAULT_MINIMUM_SIZE = 1024
#: quint8 has 2**8 levels.
_LEVELS = 256


@transform("quantize_weights", dialects={"tf", "onnx", "tflite"})
def quantize_weights(model: Model, ctx: TransformContext, *, minimum_size: int = DEFAULT_MINIMUM_SIZE,
                     bits: int = 8, block_size: int = 128, symmetric: bool = True, target: str = "generic",
                     weight_type: str = "", exclude_ops: list[str] | None = None,
                     exclude_nodes: list[str] | None = None, int4_method: str = "mse",
                     accuracy_level: int = 4) -> TransformResult:
    """Store float Consts with at least minimum_size elements as quint8 + Dequantize(MIN_FIRST)."""
    if minimum_size < 0:
        raise TransformError(f"quantize_weights: minimum_size must be >= 0, got {minimum_size}")
    if bits not in (4, 8):
        raise TransformError(f"quantize_weights: bits must be 4 or 8, got {bits}")
    if model.format in ("onnx", "tflite"):
        options = QuantOptions.build(weight_type=weight_type or ("int4" if bits == 4 else "int8"),
                                     block_size=block_size, symmetric_weights=symmetric, target=target,
                                     exclude_ops=exclude_ops, exclude_nodes=exclude_nodes, int4_method=int4_method,
                                     accuracy_level=accuracy_level)
        if model.format == "tflite":
            if options.weight_type == "float16":
                return quantize_weights_float16_tflite(model)
            return quantize_weights_tflite(model, options)
        return quantize_onnx_initializers(model, minimum_size=minimum_size, options=options)
    if bits != 8:
        raise TransformError("quantize_weights: GraphDefs store eight-bit weights only (bits=8)")
    graph = model.graph
    quantized = elements = bytes_before = 0
    for node in list(graph):
        if node.op != "Const" or node.dialect != "tf":
            continue
        tensor = constant_value(node.output)
        if tensor is None or tensor.dtype is not DType.FLOAT32 or tensor.size < minimum_size:
            continue
        _replace_const(graph, node, tensor)
        quantized += 1
        elements += tensor.size
        bytes_before += tensor.size * 4
    return TransformResult(
        quantized > 0,
        {"consts_quantized": quantized, "elements_quantized": elements,
         "bytes_saved": bytes_before - elements},
    )


def weight_range(values: np.ndarray) -> tuple[np.float32, np.float32]:
    """The (lo, hi) float32 range of ``values``, widened to include 0 and never empty."""
    lo = np.float32(min(np.float32(values.min()), np.float32(0.0))) if values.size else np.float32(0.0)
    hi = np.float32(max(np.float32(values.max()), np.float32(0.0))) if values.size else np.float32(0.0)
    if lo == hi:  # only when every value is 0 once the range holds 0
        hi = np.float32(lo + np.float32(1.0))
    return lo, hi


def quantize_min_first(values: np.ndarray, lo: float | np.floating, hi: float | np.floating) -> np.ndarray:
    """``values`` as quint8 codes of the range [lo, hi] (TensorFlow's FloatToQuantized<quint8>)."""
    span = float(np.float32(np.float32(hi) - np.float32(lo)))
    scale = _LEVELS / (span * (_LEVELS / (_LEVELS - 1.0)))
    scaled = values.astype(np.float64) * scale
    codes = _round_away(scaled) - _round_away(np.float64(lo) * scale)
    return np.clip(codes, 0, _LEVELS - 1).astype(np.uint8)


def _round_away(x: np.ndarray | np.float64) -> np.ndarray:
    """Round half away from zero (C's ``round``), unlike NumPy's half-to-even."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _replace_const(graph: Graph, node: Node, tensor: Tensor) -> None:
    name = node.name
    lo, hi = weight_range(tensor.numpy())
    codes = quantize_min_first(tensor.numpy(), lo, hi)
    qconst = _const(f"{name}_quantized_const", Tensor.from_numpy(codes, DType.QUINT8), node.device)
    qmin = _const(f"{name}_quantized_min", Tensor.from_numpy(np.float32(lo), DType.FLOAT32), node.device)
    qmax = _const(f"{name}_quantized_max", Tensor.from_numpy(np.float32(hi), DType.FLOAT32), node.device)
    dequantize = Node(
        "Dequantize", [qconst.output, qmin.output, qmax.output], dialect="tf", name=name,
        device=node.device, control_inputs=node.control_inputs,
        attrs={"T": Attr.dtype(DType.QUINT8), "mode": Attr.string("MIN_FIRST")},
    )
    dequantize.output.dtype, dequantize.output.shape = DType.FLOAT32, tensor.shape
    graph.insert_before(node, [qconst, qmin, qmax, dequantize])
    node.output.replace_all_uses_with(dequantize.output)
    for user in node.control_users:
        user.remove_control_input(node)
        user.add_control_input(dequantize)
    graph.remove(node)


def _const(name: str, tensor: Tensor, device: str) -> Node:
    node = Node("Const", dialect="tf", name=name, device=device,
                attrs={"dtype": Attr.dtype(tensor.dtype), "value": Attr.tensor(tensor)})
    node.output.dtype, node.output.shape = tensor.dtype, tensor.shape
    return node
