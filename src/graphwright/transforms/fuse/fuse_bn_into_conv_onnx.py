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

A BatchNormalization over the columns of a MatMul by a constant ``W[K, C]`` folds too: its
input must be 2-D ``[N, C]`` (channel axis 1 is then the last axis), either the MatMul's own
output or a Reshape of it that keeps the last axis (LeViT's ``Linear → flatten → BatchNorm1d →
reshape back``, exported as ``MatMul → Reshape[-1, C] → BN → Reshape``).  A per-column affine
map commutes with such a Reshape (element ``i`` is in column ``i mod C`` on both sides), so::

    Before::  y = Reshape(MatMul(x, W), [-1, C]); z = BatchNormalization(y, γ, β, μ, σ²)
    After::   z = Reshape(Add(MatMul(x, W'), b'), [-1, C])     W'[:, c] = W[:, c]·s[c], b' = β − μ·s

(no Add when ``b'`` is zero); the Reshape then merges with the one after the batch norm.

One rule of the rewrite engine per shape of match, rooted at the BatchNormalization: the contraction is the
match's boundary (``ANY``), edited in place (its weight keeps its name and place, a private
bias too) while the BatchNormalization is bypassed, so its output name survives when it is a
graph output.  A chain ``Conv → BN → BN`` folds in one sweep, in graph order.

Refused, with the reason in the result (the node is left as it is): a BatchNormalization in
training mode or with its running-statistics outputs read; statistics that are not constants;
a Conv output read by anything else or a graph output; a weight that is not a constant read
only by this node (a shared weight would have to be copied, and another reader would see it
scaled); float weights only.  A shared bias is not modified: the new bias is a new
initializer.  All graphs; O(N + E) plus the weights' sizes.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, Value
from ...patterns import (
    ANY,
    Match,
    P,
    Replacement,
    RuleSet,
    Skip,
    same_graph,
    why_not_editable,
    why_not_fusable,
)
from .._channels import FLOAT_KINDS, out_channels, private_weight, scale_out_channels, set_bias, set_weight
from .._onnx import Names, const_array, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_bn_into_conv"]

_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm"})


def _from_contraction(value: Value) -> bool:
    """``value`` is produced by a standard-domain Conv, ConvTranspose or Gemm."""
    node = value.producer
    return node is not None and node.op in _PRODUCERS and is_standard(node)


#: BatchNormalization(Conv|ConvTranspose|Gemm(...), γ, β, μ, σ²): the contraction stays outside
#: the match (it is edited, not replaced).
_BN = P("BatchNormalization", ANY(name="y", where=_from_contraction), ..., name="bn", domain="")


def _bn_params(bn: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """``(s, β, μ)`` in float64 of an inference batch norm with constant statistics, or why not."""
    if len(bn.inputs) != 5:
        return f"it has {len(bn.inputs)} inputs, not 5"
    if bn.attr("training_mode", 0) or bn.attr("is_test", 1) == 0 or bn.attr("spatial", 1) != 1:
        return "it is in training mode or not spatial"
    if any(v.num_uses or v.is_graph_output for v in bn.outputs[1:]):
        return "its running statistics are read; they would be lost"
    arrays = [const_array(v) for v in bn.inputs[1:]]
    if any(a is None or a.ndim != 1 or a.dtype not in FLOAT_KINDS for a in arrays):
        return "its statistics are not 1-D float constants"
    gamma, beta, mean, var = (a.astype(np.float64) for a in arrays)  # type: ignore[union-attr]
    if not len(gamma) == len(beta) == len(mean) == len(var):
        return "its statistics differ in length"
    scale = gamma / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    return scale, beta, mean


def _fold(m: Match, names: Names) -> Replacement | Skip:
    bn = m.node
    assert bn is not None
    y = m["y"].value
    assert y is not None and y.producer is not None
    node = y.producer
    reason = why_not_editable(node, m.node)
    if reason:
        return m.skip(reason)
    params = _bn_params(bn)
    if isinstance(params, str):
        return m.skip(params)
    w_value = node.inputs[1] if len(node.inputs) > 1 else None
    weight = private_weight(w_value)
    if weight is None:
        return m.skip(f"the {node.op} weight {getattr(w_value, 'name', None)!r} is not a float constant "
                      "read only by it")
    scale, beta, mean = params
    channels = out_channels(node, weight)
    if channels != len(scale):
        return m.skip(f"the {node.op} has {channels} output channels, the batch norm {len(scale)}")
    if node.op == "Gemm":
        return _fold_gemm(m, node, bn, weight, scale, beta, mean, names)
    new_w = scale_out_channels(node, weight, scale)
    bias_value = node.inputs[2] if len(node.inputs) > 2 else None
    bias = np.zeros(channels) if bias_value is None else const_array(bias_value)
    if new_w is None or bias is None or bias.shape != (channels,):
        return m.skip(f"the {node.op} weight or bias does not match its {channels} output channels")
    new_b = ((bias.astype(np.float64) - mean) * scale + beta).astype(weight.dtype)
    set_weight(node, 1, new_w)
    set_bias(node, 2, new_b, names)
    return Replacement.bypass_to(bn.outputs[0], node.output)


def _fold_gemm(m: Match, node: Node, bn: Node, weight: np.ndarray, scale: np.ndarray, beta: np.ndarray,
               mean: np.ndarray, names: Names) -> Replacement | Skip:
    out = node.output
    if out.shape is not None and len(out.shape) != 2:
        return m.skip(f"the Gemm output {out.name!r} has rank {len(out.shape)}, not 2")
    c_value = node.inputs[2] if len(node.inputs) > 2 else None
    c = np.zeros(len(scale)) if c_value is None else const_array(c_value)
    if c is None or c.ndim > 2 or (c.ndim >= 1 and c.shape[-1] not in (1, len(scale))):
        return m.skip(f"the Gemm C {getattr(c_value, 'name', None)!r} is not a constant broadcasting per output channel")
    beta_g = float(node.attr("beta", 1.0)) if c_value is not None else 0.0
    new_c = (beta_g * c.astype(np.float64) * scale + (beta - mean * scale)).astype(weight.dtype)
    new_w = scale_out_channels(node, weight, scale)
    if new_w is None:
        return m.skip("the Gemm weight does not match its output channels")
    set_weight(node, 1, new_w)
    set_bias(node, 2, new_c, names)
    node.attrs["beta"] = Attr.float(1.0)
    return Replacement.bypass_to(bn.outputs[0], node.output)


_MATMUL = P("MatMul", ANY(name="x"), ANY(name="w"), name="mm", domain="")
#: BatchNormalization(Reshape(MatMul(x, W), shape)) and BatchNormalization(MatMul(x, W)).
_BN_MATMUL = (P("BatchNormalization", P("Reshape", _MATMUL, ANY(name="shape"), name="rs", domain=""), ...,
                name="bn", domain=""),
              P("BatchNormalization", _MATMUL, ..., name="bn", domain=""))


def _fold_matmul(m: Match, names: Names) -> Replacement | Skip:
    """``BN(Reshape?(MatMul(x, W)))`` over the last axis -> ``Reshape?(Add(MatMul(x, W·s), β − μ·s))``."""
    bn, mm = m.node, m["mm"].node
    assert bn is not None and mm is not None
    reshape = m["rs"].node if "rs" in m else None
    reason = why_not_fusable(m) or ("" if same_graph(mm, bn) else "the MatMul is in an enclosing graph")
    if reason:
        return m.skip(reason)
    params = _bn_params(bn)
    if isinstance(params, str):
        return m.skip(params)
    scale, beta, mean = params
    y = bn.inputs[0]
    if len(bn.outputs) != 1 or y.shape is None or len(y.shape) != 2 or y.shape[1] != len(scale):
        return m.skip(f"the batch norm's input {y.name!r} is not known to be [N, {len(scale)}] (its channels last)")
    w_value = m["w"].value
    weight = private_weight(w_value)
    if weight is None or weight.ndim != 2 or weight.shape[1] != len(scale):
        return m.skip(f"the MatMul weight {getattr(w_value, 'name', None)!r} is not a 2-D float constant "
                      f"[K, {len(scale)}] read only by it")
    scaled = m.constant((weight.astype(np.float64) * scale).astype(weight.dtype), name=names.fresh(f"{w_value.name}_bn"))
    new_mm = m.clone(mm, inputs=[m["x"].value, scaled])  # the old weight goes with dead code
    bias = (beta - mean * scale).astype(weight.dtype)
    out = new_mm.output
    if np.any(bias):
        template = reshape if reshape is not None else bn  # a node whose output name is free once matched
        add = m.clone(template, op="Add", inputs=[out, m.constant(bias, name=names.fresh(f"{bn.name or 'bn'}_bias"))],
                      attrs=dict.fromkeys(template.attrs))
        add.output.shape, add.output.dtype = mm.output.shape, mm.output.dtype
        out = add.output
    if reshape is None and out is new_mm.output:
        return Replacement([new_mm], {bn.outputs[0]: out})
    last = m.clone(bn, op="Reshape", inputs=[out, m["shape"].value],
                   attrs={**dict.fromkeys(bn.attrs), **reshape.attrs}) if reshape is not None else None
    nodes = [new_mm, *([] if out is new_mm.output else [out.producer]), *([last] if last is not None else [])]
    return Replacement(nodes)


def _rules(model: Model) -> RuleSet:
    names = Names(model)
    rules = RuleSet(name="fuse_bn_into_conv")
    rules.add(_BN, lambda m: _fold(m, names), name="batch_norm_into_contraction")
    for pattern in _BN_MATMUL:
        rules.add(pattern, lambda m: _fold_matmul(m, names), name="batch_norm_into_matmul")
    return rules


@transform("fuse_bn_into_conv", dialects={"onnx"})
def fuse_bn_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold inference BatchNormalization into the preceding Conv, ConvTranspose, Gemm or MatMul."""
    report = apply_rules(model, [_rules(model)])
    return result_of(report, stats={"batch_norms_fused": report.applied})
