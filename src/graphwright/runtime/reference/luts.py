"""LiteRT's int16 lookup tables (``LUTPopulate<int16_t>`` / ``LUTLookup``): 513 entries over the
int16 input range, read at the top 9 bits and interpolated on the low 7.  Element-wise int16
operators (math_ops) build theirs in float32, int16 SOFTMAX (elementwise) in double."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import round_half_away

__all__ = ["lut16_double", "lut16_float32", "lut16_lookup", "round_f32", "wrap16"]

F32 = np.float32
FloatFn = Callable[[np.ndarray], np.ndarray]


def round_f32(v: np.ndarray) -> np.ndarray:
    """C ``roundf`` on float32 values: halves away from zero."""
    return round_half_away(np.asarray(v, F32)).astype(F32)


def wrap16(v: np.ndarray) -> np.ndarray:
    """Integers wrapped to int16 as a C cast does (two's complement), kept as int64."""
    return ((np.asarray(v, np.int64) + 32768) & 0xFFFF) - 32768


def lut16_float32(fn: FloatFn, s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """``LUTPopulate<int16_t>`` (float32 arithmetic): 512 samples of ``fn`` over the input range,
    each less half its midpoint interpolation error, and the value at the range's end."""
    s_in, s_out = F32(s_in), F32(s_out)
    in_min, in_max = s_in * F32(-32768 - zp_in), s_in * F32(32767 - zp_in)
    out_min, out_max = s_out * F32(-32768 - zp_out), s_out * F32(32767 - zp_out)
    steps = 512
    step = F32((in_max - in_min) / F32(steps))
    half = F32(step / F32(2))
    inverse = F32(F32(65536) / F32(out_max - out_min))
    i = np.arange(steps, dtype=F32)
    at = (in_min + (i * step).astype(F32)).astype(F32)
    val = fn(at)
    mid = fn((at + half).astype(F32))
    nxt = fn((in_min + ((i + F32(1)) * step).astype(F32)).astype(F32))
    sample = round_f32((val * inverse).astype(F32))
    interp = round_f32(((nxt * inverse).astype(F32) + sample).astype(F32) / F32(2))
    err = (interp - round_f32((mid * inverse).astype(F32))).astype(F32)
    bias = round_f32(err / F32(2))
    table = np.empty(steps + 1, np.int64)
    table[:steps] = np.clip(sample - bias, -32768, 32767)
    table[steps] = np.clip(round_f32((fn(np.array([in_max], F32)) * inverse).astype(F32))[0], -32768, 32767)
    return table


def lut16_double(fn: Callable[[np.ndarray], np.ndarray], s_in: float, zp_in: int, s_out: float) -> np.ndarray:
    """``LUTPopulate<int16_t>`` in double (what int16 SOFTMAX builds its tables with): 512 samples
    of ``fn`` over the input range, each less half its midpoint interpolation error (all rounded
    half away from zero), then ``fn`` at the range's end; symmetric output (zero point 0)."""
    in_min, in_max = s_in * (-32768 - zp_in), s_in * (32767 - zp_in)
    step = (in_max - in_min) / 512
    inverse = 65536.0 / (s_out * 32767 - s_out * -32768)
    at = in_min + np.arange(512) * step
    sample = round_half_away(fn(at) * inverse)
    interpolated = round_half_away((fn(in_min + (np.arange(512) + 1) * step) * inverse + sample) / 2)
    bias = round_half_away((interpolated - round_half_away(fn(at + step / 2) * inverse)) / 2)
    last = round_half_away(fn(np.array([in_max])) * inverse)
    return np.clip(np.concatenate([sample - bias, last]), -32768, 32767).astype(np.int64)


def lut16_lookup(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``LUTLookup`` of int16 values: the entry at the top 9 bits, interpolated on the low 7
    (rounding to nearest), wrapped to int16, as int64."""
    v = x.astype(np.int64)
    index = 256 + (v >> 7)
    base = table[index]
    return wrap16(base + (((table[index + 1] - base) * (v & 0x7F) + 64) >> 7))
