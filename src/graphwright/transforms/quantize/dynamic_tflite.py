"""Placeholder: being written (see quantize_static / quantize_dynamic / quantize_weights)."""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model
from ..registry import TransformResult
from .options import QuantOptions

__all__ = ["quantize_dynamic_tflite"]


def quantize_dynamic_tflite(model: Model, options: QuantOptions) -> TransformResult:
    raise TransformError("quantize_dynamic_tflite is not written yet")
