"""The compiled fast paths of the 8-bit convolutions and fully connected layers (with numba,
see :mod:`.jit`), each taken only where it gives the same integers as the numpy path
(:mod:`.conv_common`):

* the 8-bit CONV_2D and FULLY_CONNECTED layers with constant weights and int32 accumulators
  sum on onnxruntime's integer GEMM (:mod:`._gemm`: exact int32 sums, 3–4x faster than the
  float32 BLAS GEMM; a KHxKW convolution's im2col matrix made in uint8) — :func:`_integer_gemm`;
* int8 on a CPU with AVX512-VNNI, on the compiled GEMM with the requantization fused
  (:class:`._gemm.VnniGemm`) — :func:`_vnni_runner` (1x1) and :func:`_vnni_window_runner` (KHxKW);
* fully connected layers (and 1x1 convolutions) of at most :data:`_DENSE_ROWS` rows as compiled
  8-bit dot products — :func:`_dense_layer`, :func:`_dense_runner`, :func:`_native_dense`;
  without onnxruntime the rest stays on BLAS.
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext
from ._gemm import IntegerGemm, VnniGemm
from .conv_common import _Plan
from .jit import kernels
from .requant import FastRequant
from .runners import Finish, Geometry, Runner

#: the activation dtypes the integer GEMM reads
_BYTES = (np.dtype(np.int8), np.dtype(np.uint8))
#: up to this many rows a fully connected layer runs as compiled 8-bit dot products
#: (its time is reading the weights: int8 there, float32 for BLAS); beyond, the GEMMs win
_DENSE_ROWS = 4


def _integer_gemm(ctx: OpContext, plan: _Plan, x: np.ndarray) -> IntegerGemm | None:
    """The exact integer GEMM (:mod:`._gemm`) of an 8-bit layer with constant weights, an int32
    accumulator and a compiled requantization, built once (None where it does not apply)."""
    if not ctx.jit or "plan" not in ctx.cache or plan.fast is None or plan.fast.native is None \
            or plan.accumulator != "int32" or x.dtype not in _BYTES:
        return None
    gemm = ctx.cache.get("gemm", False)
    if gemm is False:
        q_in = ctx.in_quant(0)
        gemm = ctx.cache["gemm"] = None if q_in is None else IntegerGemm.build(plan.weights, q_in.zp, x.dtype)
    return gemm  # type: ignore[return-value]


def _vnni_requant(ctx: OpContext, plan: _Plan, x: np.ndarray) -> FastRequant | None:
    """The compiled requantization the fused VNNI GEMM would end in, or None where the GEMM cannot run
    the layer: it needs the compiled loops, constant weights (a cached plan), int8 ``x``, int32
    accumulators summed exactly in one block and the double/single-rounding requantization
    (:class:`.requant.FastRequant`, not XNNPACK's float32 one)."""
    fast = plan.fast
    if not ctx.jit or "plan" not in ctx.cache or not isinstance(fast, FastRequant) or fast.native is None \
            or plan.accumulator != "int32" or x.dtype != np.int8 or plan.chunks is not None:
        return None
    return fast


def _vnni_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, channels: int) -> Runner | None:
    """A 1x1 stride-1 convolution of int8 ``x`` with constant weights as the compiled VNNI GEMM with the
    requantization fused (:class:`._gemm.VnniGemm`: the int32 sums stay in cache, no unsigned copy of the
    input, no onnxruntime call), or None where it does not apply (no AVX512-VNNI, K not a multiple of 4,
    weights beyond int8, the XNNPACK-style float32 requantization of single rounding, ...)."""
    fast = _vnni_requant(ctx, plan, x)
    if fast is None or fast.native is None:
        return None
    vnni = ctx.cache.get("vnni", False)
    if vnni is False:
        q_in = ctx.in_quant(0)
        vnni = ctx.cache["vnni"] = None if q_in is None else VnniGemm.build(
            np.asarray(plan.weights, np.float64), q_in.zp, fast.native[1])
    if vnni is None:
        return None
    depth, out_dtype = x.shape[3], ctx.out_dtype()
    rows, out_shape = x.size // depth, (*x.shape[:3], channels)

    def run(v: np.ndarray) -> np.ndarray:
        y = np.empty(out_shape, out_dtype)
        vnni(np.ascontiguousarray(v).reshape(rows, depth), y.reshape(rows, channels))  # type: ignore[misc]
        return y

    return run


def _vnni_window_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, g: Geometry, channels: int) -> Runner | None:
    """A KHxKW int8 convolution as an int8 im2col matrix (one compiled pass; padded taps hold ``zp_in``,
    so they add 0) whose rows are padded to a multiple of 4 bytes, then the fused VNNI GEMM
    (:func:`_vnni_runner`'s; the padding columns have zero weights).  None where it does not apply."""
    fast = _vnni_requant(ctx, plan, x)
    if fast is None or fast.native is None:
        return None
    q_in = ctx.in_quant(0)
    span = g.kh * g.kw * g.co
    depth = (span + 3) // 4 * 4
    vnni = ctx.cache.get("vnni", False)
    if vnni is False:
        matrix = np.zeros((depth, channels))
        matrix[:span] = plan.weights
        vnni = ctx.cache["vnni"] = None if q_in is None else VnniGemm.build(matrix, q_in.zp, fast.native[1])
    if vnni is None or q_in is None:
        return None
    im2col, rows = kernels().im2col_rows, g.n * g.oh * g.ow
    matrix_rows = np.zeros((rows, depth), np.int8)  # the padding columns stay 0 (their weights are 0)
    pad, out_dtype, out_shape = np.int8(q_in.zp), ctx.out_dtype(), (g.n, g.oh, g.ow, channels)

    def run(v: np.ndarray) -> np.ndarray:
        im2col(np.ascontiguousarray(v), g.kh, g.kw, pad, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.oh, g.ow, matrix_rows)
        y = np.empty(out_shape, out_dtype)
        vnni(matrix_rows, y.reshape(rows, channels))  # type: ignore[misc]
        return y

    return run


def _dense_weights(ctx: OpContext, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """The weights [units, depth] of :func:`_native_dense` and their per-unit sums: int8 where
    every ``w − zp_w`` fits (half the bytes to read: a layer's time is reading its weights), else int16."""
    weights = ctx.cache.get("dense")
    if weights is None:
        matrix = plan.weights.T.astype(np.int64)  # exact integers, |w − zp_w| ≤ 255
        narrow = np.int8 if matrix.size and matrix.min() >= -128 and matrix.max() <= 127 else np.int16
        weights = (np.ascontiguousarray(matrix.astype(narrow)), matrix.sum(axis=1))
        if "plan" in ctx.cache:  # constant weights (as the plan): keep them for later runs
            ctx.cache["dense"] = weights
    return weights  # type: ignore[no-any-return]


def _dense_runner(ctx: OpContext, plan: _Plan, x: np.ndarray, zp_in: int, finish: Finish) -> Runner | None:
    """A 1x1 convolution of a few 8-bit pixels (squeeze-and-excite's [1, 1, 1, C]) as the compiled
    dot products of :func:`_native_dense`, then ``finish``: no onnxruntime call, whose fixed cost
    (~25 µs inside a model's run) is most of such a layer's time.  None where a raw sum
    ``Σ_k x·w`` could leave int32 (|x| ≤ 255) — then the GEMM runs."""
    w16, sums = _dense_weights(ctx, plan)
    if not _dense_fits(w16):
        return None
    dense, units = kernels().dense, w16.shape[0]
    rows = (x.size // x.shape[-1], x.shape[-1])
    out_shape, offset = (*x.shape[:-1], units), (np.int64(zp_in) * sums).astype(np.int32)

    def run(x: np.ndarray) -> np.ndarray:
        acc = np.empty((rows[0], units), np.int32)
        dense(np.ascontiguousarray(x).reshape(rows), w16, acc)
        acc -= offset
        return finish(acc.reshape(out_shape))

    return run


def _dense_fits(weights: np.ndarray) -> bool:
    """No raw sum ``Σ_k x·w`` of 8-bit ``x`` (|x| ≤ 255) can leave int32."""
    return 255.0 * float(np.abs(weights.astype(np.int64)).sum(axis=1).max(initial=0)) < 2.0**31


def _dense_layer(ctx: OpContext, plan: _Plan, x: np.ndarray, rows: int, rounding: str | None) -> Runner | None:
    """A FULLY_CONNECTED of at most :data:`_DENSE_ROWS` 8-bit rows with constant weights as the compiled
    dot products (:func:`_native_dense`; int8 weights read at memory speed — a 1280x1000 classifier
    ~90 µs with its weights out of cache, where onnxruntime's call took ~160 µs in a model's run), then
    the requantization; kept as the operator's runner.  None where it does not apply."""
    q_in = ctx.in_quant(0)
    if "plan" not in ctx.cache or plan.fast is None or plan.fast.native is None or rows > _DENSE_ROWS \
            or q_in is None or x.dtype not in _BYTES or plan.accumulator != "int32" or plan.real is not None:
        return None
    weights, sums = _dense_weights(ctx, plan)
    if weights.dtype != np.int8 or not _dense_fits(weights):
        return None
    dense, units, depth = kernels().dense, weights.shape[0], weights.shape[1]
    offset, finish, out_dtype = (np.int64(q_in.zp) * sums).astype(np.int32), plan.fast, ctx.out_dtype()
    shape = (*x.shape[:-1], units) if ctx.attr("keep_num_dims", False) else (rows, units)

    def run(v: np.ndarray) -> np.ndarray:
        acc = np.empty((rows, units), np.int32)
        dense(np.ascontiguousarray(v).reshape(rows, depth), weights, acc)
        acc -= offset
        return finish(acc, out_dtype).reshape(shape)

    return run


def _native_dense(ctx: OpContext, plan: _Plan, x: np.ndarray, zp_in: int) -> np.ndarray:
    """``(x − zp_in)·W`` as int32 from the compiled dot products (:mod:`.jit`): the raw
    8-bit input against int16 weights [units, depth], ``zp_in·Σ_k W[k, n]`` subtracted
    after (exact integers either way)."""
    w16, sums = _dense_weights(ctx, plan)
    acc = np.empty((x.shape[0], w16.shape[0]), np.int32)
    kernels().dense(np.ascontiguousarray(x), w16, acc)
    if zp_in:
        acc -= (zp_in * sums).astype(np.int32)
    return acc
