"""fuse_resize_and_conv: ``Conv2D(ResizeBilinear(x, size), w)`` -> ``FusedResizeAndPadConv2D``.

Before::  r = ResizeBilinear(x, size){align_corners}; y = Conv2D(r, w){strides, padding}
After::   y = FusedResizeAndPadConv2D(x, size, zeros[4,2], w){resize_align_corners, mode=REFLECT,
                                                              strides, padding}

With zero paddings the mirror pad is the identity, so ``y`` is unchanged
(bit-exact: the fused kernel computes the same bilinear samples and dot
products).  The conditions and the cost are in :mod:`._conv_chains_tf`.
"""

from __future__ import annotations

from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._conv_chains_tf import fuse_convolution_chains


@transform("fuse_resize_and_conv", dialects={"tf"})
def fuse_resize_and_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fuse ResizeBilinear + Conv2D into FusedResizeAndPadConv2D."""
    return fuse_convolution_chains(model, [(True, False)])
