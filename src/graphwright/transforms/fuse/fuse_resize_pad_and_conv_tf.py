"""fuse_resize_pad_and_conv: ``Conv2D(MirrorPad(ResizeBilinear(x, size), p), w)`` -> one op.

Before::  r = ResizeBilinear(x, size); q = MirrorPad(r, p){mode}; y = Conv2D(q, w)
After::   y = FusedResizeAndPadConv2D(x, size, p, w){resize_align_corners, mode, strides, padding}

Exact (same samples, same sums).  Conditions and cost: :mod:`._conv_chains_tf`.
"""

from __future__ import annotations

from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._conv_chains_tf import fuse_convolution_chains


@transform("fuse_resize_pad_and_conv", dialects={"tf"})
def fuse_resize_pad_and_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fuse ResizeBilinear + MirrorPad + Conv2D into FusedResizeAndPadConv2D."""
    return fuse_convolution_chains(model, [(True, True)])
