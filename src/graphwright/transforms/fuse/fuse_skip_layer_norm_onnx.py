"""fuse_skip_layer_norm: a residual sum before a normalization becomes onnxruntime's Skip*Normalization.

Before → after (``target="onnxruntime"``; run after ``fuse_layer_norm``/``fuse_rms_norm``,
which produce the normalizations it reads)::

    [Add(a, bias) ─►] Add(·, s) ─► LayerNormalization(·, γ[, β]; axis = last)
        → com.microsoft::SkipLayerNormalization(a, s, γ[, β][, bias]; epsilon)
    [Add(a, bias) ─►] Add(·, s) ─► SimplifiedLayerNormalization(·, γ)                 (RMSNorm)
        → com.microsoft::SkipSimplifiedLayerNormalization(a, s, γ[, bias]; epsilon)

The maths: the fused op normalizes ``a + s (+ bias)`` over the last axis exactly as the
normalization did; when the sum is also read elsewhere (the residual stream of pre-LN
transformers) it is taken from the op's fourth output (``input_skip_bias_sum``).

Not part of ``simplify --target onnxruntime``: it makes onnxruntime's CPU inference slower,
measured on onnxruntime 1.32 (one thread, sequence 128): one ``SkipLayerNormalization`` takes
3.5–5.9× the time of the ``Add``, ``Add`` and ``LayerNormalization`` it replaces (hidden
256–1024, batch 1 and 8), and whole BERT/GPT-2/ViT models get 7–12 % slower with it;
``SkipSimplifiedLayerNormalization`` takes 1.1–1.7× the time of what it replaces at batch 1,
0.9–1.1× at batch 8 (``benchmarks/ort_transformers.md``).  Run it on request
(``graphwright transform … --transforms 'fuse_skip_layer_norm(target=onnxruntime)'``) for fewer
nodes or for execution providers whose kernels are faster; ``layer_norm=false`` or
``simplified=false`` leave one kind alone.

The kernels add their two inputs without ONNX broadcasting: equal shapes of rank 2 or 3, or a
skip of shape (1, S, H) / (S, H) (which goes in the skip slot, whichever side of the Add it
was).  Statically known shapes decide; where a dynamic export left them unknown or named apart
(``batch`` and ``unk__3``), the summands' shapes are measured on onnxruntime at two sizes of
every dynamic input dim (``_shape_probe_onnx``), and the fusion needs them to fit at both.

Refused, with the reason in the report's notes: ``target="standard"``; non-float32 tensors
(the CPU kernels are float32); a normalization over more than the last axis, with γ/β that
are not 1-D float32 vectors of the last dim, or whose mean/inverse-std outputs are read;
summands whose shapes don't fit (or can't be measured: the probe's reason); a bias that is
not a vector of the last dim; a residual sum that is a graph output or has control edges.

Cost: one sweep, O(N), plus the probe's two onnxruntime runs when some sum's shapes are not
statically known to fit; O(1) per fusion.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Value, constant_value
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
)
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, new_node, require_ms_domain
from ._shape_probe_onnx import ShapeProbe
from .fuse_ort_contrib_onnx import DEFAULT_LN_EPSILON, Rule, _bias_vector, _float32, _last_dim

__all__ = ["fuse_skip_layer_norm", "SKIP_OPS"]

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


@transform("fuse_skip_layer_norm", dialects={"onnx"})
def fuse_skip_layer_norm(model: Model, ctx: TransformContext, *, target: str = STANDARD, layer_norm: bool = True,
                         simplified: bool = True) -> TransformResult:
    """Fuse residual Add (+ bias Add) + (Simplified)LayerNormalization into onnxruntime's Skip* ops."""
    check_target("fuse_skip_layer_norm", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_skip_layer_norm: emits onnxruntime's com.microsoft skip ops; pass target=onnxruntime"])
    ops = frozenset(op for op, on in (("LayerNormalization", layer_norm), ("SimplifiedLayerNormalization", simplified))
                    if on)
    probe = ShapeProbe(model, lambda: _residual_summands(model, ops))
    probe.measure_if(_needs_probe(model, ops))  # on the model as it is, before the sweep rewrites it
    rule = _skip_layer_norm(model, probe)
    rules = RuleSet(name="fuse_skip_layer_norm")
    if "LayerNormalization" in ops:
        rules.add(_skip_ln(_SUM_WITH_BIAS, True), rule, name="bias_skip_layer_norm")
        rules.add(_skip_ln(_SUM_WITH_BIAS, False), rule, name="bias_skip_layer_norm")
        rules.add(_skip_ln(_SUM, True), rule, name="skip_layer_norm")
        rules.add(_skip_ln(_SUM, False), rule, name="skip_layer_norm")
    if "SimplifiedLayerNormalization" in ops:
        rules.add(_skip_rms(_SUM_WITH_BIAS), rule, name="bias_skip_simplified_layer_norm")
        rules.add(_skip_rms(_SUM), rule, name="skip_simplified_layer_norm")
    report = apply_rules(model, [rules])
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
