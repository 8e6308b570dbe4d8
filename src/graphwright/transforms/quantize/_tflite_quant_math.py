"""The arithmetic of the TFLite converter's post-training quantization, value by value.

The converter quantizes int8 models with its MLIR quantizer (doubles throughout, scales rounded
to float32 only when written) and 16x8 models with its older flatbuffer quantizer (float32
throughout).  Each function here says which one it follows; all are O(size of the tensor).

* int8 activations: the calibrated range widened to hold 0, ``scale = (max - min) / 255`` in
  float32, the zero point ``-128 - min / scale`` rounded half away from zero and clamped to
  [-128, 127] (MLIR's nudging with the float32 scales the TFLite converter asks for); an
  empty range gives scale 1, zero point -128.
* int16 activations: symmetric, ``scale = max(|min|, |max|) / 32767`` in float32, zero point 0.
* weights: symmetric int8 in [-127, 127], per channel along the operator's weight axis
  (per tensor for other constants), ``scale = max|w| / 127``; a range under 1e-6 has its
  minimum lowered by 5e-7 and is widened to 1e-6 (MLIR, every constant) so a scale is never 0; codes
  ``round(w * inv)`` in float32 with ``inv = 1 / scale`` (MLIR) or ``127 / max|w|`` (16x8).
* biases: ``scale = s_in * s_w[c]`` in float32, zero point 0, codes as the weights', int32
  (int8) or int64 (16x8).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "activation_int8", "activation_int16", "bias_codes", "constant_codes", "quantize_weight", "widen_near_zero",
]

#: MLIR's smallest weight range: narrower ranges are widened to it around 0.
NEAR_ZERO = 1.0e-6


def activation_int8(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) of an int8 activation calibrated to [lo, hi], as the MLIR quantizer
    writes them with its float32 scales: the range widened to hold 0, ``scale = (max - min) /
    255`` in float32, the zero point ``-128 - min / scale`` rounded half away from zero and
    clamped; an empty range gives scale 1, zero point -128."""
    rmin, rmax = min(float(lo), 0.0), max(float(hi), 0.0)
    if abs(rmax - rmin) < np.finfo(np.float64).eps:
        return 1.0, -128
    scale = float(np.float32(np.float32(rmax) - np.float32(rmin)) / np.float32(255))
    zero = float(np.float32(-128.0 - rmin / scale))
    return scale, int(np.clip(_round_away(zero), -128, 127))


def activation_int16(lo: float, hi: float) -> tuple[float, int]:
    """(scale, 0) of an int16 activation calibrated to [lo, hi] (symmetric, in float32)."""
    lo32, hi32 = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    bound = max(abs(lo32), abs(hi32))
    if bound == 0:
        return 1.0, 0
    return float(np.float32(bound) / np.float32(32767)), 0


def widen_near_zero(lo: np.ndarray | float, hi: np.ndarray | float) -> tuple:
    """MLIR's guard for a constant's range (0 already inside): one narrower than 1e-6 has its
    minimum lowered by 5e-7 and is at least 1e-6 wide, so a scale is never 0 (all zeros and a
    1e-12 epsilon get [-5e-7, 5e-7], scale 1e-6/255 and zero point 0 as in the converter's
    bert_tiny and binary files; a 1e-6 epsilon gets [-5e-7, 1e-6])."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    narrow = hi - lo < NEAR_ZERO
    lo = np.where(narrow, lo - NEAR_ZERO / 2, lo)
    hi = np.where(narrow, np.maximum(hi, lo + NEAR_ZERO), hi)
    return (lo, hi) if lo.ndim else (float(lo), float(hi))


def quantize_weight(weights: np.ndarray, axis: int | None, *, legacy: bool) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scales) of a symmetric weight, one scale per slice along ``axis``
    (one for all when ``axis`` is None): ``scale = max|w| / 127`` and codes ``round(w * inv)``
    in float32, halves away from zero, clamped to [-127, 127].

    MLIR (int8 models, ``legacy=False``): ``inv = 1 / scale``, and a range under 1e-6 becomes
    [-5e-7, 5e-7].  Flatbuffer quantizer (16x8, ``legacy=True``): ``inv = 127 / max|w|``, and
    an all-zero slice gets scale 0 and codes 0.
    """
    w = np.asarray(weights, np.float32)
    shape = [1] * w.ndim
    if axis is None:
        bound = np.abs(w).max(initial=0.0).reshape(1)
    else:
        shape[axis] = -1
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        bound = np.maximum(np.abs(moved.min(axis=1, initial=0.0)), np.abs(moved.max(axis=1, initial=0.0)))
    bound = bound.astype(np.float32)
    if legacy:
        scales = bound / np.float32(127)
        inverse = np.where(bound == 0, np.float32(0), np.float32(127) / np.where(bound == 0, 1, bound))
    else:
        if axis is None:
            lo, hi = np.minimum(w.min(initial=0.0), 0.0).reshape(1), np.maximum(w.max(initial=0.0), 0.0).reshape(1)
        else:
            lo, hi = np.minimum(moved.min(axis=1), 0.0), np.maximum(moved.max(axis=1), 0.0)
        lo, hi = widen_near_zero(lo.astype(np.float64), hi.astype(np.float64))
        scales = (np.maximum(np.abs(lo), np.abs(hi)) / 127).astype(np.float32)
        inverse = _inverse(scales)
    codes = _round_away(w * inverse.astype(np.float32).reshape(shape))
    return np.clip(codes, -127, 127).astype(np.int8), scales.astype(np.float32)


def bias_codes(bias: np.ndarray, input_scale: float, scales: np.ndarray, *, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) of a bias: ``scale[c] = s_in * s_w[c]`` in float32, codes
    ``round(b * (1 / scale))`` in float32; int32 (int8 models) or int64 (16x8 models)."""
    b = np.asarray(bias, np.float32)
    bias_scales = (np.float32(input_scale) * np.asarray(scales, np.float32)).astype(np.float32)
    codes = _round_away(b * _inverse(bias_scales))
    info = np.iinfo(np.int32 if bits == 32 else np.int64)
    return np.clip(codes, info.min, info.max).astype(info.dtype), bias_scales


def constant_codes(data: np.ndarray, scale: float, zero: int, *, bits: int) -> np.ndarray:
    """Codes of a float constant an operator reads as an activation (a MUL's or ADD's operand,
    a GATHER table): int8 (MLIR) ``round(c / scale) + zero`` in double, clamped to [-128, 127];
    int16 (16x8) ``round(c * (1 / scale))`` in float32, clamped to [-32767, 32767]; halves away
    from zero."""
    if bits == 8:
        scaled = np.asarray(data, np.float64) / float(np.float32(scale))
        return np.clip(_round_away(scaled) + zero, -128, 127).astype(np.int8)
    scaled = np.asarray(data, np.float32) * _inverse(np.asarray([scale], np.float32))[0]
    return np.clip(_round_away(scaled) + zero, -32767, 32767).astype(np.int16)


def _inverse(scales: np.ndarray) -> np.ndarray:
    scales = np.asarray(scales, np.float32)
    safe = np.where(scales == 0, np.float32(1), scales)
    return np.where(scales == 0, np.float32(0), np.float32(1) / safe).astype(np.float32)


def _round_away(x: np.ndarray | float) -> np.ndarray:
    """Round half away from zero (std::round, LLVM's rmNearestTiesToAway)."""
    x = np.asarray(x, np.float64)  # exact for float32 inputs, so float32 halves stay halves
    return np.sign(x) * np.floor(np.abs(x) + 0.5)
