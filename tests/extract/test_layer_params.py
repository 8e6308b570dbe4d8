"""extract's layer parameters are enough to compute each quantized layer with integers only:
every layer of converter-made int8, 16x8 and legacy uint8 models (the tflite_ops, tflite_conv,
tflite_math, tflite_binary, tflite_reduce, tflite_index, tflite_real and tflite_zoo corpora) is
recomputed here from the manifest's numbers (and tables) and the oracle's input tensors alone —
integer-only numpy, written from the reference kernels' formulas, not graphwright's — and must
equal the output of LiteRT's reference kernels (``litert-ref``; TFLite Micro for quantized SUM)
bit for bit, on several inputs.  int16 SOFTMAX's LUTs are rebuilt here from LiteRT's
LUTPopulate formula; 8-bit SOFTMAX's fixed-point parameters are checked against both runtimes;
LOG_SOFTMAX's against LiteRT's formulas too; LSTM roles by index (the integer LSTM and SVDF: see
test_layer_params_lstm.py and test_layer_params_svdf.py)."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphwright as gw
from graphwright.extract import extract
from graphwright.extract.manifest import role_of
from graphwright.ir import Node, QuantParams, Value
from graphwright.runtime.execute import Job, execute
from tests.models import get_model
from tests.runtime.reference._oracle import feeds_for
from tests.runtime.reference.uint8_models import write_uint8_model

pytestmark = pytest.mark.slow

#: (family, model, the operators each must have recomputed)
MODELS = [
    ("tflite_ops", "convs_int8", {"ADD", "SUB", "MUL", "AVERAGE_POOL_2D", "MEAN", "SOFTMAX", "CONCATENATION",
                                  "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D"}),
    ("tflite_ops", "acts_int8", {"LOGISTIC", "TANH", "HARD_SWISH", "QUANTIZE", "DEQUANTIZE", "ADD", "SUB",
                                 "CONCATENATION"}),
    ("tflite_ops", "misc_int8", {"RELU", "RELU6", "MEAN", "AVERAGE_POOL_2D", "MUL", "ADD", "CONCATENATION"}),
    ("tflite_math", "prelu_int8", {"PRELU", "CONV_2D"}),
    ("tflite_math", "unary_int8", {"LEAKY_RELU", "SUB", "MUL", "QUANTIZE", "ABS", "LOG", "SQRT", "RSQRT", "EXP",
                                   "GELU", "LOG_SOFTMAX", "L2_NORMALIZATION"}),
    ("tflite_binary", "pot_int16x8", {"ADD", "SUB", "MUL", "QUANTIZE", "DIV"}),
    ("tflite_binary", "binary_int8", {"DIV"}),
    ("tflite_math", "unary_int16x8", {"LEAKY_RELU", "GELU", "ABS", "EXP", "LOG", "RSQRT"}),
    ("tflite_binary", "activations_int16x8", {"ADD", "SUB", "MUL", "QUANTIZE", "DEQUANTIZE", "LOGISTIC", "TANH",
                                              "SOFTMAX"}),
    ("tflite_reduce", "reduce_int8", {"AVERAGE_POOL_2D", "MEAN", "SUB", "REDUCE_PROD"}),
    ("tflite_reduce", "reduce_int16x8", {"AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "REDUCE_PROD"}),
    ("tflite_conv", "convs_int8", {"TRANSPOSE_CONV", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}),
    ("tflite_index", "index_int8", {"RESIZE_BILINEAR"}),
    ("tflite_index", "index_int16x8", {"RESIZE_BILINEAR"}),
    ("tflite_conv", "convs_int16x8", {"TRANSPOSE_CONV", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}),
    ("tflite_real", "transformer_int8", {"BATCH_MATMUL", "FULLY_CONNECTED", "MEAN", "SQUARED_DIFFERENCE", "RSQRT",
                                         "GELU", "SOFTMAX", "ADD", "MUL", "QUANTIZE"}),
    ("tflite_real", "transformer_int16x8", {"BATCH_MATMUL", "FULLY_CONNECTED", "MEAN", "ADD", "MUL", "SUB"}),
    ("tflite_real", "landmarks_int8", {"CONV_2D", "DEPTHWISE_CONV_2D", "PRELU", "ADD", "FULLY_CONNECTED",
                                       "LOGISTIC", "MEAN", "CONCATENATION"}),
    ("tflite_math", "relu01_int8", {"RELU_0_TO_1"}),
    ("tflite_math", "legacy_uint8", {"L2_NORMALIZATION", "PRELU", "LEAKY_RELU", "LOG_SOFTMAX"}),
    ("tflite_math", "elu_int8", {"ELU"}),
    ("tflite_zoo", "ssd_int8", {"LOG_SOFTMAX", "CONV_2D", "CONCATENATION"}),
    ("tflite_math", "widened_int16x8", {"PRELU", "SQRT"}),
    ("tflite_zoo", "ds_cnn_uint8io_int8", {"QUANTIZE", "CONV_2D", "DEPTHWISE_CONV_2D"}),
    ("tflite_zoo", "face_embed_int8", {"L2_NORMALIZATION", "PRELU", "DEPTHWISE_CONV_2D"}),
    ("tflite_reduce", "sums_int8", {"SUM"}),
    ("tflite_reduce", "sums_int16x8", {"SUM"}),
]
#: LiteRT's BUILTIN_REF quantized SUM reads int8/int16 tensors as uint8: TFLite Micro is the oracle there
ORACLE = {"sums_int8": "tflm", "sums_int16x8": "tflm", "elu_int8": "litert"}  # BUILTIN_REF has no ELU
Layer = dict[str, Any]


# -- the integer arithmetic a target implements (gemmlowp / TFLite reference formulas) ---------------

def _srdhm(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int32 values held in int64."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    v = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(v >= 0, v >> 31, -((-v) >> 31))  # C division truncates
    return np.where((a == -(2**31)) & (b == -(2**31)), 2**31 - 1, high)


def _rdbpot(x: np.ndarray, exponent: int) -> np.ndarray:
    """RoundingDivideByPOT: shift right rounding half away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def _mbqm(x: np.ndarray, m: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier with the reference kernels' two roundings."""
    return _rdbpot(_srdhm(np.asarray(x, np.int64) * (1 << max(shift, 0)), m), max(-shift, 0))


def _requantize(acc: np.ndarray, p: Layer, c: int | None = None) -> np.ndarray:
    """The accumulator scaled as ``p["rounding"]`` says (channel ``c`` of per-channel parameters)."""
    m, shift = (p["multiplier"], p["shift"]) if c is None else (p["multiplier"][c], p["shift"][c])
    if p["accumulator"] == "int32":
        acc = ((acc + 2**31) % 2**32) - 2**31
    if p["rounding"] == "double":
        return _mbqm(acc, m, shift)
    if p["rounding"] == "single":
        return np.clip((acc * m + (1 << (30 - shift))) >> (31 - shift), -(2**31), 2**31 - 1)
    if p["rounding"] == "int64":
        return _mbqm64(acc, m, shift)
    assert p["rounding"] == "real" and c is not None
    v = acc.astype(np.float64) * p["real_multiplier"][c]
    return np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -(2**31), 2**31 - 1).astype(np.int64)


def _clamp(y: np.ndarray, p: Layer, dtype: np.dtype) -> np.ndarray:
    return np.clip(y, p["activation_min"], p["activation_max"]).astype(dtype)


def _add_sub(p: Layer, x: list[np.ndarray], out: np.ndarray, sign: int) -> np.ndarray:
    if p.get("pot_scale_int16"):
        y = _rdbpot(x[0].astype(np.int64), -p["input1_shift"]) + sign * _rdbpot(x[1].astype(np.int64),
                                                                                  -p["input2_shift"])
        return _clamp(y, p, out.dtype)
    a = [_mbqm((x[i].astype(np.int64) - p[f"input{i + 1}_zero_point"]) << p["left_shift"],
               p[f"input{i + 1}_multiplier"], p[f"input{i + 1}_shift"]) for i in range(2)]
    return _clamp(_mbqm(a[0] + sign * a[1], p["output_multiplier"], p["output_shift"]) + p["output_zero_point"],
                  p, out.dtype)


def _squared_difference(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    a = [_mbqm((x[i].astype(np.int64) - p[f"input{i + 1}_zero_point"]) << p["left_shift"],
               p[f"input{i + 1}_multiplier"], p[f"input{i + 1}_shift"]) for i in range(2)]
    y = _mbqm((a[0] - a[1]) ** 2, p["output_multiplier"], p["output_shift"]) + p["output_zero_point"]
    return _clamp(y, p, out.dtype)


def _mul(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    if p.get("q015_product"):
        a, b = x[0].astype(np.int64), x[1].astype(np.int64)
        ab = a * b
        v = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
        high = np.where((a == -32768) & (b == -32768), 32767, np.where(v >= 0, v >> 15, -((-v) >> 15)))
        zp = p["output_zero_point"]
        y = np.clip(_rdbpot(high, 8), p["activation_min"] - zp, p["activation_max"] - zp) + zp
        return y.astype(out.dtype)
    prod = (x[0].astype(np.int64) - p["input1_zero_point"]) * (x[1].astype(np.int64) - p["input2_zero_point"])
    return _clamp(_mbqm(prod, p["output_multiplier"], p["output_shift"]) + p["output_zero_point"], p, out.dtype)


def _table(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    table = np.asarray(p["table"], np.int64)
    return table[x[0].astype(np.int64) - p["table_first_input"]].astype(out.dtype)


def _rescale(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    y = _mbqm(x[0].astype(np.int64) - p["input_zero_point"], p["multiplier"], p["shift"]) + p["output_zero_point"]
    return _clamp(y, p, out.dtype)


def _quantize(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    if x[0].dtype.kind == "f":  # AffineQuantize: round(x / scale) in float32, half away from zero
        v = (x[0].astype(np.float32) / np.float32(p["scale"])).astype(np.float32)
        rounded = np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))
        return _clamp(rounded.astype(np.int64) + p["output_zero_point"], p, out.dtype)
    return _rescale(p, x, out)


def _dequantize(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    scale, zp = np.float32(p["scale"][0]), p["input_zero_point"][0]
    return (scale * (x[0].astype(np.int32) - zp).astype(np.float32)).astype(out.dtype)


def _pool(p: Layer, x: list[np.ndarray], out: np.ndarray, average: bool) -> np.ndarray:
    (kh, kw), (sh, sw) = p["filter"], p["strides"]
    _, h, w, _ = x[0].shape
    _, oh, ow, _ = out.shape
    top = max((oh - 1) * sh + kh - h, 0) // 2 if p["padding"] == "SAME" else 0
    left = max((ow - 1) * sw + kw - w, 0) // 2 if p["padding"] == "SAME" else 0
    y = np.zeros(out.shape, np.int64)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = max(i * sh - top, 0), max(j * sw - left, 0)
            r1, c1 = min(i * sh - top + kh, h), min(j * sw - left + kw, w)
            window = x[0][:, r0:r1, c0:c1, :].astype(np.int64)
            if not average:
                y[:, i, j, :] = window.max(axis=(1, 2))
                continue
            total, count = window.sum(axis=(1, 2)), (r1 - r0) * (c1 - c0)
            num = np.where(total > 0, total + count // 2, total - count // 2)
            y[:, i, j, :] = np.sign(num) * (np.abs(num) // count)
    return _clamp(y, p, out.dtype)


def _mean(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    total = x[0].astype(np.int64).sum(axis=tuple(p["axes"]))
    y = _mbqm(total - p["input_zero_point"] * p["reduced_count"], p["multiplier"], p["shift"]) + p["output_zero_point"]
    return _clamp(y, p, out.dtype).reshape(out.shape)


def _sum(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    total = x[0].astype(np.int64).sum(axis=tuple(p["axes"]))
    wrapped = ((total - p["input_zero_point"] * p["reduced_count"] + 2**31) % 2**32) - 2**31  # int32 arithmetic
    y = _mbqm(wrapped, p["multiplier"], p["shift"]) + p["output_zero_point"]
    return _clamp(y, p, out.dtype).reshape(out.shape)


def _mbqm64(x: np.ndarray, m: int, shift: int) -> np.ndarray:
    """The int64 MultiplyByQuantizedMultiplier: the multiplier rounded to 15 bits, one rounding
    half up, the result cast to int32 (wrapping)."""
    reduced = (m + (1 << 15)) >> 16 if m < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    v = (x * reduced + (1 << (total - 1))) >> total
    return ((v + 2**31) % 2**32) - 2**31


def _reduce_prod(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    rows = np.moveaxis(x[0].astype(np.int64) - p["input_zero_point"], p["axes"], list(range(-len(p["axes"]), 0)))
    rows = rows.reshape(*rows.shape[:rows.ndim - len(p["axes"])], -1)
    acc = rows[..., 0]
    for i in range(1, rows.shape[-1]):
        acc = _mbqm64(acc * rows[..., i], p["multiplier"], p["shift"])
    y = _mbqm64(acc, p["multiplier"], p["shift"]) + p["output_zero_point"]
    return _clamp(y, p, out.dtype).reshape(out.shape)


def _softmax(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    table = np.asarray(p["exp_table"], np.float32)
    xi = x[0].astype(np.int64)
    e = table[xi.max(axis=-1, keepdims=True) - xi]
    total = np.zeros(e.shape[:-1] + (1,), np.float32)
    for k in range(e.shape[-1]):  # float32, in order
        total = (total + e[..., k:k + 1]).astype(np.float32)
    prob = (e * (np.float32(1) / (total * np.float32(p["output_scale"])))).astype(np.float32)
    q = np.sign(prob) * np.floor(np.abs(prob) + np.float32(0.5))
    return np.clip(q.astype(np.int64) + p["output_zero_point"], -128, 127).astype(out.dtype)


def _round_away(v: float) -> float:
    """C ``round`` on a double: halves away from zero."""
    whole = math.floor(abs(v))
    return math.copysign(whole + (abs(v) - whole >= 0.5), v)


def _lut16(fn: Callable[[float], float], input_scale: float, input_zero_point: int) -> np.ndarray:
    """LiteRT's ``LUTPopulate<int16_t>`` in double over the int16 input range, to an output of
    scale 2/65535 and zero point 0 (the two tables of the 16x8 softmax), one entry at a time:
    512 samples, each less half the rounded error of interpolating its midpoint, then the end."""
    in_min, in_max = input_scale * (-32768 - input_zero_point), input_scale * (32767 - input_zero_point)
    out_scale = 2.0 / 65535.0
    inverse = 65536.0 / (out_scale * 32767 - out_scale * -32768)
    step = (in_max - in_min) / 512
    lut = []
    for i in range(512):
        sample = _round_away(fn(in_min + i * step) * inverse)
        interpolated = _round_away((fn(in_min + (i + 1) * step) * inverse + sample) / 2)
        bias = _round_away((interpolated - _round_away(fn(in_min + i * step + step / 2) * inverse)) / 2)
        lut.append(min(max(sample - bias, -32768.0), 32767.0))
    lut.append(min(max(_round_away(fn(in_max) * inverse), -32768.0), 32767.0))
    return np.asarray(lut, np.int64)


def _lut16_lookup(lut: np.ndarray, v: np.ndarray) -> np.ndarray:
    """LiteRT's int16 ``LUTLookup``: entry ``256 + (v >> 7)``, the int16 slope to the next one
    times the low 7 bits, rounded, shifted back (int16 arithmetic: wrapped)."""
    def wrap16(a: np.ndarray) -> np.ndarray:
        return ((a + 32768) % 65536) - 32768

    index = 256 + (v >> 7)
    base, slope = lut[index], wrap16(lut[index + 1] - lut[index])
    return wrap16(base + wrap16((slope * (v & 0x7F) + 64) >> 7))


def _softmax_int16(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """LiteRT's SoftmaxInt16 from the extracted LUTs and multiplier, after checking the LUTs
    against the ones LiteRT's Prepare builds (recomputed here) and the multiplier against
    ``float32(s_in·β)/(10/65535)``."""
    np.testing.assert_array_equal(p["exp_lut"], _lut16(math.exp, 10.0 / 65535.0, 32767))
    np.testing.assert_array_equal(p["one_over_one_plus_x_lut"], _lut16(lambda v: 1.0 / (1.0 + v), 1.0 / 65535.0, -32768))
    real = float(np.float32(np.float32(p["input_scale"]) * np.float32(p["beta"]))) / (10.0 / 65535.0)
    assert abs(p["input_multiplier"] * 2.0 ** (p["input_left_shift"] - 31) / real - 1) < 2 ** -30
    exp_lut, recip_lut = (np.asarray(p[k], np.int64) for k in ("exp_lut", "one_over_one_plus_x_lut"))
    xi = x[0].astype(np.int64)
    diff = xi - xi.max(axis=-1, keepdims=True)
    scaled = np.clip(_mbqm(diff, p["input_multiplier"], p["input_left_shift"]) + 32767, -32768, 32767)
    e = _lut16_lookup(exp_lut, scaled)
    total = e.sum(axis=-1, keepdims=True)
    headroom = np.vectorize(lambda t: 32 - int(t).bit_length())(total)  # leading zeros of the uint32 sum
    shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
    recip = _lut16_lookup(recip_lut, np.clip(shifted - (1 << 15) - (1 << 16), -32768, 32767))
    right = 31 - headroom
    y = (e * recip + (1 << (right - 1))) >> right
    return np.clip(y, 0, 32767).astype(out.dtype)


def _any_softmax(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    return _softmax_int16(p, x, out) if "exp_lut" in p else _softmax(p, x, out)


def _inv_sqrt(value: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1): 1/sqrt(value) as (m, shift),
    five Newton-Raphson steps in Q3.28 on the value normalised into [2^27, 2^29)."""
    if value <= 1:
        return 2**31 - 1, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    pairs = (32 - value.bit_length() - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    x_in = np.int64(value >> 1)
    half_in = _rdbpot(x_in, 1)
    x = np.int64(1 << 28)
    for _ in range(5):
        x3 = np.clip(_srdhm(_srdhm(x, x), x) << 6, -(2**31), 2**31 - 1)  # Rescale<3> of an F9 product
        step = _srdhm(np.int64((1 << 28) + (1 << 27)), x) - _srdhm(half_in, x3)
        x = np.clip(step << 3, -(2**31), 2**31 - 1)
    x = _srdhm(x, 1518500250)
    if shift < 0:
        x, shift = x << -shift, 0
    return int(x), -shift


def _l2_normalization(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    v = x[0].astype(np.int64) - p["input_zero_point"]
    rows = v.reshape(-1, v.shape[-1])
    y = np.empty_like(rows)
    for i, row in enumerate(rows):
        m, shift = _inv_sqrt(int((row * row).sum()))
        if "input_premultiplier" in p:  # the legacy uint8 kernel: 128·diff, one multiply, offset 128
            y[i] = _rdbpot(_srdhm(p["input_premultiplier"] * row, m), -shift) + p["output_zero_point"]
        else:
            y[i] = _mbqm(row, m, shift + p["output_shift"])
    return _clamp(y.reshape(v.shape), p, out.dtype)


def _resize_bilinear(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """ResizeBilinearInteger from the extracted scales, after checking them against
    round(2^10·in/out) (align_corners: over in − 1 and out − 1)."""
    _, h, w, _ = x[0].shape
    oh, ow = p["output_size"]
    for n_in, n_out, key in ((h, oh, "height_scale_10"), (w, ow, "width_scale_10")):
        exact = 1024 * (n_in - 1) / (n_out - 1) if p["align_corners"] and n_out > 1 else 1024 * n_in / n_out
        assert abs(p[key] - exact) <= 0.5, key

    def axis(n_out: int, n_in: int, scale: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i = np.arange(n_out, dtype=np.int64)
        pos = i * scale + scale // 2 - 512 if p["half_pixel_centers"] else i * scale
        lo = np.maximum(np.trunc(pos / 1024).astype(np.int64), 0)
        hi = np.minimum(np.trunc((pos + 1023) / 1024).astype(np.int64), n_in - 1)
        return pos - 1024 * lo, lo, hi

    fy, y0, y1 = axis(oh, h, p["height_scale_10"])
    fx, x0, x1 = axis(ow, w, p["width_scale_10"])
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    v = x[0].astype(np.int64)
    acc = (v[:, y0][:, :, x0] * (1024 - fy) * (1024 - fx) + v[:, y1][:, :, x0] * fy * (1024 - fx)
           + v[:, y0][:, :, x1] * (1024 - fy) * fx + v[:, y1][:, :, x1] * fy * fx)
    nudged = acc + np.where(acc > 0, 1 << 19, -(1 << 19))
    return np.trunc(nudged / 2**20).astype(np.int64).astype(out.dtype)


def _div(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """LiteRT's quantized DivElementwise: the divisor's GetReciprocal, the dividend normalised by
    its redundant sign bits, then the output multiplier with the shifts combined."""
    a, b = np.broadcast_arrays(x[0].astype(np.int64) - p["input1_zero_point"],
                               x[1].astype(np.int64) - p["input2_zero_point"])
    a, b = np.where(b < 0, -a, a), np.abs(b)
    inverse, over = _reciprocal(b, 31)
    headroom = np.vectorize(lambda v: 31 if v == 0 else 32 - int(v if v >= 0 else ~v).bit_length() - 1)(a)
    unscaled = _srdhm(a << headroom, inverse)
    total = p["output_shift"] - over - headroom
    scaled = _srdhm(unscaled, p["output_multiplier"])
    y = np.where(total <= 0, _rdbpot_array(scaled, np.maximum(-total, 0)), scaled << np.maximum(total, 0))
    return _clamp(y + p["output_zero_point"], p, out.dtype)


def _rdbpot_array(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT with a per-element exponent."""
    mask = (np.int64(1) << exponent) - 1
    return (x >> exponent) + ((x & mask) > ((mask >> 1) + (x < 0)))


def _concatenation(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """Inputs quantized as the output are copied; others (uint8 only) rescaled in float32:
    ``round(q·s + (−zp_in·s)) + zp_out`` with ``s = s_in·(1/s_out)``, clamped."""
    inverse = np.float32(1) / np.float32(p["output_scale"])
    parts = []
    for q, scale, zp in zip(x, p["input_scales"], p["input_zero_points"], strict=True):
        if scale == p["output_scale"] and zp == p["output_zero_point"]:
            parts.append(q)
            continue
        s = np.float32(np.float32(scale) * inverse)
        v = (q.astype(np.float32) * s + np.float32(-zp * s)).astype(np.float32)
        rounded = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int64) + p["output_zero_point"]
        parts.append(np.clip(rounded, 0, 255).astype(out.dtype))
    return np.concatenate(parts, axis=p["axis"])


def _fully_connected(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    w = x[1].astype(np.int64) - p["weights_zero_point"]
    acc = (x[0].astype(np.int64).reshape(-1, w.shape[1]) - p["input_zero_point"]) @ w.T
    if len(x) > 2:
        acc = acc + x[2].astype(np.int64)
    y = np.stack([_requantize(acc[:, c], p, c) for c in range(w.shape[0])], axis=-1)
    return _clamp(y + p["output_zero_point"], p, out.dtype).reshape(out.shape)


def _leaky_relu(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    v = x[0].astype(np.int64) - p["input_zero_point"]
    y = np.where(v >= 0, _mbqm(v, p["identity_multiplier"], p["identity_shift"]),
                 _mbqm(v, p["alpha_multiplier"], p["alpha_shift"]))
    return _clamp(y + p["output_zero_point"], p, out.dtype)


def _prelu(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    v = x[0].astype(np.int64) - p["input_zero_point"]
    alpha = x[1].astype(np.int64) - p["alpha_zero_point"]
    y = np.where(v >= 0, _mbqm(v, p["identity_multiplier"], p["identity_shift"]),
                 _mbqm(v * alpha, p["alpha_multiplier"], p["alpha_shift"]))
    return _clamp(y + p["output_zero_point"], p, out.dtype)


def _conv(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """CONV_2D and DEPTHWISE_CONV_2D (NHWC; weights OHWI, or 1HW(I·multiplier) for depthwise)."""
    depthwise = "depth_multiplier" in p
    w = x[1].astype(np.int64) - p["weights_zero_point"]
    kh, kw = w.shape[1], w.shape[2]
    (sh, sw), (dh, dw) = p["strides"], p["dilations"]
    _, h, wd, _ = x[0].shape
    _, oh, ow, c_out = out.shape
    pad = [max((o - 1) * s + (k - 1) * d + 1 - n, 0) // 2 if p["padding"] == "SAME" else 0
           for o, s, k, d, n in ((oh, sh, kh, dh, h), (ow, sw, kw, dw, wd))]
    xp = np.pad(x[0].astype(np.int64) - p["input_zero_point"],
                ((0, 0), (pad[0], kh * dh + oh * sh), (pad[1], kw * dw + ow * sw), (0, 0)))
    acc = np.zeros(out.shape, np.int64)
    for i in range(kh):
        for j in range(kw):
            taps = xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw, :]
            if depthwise:
                acc += np.repeat(taps, p["depth_multiplier"], axis=-1) * w[0, i, j, :]
                continue
            per_group, outs = w.shape[3], c_out // p["groups"]  # grouped: input channels split evenly
            for g in range(p["groups"]):
                acc[..., g * outs:(g + 1) * outs] += np.einsum(
                    "nhwc,oc->nhwo", taps[..., g * per_group:(g + 1) * per_group], w[g * outs:(g + 1) * outs, i, j, :])
    if len(x) > 2:
        acc += x[2].astype(np.int64)
    y = np.stack([_requantize(acc[..., c], p, c) for c in range(c_out)], axis=-1)
    return _clamp(y + p["output_zero_point"], p, out.dtype)


def _transpose_conv(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """TRANSPOSE_CONV (inputs: output shape, OHWI weights, NHWC data, optional bias): every input
    pixel scatters its products with the kernel into the output, which TFLite's padding crops."""
    w, data = x[1].astype(np.int64) - p["weights_zero_point"], x[2].astype(np.int64) - p["input_zero_point"]
    _, kh, kw, _ = w.shape
    _, h, wd, _ = data.shape
    n, oh, ow, c_out = out.shape
    (sh, sw) = p["strides"]
    pad = [max((i - 1) * s + k - o, 0) // 2 if p["padding"] == "SAME" else 0
           for i, s, k, o in ((h, sh, kh, oh), (wd, sw, kw, ow))]
    full = np.zeros((n, (h - 1) * sh + kh + oh, (wd - 1) * sw + kw + ow, c_out), np.int64)
    for i in range(kh):
        for j in range(kw):
            full[:, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw, :] += np.einsum("nhwc,oc->nhwo", data,
                                                                                          w[:, i, j, :])
    acc = full[:, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow, :]
    if len(x) > 3:
        acc = acc + x[3].astype(np.int64)
    y = np.stack([_requantize(acc[..., c], p, c) for c in range(c_out)], axis=-1)
    return _clamp(y + p["output_zero_point"], p, out.dtype)


def _batch_matmul(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    a = x[0].astype(np.int64) - p["input1_zero_point"]
    b = x[1].astype(np.int64) - p["input2_zero_point"]
    a = np.swapaxes(a, -1, -2) if p["adj_x"] else a
    b = np.swapaxes(b, -1, -2) if p["adj_y"] else b
    return _clamp(_requantize(np.matmul(a, b), p) + p["output_zero_point"], p, out.dtype)


def _hard_swish(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """LiteRT's 8-bit HardSwish from its 16-bit fixed-point multipliers alone."""
    def srdhm16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
        ab = a * b
        v = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
        return np.where((a == -32768) & (b == -32768), 32767, np.where(v >= 0, v >> 15, -((-v) >> 15)))

    v = (x[0].astype(np.int64) - p["input_zero_point"]) * 128
    pre_out = srdhm16(v, p["output_multiplier_fixedpoint_int16"])
    e_rel, r = p["reluish_multiplier_exponent"], v
    if e_rel > 0:
        r = np.clip(r * (1 << (e_rel - 1)), -32768, 32767)
    r = srdhm16(r, p["reluish_multiplier_fixedpoint_int16"])
    if e_rel > 0:
        r = np.clip(r * 2, -32768, 32767)
    elif e_rel < 0:
        r = _rdbpot(r, -e_rel)
    r = (r + (1 << 15)) >> 1
    prod = r * pre_out  # SaturatingDoublingHighMul: no rounding nudge
    pre = np.where((r == -32768) & (pre_out == -32768), 32767, np.where(prod >= 0, prod >> 15, -((-prod) >> 15)))
    y = _rdbpot(pre, -p["output_multiplier_exponent"]) + p["output_zero_point"]
    return np.clip(y, -128, 127).astype(out.dtype)


IMPLEMENTATIONS: dict[str, Callable[[Layer, list[np.ndarray], np.ndarray], np.ndarray]] = {
    "ADD": lambda p, x, out: _add_sub(p, x, out, 1), "SUB": lambda p, x, out: _add_sub(p, x, out, -1),
    "MUL": _mul, "LOGISTIC": _table, "TANH": _table, "RELU": _rescale, "RELU6": _rescale, "RELU_0_TO_1": _rescale,
    "QUANTIZE": _quantize, "DEQUANTIZE": _dequantize, "AVERAGE_POOL_2D": lambda p, x, out: _pool(p, x, out, True),
    "MAX_POOL_2D": lambda p, x, out: _pool(p, x, out, False), "MEAN": _mean,
    "SOFTMAX": _any_softmax, "CONCATENATION": _concatenation, "FULLY_CONNECTED": _fully_connected,
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "TRANSPOSE_CONV": _transpose_conv, "BATCH_MATMUL": _batch_matmul,
    "HARD_SWISH": _hard_swish, "LEAKY_RELU": _leaky_relu, "PRELU": _prelu, "SUM": _sum,
    "REDUCE_PROD": _reduce_prod, "SQUARED_DIFFERENCE": _squared_difference, "L2_NORMALIZATION": _l2_normalization,
    "RESIZE_BILINEAR": _resize_bilinear, "DIV": _div,
    "LOG_SOFTMAX": lambda p, x, out: _log_softmax(p, x, out),  # defined below, with the gemmlowp helpers
    **dict.fromkeys(("ABS", "LOG", "SQRT", "RSQRT", "EXP", "GELU", "ELU", "NEG"), _table),
}
#: also recomputed from the table the manifest gives for them
TABLES = ("RELU", "RELU6", "RELU_0_TO_1", "QUANTIZE", "HARD_SWISH", "LEAKY_RELU")  # int16 ones too


def _inputs(folder: Path, doc: dict[str, Any], op: dict[str, Any], tensors: dict[str, np.ndarray]) -> list[np.ndarray]:
    files = {c["name"]: c["file"] for c in doc["constants"]}
    return [tensors[n] if n in tensors else np.load(folder / files[n]) for n in op["inputs"] if n is not None]


@pytest.mark.parametrize(("family", "name", "expected_ops"), MODELS, ids=[f"{m[0]}-{m[1]}" for m in MODELS])
def test_layers_recomputed_from_extracted_integers_match_litert(family: str, name: str, expected_ops: set[str],
                                                                tmp_path: Path) -> None:
    info = get_model(family, name)
    feeds = [feeds_for(info, seed) for seed in range(4)]
    checked = _recompute_layers(info.path, feeds, ORACLE.get(name, "litert-ref"), tmp_path / "out")
    assert expected_ops <= checked, expected_ops - checked


def test_legacy_uint8_layers_and_a_rescaling_concatenation(tmp_path: Path) -> None:
    """uint8 (per-tensor, asymmetric) convolutions take the legacy multiplier; a CONCATENATION
    whose inputs are quantized differently from its output rescales them in float32."""
    info = get_model("tflite_ops", "misc_int8")
    model = gw.load(write_uint8_model(info.path, tmp_path / "misc_uint8.tflite"))
    path = tmp_path / "misc_uint8_concat.tflite"
    concat = next(n for n in model.graph if n.op == "CONCATENATION")
    first = concat.inputs[0]
    assert first is not None and first.quant is not None
    first.quant = QuantParams(first.quant.scale * np.float32(1.37), first.quant.zero_point + 3)
    gw.save(model, path)
    rng = np.random.default_rng(0)
    feeds = [{k: rng.integers(0, 256, v).astype(np.uint8) for k, v in info.inputs.items()} for _ in range(3)]
    checked = _recompute_layers(path, feeds, "litert-ref", tmp_path / "out")
    assert {"CONV_2D", "CONCATENATION", "ADD", "MUL", "MEAN", "RELU", "FULLY_CONNECTED"} <= checked
    layer = next(x for x in extract(path, tmp_path / "again").layers if x.op == "CONCATENATION")
    assert layer.params["same_quantization"] is False


def _recompute_layers(path: Path, feeds: list[dict[str, np.ndarray]], oracle: str, folder: Path) -> set[str]:
    """Recompute every layer with parameters from the manifest alone, on the oracle's inputs,
    asserting the oracle's outputs; the operators checked."""
    extract(path, folder)
    doc = json.loads((folder / "manifest.json").read_text())
    constants = {c["name"] for c in doc["constants"]}
    wanted = [n for op in doc["operators"] for n in op["inputs"] + op["outputs"] if n and n not in constants]
    outputs = [n for op in doc["operators"] for n in op["outputs"]]
    ambiguous = {n for n in outputs if outputs.count(n) > 1}  # tensors are fetched by name
    checked: set[str] = set()
    for seed, feed in enumerate(feeds):
        tensors = execute(path, dict(feed), Job(backend=oracle, outputs=sorted(set(wanted)))).outputs
        for layer in doc["layers"]:
            layer = {k: np.load(folder / v["file"]) if isinstance(v, dict) and "file" in v else v
                     for k, v in layer.items()}
            op = doc["operators"][layer["operator_index"]]
            implement = IMPLEMENTATIONS.get(layer["op"])
            if implement is None or ambiguous & {*op["inputs"], *op["outputs"]}:
                continue
            x = _inputs(folder, doc, op, tensors)
            expected = np.asarray(tensors[op["outputs"][0]])
            where = f"{path.name} seed {seed}: {layer['op']} {op['name']!r}"
            got = implement(layer, x, expected)
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=where)
            else:
                np.testing.assert_array_equal(got, expected, err_msg=where)
            if layer["op"] in TABLES and layer.get("table") is not None and x[0].dtype.kind in "iu":
                np.testing.assert_array_equal(_table(layer, x, expected), expected, err_msg=f"{where} (table)")
            checked.add(layer["op"])
    return checked


# -- the integer softmax (LiteRT BUILTIN_REF, TFLite Micro) from input_multiplier, input_left_shift, diff_min
# gemmlowp fixed point: a raw int32 q with k integer bits stands for q / 2^(31-k)

def _wrap(v: np.ndarray) -> np.ndarray:
    return ((v + 2**31) % 2**32) - 2**31


def _pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT."""
    if exponent > 0:
        return np.clip(x << exponent, -(2**31), 2**31 - 1)
    return _rdbpot(x, -exponent) if exponent < 0 else x


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp on [-1/4, 0), F0 -> F0: Taylor series around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    poly = _pot(_srdhm(_pot(x4, -2) + x3, one_third) + x2, -1)
    return constant_term + _srdhm(constant_term, x + poly)


def _exp_negative(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp of a non-positive F{integer_bits} -> F0."""
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_pot(a_mod, integer_bits))
    remainder = a_mod - a
    for exponent, multiplier in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                                 (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent:
            bit = 1 << (fractional + exponent)
            result = np.where(remainder & bit, _srdhm(result, multiplier), result)
    return np.where(a == 0, 2**31 - 1, result)


def _reciprocal(total: np.ndarray, integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """GetReciprocal: (1/(1 + x) in F0 for the normalized sum, bits over one)."""
    headroom = np.array([32 - int(v).bit_length() for v in total.reshape(-1)]).reshape(total.shape)
    over = integer_bits - headroom
    shifted = _wrap(((total.astype(np.int64) << headroom) & 0xFFFFFFFF) - (1 << 31))
    half = shifted + (2**31 - 1)  # RoundingHalfSum(a, One)
    half = np.where(half >= 0, (half + 1) // 2, -((-half + 1) // 2))
    x = 1515870810 + _srdhm(half, -1010580540)
    for _ in range(3):
        one_minus = (1 << 29) - _srdhm(half, x)
        x = x + _pot(_srdhm(x, one_minus), 2)
    return _pot(x, 1), over


def _softmax_fixed_point(p: Layer, x: np.ndarray) -> np.ndarray:
    xi = x.astype(np.int64)
    diff = xi - xi.max(axis=-1, keepdims=True)
    inside = diff >= p["diff_min"]
    scaled = _srdhm(diff * (1 << p["input_left_shift"]), p["input_multiplier"])
    exps = _exp_negative(np.where(inside, scaled, 0), 5)
    total = np.where(inside, _rdbpot(exps, 12), 0).sum(axis=-1, keepdims=True)
    scale, over = _reciprocal(total, 12)
    out = _rdbpot(_srdhm(scale, exps), over + 31 - 8) - 128
    return np.where(inside, np.clip(out, -128, 127), -128).astype(np.int8)


@pytest.mark.parametrize(("family", "name"), [("tflite_ops", "convs_int8"), ("tflite_ops", "mobilenet_v3_small_int8")])
@pytest.mark.parametrize("backend", ["tflm", "litert-ref"])
def test_softmax_fixed_point_parameters_reproduce_the_integer_kernels(family: str, name: str, backend: str,
                                                                     tmp_path: Path) -> None:
    info = get_model(family, name)
    manifest = extract(info.path, tmp_path / "out")
    layer = next(layer for layer in manifest.layers if layer.op == "SOFTMAX")
    node = gw.load(info.path).graph.find_node(layer.name)
    assert node is not None
    names = [node.inputs[0].name, node.outputs[0].name]
    for seed in range(3):
        got = execute(info.path, feeds_for(info, seed), Job(backend=backend, outputs=names)).outputs
        np.testing.assert_array_equal(_softmax_fixed_point(layer.params, got[names[0]]), got[names[1]])


def _lstm_node() -> Node:
    values = [Value(f"t{i}") for i in range(24)]
    return Node("UNIDIRECTIONAL_SEQUENCE_LSTM", values, dialect="tflite", outputs=[Value("y")])


def test_lstm_inputs_have_their_roles() -> None:
    node = _lstm_node()
    roles = [role_of(node, i) for i in range(24)]
    assert roles[0] == "input"
    assert roles[1:5] == ["input_to_input_weights", "input_to_forget_weights", "input_to_cell_weights",
                          "input_to_output_weights"]
    assert roles[5] == "recurrent_to_input_weights" and roles[8] == "recurrent_to_output_weights"
    assert roles[9:12] == ["cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights"]
    assert roles[12:16] == ["input_gate_bias", "forget_gate_bias", "cell_gate_bias", "output_gate_bias"]
    assert roles[16:18] == ["projection_weights", "projection_bias"]
    assert roles[20] == "input_layer_norm_coefficients" and roles[23] == "output_layer_norm_coefficients"
    both = Node("BIDIRECTIONAL_SEQUENCE_LSTM", [Value(f"t{i}") for i in range(48)], dialect="tflite",
                outputs=[Value("y")])
    assert [role_of(both, i) for i in (2, 17, 19, 35, 39, 44)] == [
        "fw_input_to_forget_weights", "fw_projection_bias", "bw_input_to_forget_weights", "fw_output_state",
        "aux_input", "bw_aux_input_to_input_weights"]


def test_extract_names_the_weights_of_a_converter_lstm(tmp_path: Path) -> None:
    """The converter's fused LSTM (tf-keras): every constant it reads has its gate role, none is 'input'."""
    info = get_model("tflite_sequence", "lstm_int8")
    manifest = extract(info.path, tmp_path / "out")
    uses = [u for c in manifest.constants for u in c.uses if u["op"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    roles = {u["role"] for u in uses}
    assert uses and "input" not in roles
    assert {"input_to_forget_weights", "recurrent_to_cell_weights", "forget_gate_bias"} <= roles
    graph = gw.load(info.path).graph
    lstm = next(n for n in graph if n.op == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert all(role_of(lstm, i) == u for i, u in ((2, "input_to_forget_weights"), (6, "recurrent_to_forget_weights")))


def test_c_header_holds_every_kind_of_layer_parameter(tmp_path: Path) -> None:
    """Tables, real multipliers, strings and flags compile (C99, -Wall -Werror) and read back exactly."""
    info = get_model("tflite_conv", "convs_int16x8")
    extract(info.path, tmp_path / "npy")
    extract(info.path, tmp_path / "c", format="c")
    layer = next(x for x in json.loads((tmp_path / "npy" / "manifest.json").read_text())["layers"]
                 if x.get("rounding") == "real")
    acts = get_model("tflite_ops", "acts_int8")
    extract(acts.path, tmp_path / "c2", format="c")
    table = next(x for x in extract(acts.path, tmp_path / "npy2").layers if x.op == "LOGISTIC")
    program = tmp_path / "check.c"
    ident, table_ident = layer["c_name"], table.ident
    program.write_text(
        '#include <stdio.h>\n#include "c/model_data.h"\n#include "c2/model_data.h"\n'
        f'int main(void) {{ printf("%.17g %s %d\\n", {ident}_real_multiplier[0], {ident.upper()}_ROUNDING, '
        f'(int){table_ident}_table[255]); return 0; }}\n')
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-Wno-unused-const-variable", "-I", str(tmp_path),
                    "-o", str(tmp_path / "check"), str(program)], check=True)
    out = subprocess.run([str(tmp_path / "check")], check=True, capture_output=True, text=True).stdout.split()
    assert float(out[0]) == layer["real_multiplier"][0] and out[1] == "real"
    assert int(out[2]) == table.params["table"][255]


def _frexp_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier from frexp: ``real = q·2^(shift−31)``, q in [2^30, 2^31) rounded half away."""
    fraction, shift = math.frexp(real)
    q = math.floor(fraction * 2**31 + 0.5)
    return (q // 2, shift + 1) if q == 2**31 else (q, shift)


def _clz(v: np.ndarray) -> np.ndarray:
    """Leading zeros of int32 raws read as uint32."""
    return np.vectorize(lambda t: 32 - (int(t) & 0xFFFFFFFF).bit_length())(v)


def _pot_by(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a per-element exponent ≥ 0 (a saturating left shift)."""
    return np.clip(np.asarray(x, np.int64) << exponent, -(2**31), 2**31 - 1)


def _half_sum(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's RoundingHalfSum on int32: (a + b ± 1) / 2, truncated."""
    total = np.asarray(a, np.int64) + b
    total = total + np.where(total >= 0, 1, -1)
    return np.trunc(total / 2).astype(np.int64)


def _one_over_one_plus(a: np.ndarray) -> np.ndarray:
    """one_over_one_plus_x_for_x_in_0_1 on F0 raws: Newton-Raphson in F2 from 48/17 − 32/17·d."""
    half = _half_sum(a, 2**31 - 1)
    x = 1515870810 + _srdhm(half, -1010580540)
    for _ in range(3):
        x = x + _pot(_srdhm(x, (1 << 29) - _srdhm(half, x)), 2)
    return _pot(x, 1)


def _log_q12(z: np.ndarray) -> np.ndarray:
    """log_x_for_x_greater_than_or_equal_to_1<5> of F12 raws (gemmlowp's via √½ normalisation and a
    rational approximation, accumulated in F6), F5 out."""
    quarter = 1 << 23  # 1/4 in F6
    h_a = _clz(z)
    r_a = _pot(_srdhm(_pot_by(z, h_a - 1), 1518500250), 1)
    adj_a = np.clip(_pot_by(12 - h_a, 25) + quarter, -(2**31), 2**31 - 1)
    h_b = _clz(_srdhm(z, 1518500250)) - 1
    r_b = _pot_by(z, h_b)
    adj_b = np.clip(_pot_by(12 - h_b, 25) - quarter, -(2**31), 2**31 - 1)
    r, adj = np.minimum(r_a, r_b), np.maximum(adj_a, adj_b)
    p = _half_sum(r, 1805811301)
    q = _wrap(2 * _wrap(r - 1805811301))
    q2 = _srdhm(q, q)
    num = _srdhm(q, r) + _srdhm(_srdhm(q, q2), 117049297)
    denominator = _srdhm(p, 1057819769 + q + _srdhm(127690142, q2)) + _srdhm(638450708, q)
    total = _srdhm(adj, 1488522236) + _srdhm(_rdbpot(num, 6), _one_over_one_plus(denominator))
    return _pot(total, 1)


def _log_softmax(p: Layer, x: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """LiteRT's 8-bit LogSoftmax from the extracted parameters: exp of the Q5.26 differences
    summed in Q12.19, its log in Q5.26, the bound from the reverse scaling, Q4 out at the type's top."""
    lowest, highest = np.iinfo(out.dtype).min, np.iinfo(out.dtype).max
    v = x[0].astype(np.int64)
    d = v - v.max(axis=-1, keepdims=True)
    a = _mbqm(d, p["input_multiplier"], p["input_left_shift"])
    inside = d >= p["diff_min"]
    total = np.where(inside, _rdbpot(_exp_negative(np.where(inside, a, 0), 5), 12), 0).sum(axis=-1, keepdims=True)
    log_total = _log_q12(total)
    bound = np.maximum(p["diff_min"] - 1, _mbqm(log_total - 2**31, p["reverse_scaling_divisor"],
                                                p["reverse_scaling_shift"]))
    y = np.clip(_rdbpot(a - log_total, 22) + highest, lowest, highest)
    return np.where(d > bound, y, lowest).astype(out.dtype)


@pytest.mark.parametrize(("family", "name"), [("tflite_math", "unary_int8"), ("tflite_math", "legacy_uint8")])
def test_log_softmax_parameters_follow_litert_prepare(family: str, name: str, tmp_path: Path) -> None:
    """LOG_SOFTMAX's parameters recomputed from the input scale with LiteRT's formulas
    (PreprocessLogSoftmaxScalingExp with β = 1 and 5 integer bits, CalculateInputRadius).  (Its
    ``diff_min`` lies below any 8-bit difference at these scales, so LiteRT's outputs cannot show it.)"""
    info = get_model(family, name)
    manifest = extract(info.path, tmp_path / "out")
    layer = next(x for x in manifest.layers if x.op == "LOG_SOFTMAX")
    p = layer.params
    real = min(float(np.float32(p["input_scale"])) * 2.0**26, 2.0**31 - 1)
    m, left = _frexp_multiplier(real)
    assert (p["input_multiplier"], p["input_left_shift"]) == (m, left)
    assert (p["reverse_scaling_divisor"], p["reverse_scaling_shift"]) == _frexp_multiplier((1 << (31 - left)) / m)
    assert p["diff_min"] == -math.floor(31.0 * 2**26 / 2**left)
