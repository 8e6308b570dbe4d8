"""fuse_remapper: Grappler Remapper's contraction fusions, done ahead of time on a frozen GraphDef.

The fused ops are the ones TensorFlow's CPU runtime executes (checked with TF 2.21, with and
without oneDNN; no device needs to be set for a v1 Session to run them)::

    Conv2D(x, W) ─► BiasAdd(·, b) [─► Relu|Relu6|Elu|LeakyRelu]
        → _FusedConv2D(x, W, b)            fused_ops=["BiasAdd"(, act)], num_args=1
    MatMul(a, B) ─► BiasAdd(·, b) [─► Relu|Relu6|Elu|LeakyRelu|Tanh]
        → _FusedMatMul(a, B, b)            fused_ops=["BiasAdd"(, act)], num_args=1
    Conv2D(x, W) ─► FusedBatchNorm{,V2,V3}(·, γ, β, μ, σ²; inference) [─► act]
        → _FusedConv2D(x, W, γ, β, μ, σ²)  fused_ops=["FusedBatchNorm"(, act)], num_args=4, epsilon=ε
    Conv2D(x, W) ─► Squeeze(dims without the channel) ─► BiasAdd(·, b)
        → Squeeze(_FusedConv2D(x, W, b))

Going beyond Grappler: ``Add|AddV2(contraction, c)`` with ``c`` a constant holding one value per
output channel (``[C]``, ``[1,1,1,C]``, a scalar...) first becomes ``BiasAdd(contraction, c')``
(``c'`` the ``[C]`` vector), so the chains batch-norm folding leaves on Keras graphs fuse too;
Grappler without oneDNN leaves Conv2D+AddV2 unfused there.

The arithmetic is unchanged (the fused kernels compute the same sums); outputs agree with the
unfused graph to float rounding.  The Remapper's safety checks apply to every fusion: no control
edges on any fused node, every intermediate read exactly once, no fused node is a graph input or
output (the root included, as Grappler preserves fetch nodes), float32 everywhere (the CPU
kernels' type), NHWC only, FusedBatchNorm in inference mode with its batch statistics unread.
The fused node takes the root's name (as Grappler does), so fetch names keep working.
``_FusedDepthwiseConv2dNative`` and ``_FusedBatchNormEx`` are not produced: TensorFlow runs them
only with oneDNN enabled.

Cost: each sweep is O(N) (rules indexed by root op) plus O(1) per fusion; three sweeps (Add into
BiasAdd, the chains with an activation, those without), run by :func:`graphwright.transforms.rules.apply_rules`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...formats.graphdef.op_registry import op_def
from ...ir import Attr, AttrKind, DType, Model, Node
from ...patterns import ANY, CONST, Match, P, Replacement, RuleSet, Skip, why_not_fusable
from .._channels import channel_count, node_of, output_channel_axis, per_channel, value_name
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["CONV_ACTIVATIONS", "MATMUL_ACTIVATIONS", "fuse_remapper"]

#: Activations _FusedConv2D runs on CPU after BiasAdd or FusedBatchNorm.
CONV_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu")
#: Activations _FusedMatMul runs on CPU after BiasAdd.
MATMUL_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu", "Tanh")
DEFAULT_EPSILON = 1e-4
DEFAULT_LEAKYRELU_ALPHA = 0.2

_FUSED_BN = "FusedBatchNorm|FusedBatchNormV2|FusedBatchNormV3"
_CONV = P("Conv2D", ANY(name="x"), ANY(name="w"), name="conv")
_MATMUL = P("MatMul", ANY(name="x"), ANY(name="w"), name="conv")
_CONV_BIAS = P("BiasAdd", _CONV, ANY(name="b"), name="bias")
_MATMUL_BIAS = P("BiasAdd", _MATMUL, ANY(name="b"), name="bias")
_CONV_BN = P(_FUSED_BN, _CONV, ANY(name="gamma"), ANY(name="beta"), ANY(name="mean"), ANY(name="var"), name="bn")
_SQUEEZE_BIAS = P("BiasAdd", P("Squeeze", _CONV, name="squeeze"), ANY(name="b"), name="bias")
_ADD_AFTER = P("Add|AddV2", P("Conv2D|DepthwiseConv2dNative|MatMul", ANY, CONST(name="w"), name="conv"),
               CONST(name="c"), name="add", commutative=True)


def _fmt(node: Node) -> bytes:
    raw = node.attr("data_format", b"NHWC")
    return raw if isinstance(raw, bytes) else str(raw).encode()


def _why_not(m: Match) -> str | None:
    """The Remapper's checks on the whole match (see the module docstring)."""
    reason = why_not_fusable(m, check_root=True)
    if reason:
        return reason
    root = m.node
    assert root is not None
    if any(v.is_graph_output for v in root.outputs):
        return f"{root.name!r} is a graph output; Grappler never fuses fetch nodes"
    for node in m.nodes:
        dtypes = {node.attr("T")} | ({node.attr("U")} if node.attrs.get("U") else set())
        if dtypes != {DType.FLOAT32}:
            return f"{node.name!r} ({node.op}) is not float32; the CPU fused kernels are float32 only"
        if node.op != "MatMul" and _fmt(node) != b"NHWC":
            return f"{node.name!r} ({node.op}) is {_fmt(node).decode()}; the CPU fused kernels are NHWC only"
    bn = m.get("bn")
    if bn is not None and bn.node is not None:
        if bn.node.attr("is_training", True):
            return f"{bn.node.name!r} is in training mode"
        if any(v.num_uses or v.is_graph_output for v in bn.node.outputs[1:]):
            return f"{bn.node.name!r} has its batch statistics read"
    return None


def _fused(m: Match, fused_ops: list[str], args: list[str], name: str, act: Node | None) -> Node:
    """The _FusedConv2D / _FusedMatMul node replacing the match."""
    conv = node_of(m, "conv")
    inputs = [m["x"].value, m["w"].value] + [m[a].value for a in args]
    attrs: dict[str, Attr | None] = {
        "fused_ops": Attr.strings(fused_ops),
        "num_args": Attr.int(len(args)),
        "epsilon": Attr.float(node_of(m, "bn").attr("epsilon", DEFAULT_EPSILON) if m.get("bn") else DEFAULT_EPSILON),
        "leakyrelu_alpha": Attr.float(
            act.attr("alpha", DEFAULT_LEAKYRELU_ALPHA) if act is not None and act.op == "LeakyRelu"
            else DEFAULT_LEAKYRELU_ALPHA),
    }
    if conv.op == "Conv2D":
        attrs["TArgs"] = Attr(AttrKind.DTYPES, (DType.FLOAT32,) * len(args))
        attrs["num_host_args"] = Attr.int(0)
        op = "_FusedConv2D"
    else:
        op = "_FusedMatMul"
    fused = m.clone(conv, op=op, inputs=inputs, name=name, attrs=attrs)
    # Attributes of the contraction the fused op does not define (MatMul's grad_a/grad_b in
    # TF >= 2.17) would make TensorFlow log an error for every such node: drop them.
    definition = op_def(op)
    if definition is not None:
        known = {a.name for a in definition.attr}
        for key in [k for k in fused.attrs if k not in known and not k.startswith("_")]:
            del fused.attrs[key]
    return fused


def _contraction_rule(with_act: bool, args: list[str], first_op: str) -> Callable[[Match], Replacement | Skip]:
    """The rule fusing a contraction with ``first_op`` (reading captures ``args``) and, if asked, the root activation."""
    def rule(m: Match) -> Replacement | Skip:
        reason = _why_not(m)
        if reason:
            return m.skip(reason)
        act = m.node if with_act else None
        fused_ops = [first_op] + ([act.op] if act is not None else [])
        root = m.node
        assert root is not None
        node = _fused(m, fused_ops, args, root.name, act)
        return Replacement([node], {root.outputs[0]: node.output})
    return rule


def _squeeze_rule(m: Match) -> Replacement | Skip:
    reason = _why_not(m)
    if reason:
        return m.skip(reason)
    squeeze = node_of(m, "squeeze")
    dims = [int(d) for d in squeeze.attr("squeeze_dims", ()) or ()]
    if not dims or any(d in (3, -1) for d in dims):
        return m.skip(f"{squeeze.name!r} squeezes {dims or 'every size-1 dim'}; the channel axis must stay")
    root = m.node
    assert root is not None
    conv = node_of(m, "conv")
    fused = _fused(m, ["BiasAdd"], ["b"], conv.name, None)
    new_squeeze = m.clone(squeeze, inputs=[fused.output], name=root.name)
    return Replacement([fused, new_squeeze], {root.outputs[0]: new_squeeze.output})


def _add_to_bias_add(m: Match) -> Replacement | Skip:
    """Add|AddV2(contraction, per-channel constant) -> BiasAdd(contraction, [C] vector)."""
    conv, add = node_of(m, "conv"), m.node
    assert add is not None
    c = m.const("c")
    if conv.output.num_uses != 1 or c.dtype is not DType.FLOAT32 or add.attr("T") is not DType.FLOAT32:
        return m.skip("not a single-use float32 contraction")
    rank, axis = output_channel_axis(conv)
    vector = per_channel(c.numpy(), rank, axis, channel_count(conv, m.array("w")))
    if vector is None:
        return m.skip(f"{value_name(m, 'c')!r} is not one value per output channel")
    bias = m.constant(vector.astype(np.float32), name=f"{add.name}/bias", dtype=DType.FLOAT32)
    attrs = {"T": Attr.dtype(DType.FLOAT32)}
    if conv.op != "MatMul":
        attrs["data_format"] = Attr.string(_fmt(conv))
    new = Node("BiasAdd", [conv.output, bias], dialect="tf", name=add.name, attrs=attrs,
               device=add.device, control_inputs=add.control_inputs)
    new.output.dtype, new.output.shape = add.output.dtype, add.output.shape
    return Replacement([conv, new], {add.outputs[0]: new.output})  # the contraction stays


def _rule_sets() -> list[RuleSet]:
    to_bias = RuleSet(name="fuse_remapper")
    to_bias.add(_ADD_AFTER, _add_to_bias_add, name="add_to_bias_add")
    with_act = RuleSet(name="fuse_remapper")
    with_act.add(P("|".join(CONV_ACTIVATIONS), _CONV_BIAS, name="act"),
                 _contraction_rule(True, ["b"], "BiasAdd"), name="conv_bias_act")
    with_act.add(P("|".join(MATMUL_ACTIVATIONS), _MATMUL_BIAS, name="act"),
                 _contraction_rule(True, ["b"], "BiasAdd"), name="matmul_bias_act")
    with_act.add(P("|".join(CONV_ACTIVATIONS), _CONV_BN, name="act"),
                 _contraction_rule(True, ["gamma", "beta", "mean", "var"], "FusedBatchNorm"), name="conv_bn_act")
    plain = RuleSet(name="fuse_remapper")
    plain.add(_CONV_BIAS, _contraction_rule(False, ["b"], "BiasAdd"), name="conv_bias")
    plain.add(_MATMUL_BIAS, _contraction_rule(False, ["b"], "BiasAdd"), name="matmul_bias")
    plain.add(_CONV_BN, _contraction_rule(False, ["gamma", "beta", "mean", "var"], "FusedBatchNorm"),
              name="conv_bn")
    plain.add(_SQUEEZE_BIAS, _squeeze_rule, name="conv_squeeze_bias")
    return [to_bias, with_act, plain]


@transform("fuse_remapper", dialects={"tf"})
def fuse_remapper(model: Model, ctx: TransformContext) -> TransformResult:
    """Fuse Conv2D/MatMul + BiasAdd/FusedBatchNorm (+ activation) into _FusedConv2D/_FusedMatMul."""
    report = apply_rules(model, _rule_sets(), subgraphs=False)
    stats = dict(report.by_rule)
    stats["fused"] = sum(v for k, v in stats.items() if k != "add_to_bias_add")
    # changed when anything was rewritten, an Add turned into a BiasAdd included
    return result_of(report, stats=stats, changed=report.applied > 0)
