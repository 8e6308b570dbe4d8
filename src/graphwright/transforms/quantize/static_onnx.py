"""Placeholder: being written (see quantize_static / quantize_dynamic / quantize_weights)."""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model
from ..registry import TransformResult
from .options import QuantOptions, Ranges

__all__ = ["quantize_static_onnx"]


def quantize_static_onnx(model: Model, ranges: Ranges, options: QuantOptions) -> TransformResult:
    raise TransformError("quantize_static_onnx is not written yet")
