"""quantize_static: full-integer post-training quantization from calibrated ranges.

ONNX: QDQ format (``QuantizeLinear``/``DequantizeLinear`` pairs around every quantizable
operator, per-channel int8 weights, int32 biases with scale ``s_in * s_w``), as
``onnxruntime.quantization.quantize_static`` writes it, so onnxruntime fuses the pairs into its
integer kernels — see :mod:`.static_onnx`.

TFLite: a float ``.tflite`` becomes the model the TFLite converter's post-training integer
quantization makes (int8 or 16x8 activations, symmetric per-channel int8 weights, int32/int64
biases, fixed output ranges for LOGISTIC/TANH/SOFTMAX, the converter's operator versions) — see
:mod:`.static_tflite`.

``ranges`` names a ranges file (:mod:`.options`); ``graphwright quantize`` calibrates and writes
one, or the Python API passes the mapping to the format functions directly.
"""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from .options import QuantOptions, load_ranges
from .static_onnx import quantize_static_onnx
from .static_tflite import quantize_static_tflite

__all__ = ["quantize_static"]


@transform("quantize_static", dialects={"onnx", "tflite"})
def quantize_static(model: Model, ctx: TransformContext, *, ranges: str, activation_type: str = "int8",
                    weight_type: str = "int8", per_channel: bool = True, symmetric_activations: bool = False,
                    symmetric_weights: bool = True, io_type: str = "float32", target: str = "generic",
                    exclude_ops: list[str] | None = None,
                    exclude_nodes: list[str] | None = None) -> TransformResult:
    """Quantize weights and activations to integers using the calibrated ranges file `ranges`."""
    options = QuantOptions.build(activation_type=activation_type, weight_type=weight_type,
                                 per_channel=per_channel, symmetric_activations=symmetric_activations,
                                 symmetric_weights=symmetric_weights, io_type=io_type, target=target,
                                 exclude_ops=exclude_ops, exclude_nodes=exclude_nodes)
    table = load_ranges(ranges)
    if model.format == "onnx":
        return quantize_static_onnx(model, table, options)
    if model.format == "tflite":
        return quantize_static_tflite(model, table, options)
    raise TransformError(f"quantize_static does not apply to {model.format} models")
