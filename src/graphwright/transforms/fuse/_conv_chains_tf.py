"""Shared matcher and rewrite for the three convolution fusions (ResizeBilinear / MirrorPad + Conv2D).

The fused kernels TensorFlow's CPU runtime ships::

    FusedResizeAndPadConv2D(input, size, paddings, filter) {T, resize_align_corners, mode, strides, padding}
    FusedPadConv2D(input, paddings, filter)                 {T, mode, strides, padding}

compute ``Conv2D(MirrorPad(ResizeBilinear(input, size), paddings, mode), filter)``
(resp. without the resize) while generating the im2col patches, so the resized
and padded image is never materialised.  Their resize is the legacy bilinear
one (no half-pixel centres), their conv is NHWC with no dilation.

A chain is fused only when the result is the same maths: the resize has
``half_pixel_centers=false`` (the original tool does not check this and
silently changes the outputs of TF2 ``tf.image.resize`` graphs), the conv is
NHWC with unit dilations and ``SAME``/``VALID`` padding, the dtypes agree, the
paddings are int32, and the resize/pad outputs feed only this conv (are not
graph outputs and have no control users).  Otherwise the chain is left alone and
the reason is reported.  O(N).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Model, Node, Value
from ...patterns import make_constant
from ..registry import TransformResult

__all__ = ["fuse_convolution_chains"]

FUSABLE_TYPES = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64})


def _producer(node: Node, index: int, op: str) -> Node | None:
    value = node.inputs[index] if index < len(node.inputs) else None
    producer = value.producer if value is not None else None
    return producer if producer is not None and producer.op == op else None


def _private(node: Node) -> str | None:
    """Why ``node``'s output cannot disappear into a fusion, or None if it can."""
    value = node.output
    if value.num_uses != 1:
        return f"{node.name} has {value.num_uses} readers"
    if value.is_graph_output:
        return f"{node.name} is a graph output"
    if node.control_users:
        return f"{node.name} has control users"
    if any(v.num_uses for v in node.outputs[1:]):
        return f"{node.name} has other outputs in use"
    return None


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
    return _private(resize)


def _pad_problem(pad: Node, conv: Node) -> str | None:
    if pad.attr("Tpaddings", DType.INT32) is not DType.INT32:
        return "paddings are not int32"
    if pad.attr("T") != conv.attr("T"):
        return "pad dtype differs from the conv dtype"
    return _private(pad)


def fuse_convolution_chains(model: Model, *, resize: bool, pad: bool) -> TransformResult:
    """Fuse ``[ResizeBilinear ->] [MirrorPad ->] Conv2D`` chains of the requested shape."""
    graph = model.graph
    fused = 0
    notes: list[str] = []
    for conv in graph:
        if conv.op != "Conv2D" or len(conv.inputs) != 2:
            continue
        pad_node = _producer(conv, 0, "MirrorPad")
        if pad:
            if pad_node is None:
                continue
            resize_node = _producer(pad_node, 0, "ResizeBilinear")
            if resize != (resize_node is not None):
                continue
        else:
            resize_node = _producer(conv, 0, "ResizeBilinear")
            if resize_node is None:
                continue
            pad_node = None
        problem = _conv_problem(conv)
        if problem is None and pad_node is not None:
            problem = _pad_problem(pad_node, conv)
        if problem is None and resize_node is not None:
            problem = _resize_problem(resize_node, conv)
        if problem is not None:
            notes.append(f"{conv.name}: not fused ({problem})")
            continue
        _rewrite(conv, resize_node, pad_node)
        fused += 1
    return TransformResult(fused > 0, {"convolutions_fused": fused}, notes)


def _rewrite(conv: Node, resize: Node | None, pad: Node | None) -> None:
    graph = conv.graph
    assert graph is not None
    attrs = {"T": conv.attrs["T"], "strides": conv.attrs["strides"], "padding": conv.attrs["padding"]}
    before: list[Node] = []
    if pad is not None:
        attrs["mode"] = pad.attrs["mode"]
        paddings = pad.input(1)
        source = pad.input(0) if resize is None else resize.input(0)
    else:  # resize only: zero paddings, any mode
        attrs["mode"] = Attr.string("REFLECT")
        const, paddings = make_constant(conv, np.zeros((4, 2), np.int32), f"{conv.name}_dummy_paddings")
        assert const is not None
        before.append(const)
        source = resize.input(0)  # type: ignore[union-attr]
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
    name = conv.name
    fused = Node(op, inputs, dialect="tf", name=graph.unique_node_name(f"{name}/fused"), attrs=attrs,
                 control_inputs=controls, device=conv.device)
    fused.output.dtype = conv.output.dtype
    fused.output.shape = conv.output.shape
    graph.insert_before(conv, [*before, fused])
    conv.output.replace_all_uses_with(fused.output)
    graph.remove([n for n in (conv, pad, resize) if n is not None])
    fused.name = name
    fused.output.name = name
