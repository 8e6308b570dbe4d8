"""The ``mse`` block scales of :mod:`._nbits_onnx` as compiled loops (numba, optional): the same
arithmetic as its numpy path, one pass per candidate instead of five.

* ``best_candidates(blocks, inv, scale, zp, qlo, qhi, last)``: per block of ``blocks[c, kb, b]``, the
  index of the candidate (rows of ``inv``/``scale``/``zp``, shape ``[G, c, kb]``) whose codes
  ``clamp(rint(w·inv) + zp, qlo, qhi)`` give the least ``Σ (w - scale·(code - zp))²`` over the block's
  first ``b`` elements (``last`` in the last block: padding left out); the first wins ties.
* ``finish(blocks, inv, zp, qlo, qhi, last, codes)``: ``codes = clamp(roundf(w·inv) + zp, qlo, qhi)``
  (C's roundf, halves away from zero, as the numpy path) and the least-squares scale
  ``Σ w·(code - zp) / Σ (code - zp)²`` per block (0 / 0: NaN, the caller keeps its scale).

The sums may be reassociated (``fastmath`` reassoc: vectorised), so on a near-tie the compiled and
numpy searches can pick different candidates of the same error to float rounding.  Imported lazily
(importing numba costs ~0.3 s; ``cache=True`` keeps the machine code on disk, compiled once per machine).
"""

from __future__ import annotations

import numba
import numpy as np

_SUMS = {"cache": True, "nogil": True, "boundscheck": False, "fastmath": {"reassoc"}}


@numba.njit(**_SUMS)
def best_candidates(blocks, inv, scale, zp, qlo, qhi, last):  # type: ignore[no-untyped-def]
    g_count, c_count, kb = inv.shape
    b = blocks.shape[2]
    best = np.zeros((c_count, kb), np.intp)
    for c in range(c_count):
        for k in range(kb):
            n = last if k == kb - 1 else b
            row = blocks[c, k]
            best_err = np.inf
            for g in range(g_count):
                iv, s, z = inv[g, c, k], scale[g, c, k], zp[g, c, k]
                err = np.float32(0)
                for i in range(n):
                    x = row[i] * iv
                    q = min(max(np.rint(x) + z, qlo), qhi)
                    r = x - (q - z)
                    err += r * r
                err = err * (s * s)
                if err < best_err:
                    best_err = err
                    best[c, k] = g
    return best


@numba.njit(**_SUMS)
def finish(blocks, inv, zp, qlo, qhi, last, codes):  # type: ignore[no-untyped-def]
    c_count, kb, b = blocks.shape
    refit = np.empty((c_count, kb), np.float32)
    half = np.float32(0.49999997)
    for c in range(c_count):
        for k in range(kb):
            n = last if k == kb - 1 else b
            iv, z = inv[c, k], zp[c, k]
            num = np.float32(0)
            den = np.float32(0)
            for i in range(b):
                w = blocks[c, k, i]
                x = w * iv
                q = min(max(np.copysign(np.floor(np.abs(x) + half), x) + z, qlo), qhi)
                codes[c, k, i] = q
                if i < n:
                    level = q - z
                    num += w * level
                    den += level * level
            refit[c, k] = num / den if den > 0 else np.float32(np.nan)
    return refit
