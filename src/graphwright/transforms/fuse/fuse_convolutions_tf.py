"""fuse_convolutions: the seed's name for the three convolution fusions, run in their best order.

Runs ``fuse_resize_pad_and_conv``, then ``fuse_resize_and_conv``, then
``fuse_pad_and_conv`` (longest chain first, so a resize+pad+conv chain becomes
one op rather than a resize left over), and sums their counters: their three rule
sets in one :func:`~graphwright.transforms.rules.apply_rules` run.  Cost: three O(N) sweeps.
"""

from __future__ import annotations

from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._conv_chains_tf import fuse_convolution_chains

#: (resize, pad) shapes in the order they are fused.
ORDER = ((True, True), (True, False), (False, True))


@transform("fuse_convolutions", dialects={"tf"})
def fuse_convolutions(model: Model, ctx: TransformContext) -> TransformResult:
    """Run fuse_resize_pad_and_conv, fuse_resize_and_conv and fuse_pad_and_conv."""
    return fuse_convolution_chains(model, ORDER)
