"""GPTQ for 4-bit ONNX MatMul/Gemm weights: blockwise codes chosen with the layer's input statistics.

Before: a float weight ``W[K, N]`` (K the reduction axis) and the Hessian of its layer's squared
output error, ``H = sum x x^T`` over the calibration rows ``x[K]`` of the layer's input.  After: the
same ``(levels, scales, zero points)`` triple as :func:`._nbits_onnx._mse_block` — blocks of
``block_size`` rows of one column, one scale (and zero point when asymmetric) per block — so the
``DequantizeLinear`` and ``MatMulNBits`` writers store it unchanged.

Algorithm (Frantar et al., GPTQ, with groups equal to the writers' blocks): rows of W are quantized
in order 0..K-1; a block's scale is chosen (``mse`` range search and least-squares refit of
:mod:`._nbits_onnx`) when its first row is reached, from the weights as already updated; each row's
rounding error ``e = (w - q) / U[i, i]`` is pushed onto the rows not yet quantized, ``W[j] -= e · U[i, j]``,
``U`` the upper Cholesky factor of ``(H + damp·mean(diag H)·I)^-1`` (float32).  This minimises, greedily, the
layer's output error ``(W - Q)^T H (W - Q)`` instead of the weight error.  Rows whose input is always 0
(``H[i, i] = 0``) get weight 0.  Updates inside a block run in sub-blocks of ``_SUB`` rows (rank-1 updates
within, one matrix product across), across blocks in one product.  Cost per weight: O(K^3) for the
factor + O(K^2·N) for the updates; memory O(K^2 + K·N).

:func:`collect_hessians` streams calibration samples through onnxruntime (the float model with the
layers' inputs as extra outputs, :mod:`graphwright.runtime.intermediates`), adding ``x^T x`` per run:
memory is one ``K x K`` float32 matrix per distinct layer input, whatever the number of samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ...ir import Model

__all__ = ["DAMP", "collect_hessians", "gptq_levels", "hessian_inputs"]

#: Dampening: ``H + DAMP·mean(diag H)·I`` (GPTQ's 1 %).
DAMP = 0.01
#: Rows per rank-1 sub-block (the rest of the update is one matrix product).
_SUB = 32
#: Activation rows gathered per Hessian update (memory: _ROWS x K floats per layer input).
_ROWS = 1024
#: Triangular blocks inverted directly below this size (recursion above).
_DIRECT = 256


def hessian_inputs(model: Model, minimum_size: int, options: object) -> dict[str, tuple[str, int]]:
    """Of every MatMul/Gemm whose weight becomes 4-bit as B (``[K, N]`` or ``[N, K]`` with transB):
    ``{weight name: (input activation name, K)}``, main graph only (weights in subgraphs, and a weight-first
    MatMul's A, get ``mse``).  A weight read by several layers takes the first layer's input."""
    from .quantize_weights_onnx import _FOURBIT_OPS, _why_not_4bit  # lazy: that module imports this one's users

    out: dict[str, tuple[str, int]] = {}
    for node in model.graph:
        if node.op not in _FOURBIT_OPS or node.domain not in ("", "ai.onnx"):
            continue
        _reason, site = _why_not_4bit(node, model.graph, minimum_size, options)  # type: ignore[arg-type]
        if site is None or site.index != 1 or (node.op == "Gemm" and node.attr("transA", 0)):
            continue
        weight = node.inputs[1]
        k = weight.const.shape[1 if site.transposed else 0]
        out.setdefault(weight.name, (node.inputs[0].name, int(k)))
    return out


def collect_hessians(model: Model, samples: Iterable[Mapping[str, np.ndarray]], inputs: Mapping[str, tuple[str, int]],
                     on_sample: Callable[[int], None] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """``({weight name: H[K, K] float32}, samples run)`` over ``samples`` (see the module docstring);
    ``inputs`` from :func:`hessian_inputs`.  One onnxruntime run per sample."""
    from ...runtime.intermediates import prepare_intermediates  # lazy: onnxruntime

    by_input: dict[str, list[str]] = {}
    for weight, (name, _k) in inputs.items():
        by_input.setdefault(name, []).append(weight)
    sums: dict[str, np.ndarray] = {}
    rows: dict[str, list[np.ndarray]] = {}

    def flush(name: str) -> None:  # one product per _ROWS rows: the K x K sum is read and written once for them
        x = np.concatenate(rows.pop(name))
        if name in sums:
            sums[name] += x.T @ x
        else:
            sums[name] = x.T @ x

    session = prepare_intermediates(model, list(by_input))
    count = 0
    try:
        for feeds in samples:
            for name, array in session.run(feeds).items():
                weights = by_input.get(name)
                if not weights:
                    continue
                x = np.asarray(array, np.float32)
                k = inputs[weights[0]][1]
                if x.ndim == 0 or x.shape[-1] != k:
                    continue
                x = x.reshape(-1, k)
                pending = rows.setdefault(name, [])
                pending.append(x[np.isfinite(x).all(axis=1)])
                if sum(len(p) for p in pending) >= _ROWS:
                    flush(name)
            count += 1
            if on_sample is not None:
                on_sample(count)
    finally:
        session.close()
    for name in list(rows):
        flush(name)
    return {w: sums[name] for name, weights in by_input.items() if name in sums for w in weights}, count


def _lower_inverse(m: np.ndarray) -> np.ndarray:
    """The inverse of a lower-triangular ``m`` (recursive 2x2 blocks: O(K^3/3) in matrix products)."""
    n = m.shape[0]
    if n <= _DIRECT:
        return np.linalg.inv(m)
    h = n // 2
    a, c, d = m[:h, :h], m[h:, :h], m[h:, h:]
    ai, di = _lower_inverse(a), _lower_inverse(d)
    out = np.zeros_like(m)
    out[:h, :h], out[h:, h:] = ai, di
    out[h:, :h] = -(di @ (c @ ai))
    return out


def _inverse_upper_factor(h: np.ndarray) -> np.ndarray:
    """``U`` upper triangular with ``h^-1 = U^T U``: with ``J`` the reversal, ``J h J = M M^T`` (M lower)
    gives ``U = J M^-1 J``."""
    m = np.linalg.cholesky(h[::-1, ::-1])
    return np.ascontiguousarray(_lower_inverse(m)[::-1, ::-1])


def gptq_levels(w: np.ndarray, hessian: np.ndarray, block_size: int, symmetric: bool,
                damp: float = DAMP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of ``w[K, N]`` and ``hessian[K, K]``: (levels ``[N, kb, block_size]`` float32 in the
    ``DequantizeLinear`` form — int4 values when symmetric, uint4 codes with zero points otherwise;
    rows past K level 0 —, scales ``[N, kb]`` float32, zero points ``[N, kb]`` float32)."""
    from ._nbits_onnx import _mse_block  # lazy: _nbits_onnx calls this module

    w = np.asarray(w, np.float32)
    k, n = w.shape
    kb = -(-k // block_size)
    h = np.array(hessian, np.float64)  # damped in float64, factored in float32 (as GPTQ's GPU code)
    if h.shape != (k, k):
        raise ValueError(f"Hessian of shape {h.shape} for a weight with K={k}")
    work = np.array(w, np.float32)  # [K, N], updated in place
    diag = np.diagonal(h).copy()
    dead = ~(diag > 0)
    h[dead, dead] = 1.0
    work[dead] = 0.0
    h[np.diag_indices(k)] += damp * float(np.mean(np.diagonal(h)))
    u = _inverse_upper_factor(h.astype(np.float32))
    levels = np.zeros((kb, block_size, n), np.float32)  # rows of W contiguous (N wide) while they are updated
    scales = np.empty((n, kb), np.float32)
    zps = np.empty((n, kb), np.float32)
    for b in range(kb):
        i1, i2 = b * block_size, min(k, (b + 1) * block_size)
        width = i2 - i1
        group = np.empty((n, 1, block_size), np.float32)
        group[:, 0, :width] = work[i1:i2].T
        group[:, 0, width:] = group[:, 0, width - 1:width]
        lo = np.minimum(group.min(axis=2), np.float32(0))
        hi = np.maximum(group.max(axis=2), np.float32(0))
        _x, scale, zp = _mse_block(group, lo, hi, symmetric, pad=block_size - width)
        s, z = scale[:, 0], zp[:, 0]
        inv = np.where(s != 0, np.float32(1) / np.where(s != 0, s, np.float32(1)), np.float32(0)).astype(np.float32)
        q_lo, q_hi = (np.float32(-8), np.float32(7)) if symmetric else (-z, np.float32(15) - z)
        block = work[i1:i2]  # a view: updated in place
        errs = np.empty((width, n), np.float32)
        ub = u[i1:i2, i1:i2]
        for j1 in range(0, width, _SUB):
            j2 = min(width, j1 + _SUB)
            for j in range(j1, j2):
                row = block[j]
                q = np.rint(row * inv)
                np.clip(q, q_lo, q_hi, out=q)
                levels[b, j] = q if symmetric else q + z
                e = errs[j]
                np.multiply(q, s, out=e)
                np.subtract(row, e, out=e)
                e *= np.float32(1) / ub[j, j]
                if j + 1 < j2:
                    block[j + 1:j2] -= ub[j, j + 1:j2, None] * e
            if j2 < width:
                block[j2:] -= ub[j1:j2, j2:].T @ errs[j1:j2]
        if i2 < k:
            work[i2:] -= u[i1:i2, i2:].T @ errs
        scales[:, b] = s
        zps[:, b] = z
        if width < block_size and not symmetric:
            levels[b, width:] = z
    levels = np.ascontiguousarray(levels.transpose(2, 0, 1))
    return levels, scales, zps
