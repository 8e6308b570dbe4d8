"""fuse_mul_add_into_conv: fold a per-channel Mul, Add or Sub after a Conv/ConvTranspose into it.

Before::  y = Conv(x, W, b); z = Mul(y, s[1, C, 1, 1]); u = Add(z, c[C, 1, 1])
After::   u = Conv(x, W', b')   with  W'[o] = W[o]·s[o],  b' = b·s + c

``Mul(y, s)``: ``W'[o] = W[o]·s[o]`` and ``b'[o] = b[o]·s[o]`` (weights private
to the Conv, as for batch-norm folding).  ``Add(y, c)`` / ``Add(c, y)``:
``b'[o] = b[o] + c[o]``; ``Sub(y, c)``: ``b'[o] = b[o] − c[o]`` (a missing bias
is zero; a shared bias is not modified, a new one is made).  The constant must
be per output channel or a scalar: after aligning it to the Conv output's
rank from the right, every dim but the channel dim (axis 1) is 1, so
broadcasting cannot change the output's shape.  The Conv output must be read
only by that node and not be a graph output.  Float only; arithmetic in
float64.  All graphs; O(N + E) plus the weights' sizes.
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Node, Value, topological_order
from .._channels import FLOAT_KINDS, out_channels, scale_out_channels
from .._onnx import Names, all_graphs, bypass, const_array, is_standard, only_reader
from ..context import TransformContext
from ..registry import TransformResult, transform
from .fuse_bn_into_conv_onnx import own_weight, set_bias, set_weight

__all__ = ["fuse_mul_add_into_conv"]

_CONVS = frozenset({"Conv", "ConvTranspose"})


def per_channel(const: Value, out_rank: int, channels: int) -> np.ndarray | None:
    """The constant as one value per output channel (length ``channels``), or None."""
    array = const_array(const)
    if array is None or array.dtype not in FLOAT_KINDS or array.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - array.ndim) + array.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1).astype(np.float64), (channels,))


def _fuse(conv: Node, op_node: Node, const: Value, names: Names) -> bool:
    weight_value = conv.inputs[1] if len(conv.inputs) > 1 else None
    weight = const_array(weight_value) if weight_value is not None else None
    if weight is None or weight.dtype not in FLOAT_KINDS:
        return False
    channels = out_channels(conv, weight)
    values = None if channels is None else per_channel(const, weight.ndim, channels)
    if values is None or const.dtype != weight_value.dtype:  # type: ignore[union-attr]
        return False
    bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    bias = np.zeros(channels) if bias_value is None else const_array(bias_value)  # type: ignore[arg-type]
    if bias is None or bias.shape != (channels,):
        return False
    if op_node.op == "Mul":
        if own_weight(weight_value) is None:
            return False  # a shared weight cannot be scaled in place
        new_w = scale_out_channels(conv, weight, values)
        if new_w is None:
            return False
        set_weight(conv, 1, new_w)
        new_b = bias.astype(np.float64) * values
    elif op_node.op == "Add":
        new_b = bias.astype(np.float64) + values
    else:
        new_b = bias.astype(np.float64) - values
    if bias_value is not None or op_node.op != "Mul":
        set_bias(conv, 2, new_b.astype(weight.dtype), names)
    return bypass(op_node, conv.output)


@transform("fuse_mul_add_into_conv", dialects={"onnx"})
def fuse_mul_add_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold per-channel constant Mul/Add/Sub after Conv or ConvTranspose into its weights and bias."""
    names = Names(model)
    fused = 0
    for graph in all_graphs(model):
        for node in topological_order(graph):
            if node.graph is None or node.op not in ("Mul", "Add", "Sub") or not is_standard(node):
                continue
            if len(node.inputs) != 2 or any(v is None for v in node.inputs):
                continue
            for k in ((0, 1) if node.op != "Sub" else (0,)):
                y, const = node.inputs[k], node.inputs[1 - k]
                conv = y.producer if y is not None else None
                if conv is None or conv.op not in _CONVS or not is_standard(conv) or conv.graph is not graph:
                    continue
                if only_reader(y) is not node or len(conv.outputs) != 1:  # type: ignore[arg-type]
                    continue
                if _fuse(conv, node, const, names):  # type: ignore[arg-type]
                    fused += 1
                    break
    return TransformResult(bool(fused), {"nodes_fused": fused})
