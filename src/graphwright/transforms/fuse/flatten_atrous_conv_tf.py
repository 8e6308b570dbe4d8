"""flatten_atrous_conv: SpaceToBatchND -> Conv2D -> BatchToSpaceND becomes one Conv2D.

Before::  s = SpaceToBatchND(x, block=[bh, bw], paddings=P)
          c = Conv2D(s, W[Kh, Kw, Ci, Co]){strides=1, padding=p}
          y = BatchToSpaceND(c, block=[bh, bw], crops=C)
After::   y = Conv2D(x, W'){strides=1, padding=SAME|VALID|EXPLICIT}
          W'[(Kh-1)·bh+1, (Kw-1)·bw+1, Ci, Co],  W'[i·bh, j·bw] = W[i, j], zero elsewhere

The maths (per spatial axis, block b, kernel K, inner conv padding top ``t_b``
and bottom ``u_b`` in the batched space: 0 for VALID, ``(K-1)//2`` and the rest
for SAME)::

    y[i] = Σ_k W[k] · x[i + k·b − e_top],  e_top = P_top + t_b·b − C_top
                                            e_bot = P_bot + u_b·b − C_bot

which is a dilated convolution of ``x`` with padding ``(e_top, e_bot)``, i.e. a
plain convolution with the zero-upsampled filter ``W'``.  That padding is
emitted as ``VALID`` when zero, ``SAME`` when it is SAME's padding for the
upsampled kernel, and as ``EXPLICIT`` paddings otherwise.  The original tool
always writes ``SAME`` and so computes wrong values (and shapes) for atrous
``VALID`` convolutions; this one is exact for both.  Like the original it emits
upsampled filters rather than the ``dilations`` attribute, so runtimes without
dilated kernels can run the result.

``DepthwiseConv2dNative`` (filter ``[Kh, Kw, C, M]``) is flattened the same
way; the original tool handles ``Conv2D`` only.

Applies only when block shape, paddings and crops are constants, the inner
conv has unit strides and dilations, NHWC data, a constant filter, and its
intermediates feed nothing else; a negative effective padding (crops larger
than the padding) is left alone and reported.  O(N + filter sizes).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, constant_value
from ...patterns import make_constant
from ..context import TransformContext
from ..registry import TransformResult, transform

#: Convolutions whose filter is [Kh, Kw, ...] and that accept SAME/VALID/EXPLICIT padding.
CONV_OPS = frozenset({"Conv2D", "DepthwiseConv2dNative"})


def _const(node: Node, index: int) -> np.ndarray | None:
    """Input ``index`` of ``node`` as an array when it is a constant, seen through Identity nodes."""
    value = node.inputs[index] if index < len(node.inputs) else None
    while value is not None and value.producer is not None and value.producer.op == "Identity":
        value = value.producer.inputs[0] if value.producer.inputs else None
    tensor = constant_value(value) if value is not None else None
    return None if tensor is None else tensor.numpy()


def _upsample(weights: np.ndarray, bh: int, bw: int) -> np.ndarray:
    kh, kw = weights.shape[:2]
    out = np.zeros(((kh - 1) * bh + 1, (kw - 1) * bw + 1, *weights.shape[2:]), weights.dtype)
    out[::bh, ::bw] = weights
    return out


def _plan(b2s: Node) -> tuple[Node, Node, np.ndarray, list[int]] | str | None:
    """(conv, space_to_batch, upsampled filter, [top, bottom, left, right]) or why not (None: no match)."""
    conv = b2s.inputs[0].producer if b2s.inputs and b2s.inputs[0] is not None else None
    if conv is None or conv.op not in CONV_OPS:
        return None
    s2b = conv.inputs[0].producer if conv.inputs and conv.inputs[0] is not None else None
    if s2b is None or s2b.op != "SpaceToBatchND":
        return None
    block, paddings, crops = _const(s2b, 1), _const(s2b, 2), _const(b2s, 2)
    weights = _const(conv, 1)
    if block is None or paddings is None or crops is None or weights is None:
        return "block shape, paddings, crops and filter must be constants"
    block2 = _const(b2s, 1)
    if block.shape != (2,) or block2 is None or not np.array_equal(block, block2):
        return "block shapes are not the same two spatial factors"
    if paddings.shape != (2, 2) or crops.shape != (2, 2) or weights.ndim != 4:
        return "paddings/crops are not 2x2 or the filter is not 4-D"
    if conv.attr("data_format", b"NHWC") != b"NHWC":
        return "conv is not NHWC"
    if any(s != 1 for s in conv.attr("strides", (1, 1, 1, 1))) or any(
            d != 1 for d in conv.attr("dilations", (1, 1, 1, 1))):
        return "inner conv has strides or dilations"
    mode = conv.attr("padding")
    if mode not in (b"SAME", b"VALID"):
        return "inner conv padding is not SAME/VALID"
    for node in (s2b, conv):
        if node.output.num_uses != 1 or node.output.is_graph_output or node.control_users:
            return f"{node.name} is also read elsewhere"
    pads: list[int] = []
    for axis in range(2):
        b, k = int(block[axis]), int(weights.shape[axis])
        inner_top = (k - 1) // 2 if mode == b"SAME" else 0
        inner_bottom = (k - 1 - inner_top) if mode == b"SAME" else 0
        pads.append(int(paddings[axis, 0]) + inner_top * b - int(crops[axis, 0]))
        pads.append(int(paddings[axis, 1]) + inner_bottom * b - int(crops[axis, 1]))
    if min(pads) < 0:
        return "crops exceed the padding (negative effective padding)"
    return conv, s2b, _upsample(weights, int(block[0]), int(block[1])), pads


@transform("flatten_atrous_conv", dialects={"tf"})
def flatten_atrous_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace SpaceToBatchND/Conv2D/BatchToSpaceND by a Conv2D with upsampled filters."""
    graph = model.graph
    flattened = 0
    notes: list[str] = []
    for b2s in graph:
        if b2s.op != "BatchToSpaceND":
            continue
        plan = _plan(b2s)
        if plan is None:
            continue
        if isinstance(plan, str):
            notes.append(f"{b2s.name}: not flattened ({plan})")
            continue
        conv, s2b, weights, pads = plan
        _rewrite(b2s, conv, s2b, weights, pads)
        flattened += 1
    return TransformResult(flattened > 0, {"atrous_convs_flattened": flattened}, notes)


def _padding_attrs(weights: np.ndarray, pads: list[int]) -> dict[str, Attr]:
    if not any(pads):
        return {"padding": Attr.string("VALID")}
    same = []
    for axis in range(2):
        total = weights.shape[axis] - 1
        same += [total // 2, total - total // 2]
    if pads == same:
        return {"padding": Attr.string("SAME")}
    return {"padding": Attr.string("EXPLICIT"), "explicit_paddings": Attr.ints([0, 0, *pads, 0, 0])}


def _rewrite(b2s: Node, conv: Node, s2b: Node, weights: np.ndarray, pads: list[int]) -> None:
    graph = b2s.graph
    assert graph is not None
    old_filter = conv.input(1)
    filter_node, filter_value = make_constant(b2s, weights, f"{old_filter.name}/upsampled")
    assert filter_node is not None
    attrs = {k: v for k, v in conv.attrs.items() if k not in ("padding", "explicit_paddings", "dilations")}
    attrs.update(_padding_attrs(weights, pads))
    controls = dict.fromkeys([*s2b.control_inputs, *conv.control_inputs, *b2s.control_inputs])
    name = b2s.name
    flat = Node(conv.op, (s2b.input(0), filter_value), dialect="tf", name=graph.unique_node_name(f"{name}/flat"),
                attrs=attrs, control_inputs=controls, device=conv.device)
    flat.output.dtype = b2s.output.dtype
    flat.output.shape = b2s.output.shape
    graph.insert_before(b2s, [filter_node, flat])
    b2s.output.replace_all_uses_with(flat.output)
    constants = [v.producer for v in (*s2b.inputs[1:], *b2s.inputs[1:], old_filter) if v is not None]
    graph.remove([b2s, conv, s2b])
    for producer in constants:  # block shapes, paddings, crops, the old filter: gone if unused now
        _drop_if_dead(producer)
    old_producer = old_filter.producer
    if old_producer is not None and old_producer.graph is None and not graph.has_node_name(old_producer.name):
        filter_node.name = filter_value.name = old_producer.name  # as the original: same name, new data
    flat.name = name
    flat.output.name = name


def _drop_if_dead(node: Node | None) -> None:
    """Remove a constant (and an Identity chain above it) that nothing reads any more."""
    while node is not None and node.graph is not None and node.op in ("Const", "Identity"):
        if any(v.num_uses or v.is_graph_output for v in node.outputs) or node.control_users:
            return
        parent = node.inputs[0].producer if node.op == "Identity" and node.inputs and node.inputs[0] else None
        node.graph.remove(node)
        node = parent

