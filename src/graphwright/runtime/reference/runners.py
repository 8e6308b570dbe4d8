"""Compiled runners for the convolutions: everything that depends only on
the weights and the input shape is done once, the call itself is a fixed sequence
of numpy operations into preallocated buffers.

A kernel builds a runner on its first call and keeps it in its per-operator cache
(only when the weights are constants); the interpreter runs it directly while the
input keeps that shape and dtype, skipping the kernel with its attribute,
quantization and shape handling.  The
buffers belong to the runner, so one interpreter runs one model at a time (its
lock, see ``Interpreter``).  The arithmetic is exactly the kernels': shifted
inputs ``x − zp_in`` and products/sums exact in the plan's float dtype (see
``conv_common._plan``), requantized by :class:`.requant.FastRequant`.  Float32 convolutions
run the same 1x1 and KHxKW runners (the float input read as it is: no shifted copy)
ending in an in-place float32 bias and activation clamp, and depthwise ones as a
compiled float32 loop (:func:`float_depthwise_runner`).  8-bit convolutions with the
compiled loops sum on onnxruntime's integer GEMM instead (:func:`integer_pointwise_runner`,
:func:`integer_window_runner`, :mod:`._gemm`), and their depthwise layers sum a
zero-point-bordered copy of the input (:func:`_native_depthwise`).

Measured choices (int8 MobileNetV2, 1 thread): a depthwise layer as one ``einsum``
over a no-copy strided view of its taps takes 0.35–0.7x the time of KH·KW
separate multiply-adds (17 passes over the output); a KHxKW convolution's im2col
matrix as one copy of a strided view, a quarter of KH·KW slice copies with short
inner loops.  Not kept: requantizing in place on the GEMM output (recomputing the
accumulators of the flagged elements) and per-layer scratch buffers for the
requantization were both slower than fresh arrays, which numpy's allocator hands
back from memory the previous layer just freed, still in cache; so was running
large 1x1 layers by bands of image rows (GEMM then requantization per band).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._common import OpContext
from ._gemm import IntegerGemm, unsigned
from .jit import kernels
from .requant import FastRequant

if TYPE_CHECKING:
    from .conv_common import _Plan

__all__ = ["Finish", "Geometry", "Runner", "compile_runner", "depthwise_runner", "float_depthwise_runner",
           "float_finish", "integer_pointwise_runner", "integer_window_runner", "pointwise_runner", "window_runner"]

Runner = Callable[[np.ndarray], np.ndarray]
#: the end of a convolution runner: sums -> output (requantization, or float bias and activation)
Finish = Callable[[np.ndarray], np.ndarray]


def compile_runner(ctx: OpContext, x: np.ndarray, runner: Runner) -> Runner:
    """Keep ``runner`` for later calls when the operator's plan is cached (constant weights):
    the interpreter calls it directly while the input keeps this shape and dtype."""
    if "plan" in ctx.cache:
        ctx.cache["compiled"] = (x.shape, x.dtype, runner)
    return runner


def pointwise_runner(plan: _Plan, x: np.ndarray, zp_in: int | None, finish: Finish) -> Runner:
    """1x1 stride-1 convolution: one GEMM on the NHWC buffer (no im2col), then ``finish``;
    ``zp_in`` None: a float input, read by the GEMM as it is (no shifted copy)."""
    dtype, weights = plan.dtype, plan.weights
    if zp_in is None:
        def run_float(x: np.ndarray) -> np.ndarray:
            return finish(np.matmul(x.reshape(-1, x.shape[3]), weights).reshape(*x.shape[:3], weights.shape[1]))

        return run_float
    shifted: np.ndarray = np.empty(x.shape, dtype)
    acc = np.empty((*x.shape[:3], weights.shape[1]), dtype)
    rows, acc_rows, shift = shifted.reshape(-1, x.shape[3]), acc.reshape(-1, weights.shape[1]), _shifter(plan, zp_in)

    def run(x: np.ndarray) -> np.ndarray:
        shift(x, shifted)
        np.matmul(rows, weights, out=acc_rows)
        return finish(acc)

    return run


def _shifter(plan: _Plan, zp_in: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """``(x, out)`` -> ``out = x − zp_in`` in the plan's dtype (exact): a compiled pass for
    8-bit inputs when the plan requantizes compiled (:mod:`.jit`) — half the time of numpy's
    mixed-type subtract, which casts through a buffer — else numpy's (float inputs: a copy)."""
    dtype = plan.dtype
    zp = dtype(zp_in)

    def shift(x: np.ndarray, out: np.ndarray) -> None:
        np.subtract(x, zp, dtype=dtype, out=out, casting="unsafe")

    if plan.fast is None or plan.fast.native is None:
        return shift
    compiled, zp32 = kernels().shift, np.int32(zp_in)

    def shift_compiled(x: np.ndarray, out: np.ndarray) -> None:
        if x.dtype.itemsize == 1:
            compiled(x, zp32, out)
        else:
            shift(x, out)

    return shift_compiled


def float_finish(bias: np.ndarray | None, lo: float, hi: float, channels: int, jit: bool) -> Finish:
    """A float convolution's ending, in place on its fresh float32 sums [..., channels]: ``+ bias``
    (float32, as LiteRT's kernels add it) and the clamp to the fused activation's range — one
    compiled pass with ``jit``."""
    bias32 = np.zeros(channels, np.float32) if bias is None else bias.astype(np.float32)
    if jit:
        compiled, low, high = kernels().bias_clamp, np.float32(lo), np.float32(hi)

        def finish_compiled(acc: np.ndarray) -> np.ndarray:
            compiled(acc.reshape(-1, channels), bias32, low, high)
            return acc

        return finish_compiled

    def finish(acc: np.ndarray) -> np.ndarray:
        if bias is not None:
            np.add(acc, bias32, out=acc)
        return np.clip(acc, lo, hi, out=acc)  # type: ignore[no-any-return]

    return finish


class Geometry(NamedTuple):
    """A convolution's sizes: batch, output (OH, OW), padded input (HP, WP), channels
    of the padded buffer (depthwise: output channels; KHxKW: input channels), padding
    before (top, left), kernel, strides, dilations."""

    n: int
    oh: int
    ow: int
    hp: int
    wp: int
    co: int
    pt: int
    pl: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int


def depthwise_runner(plan: _Plan, g: Geometry, zp_in: int, mult: int, out_dtype: np.dtype) -> Runner:
    """Depthwise convolution over one zero-padded buffer (its borders are never
    written, so they stay 0 = the shifted zero point), as one ``einsum`` pass that
    reads the taps through a strided view (no copy) — or, for narrow strided layers,
    KH·KW multiply-adds of views.  Each output is a sum of KH·KW products, exact in
    the plan's dtype.

    Stride 1 uses a flat layout: output pixel (y, x) of tap (i, j) reads flat element
    ``((y + i·dh)·WP + x + j·dw)·C + c`` of the padded buffer, so the view is
    ``[N, OH, WP·C, KH, KW]`` and the contraction's inner loop runs along a whole
    padded row (WP·C values) against the weights tiled along it; columns x ≥ OW read
    into the next row (one spare zero row at the bottom keeps the last tap in bounds)
    and are dropped after requantization: (WP − OW)/WP extra work, 4% for 3x3 at 48
    wide; used when that is at most 10%.  Otherwise the view is ``[N, OH, OW, KH, KW, C]``
    (inner loop along the channels), used from 64 channels on; below that, per-tap
    multiply-adds with the weights tiled along the output width are faster.
    """
    dtype, fast = plan.dtype, plan.fast
    assert fast is not None
    if fast.native is not None:
        return _native_depthwise(plan, g, zp_in, mult, out_dtype)
    zp = dtype(zp_in)
    flat = g.sh == g.sw == 1 and 10 * (g.wp - g.ow) <= g.wp  # garbage columns ≤ 10%
    xp: np.ndarray = np.zeros((g.n, g.hp + int(flat), g.wp, g.co), dtype)
    s0, s1, s2, s3 = xp.strides
    if flat:
        view = as_strided(xp, shape=(g.n, g.oh, g.wp * g.co, g.kh, g.kw),
                          strides=(s0, s1, s3, s1 * g.dh, s2 * g.dw), writeable=False)
        weights = np.ascontiguousarray(plan.tiled(g.wp).reshape(g.kh, g.kw, g.wp * g.co))

        def contract() -> np.ndarray:
            acc = np.einsum("nhxij,ijx->nhx", view, weights, optimize=False)
            return acc.reshape(g.n, g.oh, g.wp, g.co)
    elif g.co >= _EINSUM_CHANNELS:
        view = as_strided(xp, shape=(g.n, g.oh, g.ow, g.kh, g.kw, g.co),
                          strides=(s0, s1 * g.sh, s2 * g.sw, s1 * g.dh, s2 * g.dw, s3), writeable=False)
        weights = np.ascontiguousarray(plan.weights.reshape(g.kh, g.kw, g.co))

        def contract() -> np.ndarray:
            return np.einsum("nhwijc,ijc->nhwc", view, weights, optimize=False)  # type: ignore[no-any-return]
    else:
        contract = _tap_sum(plan, g, xp)

    def run(x: np.ndarray) -> np.ndarray:
        inner = xp[:, g.pt:g.pt + x.shape[1], g.pl:g.pl + x.shape[2], :]
        # output channel c·M + m reads input channel c
        np.subtract(np.repeat(x, mult, axis=3) if mult > 1 else x, zp, dtype=dtype, out=inner, casting="unsafe")
        y = fast(contract(), out_dtype)
        return np.ascontiguousarray(y[:, :, :g.ow, :]) if flat else y

    return run


def _native_depthwise(plan: _Plan, g: Geometry, zp_in: int, mult: int, out_dtype: np.dtype) -> Runner:
    """The compiled depthwise loop (:mod:`.jit`): the 8-bit input copied into a buffer bordered
    by its zero point (filled once; only the interior is written), int32 sums of its taps, less
    ``zp_in·Σ_taps w`` per channel (the sums of ``(x − zp_in)·w``, border taps adding 0),
    requantized in the same pass."""
    fast = plan.fast
    assert fast is not None and fast.native is not None
    compiled, constants = fast.native
    fused = isinstance(fast, FastRequant)  # else the sums go to the float32 requantizer after
    taps = plan.weights.reshape(g.kh, g.kw, g.co)  # exact integers; int16 where they fit (8-bit weights do)
    narrow = np.int16 if taps.size and float(np.abs(taps).max()) <= 32767 else np.int32
    weights = np.ascontiguousarray(taps.astype(narrow))
    offset = (np.int64(zp_in) * weights.astype(np.int64).sum(axis=(0, 1))).astype(np.int64)
    # 3x3 and 5-wide taps in int16 pairs where every pair's sum of products fits int16 (see the kernel):
    # max|x| = 128 (int8), 255 (uint8)
    pairs = {np.dtype(np.int8): False, np.dtype(np.uint8): False}
    mags = np.abs(weights.astype(np.int64))
    widest = None
    if g.kh == g.kw == 3:
        flat = mags.reshape(9, g.co)
        widest = max(int((flat[0:8:2] + flat[1:8:2]).max()), int(flat[8].max()))
    elif g.kw == 5 and mags.size:
        widest = max(int((mags[:, 0] + mags[:, 1]).max()), int((mags[:, 2] + mags[:, 3]).max()), int(mags[:, 4].max()))
    if widest is not None and weights.dtype == np.int16:
        pairs = {np.dtype(np.int8): 128 * widest < 1 << 15, np.dtype(np.uint8): 255 * widest < 1 << 15}
    shape = (g.n, g.oh, g.ow, g.co)
    acc = np.empty((g.ow, g.co), np.int32)

    def run(x: np.ndarray) -> np.ndarray:
        xp = _bordered(x, g, mult, zp_in)
        y = np.empty(shape, out_dtype if fused else np.int32)
        compiled.depthwise_padded(xp, weights, offset, g.sh, g.sw, g.dh, g.dw, constants if fused else None, y, acc,
                                  pairs.get(x.dtype, False))
        return y if fused else fast(y, out_dtype)

    return run


def float_depthwise_runner(plan: _Plan, g: Geometry, mult: int, bias: np.ndarray | None, lo: float, hi: float
                           ) -> Runner:
    """Float32 depthwise convolution as the compiled loop (:mod:`.jit`): sums, bias and
    activation in one pass over the unpadded input.  (The bordered, row-unrolled form of the 8-bit
    loop gave the same floats but was faster only on large stride-1 layers: not kept.)"""
    compiled = kernels()
    weights = np.ascontiguousarray(plan.weights.reshape(g.kh, g.kw, g.co).astype(np.float32))
    bias32 = np.zeros(g.co, np.float32) if bias is None else bias.astype(np.float32)
    low, high, shape = np.float32(lo), np.float32(hi), (g.n, g.oh, g.ow, g.co)

    def run(x: np.ndarray) -> np.ndarray:
        y = np.empty(shape, np.float32)
        compiled.depthwise_float(np.repeat(x, mult, axis=3) if mult > 1 else x, weights, bias32, g.sh, g.sw,
                                 g.dh, g.dw, g.pt, g.pl, low, high, y)  # output channel c·M + m reads input c
        return y

    return run


def _bordered(x: np.ndarray, g: Geometry, mult: int, fill: int) -> np.ndarray:
    """``x`` (output channel c·M + m reading input channel c) inside a border of ``fill`` in a fresh
    [N, HP, WP, C] buffer (the memory the last layer freed, still in cache): border and interior
    each written once."""
    xp = np.empty((g.n, g.hp, g.wp, g.co), x.dtype)
    h, w = x.shape[1], x.shape[2]
    if mult == 1 and x.flags.c_contiguous and g.hp >= g.pt + h and g.wp >= g.pl + w:  # one compiled call
        kernels().bordered(x, x.dtype.type(fill), g.pt, g.pl, xp)
        return xp
    xp[:, :g.pt] = fill
    xp[:, g.pt + h:] = fill
    xp[:, g.pt:g.pt + h, :g.pl] = fill
    xp[:, g.pt:g.pt + h, g.pl + w:] = fill
    xp[:, g.pt:g.pt + h, g.pl:g.pl + w, :] = np.repeat(x, mult, axis=3) if mult > 1 else x
    return xp


#: from this many channels on, one ``einsum`` over strided windows beats per-tap
#: multiply-adds (its inner loop runs along the channels)
_EINSUM_CHANNELS = 64


def _tap_sum(plan: _Plan, g: Geometry, xp: np.ndarray) -> Callable[[], np.ndarray]:
    """KH·KW multiply-adds of strided views of ``xp``, the weights tiled along the
    output width so that every operand has the same inner loop."""
    tiled = plan.tiled(g.ow)
    taps = [(xp[:, i * g.dh: i * g.dh + (g.oh - 1) * g.sh + 1: g.sh,
                j * g.dw: j * g.dw + (g.ow - 1) * g.sw + 1: g.sw, :], tiled[i * g.kw + j])
            for i in range(g.kh) for j in range(g.kw)]
    (first, w0), rest = taps[0], taps[1:]
    tmp: np.ndarray = np.empty((g.n, g.oh, g.ow, g.co), plan.dtype)

    def contract() -> np.ndarray:
        acc = np.multiply(first, w0)
        for tap, weight in rest:
            np.multiply(tap, weight, out=tmp)
            acc += tmp
        return acc

    return contract


def window_runner(plan: _Plan, g: Geometry, zp_in: int, finish: Finish, jit: bool) -> Runner:
    """KHxKW convolution (any strides, dilations, padding; ``g.co`` = input channels)
    as im2col + one GEMM: the shifted input goes into the interior of a zero-padded
    buffer, its windows are seen as ``[N, OH, OW, KH, KW, C]`` through a strided view
    and copied once into the ``[N·OH·OW, KH·KW·C]`` matrix the GEMM reads (one pass,
    where slicing tap by tap makes KH·KW short-looped copies); then ``finish`` (float: ``zp_in`` 0).
    With ``jit`` the matrix is one compiled pass over the input (no padded buffer; numpy's
    copy is slow on the few channels of a first layer: its inner loops are C long)."""
    dtype, weights = plan.dtype, plan.weights
    if jit:
        return _compiled_window_runner(plan, g, zp_in, finish)
    shift = _shifter(plan, zp_in)
    xp: np.ndarray = np.zeros((g.n, g.hp, g.wp, g.co), dtype)
    s0, s1, s2, s3 = xp.strides
    view = as_strided(xp, shape=(g.n, g.oh, g.ow, g.kh, g.kw, g.co),
                      strides=(s0, s1 * g.sh, s2 * g.sw, s1 * g.dh, s2 * g.dw, s3), writeable=False)
    columns: np.ndarray = np.empty(view.shape, dtype)
    rows = columns.reshape(-1, g.kh * g.kw * g.co)

    def run(x: np.ndarray) -> np.ndarray:
        shift(x, xp[:, g.pt:g.pt + x.shape[1], g.pl:g.pl + x.shape[2], :])
        np.copyto(columns, view)
        acc = np.matmul(rows, weights).reshape(g.n, g.oh, g.ow, weights.shape[1])
        return finish(acc)

    return run


def _compiled_window_runner(plan: _Plan, g: Geometry, zp_in: int, finish: Finish) -> Runner:
    """:func:`window_runner` with the im2col matrix made by the compiled loop (:mod:`.jit`)."""
    dtype, weights, im2col = plan.dtype, plan.weights, kernels().im2col
    columns: np.ndarray = np.empty((g.n, g.oh, g.ow, g.kh, g.kw * g.co), dtype)
    rows = columns.reshape(-1, g.kh * g.kw * g.co)
    zp = np.int32(zp_in)

    def run(x: np.ndarray) -> np.ndarray:
        im2col(np.ascontiguousarray(x), zp if x.dtype.kind in "iu" else dtype(zp_in), g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, columns)
        acc = np.matmul(rows, weights).reshape(g.n, g.oh, g.ow, weights.shape[1])
        return finish(acc)

    return run


def integer_pointwise_runner(gemm: IntegerGemm, x: np.ndarray, channels: int, finish: Finish) -> Runner:
    """1x1 stride-1 convolution of 8-bit ``x`` on the integer GEMM (:mod:`._gemm`): the input's rows
    made unsigned (int8: one xor per byte; uint8: read as they are), int32 sums, then ``finish``."""
    rows_shape, out_shape = (x.size // x.shape[3], x.shape[3]), (*x.shape[:3], channels)
    if x.dtype == np.uint8:
        def run_unsigned(x: np.ndarray) -> np.ndarray:
            return finish(gemm(np.ascontiguousarray(x).reshape(rows_shape)).reshape(out_shape))

        return run_unsigned

    def run(x: np.ndarray) -> np.ndarray:  # a fresh buffer: the memory the last layer freed, still in cache
        return finish(gemm(unsigned(x.reshape(rows_shape), np.empty(rows_shape, np.uint8))).reshape(out_shape))

    return run


def integer_window_runner(gemm: IntegerGemm, g: Geometry, channels: int, finish: Finish) -> Runner:
    """KHxKW convolution of 8-bit input on the integer GEMM (:mod:`._gemm`): the uint8 im2col matrix
    in one compiled pass (:mod:`.jit`; padded taps hold the GEMM's zero point, so they add 0),
    int32 sums, then ``finish``."""
    im2col = kernels().im2col_bytes
    columns: np.ndarray = np.empty((g.n, g.oh, g.ow, g.kh, g.kw * g.co), np.uint8)
    rows = columns.reshape(-1, g.kh * g.kw * g.co)
    pad, out_shape = np.uint8(gemm.za), (g.n, g.oh, g.ow, channels)

    def run(x: np.ndarray) -> np.ndarray:
        flip = np.uint8(0x80 if x.dtype == np.int8 else 0)
        im2col(np.ascontiguousarray(x).view(np.uint8), flip, pad, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, columns)
        return finish(gemm(rows).reshape(out_shape))

    return run
