"""fuse_remapper: Grappler Remapper's fusions, done ahead of time on a frozen GraphDef.

The fused ops are the ones TensorFlow 2.21's runtime executes for the chosen ``target``
(``onednn``, the default: TF's default x86 build; ``eigen``: the same with
``TF_ENABLE_ONEDNN_OPTS=0``; ``gpu``: nodes that will run on a GPU).  What each target's kernels
register is in :mod:`._remapper_kernels` (checked by importing and running every form with
Grappler off in both CPU builds); a fusion the target cannot run is refused with that reason::

    Conv2D|DepthwiseConv2dNative|MatMul(x, W) ─► BiasAdd(·, b) [─► Relu|Relu6|Elu|LeakyRelu|Tanh|Sigmoid]
        → _FusedConv2D | _FusedDepthwiseConv2dNative | _FusedMatMul(x, W, b)   fused_ops=["BiasAdd"(, act)]
    Conv2D(x, W) ─► BiasAdd(·, b) ─► Add|AddV2(·, y same shape) [─► act]         (oneDNN)
        → _FusedConv2D(x, W, b, y)              fused_ops=["BiasAdd", "Add"(, act)], num_args=2
    Conv2D(x, W) ─► FusedBatchNorm{,V2,V3}(·, γ, β, μ, σ²; inference) [─► act]
        → _FusedConv2D(x, W, γ, β, μ, σ²)      fused_ops=["FusedBatchNorm"(, act)], num_args=4, epsilon=ε
    FusedBatchNorm{,V2,V3}(inference) [─► Add(·, side) (gpu)] ─► Relu
        → _FusedBatchNormEx(activation_mode=Relu)                                (oneDNN, gpu)
    FusedBatchNorm{,V2,V3}(inference, γ and σ² constant), nothing to fuse with
        → Add(Mul(x, γ/√(σ²+ε)), β - μ·γ/√(σ²+ε))   Grappler's decomposition, constants folded
    MatMul ─► BiasAdd ─► a decomposed GELU (exact or tanh)
        → _FusedMatMul  fused_ops=["BiasAdd", "GeluExact"|"GeluApproximate"]     (oneDNN)
    Conv2D(x, W) ─► Squeeze(dims without the channel, or none) ─► BiasAdd(·, b)
        → Squeeze(_FusedConv2D(x, W, b))

Going beyond Grappler: ``Add|AddV2(contraction, c)`` with ``c`` a constant holding one value per
output channel (``[C]``, ``[1,1,1,C]``, a scalar...) first becomes ``BiasAdd(contraction, c')``
(the oneDNN build's remapper does the same for Conv2D; the Eigen build's leaves it), so the
chains batch-norm folding leaves on Keras graphs fuse on every target; Conv2D+BiasAdd+Add fuses
whenever the shapes are known equal (TF 2.21's remapper only when it has run shape inference).

The arithmetic is unchanged (the fused kernels compute the same sums); outputs agree with the
unfused graph to float rounding.  The safety checks are TF 2.21's: no control edges on any fused
node, every intermediate read exactly once and not a graph output (TF keeps fetched nodes), one
element type and one device over the match.  The root may be a graph output: the fused node
takes the root's name, as a TF 2.21 Session does when ``x→Conv2D→BiasAdd→Relu`` is fetched at the
Relu (a fetched BiasAdd stops the chain there: Conv2D+BiasAdd fuse, the Relu stays).  The fused
node keeps the device of the nodes it replaces; nodes on a GPU are held to the GPU kernels.
Every refusal carries its reason (``graphwright transform --verbose``).

Cost: each sweep is O(N) (rules indexed by root op) plus O(1) per fusion (O(12) for a GELU);
six sweeps, run by :func:`graphwright.transforms.rules.apply_rules`.
"""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model, Node
from ...patterns import P, RuleSet
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._remapper_gelu import GELU_ROOT, gelu_rule
from ._remapper_kernels import CONV_ACTS, MATMUL_ACTS, TARGETS
from ._remapper_rules import (
    ACTIVATIONS,
    ADD_AFTER,
    BN,
    BN_SIDES,
    CONTRACTION_BIAS,
    CONV_BIAS_ADDS,
    CONV_BN,
    SQUEEZE_BIAS,
    add_to_bias_add,
    batch_norm_ex_rule,
    contraction_rule,
    decompose_batch_norm,
    squeeze_rule,
)
from ._remapper_shapes import annotate_shapes

__all__ = ["CONV_ACTIVATIONS", "MATMUL_ACTIVATIONS", "TARGETS", "fuse_remapper"]

#: Activations _FusedConv2D runs on CPU after BiasAdd or FusedBatchNorm.
CONV_ACTIVATIONS = tuple(sorted(CONV_ACTS))
#: Activations _FusedMatMul runs on CPU after BiasAdd (GELU besides, from its decomposition).
MATMUL_ACTIVATIONS = tuple(sorted(MATMUL_ACTS))
_BN_ARGS = ["gamma", "beta", "mean", "var"]


def _rule_sets(target: str, dead: list[Node]) -> list[list[RuleSet]]:
    """Rule sets in the order they must run; a GELU's leftovers are removed after the first group."""
    gelu = RuleSet(name="fuse_remapper")
    gelu.add(GELU_ROOT, gelu_rule(target, dead), name="matmul_bias_gelu")
    to_bias = RuleSet(name="fuse_remapper")
    to_bias.add(ADD_AFTER, add_to_bias_add, name="add_to_bias_add")
    with_act = RuleSet(name="fuse_remapper")
    for add in CONV_BIAS_ADDS:
        with_act.add(P(ACTIVATIONS, add, name="act"),
                     contraction_rule(target, "BiasAdd", ["b"], with_act=True, with_add=True), name="conv_bias_add_act")
    with_act.add(P(ACTIVATIONS, CONTRACTION_BIAS, name="act"),
                 contraction_rule(target, "BiasAdd", ["b"], with_act=True), name="contraction_bias_act")
    with_act.add(P(ACTIVATIONS, CONV_BN, name="act"),
                 contraction_rule(target, "FusedBatchNorm", _BN_ARGS, with_act=True), name="conv_bn_act")
    for side in BN_SIDES:
        with_act.add(P("Relu", side, name="act"), batch_norm_ex_rule(target, side=True), name="bn_side_relu")
    with_act.add(P("Relu", BN, name="act"), batch_norm_ex_rule(target, side=False), name="bn_relu")
    with_add = RuleSet(name="fuse_remapper")
    for add in CONV_BIAS_ADDS:
        with_add.add(add, contraction_rule(target, "BiasAdd", ["b"], with_act=False, with_add=True),
                     name="conv_bias_add")
    plain = RuleSet(name="fuse_remapper")
    plain.add(CONTRACTION_BIAS, contraction_rule(target, "BiasAdd", ["b"], with_act=False), name="contraction_bias")
    plain.add(CONV_BN, contraction_rule(target, "FusedBatchNorm", _BN_ARGS, with_act=False), name="conv_bn")
    plain.add(SQUEEZE_BIAS, squeeze_rule(target), name="conv_squeeze_bias")
    decompose = RuleSet(name="fuse_remapper")
    decompose.add(BN, decompose_batch_norm, name="decompose_batch_norm")
    return [[gelu], [to_bias, with_act, with_add, plain, decompose]]


def _remove_dead(model: Model, dead: list[Node]) -> None:
    """Remove the nodes a GELU fusion left unread (the region, its BiasAdd and MatMul)."""
    doomed = [n for n in dict.fromkeys(dead) if n.graph is model.graph]
    if doomed:
        model.graph.remove(doomed)


@transform("fuse_remapper", dialects={"tf"})
def fuse_remapper(model: Model, ctx: TransformContext, *, target: str = "onednn") -> TransformResult:
    """Fuse contractions, batch norms, residual adds and activations into the fused ops TensorFlow runs (Grappler's remapper)."""
    if target not in TARGETS:
        raise TransformError(f"fuse_remapper: target must be one of {', '.join(TARGETS)}, not {target!r}")
    annotate_shapes(model.graph)  # the residual Add and side input must not broadcast
    dead: list[Node] = []
    first, rest = _rule_sets(target, dead)
    report = apply_rules(model, first, subgraphs=False)
    _remove_dead(model, dead)
    report.merge(apply_rules(model, rest, subgraphs=False))
    stats = dict(report.by_rule)
    stats["fused"] = sum(v for k, v in stats.items() if k not in ("add_to_bias_add", "decompose_batch_norm"))
    # changed when anything was rewritten, an Add turned into a BiasAdd included
    return result_of(report, stats=stats, changed=report.applied > 0)
