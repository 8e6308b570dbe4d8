"""fuse_bn_into_conv: fold an inference BatchNormalization into the Conv/ConvTranspose/Gemm before it.

Before::  y = Conv(x, W, b); z = BatchNormalization(y, γ, β, μ, σ², epsilon=ε)
After::   z = Conv(x, W', b')

With ``s = γ / √(σ² + ε)`` (one factor per output channel)::

    W'[o] = W[o] · s[o]            b'[o] = (b[o] − μ[o]) · s[o] + β[o]    (b = 0 when absent)

ConvTranspose scales ``W[:, o mod (C_out/group)]`` of each group instead
(see ``_channels.py``).  ``Gemm`` (``Y = α·A·B + β_g·C``, BN over axis 1 of its
2-D output) gets ``B'`` scaled per column and ``C' = β_g·C·s + β − μ·s`` with
``beta = 1``.  Everything is computed in float64 and stored in the weight's
dtype.

Refused (the node is left as it is): a BatchNormalization in training mode or
with its running-statistics outputs read; statistics that are not constants;
a Conv output read by anything else or a graph output; a weight that is not a
constant read only by this node (a shared weight would have to be copied, and
another reader would see it scaled); float weights only.  A shared bias is
not modified: the new bias is a new initializer.  All graphs; O(N + E) plus
the weights' sizes.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, Tensor, Value, set_constant_value, topological_order
from .._channels import FLOAT_KINDS, out_channels, scale_out_channels
from .._onnx import Names, all_graphs, bypass, const_array, is_standard, new_initializer, only_reader
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_bn_into_conv", "own_weight", "set_bias"]

_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm"})


def own_weight(value: Value | None) -> np.ndarray | None:
    """The constant array of ``value`` when only one node reads it (a private weight), else None."""
    if value is None or value.num_uses != 1 or value.is_graph_output or value.is_graph_input:
        return None
    array = const_array(value)
    return array if array is not None and array.dtype in FLOAT_KINDS else None


def set_weight(node: Node, index: int, array: np.ndarray) -> None:
    """Give the node's private constant input ``index`` new data (keeps its name)."""
    value = node.input(index)
    set_constant_value(value, Tensor.from_numpy(array, value.dtype))


def set_bias(node: Node, index: int, bias: np.ndarray, names: Names) -> None:
    """Make input ``index`` of ``node`` the constant ``bias``: in place if private, else a new initializer."""
    graph = node.graph
    assert graph is not None
    current = node.inputs[index] if len(node.inputs) > index else None
    if current is not None and own_weight(current) is not None:
        set_constant_value(current, Tensor.from_numpy(bias, current.dtype))
        return
    value = new_initializer(graph, bias, f"{node.name or node.op}_bias", names)
    inputs = list(node.inputs) + [None] * (index + 1 - len(node.inputs))
    inputs[index] = value
    node.set_inputs(inputs)


def _bn_params(bn: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    if len(bn.inputs) != 5 or bn.attr("training_mode", 0) or bn.attr("is_test", 1) == 0 or bn.attr("spatial", 1) != 1:
        return None
    if any(v.num_uses or v.is_graph_output for v in bn.outputs[1:]):
        return None
    arrays = [const_array(v) for v in bn.inputs[1:]]
    if any(a is None or a.ndim != 1 or a.dtype not in FLOAT_KINDS for a in arrays):
        return None
    gamma, beta, mean, var = (a.astype(np.float64) for a in arrays)  # type: ignore[union-attr]
    if not len(gamma) == len(beta) == len(mean) == len(var):
        return None
    scale = gamma / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    return scale, beta, mean, gamma


def _fuse(node: Node, bn: Node, names: Names) -> bool:
    params = _bn_params(bn)
    weight = own_weight(node.inputs[1]) if len(node.inputs) > 1 else None
    if params is None or weight is None:
        return False
    scale, beta, mean, _ = params
    channels = out_channels(node, weight)
    if channels != len(scale):
        return False
    if node.op == "Gemm":
        return _fuse_gemm(node, bn, weight, scale, beta, mean, names)
    new_w = scale_out_channels(node, weight, scale)
    bias_value = node.inputs[2] if len(node.inputs) > 2 else None
    bias = np.zeros(channels) if bias_value is None else const_array(bias_value)
    if new_w is None or bias is None or bias.shape != (channels,):
        return False
    new_b = ((bias.astype(np.float64) - mean) * scale + beta).astype(weight.dtype)
    set_weight(node, 1, new_w)
    set_bias(node, 2, new_b, names)
    return bypass(bn, node.output)


def _fuse_gemm(node: Node, bn: Node, weight: np.ndarray, scale: np.ndarray, beta: np.ndarray,
               mean: np.ndarray, names: Names) -> bool:
    out = node.output
    if out.shape is not None and len(out.shape) != 2:
        return False
    c_value = node.inputs[2] if len(node.inputs) > 2 else None
    c = np.zeros(len(scale)) if c_value is None else const_array(c_value)
    if c is None or c.ndim > 2 or (c.ndim >= 1 and c.shape[-1] not in (1, len(scale))):
        return False
    beta_g = float(node.attr("beta", 1.0)) if c_value is not None else 0.0
    new_c = (beta_g * c.astype(np.float64) * scale + (beta - mean * scale)).astype(weight.dtype)
    new_w = scale_out_channels(node, weight, scale)
    if new_w is None:
        return False
    set_weight(node, 1, new_w)
    set_bias(node, 2, new_c, names)
    node.attrs["beta"] = Attr.float(1.0)
    return bypass(bn, node.output)


@transform("fuse_bn_into_conv", dialects={"onnx"})
def fuse_bn_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold inference BatchNormalization into the preceding Conv, ConvTranspose or Gemm."""
    names = Names(model)
    fused = 0
    for graph in all_graphs(model):
        for bn in topological_order(graph):
            if bn.graph is None or bn.op != "BatchNormalization" or not is_standard(bn) or not bn.inputs:
                continue
            x = bn.inputs[0]
            node = x.producer if x is not None else None
            if x is None or node is None or node.op not in _PRODUCERS or not is_standard(node):
                continue
            if only_reader(x) is not bn or node.graph is not graph or len(node.outputs) != 1:
                continue
            if _fuse(node, bn, names):
                fused += 1
    return TransformResult(bool(fused), {"batch_norms_fused": fused})
