"""fuse_pad_and_conv: ``Conv2D(MirrorPad(x, p), w)`` -> ``FusedPadConv2D``.

Before::  q = MirrorPad(x, p){mode}; y = Conv2D(q, w){strides, padding}
After::   y = FusedPadConv2D(x, p, w){mode, strides, padding}

Exact: the fused kernel reads the mirrored pixels while building patches.  A
``MirrorPad`` fed by a ``ResizeBilinear`` is left for
``fuse_resize_pad_and_conv``, as in the original tool.  Conditions and cost:
:mod:`._conv_chains_tf`.
"""

from __future__ import annotations

from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._conv_chains_tf import fuse_convolution_chains


@transform("fuse_pad_and_conv", dialects={"tf"})
def fuse_pad_and_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fuse MirrorPad + Conv2D into FusedPadConv2D."""
    return fuse_convolution_chains(model, [(False, True)])
