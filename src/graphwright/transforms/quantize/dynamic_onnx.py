"""Placeholder: being written (see quantize_static / quantize_dynamic / quantize_weights)."""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model
from ..registry import TransformResult
from .options import QuantOptions

__all__ = ["quantize_dynamic_onnx"]


def quantize_dynamic_onnx(model: Model, options: QuantOptions) -> TransformResult:
    raise TransformError("quantize_dynamic_onnx is not written yet")
