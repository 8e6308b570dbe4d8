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
    [Transpose(a) ─►] MatMul(·, [Transpose(b)]) [─► Mul(·, α)]
        → com.microsoft::FusedMatMul(a, b; transA, transB, alpha)

Residual sums before a normalization (``SkipLayerNormalization``) are ``fuse_skip_layer_norm``'s,
which runs on request only: onnxruntime's CPU kernels for them are slower than what they replace.

The maths is unchanged: FusedConv computes ``act(conv(x, W) + B)`` with ``activation_params``
``[alpha]`` (LeakyRelu), ``[min, max]`` (Clip), ``[alpha, beta]`` (HardSigmoid);
BiasGelu/FastGelu add ``b`` before the activation; FusedMatMul is
``α · op(a) · op(b)`` with ``op`` a swap of the last two axes.

Refused, with the reason in the report's notes: non-float32 tensors (the CPU contrib kernels
are float32); Clip bounds not constant; a bias that is not a 1-D constant of the last
dimension's size, or an unknown last dimension (run shape inference first); a Transpose that
is not a swap of the last two axes; an intermediate read outside the pattern or being a graph output.

Cost: three sweeps, each O(N); O(1) per fusion.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import Attr, DType, Model, Node, Value
from ...patterns import (
    ANY,
    CONST,
    Match,
    P,
    Pattern,
    Replacement,
    RuleSet,
    Skip,
    why_not_closed,
)
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, new_node, require_ms_domain, scalar

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


def _sweeps(model: Model) -> list[RuleSet]:
    first = RuleSet(name="fuse_ort_contrib")
    first.add(_CONV_ACT, _fused_conv(model), name="fused_conv")
    first.add(_BIAS_GELU, _bias_gelu(model), name="bias_gelu")
    first.add(_BIAS_FAST_GELU, _bias_gelu(model), name="bias_fast_gelu")
    with_alpha, plain = RuleSet(name="fuse_ort_contrib"), RuleSet(name="fuse_ort_contrib")
    matmul = _fused_matmul(model)
    for name, pattern in _matmul_patterns():
        (with_alpha if name.endswith("_alpha") else plain).add(pattern, matmul, name=name)
    return [first, with_alpha, plain]


@transform("fuse_ort_contrib", dialects={"onnx"})
def fuse_ort_contrib(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse Conv+activation, bias+Gelu and Transpose+MatMul(+scale) into onnxruntime contrib ops."""
    check_target("fuse_ort_contrib", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_ort_contrib: standard ONNX has no fused Conv/MatMul/bias operators; "
            "pass target=onnxruntime to emit com.microsoft contrib ops"])
    report = apply_rules(model, _sweeps(model))
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
