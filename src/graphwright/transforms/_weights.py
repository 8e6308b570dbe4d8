"""Weight arithmetic shared by the GraphDef and ONNX transforms."""

from __future__ import annotations

import numpy as np

__all__ = ["scaled"]


def scaled(weight: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """``weight · factor`` (``factor`` broadcasting against it) computed in float64 and
    rounded once to the weight's dtype, into a new array of the weight's shape —
    without float64 copies of the weight (the ufunc converts a small buffer at a
    time), so folding a model's batch norms holds one new weight at a time, not three.
    For floating-point weights (an integer weight raises numpy's casting error)."""
    out = np.empty(weight.shape, dtype=weight.dtype)
    np.multiply(weight, factor, out=out, dtype=np.float64, casting="same_kind")
    return out
