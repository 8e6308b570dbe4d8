"""Arithmetic on quantized tensors shared by everything that compares a float model with its
quantized version (``graphwright diff``'s per-layer errors, ``graphwright quantize``'s report).

``dequantize(q, quant) = scale * (q - zero_point)`` (per tensor, or per channel along
``quant.axis``); ``quantize_like`` is the float input a quantized model's integer input takes;
``sqnr_db`` is the signal-to-quantization-noise ratio from summed energies.  O(size) each.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["dequantize", "quantize_like", "sqnr_db", "sqnr_of"]


def sqnr_db(signal: float, noise: float) -> float:
    """``10 log10(signal / noise)``: inf when the noise is zero, -inf when the signal is."""
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def sqnr_of(a: np.ndarray, b: np.ndarray) -> float:
    """SQNR of ``b`` against the reference ``a``, in dB."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return sqnr_db(float(np.sum(a64 ** 2)), float(np.sum((a64 - b64) ** 2)))


def dequantize(x: np.ndarray, quant: Any) -> np.ndarray:
    """``scale * (q - zero_point)`` in float64 (per tensor, or per channel along ``quant.axis``)."""
    scale = np.asarray(quant.scale, np.float64)
    zero = np.asarray(quant.zero_point, np.float64)
    if scale.size > 1 and x.ndim:
        shape = [1] * x.ndim
        shape[quant.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (x.astype(np.float64) - zero) * scale


def quantize_like(x: np.ndarray, quant: Any, dtype: np.dtype) -> np.ndarray:
    """A float array as ``dtype`` integers with ``quant`` (round half to even, clipped): what a
    float input becomes for the quantized model."""
    scale = np.asarray(quant.scale, np.float64).ravel()[0]
    zero = np.asarray(quant.zero_point, np.float64).ravel()[0]
    info = np.iinfo(dtype)
    return np.clip(np.round(x.astype(np.float64) / scale) + zero, info.min, info.max).astype(dtype)
