"""quantize_dynamic: int8 weights, activations quantized at run time from their own range.

ONNX: ``DynamicQuantizeLinear`` + ``MatMulInteger``/``ConvInteger`` and the float rescale, as
``onnxruntime.quantization.quantize_dynamic`` writes it — see :mod:`.dynamic_onnx`.
TFLite: the converter's dynamic-range quantization (int8 weights, float activations, hybrid
kernels with ``asymmetric_quantize_inputs``) — see :mod:`.dynamic_tflite`.
No calibration is needed.
"""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from .dynamic_onnx import quantize_dynamic_onnx
from .dynamic_tflite import quantize_dynamic_tflite
from .options import QuantOptions

__all__ = ["quantize_dynamic"]


@transform("quantize_dynamic", dialects={"onnx", "tflite"})
def quantize_dynamic(model: Model, ctx: TransformContext, *, weight_type: str = "int8", per_channel: bool = True,
                     symmetric: bool | None = None, exclude_ops: list[str] | None = None,
                     exclude_nodes: list[str] | None = None) -> TransformResult:
    """Quantize weights to int8 and activations at run time (no calibration).

    ``symmetric`` defaults as onnxruntime's: symmetric int8 weights, asymmetric uint8 ones.
    ``per_channel`` defaults to on (onnxruntime's default is off): one scale per output
    column costs nothing at run time and is never less accurate.
    """
    if symmetric is None:
        symmetric = weight_type != "uint8"
    options = QuantOptions.build(weight_type=weight_type, per_channel=per_channel, symmetric_weights=symmetric,
                                 exclude_ops=exclude_ops, exclude_nodes=exclude_nodes)
    if model.format == "onnx":
        return quantize_dynamic_onnx(model, options)
    if model.format == "tflite":
        return quantize_dynamic_tflite(model, options)
    raise TransformError(f"quantize_dynamic does not apply to {model.format} models")
