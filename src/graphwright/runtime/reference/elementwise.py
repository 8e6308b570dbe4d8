"""What the element-wise kernels share (:mod:`.add_sub_mul`, :mod:`.activations`,
:mod:`.softmax`, :mod:`.quantize_ops`, :mod:`.math_ops`, :mod:`.binary_ops`): their
quantization parameters, the ``MultiplyByQuantizedMultiplier`` of a real multiplier in the
interpreter's rounding, scales as the doubles the runtime promotes them to, LiteRT's
``CheckedLog2`` and its 16-bit kernels' symmetric-quantization check.  8-bit operators run
through tables of their formula (:mod:`.table_lookup`).

``LEFT_SHIFT``: the 8-bit ADD/SUB's left shift (the extract layer reads it here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import OpContext, Quant, round_half_away
from .fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier

__all__ = ["LEFT_SHIFT"]

LEFT_SHIFT = 20


def _quants(ctx: OpContext, *indices: int) -> list[Quant]:
    qs = [ctx.in_quant(i) for i in indices] + [ctx.out_quant()]
    if any(q is None for q in qs):
        raise ctx.error("integer tensors without quantization parameters")
    return [q for q in qs if q is not None]


def _mbqm(ctx: OpContext, x: np.ndarray, real: float) -> np.ndarray:
    m, s = quantize_multiplier(real)
    return multiply_by_quantized_multiplier(x, m, s, ctx.rounding)


def _f64(v: float | np.floating[Any]) -> float:
    """A float32 scale as the double the runtime promotes it to."""
    return float(np.float64(np.float32(v)))


def _checked_log2(scale: float) -> int | None:
    """LiteRT's CheckedLog2 in float32: the rounded ``log2(scale)`` when it is within 1e-3 of an integer."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.float32(np.log(np.float32(scale)) * (np.float32(1) / np.log(np.float32(2))))
    if not np.isfinite(x):
        return None
    rounded = np.float32(round_half_away(x))
    return int(rounded) if abs(np.float32(x - rounded)) < np.float32(1e-3) else None


def _symmetric(ctx: OpContext, *quants: Quant) -> None:
    if any(q.zp != 0 for q in quants):
        raise ctx.error("int16 tensors with a non-zero zero point (LiteRT's 16-bit kernel needs symmetric quantization)")
