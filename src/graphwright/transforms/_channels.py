"""Per-output-channel arithmetic on Conv, ConvTranspose and Gemm weights (shared by the fusions).

Output channel ``o`` of a convolution is computed with

- ``Conv``: ``W[o, ...]`` (W is ``[C_out, C_in/group, k...]``);
- ``ConvTranspose``: ``W[c, o mod (C_out/group), ...]`` for the input channels
  ``c`` of group ``o div (C_out/group)`` (W is ``[C_in, C_out/group, k...]``);
- ``Gemm`` (``Y = A·B``): column ``o`` of ``B`` (``B[:, o]``, or ``B[o, :]`` with ``transB``).

so multiplying output channel ``o`` by ``s[o]`` multiplies exactly those
weights.  Arithmetic is done in float64 and stored in the weight's dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir import Node
from ._weights import scaled

__all__ = ["out_channels", "scale_out_channels", "FLOAT_KINDS"]

FLOAT_KINDS = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})


def out_channels(node: Node, weight: np.ndarray) -> int | None:
    """Number of output channels of ``node`` given its weight, or None if malformed."""
    if node.op == "Conv":
        return int(weight.shape[0]) if weight.ndim >= 2 else None
    if node.op == "ConvTranspose":
        return int(weight.shape[1]) * int(node.attr("group", 1)) if weight.ndim >= 2 else None
    if node.op == "Gemm":
        if weight.ndim != 2:
            return None
        return int(weight.shape[0] if node.attr("transB", 0) else weight.shape[1])
    return None


def scale_out_channels(node: Node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """``weight`` with output channel ``o`` multiplied by ``scale[o]`` (None if shapes disagree).

    Each product is computed in float64 and rounded once to the weight's dtype,
    but without a float64 copy of the weight: the multiplication writes
    straight into the result (numpy's ufunc loop converts a small buffer at a
    time).  Besides the result, the cost is O(channels) memory, not two
    float64 temporaries of 2x the weight each -- those made folding ResNet-50's
    batch norms peak at 2x the model's size and left the heap fragmented.
    The values are bit-identical to ``(weight.astype(f64) * s).astype(dtype)``.
    """
    channels = out_channels(node, weight)
    if channels is None or scale.shape != (channels,):
        return None
    s = scale.astype(np.float64)
    if node.op == "Conv":
        return scaled(weight, s.reshape((channels,) + (1,) * (weight.ndim - 1)))
    if node.op == "ConvTranspose":
        group = int(node.attr("group", 1))
        c_in, per_group = weight.shape[0], weight.shape[1]
        if group < 1 or c_in % group:
            return None
        grouped = (group, c_in // group, per_group) + weight.shape[2:]
        factor = s.reshape((group, 1, per_group) + (1,) * (weight.ndim - 2))
        return scaled(weight.reshape(grouped), factor).reshape(weight.shape)
    return scaled(weight, s[:, None] if node.attr("transB", 0) else s[None, :])
