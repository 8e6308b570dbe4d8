"""fuse_ort_contrib: fusions only onnxruntime's contrib operators (domain ``com.microsoft``) can carry.

Standard ONNX has no operator that runs a convolution or a matrix product together with its
activation, bias or residual, so with ``target="standard"`` (the default) this transform changes
nothing and says so.  With ``target="onnxruntime"``, before → after (run it after
``fuse_layer_norm`` and ``fuse_gelu``, which produce the LayerNormalization/Gelu it reads)::

    Conv(x, W[, B]) ─► Relu|Tanh|Sigmoid|LeakyRelu|Clip|HardSigmoid
        → com.microsoft::FusedConv(x, W[, B]; activation, activation_params)
    Add(x, b) ─► Gelu(approximate="none") | com.microsoft::Gelu
        → com.microsoft::BiasGelu(x, b)
    Add(x, b) ─► Gelu(approximate="tanh") | com.microsoft::FastGelu(x)
        → com.microsoft::FastGelu(x, b)
    [Add(a, bias) ─►] Add(·, s) ─► LayerNormalization(·, γ[, β]; axis = last)     (skip_layer_norm=true)
        → com.microsoft::SkipLayerNormalization(a, s, γ[, β][, bias]; epsilon)
    [Add(a, bias) ─►] Add(·, s) ─► SimplifiedLayerNormalization(·, γ)   (skip_simplified_layer_norm=true)
        → com.microsoft::SkipSimplifiedLayerNormalization(a, s, γ[, bias]; epsilon)

Both skip fusions are off by default because they make onnxruntime's CPU inference slower,
measured on onnxruntime 1.32 (one thread, sequence 128): one ``SkipLayerNormalization`` takes
3.5–5.9× the time of the ``Add``, ``Add`` and ``LayerNormalization`` it replaces (hidden 256–1024,
batch 1 and 8), and whole BERT/GPT-2/ViT models get ~10 % slower with it;
``SkipSimplifiedLayerNormalization`` takes 1.1–1.7× the time of ``Add``, ``Add``,
``SimplifiedLayerNormalization`` at batch 1 and 0.9–1.1× at batch 8, and T5 gets ~3 % slower
(``benchmarks/ort_transformers.md``).  Turn them on for fewer nodes, or for execution providers
whose kernels are faster.
    [Transpose(a) ─►] MatMul(·, [Transpose(b)]) [─► Mul(·, α)]
        → com.microsoft::FusedMatMul(a, b; transA, transB, alpha)

The maths is unchanged: FusedConv computes ``act(conv(x, W) + B)`` with ``activation_params``
``[alpha]`` (LeakyRelu), ``[min, max]`` (Clip), ``[alpha, beta]`` (HardSigmoid);
BiasGelu/FastGelu add ``b`` before the activation; SkipLayerNormalization normalizes
``a + s (+ bias)`` over the last axis, and when the sum is also read elsewhere (pre-LN
transformers) it is taken from the op's fourth output (``input_skip_bias_sum``); FusedMatMul is
``α · op(a) · op(b)`` with ``op`` a swap of the last two axes.

Refused, with the reason in the report's notes: non-float32 tensors (the CPU contrib kernels
are float32); Clip bounds not constant; a bias that is not a 1-D constant of the last
dimension's size, or an unknown last dimension (run shape inference first); a LayerNorm over
more than the last axis, with γ/β that are not 1-D, or whose mean/inverse-std outputs are
read; summands whose shapes don't fit the kernel, which adds without ONNX broadcasting (equal
shapes of rank 2 or 3, or a skip of shape (1, S, H) / (S, H)): statically known shapes decide,
and where a dynamic export left them unknown or named apart, the summands' shapes measured on
onnxruntime at two sizes of every dynamic input dim (``_shape_probe_onnx``); a Transpose that is not
a swap of the last two axes; an intermediate read outside the pattern or being a graph output.

Cost: three sweeps, each O(N); O(1) per fusion.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import Attr, DType, Model, Node, Value, constant_value
from ...patterns import (
    ANY,
    CONST,
    Match,
    P,
    Pattern,
    Replacement,
    RuleSet,
    Skip,
    no_control_edges,
    not_graph_io,
    single_use,
    why_not_closed,
)
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, new_node, require_ms_domain, scalar
from ._shape_probe_onnx import ShapeProbe

__all__ = ["fuse_ort_contrib", "CONV_ACTIVATIONS"]

#: Activations com.microsoft::FusedConv runs after the convolution.
CONV_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")
DEFAULT_LEAKY_RELU_ALPHA = 0.01
DEFAULT_HARD_SIGMOID = (0.2, 0.5)
DEFAULT_LN_EPSILON = 1e-5
#: Opset from which Clip reads min/max as inputs instead of attributes.
CLIP_INPUTS_OPSET = 11

Rule = Callable[[Match], "Replacement | Skip"]

# -- patterns -------------------------------------------------------------------
_CONV = P("Conv", name="conv", domain="")
_CONV_ACT = (P("|".join(a for a in CONV_ACTIVATIONS if a != "Clip"), _CONV, name="act", domain="")
             | P("Clip", _CONV, ..., name="act", domain=""))

_BIAS_ADD = P("Add", ANY(name="x"), CONST(name="bias"), commutative=True, name="add", domain="")
_BIAS_GELU = P("Gelu|com.microsoft::Gelu", _BIAS_ADD, name="gelu",
               where=lambda node: node.domain in ("", "ai.onnx", MS_DOMAIN))
_BIAS_FAST_GELU = P("com.microsoft::FastGelu", _BIAS_ADD, name="gelu")

_SUM_WITH_BIAS = P("Add", P("Add", ANY(name="a"), CONST(name="bias"), commutative=True, name="bias_add", domain=""),
                   ANY(name="s"), commutative=True, name="add", domain="")
_SUM = P("Add", ANY(name="a"), ANY(name="s"), name="add", domain="")


def _skip_ln(summed: Pattern, with_beta: bool) -> Pattern:
    params = (CONST(name="gamma"), CONST(name="beta")) if with_beta else (CONST(name="gamma"),)
    return P("LayerNormalization", summed, *params, name="ln", domain="")


def _skip_rms(summed: Pattern) -> Pattern:
    return P("SimplifiedLayerNormalization", summed, CONST(name="gamma"), name="ln", domain="")


#: The normalizations a residual sum folds into, and the fused op each becomes.
SKIP_OPS = {"LayerNormalization": "SkipLayerNormalization",
            "SimplifiedLayerNormalization": "SkipSimplifiedLayerNormalization"}


def _residual_summands(model: Model, ops: frozenset[str]) -> list[Value]:
    """The values a skip fusion may need runtime shapes of: each summand of an Add read by a
    (Simplified)LayerNormalization, and the non-constant operand of a bias Add feeding it."""
    out: list[Value] = []
    for node in model.graph:
        if node.op not in ops or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        add = node.inputs[0].producer if node.inputs[0] is not None else None
        if add is None or add.op != "Add" or add.domain not in ("", "ai.onnx"):
            continue
        for summand in add.inputs:
            if summand is None:
                continue
            out.append(summand)
            inner = summand.producer
            if inner is not None and inner.op == "Add":
                out.extend(v for v in inner.inputs if v is not None and constant_value(v) is None)
    return out


def _fits_as_skip(full: tuple[object, ...], skip: tuple[object, ...]) -> bool:
    """``skip`` broadcasts to ``full`` the way onnxruntime's skip kernels allow: (1, S, H) or (S, H)."""
    if len(full) != 3:
        return False
    if len(skip) == 3:
        return skip[0] == 1 and skip[1:] == full[1:]
    return len(skip) == 2 and skip == full[1:]


def _static(shape: tuple[object, ...] | None) -> bool:
    return shape is not None and None not in shape


def _input_and_skip(a: Value, s: Value, probe: ShapeProbe) -> tuple[tuple[Value, Value] | None, str]:
    """(input, skip) in the order the fused kernel needs, or None and why the shapes don't fit it.

    Statically: equal known shapes of rank 2 or 3 (ints, or the same symbolic dims), or one a
    (1, S, H) / (S, H) skip of the other.  Otherwise the shape probe: the same holds at both
    probe sizes, a broadcast skip also having a static leading 1 (or rank 2) in the IR.
    """
    sa, ss = a.shape, s.shape
    if _static(sa) and _static(ss):
        assert sa is not None and ss is not None
        if sa == ss and len(sa) in (2, 3):
            return (a, s), ""
        if _fits_as_skip(sa, ss):
            return (a, s), ""
        if _fits_as_skip(ss, sa):
            return (s, a), ""
    static = f"summands {a.name!r} {sa} and {s.name!r} {ss} are not statically equal rank-2 or rank-3 shapes"
    if sa is not None and ss is not None and all(isinstance(d, int) for d in (*sa, *ss)):
        return None, static + " nor a (1, S, H) or (S, H) skip of the other"
    ra, rs = probe.shapes(a), probe.shapes(s)
    if ra is None or rs is None:
        return None, f"{static}, and {probe.error or 'their runtime shapes are unknown'}"
    if all(x == y and len(x) in (2, 3) for x, y in zip(ra, rs, strict=True)):
        return (a, s), ""
    for full, skip, rf, rk in ((a, s, ra, rs), (s, a, rs, ra)):
        # the skip's leading 1 must not be the batch at size 1: statically 1, rank 2, or 1 in
        # both runs while the full summand's leading dim took two sizes other than 1
        leading_one = ((skip.shape is not None and (len(skip.shape) == 2 or skip.shape[0] == 1))
                       or (len({x[0] for x in rf}) == len(rf) and 1 not in {x[0] for x in rf}))
        if leading_one and all(_fits_as_skip(x, y) for x, y in zip(rf, rk, strict=True)):
            return (full, skip), ""
    return None, f"{static}; at run time they are {ra} and {rs}"


def _swaps_last_two(node: Node) -> bool:
    perm = [int(p) for p in (node.attr("perm") or ())]
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


def _matmul_patterns() -> list[tuple[str, Pattern]]:
    """(rule name, pattern) for every Transpose/alpha combination, larger ones first."""
    out: list[tuple[str, Pattern]] = []
    for alpha in (True, False):
        for ta, tb in ((True, True), (True, False), (False, True), (False, False)):
            if not (ta or tb or alpha):
                continue
            a = P("Transpose", ANY(name="a"), name="ta", where=_swaps_last_two, domain="") if ta else ANY(name="a")
            b = P("Transpose", ANY(name="b"), name="tb", where=_swaps_last_two, domain="") if tb else ANY(name="b")
            mm = P("MatMul", a, b, name="matmul", domain="")
            pattern = P("Mul", mm, CONST(name="alpha"), commutative=True, name="scale", domain="") if alpha else mm
            out.append((f"fused_matmul{'_ta' if ta else ''}{'_tb' if tb else ''}{'_alpha' if alpha else ''}", pattern))
    return out


# -- checks shared by the rules -----------------------------------------------------
def _float32(*values: Value | None) -> str | None:
    for value in values:
        if value is not None and value.dtype is not None and value.dtype is not DType.FLOAT32:
            return f"{value.name!r} is {value.dtype.value}; onnxruntime's CPU contrib kernels are float32"
    return None


def _last_dim(value: Value) -> int | None:
    shape = value.shape
    return int(shape[-1]) if shape and isinstance(shape[-1], int) else None


def _bias_vector(m: Match, name: str, x: Value) -> tuple[Value | None, str]:
    """The bias as a 1-D constant of x's last-dim size (a new one when it had leading 1s)."""
    array = np.asarray(m.array(name))
    if array.dtype != np.float32:
        return None, f"bias is {array.dtype}, not float32"
    dims = [d for d in array.shape]
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    last = _last_dim(x)
    if last is None:
        return None, f"the last dimension of {x.name!r} is unknown (run shape inference first)"
    if len(dims) != 1 or dims[0] != last:
        return None, f"bias of shape {list(array.shape)} is not a vector of the last dimension ({last})"
    if array.ndim == 1:
        return m[name].value, ""
    root = m.node
    assert root is not None
    return m.constant(array.reshape(last), name=f"{root.name}_bias"), ""


# -- rules ----------------------------------------------------------------------------
def _fused_conv(model: Model) -> Rule:
    version = opset_version(model)

    def rule(m: Match) -> Replacement | Skip:
        """Conv + activation -> com.microsoft::FusedConv."""
        act, conv = m.node, m["conv"].node
        assert act is not None and conv is not None
        reason = why_not_closed(m) or _float32(*conv.inputs, act.output)
        if reason:
            return m.skip(reason)
        params: list[float] = []
        if act.op == "LeakyRelu":
            params = [float(act.attr("alpha", DEFAULT_LEAKY_RELU_ALPHA))]
        elif act.op == "HardSigmoid":
            params = [float(act.attr("alpha", DEFAULT_HARD_SIGMOID[0])), float(act.attr("beta", DEFAULT_HARD_SIGMOID[1]))]
        elif act.op == "Clip":
            if version < CLIP_INPUTS_OPSET:
                bounds = [act.attr("min", float(np.finfo(np.float32).min)), act.attr("max", float(np.finfo(np.float32).max))]
            else:
                bounds = []
                for i, default in ((1, np.finfo(np.float32).min), (2, np.finfo(np.float32).max)):
                    source = act.inputs[i] if len(act.inputs) > i else None
                    bound = float(default) if source is None else scalar(source)
                    if bound is None:
                        return m.skip(f"Clip bound {i} of {act.name!r} is not a one-element constant")
                    bounds.append(bound)
            params = [float(b) for b in bounds]
        attrs = {k: v for k, v in conv.attrs.items()}
        attrs["activation"] = Attr.string(act.op)
        if params:
            attrs["activation_params"] = Attr.floats(params)
        require_ms_domain(model)
        return Replacement([new_node("FusedConv", list(conv.inputs), act, domain=MS_DOMAIN, attrs=attrs)])

    return rule


def _bias_gelu(model: Model) -> Rule:
    def rule(m: Match) -> Replacement | Skip:
        """Add(x, b) + Gelu/FastGelu -> com.microsoft::BiasGelu / FastGelu(x, b)."""
        gelu = m.node
        x: Value = m["x"].value  # type: ignore[assignment]
        assert gelu is not None
        tanh = gelu.op == "FastGelu" or (gelu.op == "Gelu" and gelu.domain in ("", "ai.onnx")
                                          and gelu.attrs.get("approximate") is not None
                                          and gelu.attrs["approximate"].text == "tanh")
        reason = why_not_closed(m) or _float32(x, gelu.output)
        if reason:
            return m.skip(reason)
        bias, why = _bias_vector(m, "bias", x)
        if bias is None:
            return m.skip(why)
        require_ms_domain(model)
        return Replacement([new_node("FastGelu" if tanh else "BiasGelu", [x, bias], gelu, domain=MS_DOMAIN)])

    return rule


def _skip_layer_norm(model: Model, probe: ShapeProbe) -> Rule:
    def rule(m: Match) -> Replacement | Skip:
        """[Add(a, bias) +] Add(., s) + (Simplified)LayerNormalization -> com.microsoft::Skip(Simplified)LayerNormalization."""
        ln, add = m.node, m["add"].node
        assert ln is not None and add is not None
        a: Value = m["a"].value  # type: ignore[assignment]
        s: Value = m["s"].value  # type: ignore[assignment]
        bias_add = m.get("bias_add")
        if bias_add is not None:
            node = bias_add.node
            assert node is not None
            if not (single_use(node) and not_graph_io(node) and no_control_edges(node)):
                return m.skip(f"bias sum {node.name!r} is read outside the pattern or has control edges")
        if not not_graph_io(add) or not no_control_edges(add) or ln.control_inputs:
            return m.skip(f"residual sum {add.name!r} is a graph output or has control edges")
        if any(out.num_uses or out.is_graph_output for out in ln.outputs[1:]):
            return m.skip(f"{ln.name!r} has its mean/inverse-std outputs read")
        reason = _float32(a, s, ln.output)
        if reason:
            return m.skip(reason)
        order, why = _input_and_skip(a, s, probe)
        if order is None:
            return m.skip(why)
        a, s = order
        rank = len(a.shape) if a.shape is not None else 3
        axis = int(ln.attr("axis", -1))
        if axis not in (-1, rank - 1):
            return m.skip(f"{ln.name!r} normalizes from axis {axis}, not over the last axis only")
        last = _last_dim(a) or _last_dim(s)
        if last is None:
            return m.skip(f"the last dimension of {a.name!r} is unknown (run shape inference first)")
        simplified = ln.op == "SimplifiedLayerNormalization"
        inputs: list[Value | None] = [a, s]
        for name in ("gamma", "beta"):
            if m.get(name) is None:
                continue
            array = np.asarray(m.array(name))
            if array.shape != (last,) or array.dtype != np.float32:
                return m.skip(f"{name} of shape {list(array.shape)} is not a float32 vector of size {last}")
            inputs.append(m[name].value)
        if bias_add is not None:
            if m.get("beta") is None and not simplified:
                inputs.append(None)
            bias, why = _bias_vector(m, "bias", a if a.shape is not None else s)
            if bias is None:
                return m.skip(why)
            inputs.append(bias)
        attrs = {"epsilon": Attr.float(float(ln.attr("epsilon", DEFAULT_LN_EPSILON)))}
        node = new_node(SKIP_OPS[ln.op], inputs, ln, domain=MS_DOMAIN, attrs=attrs, outputs=4)
        values = {ln.outputs[0]: node.outputs[0]}
        probe.alias(node.outputs[0], ln.outputs[0])
        if add.output.num_uses > 1:  # the residual stream reads the sum too: take it from output 3
            values[add.output] = node.outputs[3]
            node.outputs[3].dtype, node.outputs[3].shape = add.output.dtype, add.output.shape
            probe.alias(node.outputs[3], add.output)
        require_ms_domain(model)
        return Replacement([node], values)

    return rule


def _fused_matmul(model: Model) -> Rule:
    def rule(m: Match) -> Replacement | Skip:
        """[Transpose +] MatMul [+ Mul(alpha)] -> com.microsoft::FusedMatMul."""
        root = m.node
        assert root is not None
        a: Value = m["a"].value  # type: ignore[assignment]
        b: Value = m["b"].value  # type: ignore[assignment]
        reason = why_not_closed(m) or _float32(a, b, root.output)
        if reason:
            return m.skip(reason)
        alpha = 1.0
        if m.get("alpha") is not None:
            got, array = scalar(m["alpha"].value), np.asarray(m.array("alpha"))
            if got is None or array.dtype != np.float32:
                return m.skip("the scale is not a one-element float32 constant")
            product = m["matmul"].node.output  # type: ignore[union-attr]
            if array.ndim and (product.shape is None or product.shape != root.output.shape):
                return m.skip(f"the scale of shape {list(array.shape)} may broadcast the product to a higher rank")
            alpha = got
        attrs = {"transA": Attr.int(1 if m.get("ta") else 0), "transB": Attr.int(1 if m.get("tb") else 0),
                 "alpha": Attr.float(alpha)}
        require_ms_domain(model)
        return Replacement([new_node("FusedMatMul", [a, b], root, domain=MS_DOMAIN, attrs=attrs)])

    return rule


def _static_fit(a: Value, s: Value) -> bool:
    sa, ss = a.shape, s.shape
    if not (_static(sa) and _static(ss)):
        return False
    assert sa is not None and ss is not None
    return (sa == ss and len(sa) in (2, 3)) or _fits_as_skip(sa, ss) or _fits_as_skip(ss, sa)


def _needs_probe(model: Model, ops: frozenset[str]) -> bool:
    """Some residual sum before a normalization whose summands' shapes are not statically known to fit."""
    for node in model.graph:
        if node.op in ops and node.domain in ("", "ai.onnx") and node.inputs and node.inputs[0] is not None:
            add = node.inputs[0].producer
            if add is not None and add.op == "Add" and len(add.inputs) == 2 and None not in add.inputs:
                a, s = add.inputs
                assert a is not None and s is not None
                if not _static_fit(a, s):
                    return True
    return False


def _sweeps(model: Model, skip_ops: frozenset[str]) -> list[RuleSet]:
    first = RuleSet(name="fuse_ort_contrib")
    first.add(_CONV_ACT, _fused_conv(model), name="fused_conv")
    first.add(_BIAS_GELU, _bias_gelu(model), name="bias_gelu")
    first.add(_BIAS_FAST_GELU, _bias_gelu(model), name="bias_fast_gelu")
    probe = ShapeProbe(model, lambda: _residual_summands(model, skip_ops))
    probe.measure_if(_needs_probe(model, skip_ops))  # on the model as it is, before the sweep rewrites it
    skip_ln = _skip_layer_norm(model, probe)
    if "LayerNormalization" in skip_ops:
        first.add(_skip_ln(_SUM_WITH_BIAS, True), skip_ln, name="bias_skip_layer_norm")
        first.add(_skip_ln(_SUM_WITH_BIAS, False), skip_ln, name="bias_skip_layer_norm")
        first.add(_skip_ln(_SUM, True), skip_ln, name="skip_layer_norm")
        first.add(_skip_ln(_SUM, False), skip_ln, name="skip_layer_norm")
    if "SimplifiedLayerNormalization" in skip_ops:
        first.add(_skip_rms(_SUM_WITH_BIAS), skip_ln, name="bias_skip_simplified_layer_norm")
        first.add(_skip_rms(_SUM), skip_ln, name="skip_simplified_layer_norm")
    with_alpha, plain = RuleSet(name="fuse_ort_contrib"), RuleSet(name="fuse_ort_contrib")
    matmul = _fused_matmul(model)
    for name, pattern in _matmul_patterns():
        (with_alpha if name.endswith("_alpha") else plain).add(pattern, matmul, name=name)
    return [first, with_alpha, plain]


@transform("fuse_ort_contrib", dialects={"onnx"})
def fuse_ort_contrib(model: Model, ctx: TransformContext, *, target: str = STANDARD, skip_layer_norm: bool = False,
                     skip_simplified_layer_norm: bool = False) -> TransformResult:
    """Fuse Conv+activation, bias+Gelu, residual+LayerNorm and Transpose+MatMul into onnxruntime contrib ops."""
    check_target("fuse_ort_contrib", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_ort_contrib: standard ONNX has no fused Conv/MatMul/bias/residual operators; "
            "pass target=onnxruntime to emit com.microsoft contrib ops"])
    skip_ops = frozenset(op for op, on in (("LayerNormalization", skip_layer_norm),
                                           ("SimplifiedLayerNormalization", skip_simplified_layer_norm)) if on)
    report = apply_rules(model, _sweeps(model, skip_ops))
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
