"""4-bit blockwise quantization of a MatMul weight ``W[K, N]``: onnxruntime's arithmetic (``rtn``),
or scales chosen by squared error (``mse``, the default of :class:`.options.QuantOptions`).

A block is ``block_size`` consecutive rows of one column (along K, the reduction axis); the last
block of a column may be short.  Per block, in float32, with ``lo = min(block, 0)`` and
``hi = max(block, 0)``:

* symmetric: ``m`` = the one of ``lo``/``hi`` with the larger magnitude, ``s = -m / 8`` (so the
  largest magnitude maps to -8 and the scale may be negative), zero point 0 (int4) or 8 (the
  unsigned nibbles of ``MatMulNBits``);
* asymmetric: ``s = (hi - lo) / 15``, ``zp = clamp(roundf(-lo / s), 0, 15)``;

codes ``clamp(roundf(w · (1/s)) + zp)`` (``DequantizeLinear`` form) or ``clamp(roundf(w · (1/s) + zp))``
(``MatMulNBits`` form), ``roundf`` rounding halves away from zero, ``1/s = 0`` when ``s = 0``.
Asymmetric blocks give ``|w - s·(q - zp)| <= s / 2`` everywhere.  Symmetric blocks give it except
for values of the sign opposite to the peak beyond ``7/8`` of its magnitude: the codes stop at
``7·|s|`` on that side, so those clip with an error up to ``|s|`` (onnxruntime's scheme, kept for
identical bytes).  The padding nibble of an odd number of zero points is 8; with an odd K the
unused high nibble of each column's last code byte is 0 (onnxruntime leaves a stale code there,
never read).  That is ``rtn``: the same bytes as ``MatMulNBitsQuantizer`` (default RTN).

``mse`` (see :func:`_mse_block`): per block the range ``[lo, hi]`` is also tried shrunk by 0.92 and
0.85, the candidate whose codes give the least squared weight error wins (the full range on a tie),
then the scale is refitted by least squares to the chosen codes.  Each block's error is at most
``rtn``'s; on Gaussian weights (blocks of 128) the weight SQNR rises by ~0.5 dB (19.73 -> 20.24 on
GPT-2's lm_head), outliers clip.  ``mse`` computes the ``DequantizeLinear`` codes and gives
``MatMulNBits`` the same ones (plus 8 when symmetric): both forms dequantize to the same weights.
``gptq`` (:mod:`.gptq_onnx`): the same blocks, codes chosen with the layer's input Hessian
(a weight without one falls back to ``mse``).
Work happens on ``W.T`` (one column's blocks contiguous), in chunks that stay in cache.  O(K·N);
``mse`` ~2x ``rtn``'s time.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...errors import TransformError
from ...ir import DType, Graph, Tensor, Value
from .._onnx import Names, is_standard
from .gptq_onnx import gptq_levels

__all__ = ["FOURBIT_OPSET", "check_opset_raise", "dq_blocks", "int4_tensor", "move_reduce_axes", "nbits_blocks"]

#: First default-domain opset whose DequantizeLinear takes int4 and ``block_size``.
FOURBIT_OPSET = 21
#: Oldest opset raised to 21 in place: below it, too many operators changed meaning.
_OLDEST_RAISED = 13
#: Reductions whose ``axes`` moved from an attribute to an input at opset 18 (rewritten on the raise).
_AXES_INPUT_OPSET = 18
_REDUCE_AXES_MOVED = frozenset({"ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
#: Default-domain operators whose meaning changed between opset 13 and 21 (not rewritten), by the version.
_CHANGED_AT = {
    "RoiAlign": 16,  # default coordinate_transformation_mode
    "GridSample": 20,  # mode names
    "DFT": 20,  # axis: attribute -> input
    "GroupNormalization": 21,  # scale/bias per channel instead of per group
}


#: Factors of a block's range tried by the ``mse`` method (1 first: onnxruntime's range wins ties).
MSE_SHRINK = (1.0, 0.92, 0.85)
#: Block scale methods: ``rtn`` (onnxruntime's round-to-nearest of the block's range) and ``mse``.
METHODS = ("rtn", "mse", "gptq")

#: Elements quantized per step (rows of ``W.T``): the working set of one step stays in cache.
_CHUNK_ELEMENTS = 1 << 18


def _roundf(x: np.ndarray) -> np.ndarray:
    """C's ``roundf`` (halves away from zero), exactly: ``floor(|x| + 0.49999997)`` with x's sign.

    Adding the largest float below 0.5 keeps 0.49999997 at 0 (``+ 0.5`` rounds it up) and still
    takes every exact half up (the sum rounds to the integer above)."""
    r = np.abs(np.asarray(x, np.float32))
    r += np.float32(0.49999997)
    np.floor(r, out=r)
    return np.copysign(r, x, out=r)


def _block_params(lo: np.ndarray, hi: np.ndarray, symmetric: bool, unsigned: bool) -> tuple[np.ndarray, np.ndarray]:
    """(float32 scales, float32 zero points) from per-block min/max (already including 0)."""
    if symmetric:
        peak = np.where(np.abs(hi) > np.abs(lo), hi, lo)
        scale = (-peak / np.float32(8)).astype(np.float32)
        return scale, np.full(scale.shape, 8 if unsigned else 0, np.float32)
    scale = ((hi - lo) / np.float32(15)).astype(np.float32)
    safe = np.where(scale != 0, scale, np.float32(1))
    zp_fp = np.where(scale != 0, np.float32(0) - lo / safe, lo).astype(np.float32)
    return scale, np.clip(_roundf(zp_fp), 0, 15)


def _reciprocal(scale: np.ndarray) -> np.ndarray:
    return np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, np.float32(1)), 0).astype(np.float32)


def _quantize(w: np.ndarray, block_size: int, symmetric: bool, *, nbits: bool,
              method: str = "rtn", hessian: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of ``w[K, N]``: (codes ``[N, kb, block]`` uint8 — the ``DequantizeLinear`` int4 values as their
    two's-complement nibbles when signed; past K the last row's codes —, scales ``[N, kb]``, zero points
    ``[N, kb]`` float32), ``nbits`` choosing MatMulNBits' unsigned form (zero point added before rounding,
    for ``rtn``; ``mse`` computes the ``DequantizeLinear`` codes and adds 8 to symmetric ones, so both
    forms dequantize to the same weights).  Works on ``W.T`` (one column's blocks contiguous)."""
    w = np.asarray(w, np.float32)
    k, n = w.shape
    kb = -(-k // block_size)
    unsigned = nbits or not symmetric
    if method == "gptq" and hessian is not None:  # the layer's inputs were seen: GPTQ (else mse)
        x, scale, zp = gptq_levels(w, hessian, block_size, symmetric)
        if nbits and symmetric:
            x += np.float32(8)
            zp = np.full(scale.shape, 8, np.float32)
        return (x.astype(np.uint8) if unsigned else x.astype(np.int8).view(np.uint8)), scale, zp
    if method == "gptq":
        method = "mse"
    qmin, qmax = (0, 15) if unsigned else (-8, 7)
    codes = np.empty((n, kb, block_size), np.uint8)
    scales = np.empty((n, kb), np.float32)
    zps = np.empty((n, kb), np.float32)
    rows = max(1, _CHUNK_ELEMENTS // (kb * block_size))
    part = np.empty((rows, kb * block_size), np.float32)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        chunk = part[: r1 - r0]
        chunk[:, :k] = w[:, r0:r1].T
        if kb * block_size != k:  # repeat the last row of W: the blocks' min/max are unchanged
            chunk[:, k:] = chunk[:, k - 1:k]
        blocks = chunk.reshape(r1 - r0, kb, block_size)
        lo = np.minimum(blocks.min(axis=2), np.float32(0))
        hi = np.maximum(blocks.max(axis=2), np.float32(0))
        if method == "mse":
            x, scale, zp = _mse_block(blocks, lo, hi, symmetric, pad=kb * block_size - k)
            if nbits and symmetric:
                x += np.float32(8)
                zp = np.full(scale.shape, 8, np.float32)
        else:
            scale, zp = _block_params(lo, hi, symmetric, unsigned)
            x = blocks * _reciprocal(scale)[..., None]
            if nbits:
                x += zp[..., None]
                x = _roundf(x)
            else:
                x = _roundf(x)
                x += zp[..., None]
            np.clip(x, qmin, qmax, out=x)
        codes[r0:r1] = x.astype(np.uint8) if unsigned else x.astype(np.int8).view(np.uint8)
        scales[r0:r1] = scale
        zps[r0:r1] = zp
    return codes, scales, zps


def _mse_block(blocks: np.ndarray, lo: np.ndarray, hi: np.ndarray, symmetric: bool,
               pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``mse`` method on ``blocks[c, kb, block]``: (codes in the ``DequantizeLinear`` form — int4
    values when symmetric, uint4 with zero points otherwise —, float32 scales ``[c, kb]``, zero points).

    Per block, the range ``[lo, hi]`` (both including 0) is shrunk by each factor of ``MSE_SHRINK``;
    the factor whose round-to-nearest codes (``rint``, halves to even) give the least squared weight
    error wins (1, onnxruntime's range, first: a tie keeps it).  Then the scale is refitted by least squares to those codes,
    ``s = sum(w·(q - zp)) / sum((q - zp)²)``, which can only lower the error further.  So each block's
    squared error is at most round-to-nearest's.  Rows of padding (``pad``, the last block's repeated
    last row) are left out of the error and get level 0.  O(len(MSE_SHRINK) · elements)."""
    x = np.empty_like(blocks)
    q = np.empty_like(blocks)
    if symmetric:
        level_lo, level_hi = np.float32(-8), np.float32(7)
    best_err = best_scale = best_zp = None
    for shrink in MSE_SHRINK:
        f = np.float32(shrink)
        scale, zp = _block_params(lo * f, hi * f, symmetric, not symmetric)
        if not symmetric:  # the level q - zp stays within [-zp, 15 - zp]
            level_lo, level_hi = -zp[..., None], np.float32(15) - zp[..., None]
        np.multiply(blocks, _reciprocal(scale)[..., None], out=x)
        np.rint(x, out=q)
        np.clip(q, level_lo, level_hi, out=q)
        x -= q
        if pad:
            x[:, -1, blocks.shape[2] - pad:] = 0
        err = np.einsum("ckb,ckb->ck", x, x)
        err *= scale * scale
        if best_err is None:
            best_err, best_scale, best_zp = err, scale, zp
        else:
            take = err < best_err
            best_err = np.where(take, err, best_err)
            best_scale = np.where(take, scale, best_scale)
            best_zp = np.where(take, zp, best_zp)
    if not symmetric:
        level_lo, level_hi = -best_zp[..., None], np.float32(15) - best_zp[..., None]
    np.multiply(blocks, _reciprocal(best_scale)[..., None], out=x)
    np.rint(x, out=x)
    np.clip(x, level_lo, level_hi, out=x)  # the winner's levels q - zp
    if pad:  # padding rows: level 0 (left out of the sums; never read)
        x[:, -1, blocks.shape[2] - pad:] = 0
    den = np.einsum("ckb,ckb->ck", x, x)
    num = np.einsum("ckb,ckb->ck", blocks, x)
    refit = np.where(den > 0, num / np.where(den > 0, den, np.float32(1)), best_scale).astype(np.float32)
    if not symmetric:
        x += best_zp[..., None]
    return x, refit, best_zp.astype(np.float32)


def dq_blocks(w: np.ndarray, block_size: int, symmetric: bool, method: str = "rtn",
              hessian: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``DequantizeLinear(axis=0, block_size)`` form: (codes ``[K, N]`` int8 holding int4/uint4 values,
    float32 scales ``[kb, N]``, zero points ``[kb, N]`` or None when symmetric)."""
    k, n = np.shape(w)
    codes, scale, zp = _quantize(w, block_size, symmetric, nbits=False, method=method, hessian=hessian)
    codes = np.ascontiguousarray(codes.reshape(n, -1)[:, :k].view(np.int8).T)
    return codes, np.ascontiguousarray(scale.T), None if symmetric else np.ascontiguousarray(zp.T.astype(np.int8))


def nbits_blocks(w: np.ndarray, block_size: int, symmetric: bool, method: str = "rtn",
                 hessian: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``com.microsoft.MatMulNBits`` (bits=4) inputs: (packed ``[N, kb, block_size/2]`` uint8, float32 scales
    ``[N, kb]``, packed zero points ``[N, ceil(kb/2)]`` uint8 or None when symmetric).  Low nibble first."""
    k = np.shape(w)[0]
    nibbles, scale, zp = _quantize(w, block_size, symmetric, nbits=True, method=method, hessian=hessian)  # [N, kb, block]
    if k % block_size:
        nibbles[:, -1, k % block_size:] = 0
    packed = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
    if symmetric:
        return packed, scale, None
    zps = zp.astype(np.uint8)  # [N, kb]
    if zps.shape[1] % 2:
        zps = np.pad(zps, ((0, 0), (0, 1)), constant_values=8)
    return packed, scale, (zps[:, 0::2] | (zps[:, 1::2] << 4)).astype(np.uint8)


def int4_tensor(codes: np.ndarray, signed: bool) -> Tensor:
    """An INT4/UINT4 tensor of ``codes`` (int8 values in range), stored two per byte when written."""
    if signed:
        return Tensor.from_numpy(codes.astype(ml_dtypes.int4), DType.INT4)
    return Tensor.from_numpy(codes.astype(np.uint8).astype(ml_dtypes.uint4), DType.UINT4)


def check_opset_raise(opset: int, ops: set[str]) -> None:
    """Refuse (one clear error) raising a model of ``opset`` using ``ops`` to opset 21 when that changes its meaning."""
    if opset >= FOURBIT_OPSET:
        return
    hint = ("convert the model to opset 21 first (onnx.version_converter), or use target=onnxruntime "
            "(com.microsoft.MatMulNBits, any opset)")
    if opset < _OLDEST_RAISED:
        raise TransformError(f"4-bit DequantizeLinear needs opset {FOURBIT_OPSET}; this model is opset {opset}, "
                             f"too old to raise in place: {hint}")
    changed = sorted(op for op in ops if opset < _CHANGED_AT.get(op, 0) <= FOURBIT_OPSET)
    if changed:
        raise TransformError(f"4-bit DequantizeLinear needs opset {FOURBIT_OPSET}; raising this opset-{opset} model "
                             f"would change {', '.join(changed)}: {hint}")


def move_reduce_axes(graphs: list[Graph], opset: int, names: Names) -> int:
    """Before opset 18 -> 21: each ``Reduce*(x, axes=[...])`` attribute becomes an int64 ``axes`` input
    (no ``axes`` still reduces everything).  Returns how many nodes changed.  O(nodes)."""
    if opset >= _AXES_INPUT_OPSET:
        return 0
    moved = 0
    for graph in graphs:
        for node in graph:
            if node.op not in _REDUCE_AXES_MOVED or not is_standard(node) or "axes" not in node.attrs:
                continue
            axes = np.asarray(node.attr("axes"), np.int64)
            value = graph.add_initializer(Value(names.fresh(f"{node.name or node.output.name}_axes"),
                                                const=Tensor.from_numpy(axes, DType.INT64)))
            del node.attrs["axes"]
            node.set_inputs([node.inputs[0], value])
            moved += 1
    return moved
