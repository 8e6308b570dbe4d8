"""fuse_pad_into_conv: a zero Pad before a Conv becomes the Conv's own padding.

Before::  p = Pad(x, pads=[0, 0, 1, 2, 0, 0, 1, 2], mode="constant", value=0); y = Conv(p, W, pads=[0, 0, 0, 0])
After::   y = Conv(x, W, pads=[1, 2, 1, 2])

ONNX ``pads`` list all begins then all ends; a Pad over ``N, C, H, W`` adds
``pads[2:r]`` and ``pads[r+2:]`` (``r`` = rank) to the Conv's begin and end
pads.  Only when: constant mode with a zero (or absent) fill value, no
padding of the batch and channel axes, no negative pads, the Conv has
``auto_pad`` NOTSET, and the Pad output is read only by the Conv (and is not
a graph output).  Pads come from the attribute (opset < 11) or constant
inputs (with optional ``axes``, opset 18).

One rule of the rewrite engine, rooted at the Conv: the Pad is matched and removed, the Conv
is re-emitted, edited in place (it keeps its place and name); every refused match says why.
All graphs; O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node
from ...patterns import Match, P, Replacement, RuleSet, Skip, same_graph, why_not_fusable
from .._onnx import const_array
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_pad_into_conv"]


def _pads(pad: Node, rank: int) -> list[int] | None:
    """Pad's begins+ends over all ``rank`` axes when it is a zero constant pad, else None."""
    mode = pad.attr("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else str(mode)) != "constant":
        return None
    if len(pad.inputs) > 1 and pad.inputs[1] is not None:
        raw = const_array(pad.inputs[1])
        fill = const_array(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] is not None else None
        if raw is None or (len(pad.inputs) > 2 and pad.inputs[2] is not None and fill is None):
            return None
        if fill is not None and np.any(fill != 0):
            return None
        pads = [int(p) for p in raw.reshape(-1)]
        if len(pad.inputs) > 3 and pad.inputs[3] is not None:
            axes = const_array(pad.inputs[3])
            if axes is None:
                return None
            full = [0] * (2 * rank)
            n = len(axes)
            for k, a in enumerate(int(a) + rank if a < 0 else int(a) for a in axes.reshape(-1)):
                full[a], full[a + rank] = pads[k], pads[k + n]
            pads = full
    else:
        attr = pad.attr("pads", pad.attr("paddings"))
        if attr is None or float(pad.attr("value", 0.0)) != 0.0:
            return None
        pads = [int(p) for p in attr]
    return pads if len(pads) == 2 * rank else None


def _fold(m: Match) -> Replacement | Skip:
    """``Conv(Pad(x))`` -> ``Conv(x)`` with the pads added to the Conv's own; the Conv stays in place."""
    conv, pad = m.node, m["pad"].node
    assert conv is not None and pad is not None
    x = conv.input(0)
    reason = None if same_graph(pad, conv) else f"the Pad producing {x.name!r} is in an enclosing graph"
    reason = reason or why_not_fusable(m)
    if reason:
        return m.skip(reason)
    if pad.inputs[0] is None or x.shape is None:
        return m.skip(f"the rank of {x.name!r} is unknown")
    auto_pad = conv.attr("auto_pad", b"NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)) != "NOTSET":
        return m.skip(f"the Conv has auto_pad {auto_pad!r}")
    rank = len(x.shape)
    pads = _pads(pad, rank)
    if pads is None or any(p < 0 for p in pads) or any(pads[i] or pads[i + rank] for i in (0, 1)):
        return m.skip(f"{x.name!r} is not a constant zero pad of the spatial axes")
    spatial = rank - 2
    current = [int(p) for p in conv.attr("pads", [0] * (2 * spatial))]
    if len(current) != 2 * spatial:
        return m.skip(f"the Conv has {len(current)} pads for {spatial} spatial axes")
    merged = [current[i] + pads[2 + i] for i in range(spatial)] + \
             [current[spatial + i] + pads[rank + 2 + i] for i in range(spatial)]
    conv.attrs["pads"] = Attr.ints(merged)
    conv.replace_input(0, pad.inputs[0])
    return Replacement([conv], {})


#: Conv(Pad(...), ...): both standard domain; the Pad is removed, the Conv re-emitted (edited in place).
_RULES = RuleSet([], name="fuse_pad_into_conv")
_RULES.add(P("Conv", P("Pad", name="pad", domain=""), ..., domain=""), _fold, name="pad_into_conv")


@transform("fuse_pad_into_conv", dialects={"onnx"})
def fuse_pad_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Merge a constant zero Pad into the padding of the Conv that reads it."""
    report = apply_rules(model, [_RULES])
    return result_of(report, stats={"pads_fused": report.applied})
