"""fuse_reshape_gemm: a Gemm between a flattening and an unflattening Reshape becomes MatMul + Add.

Before (GPT-2's ``Conv1D`` and every ``addmm`` on a 3-D activation, as exporters write it)::

    x (B, S, K) ─► Reshape(·, [-1, K]) ─► Gemm(·, W, b) ─► Reshape(·, (B, S, N)) ─► y

After (``target="onnxruntime"``)::

    x ─► MatMul(x, W) ─► Add(·, b) ─► y          (W transposed once if the Gemm had transB=1)

The maths: the first Reshape flattens the leading axes in row-major order and the last one
restores them, so ``y[b, s] = x[b, s]·W + b`` — a batched MatMul with a bias, which the later
fusions fold further (``BiasGelu``/``FastGelu``, a skip's bias).  Three nodes become two, and
no shape computation is left for the unflattening.

The unflattening's target is usually computed from ``Shape(x)``, so it is checked on the running
model with the shape probe (``_shape_probe_onnx``): at two sizes of every dynamic dim, ``y``'s
shape must be ``x``'s leading dims followed by ``N``.  The flattening's target must be the
constant ``[-1, K]`` with ``K`` the last dim of ``x`` (rank 3).

Refused, with the reason in the report's notes: ``target="standard"`` (kept out of the standard
pipeline: it only pays once the contrib fusions absorb the Add); a Gemm with ``transA``,
``alpha`` or ``beta`` other than 0, 1, 1, or a ``W``/``b`` that is not a float32 constant (``b``
a vector of ``N`` or a ``(1, N)`` row); shapes the probe does not confirm; an intermediate read
outside the pattern.

Cost: one sweep, O(N), plus the probe's two onnxruntime runs when a candidate exists;
O(K·N) per fusion when ``W`` is transposed.
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Value, constant_value
from ...patterns import ANY, CONST, Match, P, Replacement, RuleSet, Skip, why_not_closed
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import ONNXRUNTIME, STANDARD, check_target, new_node, std_op
from ._shape_probe_onnx import ShapeProbe

__all__ = ["fuse_reshape_gemm"]

_FLAT = std_op("Reshape", ANY(name="x"), CONST(name="flat_shape"), name="flatten")
_GEMM = P("Gemm", _FLAT, CONST(name="w"), CONST(name="b"), name="gemm", domain="")
_PATTERN = std_op("Reshape", _GEMM, ANY(name="out_shape"), name="unflatten")


def _candidates(model: Model) -> list[Value]:
    out: list[Value] = []
    for node in model.graph:
        if node.op != "Gemm" or not node.inputs or node.inputs[0] is None:
            continue
        flat = node.inputs[0].producer
        readers = [r for r, _ in node.output.uses()]
        if flat is not None and flat.op == "Reshape" and readers and readers[0].op == "Reshape":
            out += [v for v in flat.inputs[:1] if v is not None] + [readers[0].output]
    return out


def _rule(probe: ShapeProbe):
    def rule(m: Match) -> Replacement | Skip:
        """Check attributes, constants and shapes; emit MatMul + Add."""
        reason = why_not_closed(m)
        if reason:
            return m.skip(reason)
        gemm = m["gemm"].node
        assert gemm is not None
        if int(gemm.attr("transA", 0)) or float(gemm.attr("alpha", 1.0)) != 1.0 or float(gemm.attr("beta", 1.0)) != 1.0:
            return m.skip(f"{gemm.name!r} has transA/alpha/beta other than 0/1/1")
        w, b = np.asarray(m.array("w")), np.asarray(m.array("b"))
        if w.dtype != np.float32 or w.ndim != 2 or b.dtype != np.float32:
            return m.skip("W is not a 2-D float32 constant or b not float32")
        if int(gemm.attr("transB", 0)):
            w = np.ascontiguousarray(w.T)
        k, n = w.shape
        if b.shape not in ((n,), (1, n)):
            return m.skip(f"b of shape {list(b.shape)} is not a vector of {n}")
        flat = constant_value(m["flat_shape"].value)  # type: ignore[arg-type]
        target = [int(d) for d in flat.numpy().reshape(-1)] if flat is not None else []
        if target != [-1, k]:
            return m.skip(f"the flattening's target {target} is not [-1, {k}]")
        x: Value = m["x"].value  # type: ignore[assignment]
        y = m.node.output  # type: ignore[union-attr]
        xs, ys = probe.shapes(x), probe.shapes(y)
        if xs is None or ys is None:
            return m.skip(f"the runtime shapes of {x.name!r} and {y.name!r} are unknown "
                          f"({probe.error or 'not probed'})")
        for a, c in zip(xs, ys, strict=True):
            if len(a) != 3 or a[2] != k or c != (a[0], a[1], n):
                return m.skip(f"{x.name!r} {a} and {y.name!r} {c} are not (B, S, {k}) and (B, S, {n})")
        root = m.node
        assert root is not None
        weight = m["w"].value if not int(gemm.attr("transB", 0)) else m.constant(w, name=f"{gemm.name}_weight")
        bias = m["b"].value if b.ndim == 1 else m.constant(b.reshape(n), name=f"{gemm.name}_bias")
        matmul = new_node("MatMul", [x, weight], gemm)  # type: ignore[list-item]
        leading = tuple(x.shape[:2]) if x.shape is not None and len(x.shape) == 3 else (None, None)
        matmul.output.name, matmul.output.shape = f"{gemm.output.name}_3d", (*leading, n)
        add = new_node("Add", [matmul.output, bias], root)  # type: ignore[list-item]
        return Replacement([matmul, add])

    return rule


@transform("fuse_reshape_gemm", dialects={"onnx"})
def fuse_reshape_gemm(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Reshape(flatten) + Gemm + Reshape(unflatten) -> MatMul + Add on the 3-D activation."""
    check_target("fuse_reshape_gemm", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_reshape_gemm: runs with target=onnxruntime, where the contrib fusions absorb the bias Add"])
    probe = ShapeProbe(model, lambda: _candidates(model))
    probe.measure_if(bool(_candidates(model)))
    rules = RuleSet(name="fuse_reshape_gemm")
    rules.add(_PATTERN, _rule(probe), name="reshape_gemm_reshape")
    report = apply_rules(model, [rules])
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
