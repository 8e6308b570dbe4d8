"""fuse_rms_norm: an RMSNorm written out op by op (T5's LayerNorm, Llama's) becomes one operator.

Before (as PyTorch's exporters write ``x * rsqrt(mean(x²) + ε) * γ``; ``m`` = ReduceMean over
the trailing axes, ``keepdims=1``)::

    x ─► Pow(x, 2) | Mul(x, x) ─► ReduceMean ─► Add(·, ε) ─► Sqrt = r
    x / r   or   x · Reciprocal(r)   or   x · Div(1, r)   ─► Mul(·, γ) ─► y

After::

    target="standard",    opset ≥ 23:  RMSNormalization(x, γ; axis = -k, epsilon = ε)
    target="onnxruntime", opset ≥ 23:  the same standard op
    target="onnxruntime", opset < 23:  SimplifiedLayerNormalization(x, γ; axis = -1, epsilon = ε)

The maths: ``y = x / √(E[x²] + ε) · γ`` over the last ``k`` axes, which is RMSNormalization's
definition, and that of onnxruntime's ``SimplifiedLayerNormalization`` (registered by
onnxruntime in the default domain for every opset, as its own kernel; a model using it runs
on onnxruntime only).  Without ``γ`` a ones scale is made.  ``fuse_skip_layer_norm`` (on
request) folds a residual sum before it into ``com.microsoft::SkipSimplifiedLayerNormalization``.

Refused, with the reason in the report's notes: opset below 23 with ``target="standard"``;
for onnxruntime's op, a reduction over more than the last axis (its fusion in onnxruntime's own
optimizer takes one axis too) or a tensor that is not float32/float16/float64; reductions not
over the trailing axes or with ``keepdims=0``; a ``Pow`` exponent other than 2, a numerator
other than 1; ``ε`` not a non-negative one-element constant; ``γ`` not constant, varying along
non-normalized axes, or of another dtype; an intermediate read outside the pattern or being a
graph output.

Cost: two sweeps (with γ, bare), each O(N); O(normalized size) per fusion when a scale is made.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Value, all_graphs
from ...patterns import ANY, CONST, Match, Replacement, ReplaceReport, RuleSet, Skip, why_not_closed
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import ONNXRUNTIME, STANDARD, check_target, drop_unused_constants, new_node, scalar, std_op
from .fuse_layer_norm_onnx import ORT_CONTRIB_DTYPES, _normalized_shape, _param, _reduce_axes, _trailing

__all__ = ["fuse_rms_norm", "MIN_OPSET"]

#: RMSNormalization entered the default domain at opset 23.
MIN_OPSET = 23

_X = ANY(name="x")
_SQUARE = std_op("Pow", _X, CONST(name="two")) | std_op("Mul", _X, _X)
_RMS = std_op("Sqrt", std_op("Add", std_op("ReduceMean", _SQUARE, ..., name="mean"), CONST(name="eps"),
                             commutative=True))
_INVERSE = std_op("Reciprocal", _RMS) | std_op("Div", CONST(name="one"), _RMS)
_NORM = std_op("Div", _X, _RMS, name="norm") | std_op("Mul", _X, _INVERSE, commutative=True, name="norm")
_SCALED = std_op("Mul", _NORM, CONST(name="gamma"), commutative=True, name="scaled")


def _make_rule(model: Model, target: str, dropped: list[Value]):
    version = opset_version(model)

    def rule(m: Match) -> Replacement | Skip:
        """Check the chain and emit RMSNormalization / SimplifiedLayerNormalization."""
        if version < MIN_OPSET and target != ONNXRUNTIME:
            return m.skip(f"opset {version} < {MIN_OPSET}: RMSNormalization is not available "
                          "(target=onnxruntime emits onnxruntime's SimplifiedLayerNormalization)")
        reason = why_not_closed(m)
        if reason:
            return m.skip(reason)
        x: Value = m["x"].value  # type: ignore[assignment]
        rank = len(x.shape) if x.shape is not None else None
        mean = m["mean"].node
        assert mean is not None
        axes, why = _reduce_axes(mean, rank)
        if axes is None:
            return m.skip(why)
        k = _trailing(axes, rank)
        if k is None:
            return m.skip(f"reduction over axes {axes} is not over the trailing axes")
        if m.get("two") is not None and scalar(m["two"].value) != 2.0:
            return m.skip(f"Pow exponent is {scalar(m['two'].value)}, not 2")
        if m.get("one") is not None and scalar(m["one"].value) != 1.0:
            return m.skip(f"the numerator of 1/√· is {scalar(m['one'].value)}, not 1")
        eps = scalar(m["eps"].value)
        if eps is None or not eps >= 0:
            return m.skip("epsilon is not a non-negative one-element constant")
        dtype = np.asarray(m.array("eps")).dtype
        if dtype.kind != "f":
            return m.skip(f"the normalized tensor is {dtype}, not a float type")
        contrib = version < MIN_OPSET
        if contrib and k != 1:
            return m.skip(f"SimplifiedLayerNormalization normalizes the last axis only, not the last {k}")
        if contrib and dtype not in ORT_CONTRIB_DTYPES:
            return m.skip(f"the normalized tensor is {dtype}; onnxruntime's SimplifiedLayerNormalization runs "
                          "float32, float16 and float64")
        root = m.node
        assert root is not None
        norm_shape = _normalized_shape(x, k, m)
        if m.get("gamma") is not None:
            array, why = _param(m, "gamma", norm_shape, k, dtype)
            if array is None:
                return m.skip(why)
            same = array.shape == np.shape(m.array("gamma"))
            scale: Value = m["gamma"].value if same else m.constant(array, name=f"{root.name}_scale")  # type: ignore[assignment]
        elif norm_shape is not None:
            scale = m.constant(np.ones(norm_shape, dtype), name=f"{root.name}_scale")
        else:
            return m.skip("no γ and the normalized shape is unknown, so no scale can be made")
        dropped.extend(v for v in mean.inputs[1:] if v is not None)
        op = "SimplifiedLayerNormalization" if contrib else "RMSNormalization"
        attrs = {"axis": Attr.int(-k), "epsilon": Attr.float(eps)}
        return Replacement([new_node(op, [x, scale], root, attrs=attrs)])

    return rule


@transform("fuse_rms_norm", dialects={"onnx"})
def fuse_rms_norm(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse decomposed RMSNorm chains into RMSNormalization (opset >= 23) or onnxruntime's SimplifiedLayerNormalization."""
    check_target("fuse_rms_norm", target)
    dropped: list[Value] = []
    rule = _make_rule(model, target, dropped)
    sweeps = []
    for name, pattern in (("rms_norm", _SCALED), ("rms_norm_bare", _NORM)):
        rules = RuleSet(name="fuse_rms_norm")
        rules.add(pattern, rule, name=name)
        sweeps.append(rules)
    report = ReplaceReport()
    for graph in all_graphs(model):  # graph by graph: the axes a fusion stopped reading go with their graph
        report.merge(apply_rules(model, sweeps, graphs=[graph]))
        drop_unused_constants(graph, dropped)
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
