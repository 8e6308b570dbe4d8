"""The numpy reference interpreter for TFLite models, bit-exact with LiteRT's
reference kernels (``OpResolverType.BUILTIN_REF``).

``Interpreter(model).run(feeds)`` / ``.trace(feeds)``; or through the runtime
interface as backend ``"reference"`` (option ``rounding``: ``"double"``, the
reference kernels' two-step requantization, or ``"single"``, which emulates LiteRT's
default kernels: XNNPACK's float32 requantization of convolutions, its 8-bit QUANTIZE).
:mod:`.fixedpoint` holds the requantization arithmetic.  The kernels' quantization
helpers (:func:`quant_of`, :func:`activation_range`, the per-channel multipliers of
the convolutions, the kernels by operator name) are public here for the layers that
describe quantized models (``graphwright.extract``, which tabulates 8-bit element-wise
operators with the kernels themselves).
"""

from __future__ import annotations

from ._common import KERNELS, OpContext, Quant, activation_range, quant_of
from .backend import ReferenceBackend
from .conv_common import channel_multipliers, legacy_multiplier
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_multipliers,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from .interpreter import Interpreter, supported_operators

__all__ = [
    "KERNELS",
    "Interpreter",
    "OpContext",
    "Quant",
    "ReferenceBackend",
    "activation_range",
    "channel_multipliers",
    "legacy_multiplier",
    "multiply_by_quantized_multiplier",
    "quantize_multiplier",
    "quant_of",
    "quantize_multipliers",
    "rounding_divide_by_pot",
    "saturating_rounding_doubling_high_mul",
    "supported_operators",
]

