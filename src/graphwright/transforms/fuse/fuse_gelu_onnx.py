"""fuse_gelu: GELU written out op by op becomes one ``Gelu`` (opset ≥ 20) or onnxruntime's contrib op.

Before, the exact (erf) form, as PyTorch's ``nn.GELU()`` / BERT export it::

    x ─► Div(x, √2) | Mul(x, 1/√2) ─► Erf ─► Add(·, 1) ─┐
    x ──────────────────────────────────────────────────► Mul ─► Mul(·, 0.5) ─► y

and the tanh approximation, as GPT-2's ``gelu_new`` exports it::

    x ─► Pow(x, 3) | x·x·x ─► Mul(·, 0.044715) ─► Add(x, ·) ─► Mul(·, √(2/π)) ─► Tanh ─► Add(·, 1) ─┐
    x ─► Mul(x, 0.5) ────────────────────────────────────────────────────────────────────────────► Mul ─► y

The three groupings of the outer product are all recognized: ``(x·(1+t))·0.5``,
``x·((1+t)·0.5)`` and ``(x·0.5)·(1+t)``, in either operand order.

After::

    target="standard",    opset ≥ 20:  Gelu(x; approximate="none" | "tanh")
    target="onnxruntime", opset ≥ 20:  the same standard Gelu
    target="onnxruntime", opset < 20:  com.microsoft::Gelu(x)  |  com.microsoft::FastGelu(x)

The maths: ``gelu(x) = x·Φ(x) = 0.5·x·(1 + erf(x/√2))``; the tanh form is
``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``, which is exactly what ``Gelu(approximate="tanh")``
and ``FastGelu`` compute.  Constants are accepted within 1e-3 relative of their exact values
(exporters write 1.4142135, 0.70710677, 0.7978846, ...).

Refused, with the reason in the report's notes: opset < 20 with ``target="standard"``; contrib
ops for a non-float32 input (onnxruntime's CPU contrib kernels are float32); a constant that is
not the expected one; an intermediate read outside the pattern or being a graph output.

Cost: one sweep, O(N); O(1) per fusion.
"""

from __future__ import annotations

import math

from ...ir import Attr, DType, Model, Value
from ...patterns import ANY, CONST, Match, Pattern, Replacement, RuleSet, Skip, why_not_closed
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, near, new_node, require_ms_domain, std_op

__all__ = ["fuse_gelu", "MIN_OPSET"]

#: Gelu entered the default domain at opset 20.
MIN_OPSET = 20
SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715

_X = ANY(name="x")
_op = std_op


_ERF_ARG = _op("Div", _X, CONST(name="sqrt2")) | _op("Mul", _X, CONST(name="inv_sqrt2"), commutative=True)
_ERF_ONE_PLUS = _op("Add", _op("Erf", _ERF_ARG, name="erf"), CONST(name="one"), commutative=True, name="one_plus")

_CUBE = _op("Pow", _X, CONST(name="three")) | _op("Mul", _op("Mul", _X, _X), _X, commutative=True)
_INNER = _op("Add", _X, _op("Mul", _CUBE, CONST(name="cubic"), commutative=True), commutative=True)
_TANH_ONE_PLUS = _op("Add", _op("Tanh", _op("Mul", _INNER, CONST(name="scale"), commutative=True), name="tanh"),
                     CONST(name="one"), commutative=True, name="one_plus")


def _outer_forms(one_plus: Pattern) -> list[Pattern]:
    """The three groupings of ``0.5 · x · one_plus``."""
    half = CONST(name="half")
    return [
        _op("Mul", _op("Mul", _X, one_plus, commutative=True), half, commutative=True),  # (x·(1+t))·0.5
        _op("Mul", _X, _op("Mul", one_plus, half, commutative=True), commutative=True),  # x·((1+t)·0.5)
        _op("Mul", _op("Mul", _X, half, commutative=True), one_plus, commutative=True),  # (x·0.5)·(1+t)
    ]


def _constants_ok(m: Match, tanh: bool) -> str | None:
    """Why a captured constant is not the one GELU needs, or None."""
    expected: dict[str, float] = {"one": 1.0, "half": 0.5}
    if tanh:
        expected.update(three=3.0, cubic=TANH_CUBIC, scale=SQRT_2_OVER_PI)
    else:
        expected.update(sqrt2=SQRT2, inv_sqrt2=1.0 / SQRT2)
    for name, want in expected.items():
        if m.get(name) is not None and not near(m[name].value, want):
            return f"constant {name} is not {want:.6g}"
    return None


def _make_rule(model: Model, target: str, tanh: bool):
    version = opset_version(model)

    def rule(m: Match) -> Replacement | Skip:
        """Check the chain and emit Gelu / com.microsoft::Gelu / com.microsoft::FastGelu."""
        reason = _constants_ok(m, tanh) or why_not_closed(m)
        if reason:
            return m.skip(reason)
        root = m.node
        assert root is not None
        x: Value = m["x"].value  # type: ignore[assignment]
        if version >= MIN_OPSET:
            node = new_node("Gelu", [x], root, attrs={"approximate": Attr.string("tanh" if tanh else "none")})
            return Replacement([node])
        if target != ONNXRUNTIME:
            return m.skip(f"opset {version} < {MIN_OPSET}: Gelu is not available "
                          f"(target=onnxruntime emits com.microsoft::{'FastGelu' if tanh else 'Gelu'})")
        dtype = x.dtype or root.output.dtype
        if dtype is not None and dtype is not DType.FLOAT32:
            return m.skip(f"input is {dtype.value}; onnxruntime's CPU contrib Gelu kernels are float32")
        require_ms_domain(model)
        node = new_node("FastGelu" if tanh else "Gelu", [x], root, domain=MS_DOMAIN)
        return Replacement([node])

    return rule


@transform("fuse_gelu", dialects={"onnx"})
def fuse_gelu(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse erf- and tanh-form GELU chains into Gelu (opset >= 20) or onnxruntime's contrib Gelu/FastGelu."""
    check_target("fuse_gelu", target)
    rules = RuleSet(name="fuse_gelu")
    erf_rule, tanh_rule = _make_rule(model, target, False), _make_rule(model, target, True)
    for i, pattern in enumerate(_outer_forms(_TANH_ONE_PLUS)):
        rules.add(pattern, tanh_rule, name=f"gelu_tanh_{i}")
    for i, pattern in enumerate(_outer_forms(_ERF_ONE_PLUS)):
        rules.add(pattern, erf_rule, name=f"gelu_erf_{i}")
    report = apply_rules(model, [rules])
    stats = {**report.by_rule, "fused": report.applied}
    return result_of(report, stats=stats)
