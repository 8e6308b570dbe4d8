"""The compiled convolution runners against a direct int64 convolution.

Every depthwise strategy (flat-row ``einsum``, channel ``einsum``, per-tap
multiply-adds, the numba loop of :mod:`.jit`) and the im2col window runner, over strides, dilations, SAME/VALID
padding, depth multipliers and both roundings, give exactly what
``Σ w·(x − zp_in)`` in int64 followed by :func:`multiply_by_quantized_multiplier`
gives (itself checked against LiteRT's reference kernels in test_bitexact.py,
where MobileNetV2 runs the einsum paths on real layers).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from graphwright.runtime.reference import multiply_by_quantized_multiplier, runners
from graphwright.runtime.reference._common import PAD_SAME, PAD_VALID
from graphwright.runtime.reference.conv_common import _geometry, _Plan
from graphwright.runtime.reference.requant import FastRequant
from graphwright.runtime.reference.runners import Geometry, depthwise_runner, window_runner

ZP_IN, ZP_OUT, LO, HI = -7, 5, -128, 127


def _plan(rng: np.random.Generator, taps: int, channels: int, rounding: str,
          matrix: np.ndarray | None = None, native: bool = False) -> _Plan:
    w = rng.integers(-127, 128, (taps, channels)) if matrix is None else matrix
    bias = rng.integers(-3000, 3000, channels)
    m = rng.integers(1 << 30, 1 << 31, channels)
    shift = -rng.integers(6, 10, channels)
    fast = FastRequant.build(bias=bias, m=m, shift=shift, zp=ZP_OUT, lo=LO, hi=HI, rounding=rounding,
                             acc_dtype=np.float32, out_dtype=np.dtype(np.int8), native=native)
    assert fast is not None
    return _Plan(np.ascontiguousarray(w.astype(np.float32)), np.float32, bias, m, shift, fast)


def _padded(x: np.ndarray, g: Geometry) -> np.ndarray:
    xp = np.zeros((g.n, g.hp, g.wp, x.shape[3]), np.int64)
    xp[:, g.pt:g.pt + x.shape[1], g.pl:g.pl + x.shape[2], :] = x.astype(np.int64) - ZP_IN
    return xp


def _requantized(acc: np.ndarray, plan: _Plan, rounding: str) -> np.ndarray:
    assert plan.bias is not None and plan.m is not None and plan.shift is not None
    y = multiply_by_quantized_multiplier(acc + plan.bias, plan.m, plan.shift, rounding) + ZP_OUT
    return np.clip(y, LO, HI).astype(np.int8)


def _depthwise_reference(x: np.ndarray, plan: _Plan, g: Geometry, mult: int, rounding: str) -> np.ndarray:
    xp = _padded(np.repeat(x, mult, axis=3), g)
    w = plan.weights.astype(np.int64).reshape(g.kh, g.kw, g.co)
    acc = np.zeros((g.n, g.oh, g.ow, g.co), np.int64)
    for i in range(g.kh):
        for j in range(g.kw):
            acc += xp[:, i * g.dh: i * g.dh + (g.oh - 1) * g.sh + 1: g.sh,
                      j * g.dw: j * g.dw + (g.ow - 1) * g.sw + 1: g.sw, :] * w[i, j]
    return _requantized(acc, plan, rounding)


DEPTHWISE_CASES = [  # (height, width, in channels, multiplier, kernel, strides, dilations, padding)
    (20, 48, 8, 1, (3, 3), (1, 1), (1, 1), PAD_SAME),   # flat rows (4% spare columns)
    (11, 40, 3, 2, (3, 3), (1, 1), (2, 2), PAD_SAME),   # flat, dilated, multiplier 2
    (9, 9, 8, 2, (3, 3), (1, 1), (1, 1), PAD_SAME),     # narrow: too many spare columns for flat
    (13, 12, 6, 1, (3, 3), (2, 2), (1, 1), PAD_SAME),   # strided, odd padding bottom/right
    (14, 15, 5, 1, (3, 2), (2, 1), (1, 2), PAD_VALID),  # mixed strides and dilations
    (10, 10, 4, 3, (5, 5), (2, 2), (1, 1), PAD_SAME),
]


@pytest.mark.parametrize("strategy", ["einsum", "taps", "jit"])
@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("case", DEPTHWISE_CASES)
def test_depthwise_runners_equal_int64_convolution(monkeypatch: pytest.MonkeyPatch, strategy: str,
                                                   rounding: str, case: tuple) -> None:
    h, w, ci, mult, (kh, kw), (sh, sw), (dh, dw), padding = case
    monkeypatch.setattr(runners, "_EINSUM_CHANNELS", 1 if strategy == "einsum" else 1 << 20)
    rng = np.random.default_rng(h * 100 + w)
    co = ci * mult
    g = _geometry((2, h, w, ci), (kh, kw, co), sh, sw, dh, dw, padding)
    plan = _plan(rng, kh * kw, co, rounding, native=strategy == "jit")
    run = depthwise_runner(plan, g, ZP_IN, mult, np.dtype(np.int8))
    for _ in range(2):  # the second call reuses the padded buffer: its border must still be zero
        x = rng.integers(-128, 128, (2, h, w, ci)).astype(np.int8)
        got = run(x)
        assert got.dtype == np.int8 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, _depthwise_reference(x, plan, g, mult, rounding))
        mirrored = np.flip(np.ascontiguousarray(np.flip(x, 2)), 2)  # same values, negative strides
        assert not mirrored.flags.c_contiguous
        np.testing.assert_array_equal(run(mirrored), got)


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "jit"])
@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize(("kernel", "strides", "dilations", "padding"), [
    ((3, 3), (2, 2), (1, 1), PAD_SAME),
    ((3, 3), (1, 1), (2, 2), PAD_SAME),
    ((4, 4), (1, 1), (1, 1), PAD_SAME),
    ((2, 3), (1, 2), (1, 1), PAD_VALID),
])
def test_window_runner_equals_int64_convolution(rounding: str, kernel: tuple[int, int], strides: tuple[int, int],
                                                dilations: tuple[int, int], padding: int, native: bool) -> None:
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    rng = np.random.default_rng(kh * 10 + sh)
    n, h, w, ci, co = 2, 13, 11, 5, 7
    filters = rng.integers(-127, 128, (co, kh, kw, ci))
    plan = _plan(rng, kh * kw * ci, co, rounding, matrix=filters.reshape(co, -1).T, native=native)
    g = _geometry((n, h, w, ci), (kh, kw, ci), sh, sw, dh, dw, padding)
    # the requantizing ending the convolution kernel gives it; im2col compiled with numba, in numpy else
    run = window_runner(plan, g, ZP_IN, functools.partial(plan.fast, out_dtype=np.dtype(np.int8)), native)
    for _ in range(2):
        x = rng.integers(-128, 128, (n, h, w, ci)).astype(np.int8)
        xp = _padded(x, g)
        acc = np.zeros((n, g.oh, g.ow, co), np.int64)
        for i in range(kh):
            for j in range(kw):
                window = xp[:, i * dh: i * dh + (g.oh - 1) * sh + 1: sh, j * dw: j * dw + (g.ow - 1) * sw + 1: sw, :]
                acc += window @ filters[:, i, j, :].T
        np.testing.assert_array_equal(run(x), _requantized(acc, plan, rounding))
