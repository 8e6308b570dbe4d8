"""The rules of the three convolution fusions (ResizeBilinear / MirrorPad + Conv2D).

The fused kernels TensorFlow's CPU runtime ships::

    FusedResizeAndPadConv2D(input, size, paddings, filter) {T, resize_align_corners, mode, strides, padding}
    FusedPadConv2D(input, paddings, filter)                 {T, mode, strides, padding}

compute ``Conv2D(MirrorPad(ResizeBilinear(input, size), paddings, mode), filter)``
(resp. without the resize) while generating the im2col patches, so the resized
and padded image is never materialised.  Their resize is the legacy bilinear
one (no half-pixel centres), their conv is NHWC with no dilation.

One rule per chain shape, rooted at the ``Conv2D`` (:func:`chain_rules`); a
``MirrorPad`` fed by a ``ResizeBilinear`` is not a pad-only chain (it is left
for the resize+pad rule, as in the original tool).  A matched chain is fused
only when the result is the same maths, otherwise the rule's check refuses it
with the reason: the resize has ``half_pixel_centers=false`` (the original tool
does not check this and silently changes the outputs of TF2 ``tf.image.resize``
graphs), the conv is NHWC with unit dilations and ``SAME``/``VALID`` padding,
the dtypes agree, the paddings are int32, and the resize/pad outputs feed only
this conv (:func:`~graphwright.patterns.predicates.why_not_absorbed`: one
reader, not graph outputs, no control users; their control inputs move to the
fused node).  The fused node takes the conv's name.  O(N) per rule set (one
sweep, rules indexed by root op).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...ir import Attr, DType, Model, Node, Value
from ...patterns import ANY, Match, P, Pattern, Replacement, RuleSet, why_not_absorbed
from ..registry import TransformResult
from ..rules import apply_rules, result_of

__all__ = ["chain_rules", "fuse_convolution_chains"]

FUSABLE_TYPES = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64})


def _not_resized(value: Value) -> bool:
    producer = value.producer
    return producer is None or producer.op != "ResizeBilinear"


_RESIZE = P("ResizeBilinear", ANY(name="x"), ANY(name="size"), name="resize")
#: (resize, pad) -> (rule name, pattern), in the model's own ops.
PATTERNS: dict[tuple[bool, bool], tuple[str, Pattern]] = {
    # Conv2D(MirrorPad(ResizeBilinear(x, size), paddings), w) -> FusedResizeAndPadConv2D(x, size, paddings, w)
    (True, True): ("resize_pad_conv",
                   P("Conv2D", P("MirrorPad", _RESIZE, ANY(name="paddings"), name="pad"), ANY(name="w"), name="conv")),
    # Conv2D(ResizeBilinear(x, size), w) -> FusedResizeAndPadConv2D(x, size, zeros, w)
    (True, False): ("resize_conv", P("Conv2D", _RESIZE, ANY(name="w"), name="conv")),
    # Conv2D(MirrorPad(x, paddings), w) -> FusedPadConv2D(x, paddings, w), x not a ResizeBilinear
    (False, True): ("pad_conv", P("Conv2D", P("MirrorPad", ANY(name="x", where=_not_resized), ANY(name="paddings"),
                                              name="pad"), ANY(name="w"), name="conv")),
}


def _conv_problem(conv: Node) -> str | None:
    if conv.attr("data_format", b"NHWC") != b"NHWC":
        return "conv is not NHWC"
    if any(d != 1 for d in conv.attr("dilations", (1, 1, 1, 1))):
        return "conv is dilated"
    if conv.attr("padding") not in (b"SAME", b"VALID"):
        return "conv padding is not SAME/VALID"
    if conv.attr("T") not in FUSABLE_TYPES:
        return "conv dtype has no fused kernel"
    return None


def _resize_problem(resize: Node, conv: Node) -> str | None:
    if resize.attr("half_pixel_centers", False):
        return "resize uses half-pixel centres; the fused kernel does not"
    if resize.attr("T") != conv.attr("T"):
        return "resize input dtype differs from the conv dtype"
    return why_not_absorbed(resize)


def _pad_problem(pad: Node, conv: Node) -> str | None:
    if pad.attr("Tpaddings", DType.INT32) is not DType.INT32:
        return "paddings are not int32"
    if pad.attr("T") != conv.attr("T"):
        return "pad dtype differs from the conv dtype"
    return why_not_absorbed(pad)


def _node(m: Match, name: str) -> Node | None:
    sub = m.get(name)
    return sub.node if sub is not None else None


def _why_not(m: Match) -> str | None:
    """The rules' check: why the matched chain can't be fused, or None (conv, then pad, then resize)."""
    conv = m.node
    assert conv is not None
    pad, resize = _node(m, "pad"), _node(m, "resize")
    problem = _conv_problem(conv)
    if problem is None and pad is not None:
        problem = _pad_problem(pad, conv)
    if problem is None and resize is not None:
        problem = _resize_problem(resize, conv)
    return problem


def _fuse(m: Match) -> Replacement:
    """The fused node, named like the conv; the control inputs of the chain move onto it."""
    conv = m.node
    assert conv is not None
    pad, resize = _node(m, "pad"), _node(m, "resize")
    attrs = {"T": conv.attrs["T"], "strides": conv.attrs["strides"], "padding": conv.attrs["padding"]}
    if pad is not None:
        attrs["mode"] = pad.attrs["mode"]
        paddings = pad.input(1)
    else:  # resize only: zero paddings, any mode
        attrs["mode"] = Attr.string("REFLECT")
        paddings = m.constant(np.zeros((4, 2), np.int32), name=f"{conv.name}_dummy_paddings")
    source = m["x"].value
    assert source is not None
    if resize is not None:
        attrs["resize_align_corners"] = Attr.bool(resize.attr("align_corners", False))
        inputs: tuple[Value, ...] = (source, resize.input(1), paddings, conv.input(1))
        op = "FusedResizeAndPadConv2D"
    else:
        inputs = (source, paddings, conv.input(1))
        op = "FusedPadConv2D"
    controls: dict[Node, None] = {}
    for node in (resize, pad, conv):
        if node is not None:
            controls.update(dict.fromkeys(node.control_inputs))
    fused = Node(op, inputs, dialect="tf", name=conv.name, attrs=attrs, control_inputs=controls, device=conv.device)
    fused.output.dtype = conv.output.dtype
    fused.output.shape = conv.output.shape
    return Replacement([fused])


def chain_rules(*, resize: bool, pad: bool) -> RuleSet:
    """The rule fusing ``[ResizeBilinear ->] [MirrorPad ->] Conv2D`` chains of one shape."""
    name, pattern = PATTERNS[(resize, pad)]
    rules = RuleSet(name=name)
    rules.add(pattern, _fuse, name=name, check=_why_not)
    return rules


def fuse_convolution_chains(model: Model, shapes: Iterable[tuple[bool, bool]]) -> TransformResult:
    """Fuse the chains of each ``(resize, pad)`` shape in turn, one sweep each, main graph only."""
    report = apply_rules(model, [chain_rules(resize=resize, pad=pad) for resize, pad in shapes], subgraphs=False)
    return result_of(report, stats={"convolutions_fused": report.applied})
