"""fuse_matmul_gelu: a GELU written out op by op after MatMul + BiasAdd becomes one
``_FusedMatMul(fused_ops=[BiasAdd, GeluExact|GeluApproximate])`` (oneDNN).

TensorFlow has no GELU op: ``tf.nn.gelu`` (and so Keras 3's ``gelu``) freezes as a composite.
Recognised, in any operand order::

    exact:  Mul(Mul(x, 0.5), Erfc(Mul(Neg(x), 1/√2)))                       (tf.nn.gelu, Keras 3)
            Mul(Mul(x, 0.5), Add(Erf(x · 1/√2 | x / √2), 1))                 (BERT-style)
    tanh:   Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), √(2/π))), 1))

with ``x = BiasAdd(MatMul(a, W), b)`` or ``x = BiasAdd(Reshape(MatMul(a, W), s), b)`` (Keras 3's
``Dense`` on a rank-3 input, a Tensordot, reshapes between the MatMul and the BiasAdd; when
``s`` keeps the last axis, the bias and GELU commute with the Reshape).  After::

    _FusedMatMul(a, W, b; fused_ops=[BiasAdd, GeluExact])          (GeluApproximate for tanh)
    Reshape(_FusedMatMul(...), s)                                  (the Tensordot case)

The kernels compute ``0.5·x·(1 + erf(x/√2))`` and ``0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))``
(checked in TF 2.21 against the unfused graph).  Constants are accepted within 1e-3 relative
of their exact values.

``target``: ``onednn`` (default; TF's x86 build: the GELU fusions run there), ``eigen`` (TF
2.21 without oneDNN — ``TF_ENABLE_ONEDNN_OPTS=0`` — fails them: "Fusion is not implemented:
[BiasAdd,GeluExact]"), ``gpu`` (not checked here): under the last two every match is left alone
with that reason.  Also refused: a GELU whose input is not MatMul + BiasAdd (no TF op computes
a GELU alone), an intermediate (MatMul, Reshape, BiasAdd, inside the GELU) read outside the
pattern, a graph output or with control edges, a Reshape that moves the last axis, NCHW
BiasAdd, a dtype other than float32, a constant that is not GELU's.

Cost: one sweep, O(N); O(1) per fusion.
"""

from __future__ import annotations

import math

from ...errors import TransformError
from ...ir import Attr, DType, Model, Node, Value, constant_value
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip, why_not_fusable
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from .fuse_mkl_layer_norm_tf import TARGETS, rename_roots

__all__ = ["fuse_matmul_gelu"]

_NOT_ON = {
    "eigen": ("target=eigen: TF without oneDNN has no GELU in _FusedMatMul (TF 2.21 with "
              "TF_ENABLE_ONEDNN_OPTS=0: 'Fusion is not implemented: [BiasAdd,GeluExact]', GeluApproximate alike)"),
    "gpu": "target=gpu: the GELU epilogues of the GPU _FusedMatMul are not checked here, so not emitted",
}
_STANDALONE = ("no TF op computes a GELU alone (tf.nn.gelu is this composite); only _FusedMatMul's "
               "GeluExact/GeluApproximate do, and this GELU's input is not MatMul + BiasAdd")
SQRT2 = math.sqrt(2.0)
_EXPECTED = {"half": 0.5, "one": 1.0, "inv_sqrt2": 1.0 / SQRT2, "sqrt2": SQRT2, "three": 3.0,
             "cubic": 0.044715, "scale": math.sqrt(2.0 / math.pi)}

def _producer_op(value: Value | None) -> str | None:
    return value.producer.op if value is not None and value.producer is not None else None


def _is_contraction(value: Value) -> bool:
    """``value`` is BiasAdd(MatMul(..)) or BiasAdd(Reshape(MatMul(..)))."""
    if _producer_op(value) != "BiasAdd":
        return False
    first = value.producer.inputs[0]  # type: ignore[union-attr]
    if _producer_op(first) == "Reshape":
        first = first.producer.inputs[0]  # type: ignore[union-attr]
    return _producer_op(first) == "MatMul"


_MATMUL = P("MatMul", ANY(name="a"), ANY(name="w"), name="matmul")
_CONTRACTIONS = {
    "matmul": P("BiasAdd", _MATMUL, ANY(name="b"), name="bias"),
    "tensordot": P("BiasAdd", P("Reshape", _MATMUL, CONST(name="shape"), name="reshape"), ANY(name="b"), name="bias"),
    "alone": ANY(name="x", where=lambda v: not _is_contraction(v)),
}


def _forms(x: Pattern) -> list[tuple[str, str, Pattern]]:
    """Every written-out GELU of ``x``: (form, fused op, pattern)."""
    half_x = P("Mul", x, CONST(name="half"), commutative=True, name="half_x")
    erfc = P("Erfc", P("Mul", P("Neg", x, name="neg"), CONST(name="inv_sqrt2"), commutative=True, name="scaled"),
             name="erf")
    erf_arg = (P("Mul", x, CONST(name="inv_sqrt2"), commutative=True, name="scaled")
               | P("RealDiv", x, CONST(name="sqrt2"), name="scaled"))
    erf_one_plus = P("Add|AddV2", P("Erf", erf_arg, name="erf"), CONST(name="one"), commutative=True,
                     name="one_plus")
    inner = P("Add|AddV2", x, P("Mul", P("Pow", x, CONST(name="three"), name="cube"), CONST(name="cubic"),
                                commutative=True, name="cubic_term"), commutative=True, name="inner")
    tanh_one_plus = P("Add|AddV2", P("Tanh", P("Mul", inner, CONST(name="scale"), commutative=True, name="scaled"),
                                     name="tanh"), CONST(name="one"), commutative=True, name="one_plus")
    forms = []
    for form, fused, rest in (("erfc", "GeluExact", erfc), ("erf", "GeluExact", erf_one_plus),
                              ("tanh", "GeluApproximate", tanh_one_plus)):
        forms.append((form, fused, P("Mul", half_x, rest, commutative=True)))  # (0.5·x)·rest
        forms.append((f"{form}_late_half", fused, P("Mul", P("Mul", x, rest, commutative=True, name="x_rest"),
                                                     CONST(name="half"), commutative=True)))  # (x·rest)·0.5
    return forms


def _constants(m: Match) -> str | None:
    for name, want in _EXPECTED.items():
        if m.get(name) is not None:
            got = m.const(name).numpy().reshape(-1)
            if got.size != 1 or not abs(float(got[0]) - want) <= 1e-3 * abs(want):
                return f"constant {name} is {got.tolist()[:4]}, not {want:.6g}"
    return None


def _make_rule(target: str, fused_op: str, renames: list[tuple[Node, str]]):
    def rule(m: Match) -> Replacement | Skip:
        """Check the GELU and its MatMul + BiasAdd, then one _FusedMatMul (Reshape after it for a Tensordot)."""
        if m.get("matmul") is None:
            return m.skip(_STANDALONE)
        if target in _NOT_ON:
            return m.skip(_NOT_ON[target])
        reason = _constants(m) or why_not_fusable(m, shared_inside=True, check_root=False)
        if reason:
            return m.skip(reason)
        root, matmul, bias = m.node, m["matmul"].node, m["bias"].node
        assert root is not None and matmul is not None and bias is not None
        if root.control_inputs:
            return m.skip(f"root {root.name!r} ({root.op}) has control inputs")
        fmt = bias.attr("data_format", b"NHWC")
        if (fmt if isinstance(fmt, bytes) else str(fmt).encode()) != b"NHWC":
            return m.skip(f"{bias.name!r} adds its bias along axis 1 (NCHW), not the last axis")
        if any(v.dtype is not DType.FLOAT32 for v in (matmul.output, bias.output, root.output)):
            return m.skip("not float32 throughout")
        reshape = m["reshape"].node if m.get("reshape") is not None else None
        if reshape is not None:
            weights = m["w"].value
            while weights is not None and _producer_op(weights) == "Identity":  # frozen Keras weights
                weights = weights.producer.inputs[0]  # type: ignore[union-attr]
            weights = constant_value(weights) if weights is not None else None
            columns = None
            if weights is not None and len(weights.shape) == 2:
                columns = weights.shape[0 if matmul.attr("transpose_b", False) else 1]
            dims = m.const("shape").numpy().reshape(-1).tolist()
            if columns is None or not dims or dims[-1] != columns:
                return m.skip(f"{reshape.name!r} may move the last axis (shape {dims}, MatMul columns {columns})")
        graph = root.graph
        assert graph is not None
        attrs = {"T": Attr.dtype(DType.FLOAT32), "transpose_a": Attr.bool(bool(matmul.attr("transpose_a", False))),
                 "transpose_b": Attr.bool(bool(matmul.attr("transpose_b", False))), "num_args": Attr.int(1),
                 "fused_ops": Attr.strings(["BiasAdd", fused_op])}
        fused = Node("_FusedMatMul", [matmul.input(0), matmul.input(1), bias.input(1)], dialect="tf",
                     name=graph.unique_node_name(f"{root.name}/fused_matmul"), attrs=attrs, device=matmul.device)
        fused.output.dtype = DType.FLOAT32
        made = [fused]
        if reshape is not None:
            back = Node("Reshape", [fused.output, reshape.input(1)], dialect="tf",
                        name=graph.unique_node_name(f"{root.name}/reshape"), attrs=dict(reshape.attrs),
                        device=reshape.device)
            back.output.dtype = DType.FLOAT32
            made.append(back)
        renames.append((made[-1], root.name))
        return Replacement(made, {root.output: made[-1].output})

    return rule


@transform("fuse_matmul_gelu", dialects={"tf"})
def fuse_matmul_gelu(model: Model, ctx: TransformContext, *, target: str = "onednn") -> TransformResult:
    """Fuse MatMul + BiasAdd + a decomposed GELU (exact or tanh) into oneDNN's _FusedMatMul."""
    if target not in TARGETS:
        raise TransformError(f"fuse_matmul_gelu: unknown target {target!r}; choose from {', '.join(TARGETS)}")
    renames: list[tuple[Node, str]] = []
    rules = RuleSet(name="fuse_matmul_gelu")
    for contraction, x in _CONTRACTIONS.items():
        for form, fused_op, pattern in _forms(x):
            rules.add(pattern, _make_rule(target, fused_op, renames), name=f"{contraction}_gelu_{form}")
    report = apply_rules(model, [rules])
    rename_roots(renames)
    return result_of(report, stats={**report.by_rule, "fused": report.applied})

