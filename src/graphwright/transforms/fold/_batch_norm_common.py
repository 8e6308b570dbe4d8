"""What ``fold_batch_norms`` and ``fold_old_batch_norms`` share on TF graphs: the contraction
patterns and the one rewrite that folds a per-channel scale and offset into a contraction's
weights (the channel geometry is in ``transforms/_channels.py``, which ``fuse_remapper`` reads too).

The weights may be read through an ``Identity`` and carry control edges (Keras 3's freezing
``NoOp``); they are claimed by the match so that the replacement can move those edges onto the
folded weights.  The maths: ``W' = W·s`` along the output-channel axis, ``b' = b·s + t``,
computed in float64 and rounded once to the weight's dtype.  Everything here is O(1) per match
plus O(size of the weights folded).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Node
from ...patterns import ANY, CONST, Match, P, Replacement, Skip, why_not_fusable
from .._channels import channel_count, data_format, node_of, output_channel_axis, per_channel, value_name
from .._weights import scaled

__all__ = ["BIASED", "CONTRACTION_OPS", "FLOAT_DTYPES", "fold_into_contraction"]

#: Ops whose constant weights can absorb a per-output-channel scale.
CONTRACTION_OPS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")
FLOAT_DTYPES = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)

#: The weights: a Const, possibly read through an Identity.  Claimed (not just read) so that the
#: replacement can move their control users (Keras 3's freezing NoOp) onto the folded weights.
_WEIGHT = P("Const", name="w") | P("Identity", P("Const", name="w"), name="w_read")
_CONTRACTION = P("|".join(CONTRACTION_OPS), ANY(name="x"), _WEIGHT, name="conv")
#: The contraction, optionally followed by a constant per-channel bias.
BIASED = (
    P("BiasAdd", _CONTRACTION, CONST(name="b"), name="bias")
    | P("Add|AddV2", _CONTRACTION, CONST(name="b"), name="bias", commutative=True)
    | _CONTRACTION
)


def _scaled_weights(conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``W·s`` along the output-channel axis, rounded once to W's dtype (no float64 copy of W)."""
    if conv.op == "MatMul":
        return scaled(w, s[:, None] if conv.attr("transpose_b", False) else s[None, :])
    if conv.op == "DepthwiseConv2dNative":
        return scaled(w, s.reshape(w.shape[2], w.shape[3]))
    return scaled(w, s)


# -- the shared rewrite -------------------------------------------------------------


def _why_not_foldable(m: Match) -> str | None:
    """The Remapper-style safety checks, with the weights' own rule (control users allowed)."""
    conv = node_of(m, "conv")
    w_node = node_of(m, "w")
    read = m.get("w_read")
    read_node = read.node if read is not None else None
    reason = why_not_fusable(m, ignore=(w_node, read_node))
    if reason is not None:
        return reason
    for weight, reader in ((w_node, read_node or conv), (read_node, conv)):
        if weight is None:
            continue
        others = [u for u in weight.outputs[0].users() if u is not reader]
        if others or any(v.is_graph_output for v in weight.outputs):
            names = ", ".join(repr(n.name) for n in others[:3]) or "a graph output"
            return (f"weights {weight.name!r} of {conv.name!r} are also read by {names}; "
                    "not folding into shared weights")
    return None


def fold_into_contraction(m: Match, s: np.ndarray | None, t: np.ndarray | None) -> Replacement | Skip:
    """Replace the match by ``contraction(x, W·s) [+ BiasAdd(b·s + t)]``; ``s``/``t`` are [C] or None.

    Returns a Replacement, or ``m.skip(reason)``.  Control inputs of the removed nodes move to
    the new contraction (the weights' to the new weights); control users of the old weights
    (and of an Identity reading them) move to the new weights.
    """
    conv = node_of(m, "conv")
    w_tensor = m.const("w")
    if w_tensor.dtype not in FLOAT_DTYPES:
        return m.skip(f"weights of {conv.name!r} are {w_tensor.dtype.value}, not float")
    reason = _why_not_foldable(m)
    if reason:
        return m.skip(reason)
    w = w_tensor.numpy()
    channels = channel_count(conv, w)
    if channels is None:
        return m.skip(f"weights of {conv.name!r} have rank {w.ndim}, not what {conv.op} takes")
    rank, axis = output_channel_axis(conv)
    bias = m.get("bias")
    b = None
    if bias is not None:
        if bias.node is not None and bias.node.op == "BiasAdd" and data_format(bias.node) != data_format(conv):
            return m.skip(f"BiasAdd {bias.node.name!r} and {conv.name!r} disagree on data_format")
        b = per_channel(m.array("b"), rank, axis, channels)
        if b is None:
            return m.skip(f"bias {value_name(m, 'b')!r} is not one value per output channel")
    scale = np.ones(channels) if s is None else s
    root = m.node
    assert root is not None
    weight_nodes = [node_of(m, "w")] + ([node_of(m, "w_read")] if m.get("w_read") is not None else [])
    w_value = m.constant(_scaled_weights(conv, w, scale), name=f"{conv.name}/folded_weights",
                         dtype=w_tensor.dtype)
    assert w_value.producer is not None
    for ctrl in dict.fromkeys(c for n in weight_nodes for c in n.control_inputs):
        w_value.producer.add_control_input(ctrl)
    controls = dict.fromkeys(c for n in m.nodes if n not in weight_nodes for c in n.control_inputs)
    has_bias = b is not None or t is not None
    new_conv = m.clone(conv, inputs=[conv.inputs[0], w_value], control_inputs=controls,
                       name=conv.name if has_bias else root.name)
    nodes: list[Node] = [new_conv]
    if has_bias:
        offset = (np.zeros(channels) if b is None else b * scale) + (0.0 if t is None else t)
        b_value = m.constant(offset.astype(w.dtype), name=f"{conv.name}/folded_bias", dtype=w_tensor.dtype)
        attrs = {"T": Attr.dtype(w_tensor.dtype)}
        if conv.op != "MatMul":
            attrs["data_format"] = Attr.string(data_format(conv))
        add = Node("BiasAdd", [new_conv.output, b_value], dialect="tf", name=root.name, attrs=attrs,
                   device=conv.device)
        add.output.dtype, add.output.shape = root.output.dtype, root.output.shape
        nodes.append(add)
    mapping = {root.outputs[0]: nodes[-1].output}
    mapping.update({n.outputs[0]: w_value for n in weight_nodes})
    return Replacement(nodes, mapping)
