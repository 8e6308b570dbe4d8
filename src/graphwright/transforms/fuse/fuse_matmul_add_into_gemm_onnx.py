"""fuse_matmul_add_into_gemm: MatMul + Add on 2-D operands becomes one Gemm.

Before::  y = MatMul(A[M, K], B[K, N]); z = Add(y, C)
After::   z = Gemm(A, B, C)          (alpha = beta = 1: z = A·B + C)

Exact in shape only where Gemm's contract holds: ``A`` and ``B`` of rank 2
(known), ``C`` of rank at most 2 that broadcasts to ``[M, N]`` without changing
it (each of its dims 1 or equal to the output's, so ``Add`` and Gemm's
unidirectional broadcast agree), float types Gemm accepts.  The MatMul output
must be read only by the Add and not be a graph output.  The Gemm takes the Add's place, name
and output name.

Two rules of the rewrite engine (the MatMul as the Add's first input, then as its second),
rooted at the Add: the MatMul and the Add are matched and replaced by one Gemm; every refused
match says why.  All graphs; O(N + E).
"""

from __future__ import annotations

from ...ir import DType, Model, Value
from ...patterns import ANY, Match, P, Replacement, RuleSet, Skip, same_dtype, same_graph, why_not_fusable
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_matmul_add_into_gemm"]

_GEMM_TYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16})


def _rank2(value: Value | None) -> bool:
    return value is not None and value.shape is not None and len(value.shape) == 2


def _c_fits(c: Value, out: Value) -> bool:
    if c.shape is None or len(c.shape) > 2 or out.shape is None:
        return False
    for dim, full in zip(reversed(c.shape), reversed(out.shape)):
        if dim != 1 and (dim is None or dim != full):
            return False
    return True


def _fold(m: Match) -> Replacement | Skip:
    """``Add(MatMul(a, b), c)`` (either order) -> ``Gemm(a, b, c)``, which takes the Add's place and name."""
    add, matmul = m.node, m["matmul"].node
    assert add is not None and matmul is not None
    a, b, c, y = m["a"].value, m["b"].value, m["c"].value, matmul.output
    assert a is not None and b is not None and c is not None
    reason = None if same_graph(matmul, add) else f"the MatMul producing {y.name!r} is in an enclosing graph"
    reason = reason or why_not_fusable(m)
    if reason:
        return m.skip(reason)
    if not (_rank2(a) and _rank2(b) and _rank2(y)):
        return m.skip(f"{a.name!r} @ {b.name!r} is not known to be 2-D")
    if y.dtype not in _GEMM_TYPES or not same_dtype(c, y):
        return m.skip(f"{y.name!r} and {c.name!r} are not of one float type Gemm takes")
    if not _c_fits(c, y) or add.output.shape is None or tuple(add.output.shape) != tuple(y.shape):  # type: ignore[arg-type]
        return m.skip(f"{c.name!r} does not broadcast to the [M, N] product without changing it")
    gemm = m.clone(add, op="Gemm", inputs=[a, b, c], attrs=dict.fromkeys(add.attrs))
    return Replacement([gemm])


_MATMUL = P("MatMul", ANY(name="a"), ANY(name="b"), name="matmul", domain="")
#: Add(MatMul(a, b), c), then Add(c, MatMul(a, b)): two rules, so a refused first order lets the second try.
_RULES = RuleSet([], name="fuse_matmul_add_into_gemm")
for _pattern in (P("Add", _MATMUL, ANY(name="c"), domain=""), P("Add", ANY(name="c"), _MATMUL, domain="")):
    _RULES.add(_pattern, _fold, name="matmul_add_into_gemm")


@transform("fuse_matmul_add_into_gemm", dialects={"onnx"})
def fuse_matmul_add_into_gemm(model: Model, ctx: TransformContext) -> TransformResult:
    """Turn Add(MatMul(A, B), C) on 2-D operands into Gemm(A, B, C)."""
    report = apply_rules(model, [_RULES])
    return result_of(report, stats={"gemms_made": report.applied})
