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
intermediates feed nothing else (:func:`~graphwright.patterns.predicates.why_not_absorbed`;
their control inputs move to the new conv); a negative effective padding
(crops larger than the padding) is left alone.  Every refusal is reported with
its reason.  One rule rooted at the ``BatchToSpaceND``, one sweep: O(N + filter
sizes).  The block shapes, paddings, crops and the old filter (with the
``Identity`` a TF1 variable freezes into) are removed when nothing reads them
any more, and the new filter takes the old filter's name when that is free.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Graph, Model, Node, Tensor, Value, constant_value
from ...patterns import Match, P, Replacement, RuleSet, Skip, why_not_absorbed
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

#: Convolutions whose filter is [Kh, Kw, ...] and that accept SAME/VALID/EXPLICIT padding.
CONV_OPS = frozenset({"Conv2D", "DepthwiseConv2dNative"})

# BatchToSpaceND(Conv2D|DepthwiseConv2dNative(SpaceToBatchND(x, block, paddings), W), block, crops)
PATTERN = P("BatchToSpaceND", P("|".join(sorted(CONV_OPS)), P("SpaceToBatchND", name="s2b"), ..., name="conv"), ...,
            name="b2s")


def _const_tensor(node: Node, index: int) -> Tensor | None:
    """Input ``index`` of ``node`` when it is a constant, seen through Identity nodes."""
    value = node.inputs[index] if index < len(node.inputs) else None
    while value is not None and value.producer is not None and value.producer.op == "Identity":
        value = value.producer.inputs[0] if value.producer.inputs else None
    return constant_value(value) if value is not None else None


def _const(node: Node, index: int) -> np.ndarray | None:
    tensor = _const_tensor(node, index)
    return None if tensor is None else tensor.numpy()


def _upsample(weights: np.ndarray, bh: int, bw: int) -> np.ndarray:
    kh, kw = weights.shape[:2]
    out = np.zeros(((kh - 1) * bh + 1, (kw - 1) * bw + 1, *weights.shape[2:]), weights.dtype)
    out[::bh, ::bw] = weights
    return out


def _nodes(m: Match) -> tuple[Node, Node, Node]:
    b2s, conv, s2b = m.node, m["conv"].node, m["s2b"].node
    assert b2s is not None and conv is not None and s2b is not None
    return b2s, conv, s2b


def _why_not(m: Match) -> str | None:
    """Why the matched chain can't be flattened (all but the padding arithmetic), or None."""
    b2s, conv, s2b = _nodes(m)
    block, paddings, crops = _const(s2b, 1), _const(s2b, 2), _const(b2s, 2)
    weights = _const_tensor(conv, 1)
    if block is None or paddings is None or crops is None or weights is None:
        return "block shape, paddings, crops and filter must be constants"
    block2 = _const(b2s, 1)
    if block.shape != (2,) or block2 is None or not np.array_equal(block, block2):
        return "block shapes are not the same two spatial factors"
    if paddings.shape != (2, 2) or crops.shape != (2, 2) or len(weights.shape) != 4:
        return "paddings/crops are not 2x2 or the filter is not 4-D"
    if conv.attr("data_format", b"NHWC") != b"NHWC":
        return "conv is not NHWC"
    if any(s != 1 for s in conv.attr("strides", (1, 1, 1, 1))) or any(
            d != 1 for d in conv.attr("dilations", (1, 1, 1, 1))):
        return "inner conv has strides or dilations"
    if conv.attr("padding") not in (b"SAME", b"VALID"):
        return "inner conv padding is not SAME/VALID"
    return why_not_absorbed(s2b) or why_not_absorbed(conv)


def _effective_pads(m: Match, weights: np.ndarray) -> list[int]:
    """[top, bottom, left, right] of the dilated convolution of ``x`` (see the module docstring)."""
    b2s, conv, s2b = _nodes(m)
    block, paddings, crops = _const(s2b, 1), _const(s2b, 2), _const(b2s, 2)
    assert block is not None and paddings is not None and crops is not None
    mode = conv.attr("padding")
    pads: list[int] = []
    for axis in range(2):
        b, k = int(block[axis]), int(weights.shape[axis])
        inner_top = (k - 1) // 2 if mode == b"SAME" else 0
        inner_bottom = (k - 1 - inner_top) if mode == b"SAME" else 0
        pads.append(int(paddings[axis, 0]) + inner_top * b - int(crops[axis, 0]))
        pads.append(int(paddings[axis, 1]) + inner_bottom * b - int(crops[axis, 1]))
    return pads


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


class _Leftovers:
    """What an applied flattening leaves to tidy once the engine has removed the chain: the
    constants it read (gone if unread now) and the new filter's name (the old filter's, if free).

    Tidied before the next match is looked at and at the end, so names come out as if each
    flattening had tidied up at once.
    """

    __slots__ = ("graph", "pending")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.pending: list[tuple[list[Node | None], Node, Node | None]] = []

    def flush(self) -> None:
        for constants, filter_node, old_producer in self.pending:
            for producer in constants:  # block shapes, paddings, crops, the old filter: gone if unused now
                _drop_if_dead(producer)
            if (old_producer is not None and old_producer.graph is None
                    and not self.graph.has_node_name(old_producer.name)):
                filter_node.name = filter_node.output.name = old_producer.name  # as the original: same name
        self.pending.clear()


def _rules(leftovers: _Leftovers) -> RuleSet:
    def check(m: Match) -> str | None:
        leftovers.flush()
        return _why_not(m)

    def flatten(m: Match) -> Replacement | Skip:
        """The Conv with the upsampled filter, named like the BatchToSpaceND."""
        leftovers.flush()
        b2s, conv, s2b = _nodes(m)
        weights = _const(conv, 1)
        block = _const(s2b, 1)
        assert weights is not None and block is not None
        pads = _effective_pads(m, weights)
        if min(pads) < 0:
            return m.skip("crops exceed the padding (negative effective padding)")
        upsampled = _upsample(weights, int(block[0]), int(block[1]))
        old_filter = conv.input(1)
        filter_value = m.constant(upsampled, name=f"{old_filter.name}/upsampled")
        attrs = {k: v for k, v in conv.attrs.items() if k not in ("padding", "explicit_paddings", "dilations")}
        attrs.update(_padding_attrs(upsampled, pads))
        controls = dict.fromkeys([*s2b.control_inputs, *conv.control_inputs, *b2s.control_inputs])
        flat = Node(conv.op, (s2b.input(0), filter_value), dialect="tf", name=b2s.name, attrs=attrs,
                    control_inputs=controls, device=conv.device)
        flat.output.dtype = b2s.output.dtype
        flat.output.shape = b2s.output.shape
        inputs: list[Value | None] = [*s2b.inputs[1:], *b2s.inputs[1:], old_filter]
        constants = [v.producer for v in inputs if v is not None]
        filter_node = filter_value.producer
        assert filter_node is not None
        leftovers.pending.append((constants, filter_node, old_filter.producer))
        return Replacement([flat])

    rules = RuleSet(name="flatten_atrous_conv")
    rules.add(PATTERN, flatten, name="flatten_atrous_conv", check=check)
    return rules


@transform("flatten_atrous_conv", dialects={"tf"})
def flatten_atrous_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace SpaceToBatchND/Conv2D/BatchToSpaceND by a Conv2D with upsampled filters."""
    leftovers = _Leftovers(model.graph)
    report = apply_rules(model, [_rules(leftovers)], subgraphs=False)
    leftovers.flush()
    return result_of(report, stats={"atrous_convs_flattened": report.applied})


def _drop_if_dead(node: Node | None) -> None:
    """Remove a constant (and an Identity chain above it) that nothing reads any more."""
    while node is not None and node.graph is not None and node.op in ("Const", "Identity"):
        if any(v.num_uses or v.is_graph_output for v in node.outputs) or node.control_users:
            return
        parent = node.inputs[0].producer if node.op == "Identity" and node.inputs and node.inputs[0] else None
        node.graph.remove(node)
        node = parent
