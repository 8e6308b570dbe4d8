"""The numbers of ONNX QDQ quantization: scales, zero points, integer weights and int32 biases.

Everything here is NumPy on arrays; the graph edits live in :mod:`.static_onnx`.  The
conventions are onnxruntime's (``onnxruntime.quantization``, read for behaviour):

* a range ``[rmin, rmax]`` is first widened to hold 0; symmetric makes it ``[-m, m]``
  with ``m = max(|rmin|, |rmax|)``;
* ``scale = (rmax - rmin) / (qmax - qmin)`` computed in float64 and stored as float32
  (a scale below float32's smallest normal becomes 1 with zero point 0);
* zero point: ``round((qmin + qmax) / 2)`` when symmetric (0 for signed types, 128 for
  uint8), else ``round(qmin - rmin / scale)`` with the float64 scale; rounding is half to even;
* symmetric signed types use the restricted range (int8 ``[-127, 127]``), asymmetric and
  unsigned types the full one; codes are ``clip(round(x / scale) + zp)`` in float32,
  clipped to the type's full range;
* a bias is int32 with zero point 0 and scale ``s_in * s_w * beta`` (one per channel of a
  per-channel weight), ``round(bias / scale)`` in float64;
* a symmetric int8/int16 weight whose scale would make its bias overflow int32 has that
  scale raised (:func:`widen_weight_scale_for_bias`).

O(size of the tensor) each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import DType

__all__ = [
    "QParams", "INT_TYPES", "qrange", "scale_zero_point", "range_params", "weight_params",
    "quantize", "quantize_bias", "widen_weight_scale_for_bias",
]

#: Integer types a tensor may be quantized to, by QuantOptions name.
INT_TYPES: dict[str, DType] = {"int8": DType.INT8, "uint8": DType.UINT8, "int16": DType.INT16}

_FULL = {DType.INT8: (-128, 127), DType.UINT8: (0, 255), DType.INT16: (-32768, 32767)}
_SYMMETRIC = {DType.INT8: (-127, 127), DType.INT16: (-32767, 32767)}
_TINY = np.finfo(np.float32).tiny
_INT32_SPAN = np.float64(np.iinfo(np.int32).max) - np.float64(np.iinfo(np.int32).min + 1)
_BIAS_EPSILON = 1.0001


@dataclass
class QParams:
    """Scale (float32) and zero point (of ``dtype``): 0-d per tensor, 1-d along ``axis`` per channel."""

    scale: np.ndarray
    zero_point: np.ndarray
    dtype: DType
    axis: int | None = None


def qrange(dtype: DType, symmetric: bool) -> tuple[int, int]:
    """The integer range a tensor of ``dtype`` is mapped onto."""
    return _SYMMETRIC.get(dtype, _FULL[dtype]) if symmetric else _FULL[dtype]


def scale_zero_point(rmin: np.ndarray, rmax: np.ndarray, dtype: DType, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero point) of the float32 ranges ``[rmin, rmax]``, elementwise (module docstring)."""
    qmin, qmax = qrange(dtype, symmetric)
    lo = np.minimum(np.asarray(rmin, np.float32), np.float32(0.0))
    hi = np.maximum(np.asarray(rmax, np.float32), np.float32(0.0))
    if symmetric:
        peak = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -peak, peak
    scale = (hi.astype(np.float64) - lo.astype(np.float64)) / (np.float64(qmax) - np.float64(qmin))
    if symmetric:
        zero = np.full(scale.shape, np.round(np.float64(qmin + qmax) / 2.0))
    else:
        zero = np.round(np.float64(qmin) - lo.astype(np.float64) / np.where(scale > 0, scale, 1.0))
    tiny = scale < _TINY
    return (np.where(tiny, 1.0, scale).astype(np.float32),
            np.where(tiny, 0.0, zero).astype(dtype.numpy))


def range_params(rmin: float, rmax: float, dtype: DType, symmetric: bool) -> QParams:
    """Per-tensor parameters of an activation from its calibrated range."""
    scale, zero = scale_zero_point(np.float32(rmin), np.float32(rmax), dtype, symmetric)
    return QParams(scale, zero, dtype)


def weight_params(data: np.ndarray, dtype: DType, symmetric: bool, axis: int | None) -> QParams:
    """Parameters of a constant from its own min/max: one pair, or one per slice along ``axis``
    (per channel is always symmetric)."""
    data = np.asarray(data, np.float32)
    if data.size == 0:
        shape = () if axis is None else (data.shape[axis],)
        return QParams(np.ones(shape, np.float32), np.zeros(shape, dtype.numpy), dtype, axis)
    others = None if axis is None else tuple(i for i in range(data.ndim) if i != axis)
    scale, zero = scale_zero_point(data.min(axis=others), data.max(axis=others), dtype,
                                   symmetric or axis is not None)
    return QParams(scale, zero, dtype, axis)


def quantize(data: np.ndarray, params: QParams) -> np.ndarray:
    """Integer codes of ``data`` (float32 arithmetic, half-to-even rounding, full-range clip)."""
    data = np.asarray(data, np.float32)
    scale, zero = params.scale, params.zero_point
    if params.axis is not None:
        shape = [-1 if i == params.axis else 1 for i in range(data.ndim)]
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    codes = np.round(data / scale) + zero.astype(np.float32)
    lo, hi = _FULL[params.dtype]
    return np.clip(codes, lo, hi).astype(params.dtype.numpy)


def quantize_bias(bias: np.ndarray, input_scale: np.ndarray, weight_scale: np.ndarray,
                  beta: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(int32 codes, float32 scale of shape [n]) of a bias for ``input_scale * weight_scale * beta``."""
    if beta == 0:
        bias, beta = np.zeros_like(bias), 1.0
    scale = np.asarray(input_scale, np.float32) * np.asarray(weight_scale, np.float32) * np.float32(beta)
    codes = np.round(np.asarray(bias, np.float64) / scale.astype(np.float64))
    info = np.iinfo(np.int32)
    codes = np.clip(codes, np.float64(info.min), np.float64(info.max)).astype(np.int32)
    return codes.reshape(np.shape(bias)), scale.astype(np.float32).reshape(-1)


def widen_weight_scale_for_bias(weight: QParams, input_scale: np.ndarray, bias: np.ndarray) -> bool:
    """Raise the scales of a symmetric int8/int16 ``weight`` whose bias codes would overflow int32.

    The bias scale ``s_in * s_w`` must be at least ``1.0001 * 2 * |bias| / (2**32 - 2)``; a
    smaller (positive) one is raised to that by scaling ``s_w``.  True when a scale changed.
    """
    if weight.dtype not in (DType.INT8, DType.INT16) or weight.zero_point.any() or not weight.scale.size:
        return False
    s_in = np.float64(np.asarray(input_scale).item())
    bias = np.asarray(bias, np.float32)
    if weight.axis is None:
        lo = np.minimum(np.float64(bias.min()), 0.0)
        hi = np.maximum(np.float64(bias.max()), 0.0)
        needs = [_BIAS_EPSILON * (2.0 * max(abs(lo), abs(hi))) / _INT32_SPAN]
        scales = weight.scale.reshape(1)
    else:
        needs = [np.float64(np.float32(_BIAS_EPSILON) * (np.float32(2.0) * np.abs(b))) / _INT32_SPAN
                 for b in bias.reshape(-1)[:weight.scale.size]]
        scales = weight.scale.copy()
    changed = False
    for i, need in enumerate(needs):
        candidate = s_in * np.float64(scales[i])
        if 0.0 < candidate < need:
            scales[i] = np.float32(np.float64(scales[i]) * (need / candidate))
            changed = True
    if changed:
        weight.scale = scales.reshape(weight.scale.shape).astype(np.float32)
    return changed
