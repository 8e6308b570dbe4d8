"""fuse_layer_norm: a LayerNorm written out op by op becomes one ``LayerNormalization`` (opset ≥ 17).

Before (as PyTorch's and TF's exporters write it; ``m`` = ReduceMean over the trailing axes,
``keepdims=1``, axes as an attribute below opset 18, as a constant input from 18)::

    x ─► ReduceMean ─► Sub(x, ·) = d ─► Pow(d, 2) | Mul(d, d) ─► ReduceMean ─► Add(·, ε) ─► Sqrt = s
    d / s   or   d · Reciprocal(s)   ─► Mul(·, γ) ─► Add(·, β) ─► y

After::

    x ─► LayerNormalization(x, γ, β; axis = -k, epsilon = ε) ─► y

The maths: ``y = (x − E[x]) / √(E[(x − E[x])²] + ε) · γ + β`` over the last ``k`` axes, which
is exactly LayerNormalization's definition (with its default ``stash_type=1``, float32
accumulation).  ``γ`` and ``β`` may be missing (``γ = 1``: a ones scale is made; no ``β``: the
optional bias is omitted), may be scalars or lower-rank constants (broadcast to the normalized
shape when it is static), and either operand order of the commutative ops is accepted.

Below opset 17, ``target="onnxruntime"`` still fuses: onnxruntime registers
``LayerNormalization`` in the default domain for opsets 1–16 as one of its own (contrib)
kernels, with the same inputs, attributes and maths as the standard op of opset 17.  Such a
model runs on onnxruntime only (``onnx.checker`` knows no ``LayerNormalization`` below 17).

Refused, with the reason in the report's notes: opset below 17 with ``target="standard"``
(``LayerNormalization`` does not exist there); below 17 with ``target="onnxruntime"``, a
tensor that is not float32/float16/float64 (the types onnxruntime's kernel has); the two reductions over different axes, over axes that are not the trailing
ones, or with ``keepdims=0``; ``Pow`` exponent other than 2; ``ε`` not a one-element
constant; ``γ``/``β`` not constant, varying along non-normalized axes, or of another dtype;
the normalized shape unknown when ``γ`` must be broadcast; an intermediate read outside the
pattern (``x − E[x]`` may be read by the variance and the division, nothing else) or being a
graph output.

Cost: three sweeps (full form, γ-or-β form, bare form), each O(N); O(normalized size) per
fusion when a scale must be materialized.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, Value, all_graphs, constant_value
from ...patterns import ANY, CONST, Match, Replacement, ReplaceReport, RuleSet, Skip, why_not_closed
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import ONNXRUNTIME, STANDARD, check_target, drop_unused_constants, new_node, scalar, std_op

__all__ = ["fuse_layer_norm", "MIN_OPSET"]

#: LayerNormalization entered the default domain at opset 17.
MIN_OPSET = 17
_FLOAT_KINDS = "f"
#: The types onnxruntime's own LayerNormalization kernel (default domain, opsets 1-16) runs.
ORT_CONTRIB_DTYPES = (np.float32, np.float16, np.float64)

_D = std_op("Sub", ANY(name="x"), std_op("ReduceMean", ANY(name="x"), ..., name="mean"), name="d")
_SQUARE = std_op("Pow", _D, CONST(name="two"), name="square") | std_op("Mul", _D, _D, name="square")
_STD = std_op("Sqrt", std_op("Add", std_op("ReduceMean", _SQUARE, ..., name="var"), CONST(name="eps"),
                             commutative=True, name="add_eps"), name="sqrt")
_NORM = (std_op("Div", _D, _STD, name="norm")
         | std_op("Mul", _D, std_op("Reciprocal", _STD, name="recip"), commutative=True, name="norm"))
_SCALED = std_op("Mul", _NORM, CONST(name="gamma"), commutative=True, name="scaled")

_FULL = std_op("Add", _SCALED, CONST(name="beta"), commutative=True, name="shifted")
_GAMMA_ONLY = _SCALED
_BETA_ONLY = std_op("Add", _NORM, CONST(name="beta"), commutative=True, name="shifted")


def _reduce_axes(node: Node, rank: int | None) -> tuple[list[int] | None, str]:
    """The axes a ReduceMean reduces (normalized when the rank is known), or None and why."""
    if int(node.attr("keepdims", 1)) != 1:
        return None, f"{node.name!r} has keepdims=0"
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        tensor = constant_value(node.inputs[1])
        if tensor is None:
            return None, f"{node.name!r} reads its axes from a non-constant input"
        axes = [int(a) for a in tensor.numpy().reshape(-1)]
    else:
        axes = [int(a) for a in (node.attr("axes") or ())]
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            return None, f"{node.name!r} reduces nothing (noop_with_empty_axes=1)"
        if rank is None:
            return None, f"{node.name!r} reduces every axis of a tensor of unknown rank"
        axes = list(range(rank))
    if rank is not None:
        axes = [a % rank for a in axes]
    return sorted(axes), ""


def _trailing(axes: list[int], rank: int | None) -> int | None:
    """``k`` when ``axes`` are exactly the last ``k`` axes, else None."""
    k = len(axes)
    if rank is not None:
        return k if axes == list(range(rank - k, rank)) else None
    return k if axes == list(range(-k, 0)) else None


def _param(m: Match, name: str, norm_shape: tuple[int, ...] | None, k: int,
           dtype: np.dtype) -> tuple[np.ndarray | None, str]:
    """γ or β as an array of the normalized shape, or None and why not."""
    array = np.asarray(m.array(name))
    if array.dtype != dtype:
        return None, f"{name} is {array.dtype}, the normalized input is {dtype}"
    dims = list(array.shape)
    while len(dims) > k and dims[0] == 1:
        dims.pop(0)
    if len(dims) > k:
        return None, f"{name} of shape {list(array.shape)} varies along axes that are not normalized"
    array = array.reshape(dims)
    if norm_shape is None:
        if len(dims) == k and all(d > 1 for d in dims):
            return array, ""
        return None, f"the normalized shape is unknown, so {name} of shape {list(array.shape)} can't be broadcast"
    try:
        return np.ascontiguousarray(np.broadcast_to(array, norm_shape)), ""
    except ValueError:
        return None, f"{name} of shape {list(array.shape)} doesn't broadcast to the normalized shape {list(norm_shape)}"


def _normalized_shape(x: Value, k: int, m: Match) -> tuple[int, ...] | None:
    """The static trailing ``k`` dims of ``x``, or (shape unknown) those of a full-rank γ/β."""
    if x.shape is not None and len(x.shape) >= k and all(isinstance(d, int) for d in x.shape[len(x.shape) - k:]):
        return tuple(int(d) for d in x.shape[len(x.shape) - k:])  # type: ignore[arg-type]
    for name in ("gamma", "beta"):
        if m.get(name) is not None:
            shape = [d for d in np.shape(m.array(name))]
            while len(shape) > k and shape[0] == 1:
                shape.pop(0)
            if len(shape) == k and all(d > 1 for d in shape):
                return tuple(shape)
    return None


def _node(m: Match, name: str) -> Node:
    node = m[name].node
    assert node is not None, name  # a P capture always has its node
    return node


def _make_rule(model: Model, dropped: list[Value], target: str):
    version = opset_version(model)

    def rule(m: Match) -> Replacement | Skip:
        """Check the whole chain and build the LayerNormalization."""
        if version < MIN_OPSET and target != ONNXRUNTIME:
            return m.skip(f"opset {version} < {MIN_OPSET}: LayerNormalization is not available "
                          "(target=onnxruntime emits onnxruntime's own LayerNormalization)")
        reason = why_not_closed(m)
        if reason:
            return m.skip(reason)
        x = m["x"].value
        assert x is not None
        rank = len(x.shape) if x.shape is not None else None
        mean_axes, why = _reduce_axes(_node(m, "mean"), rank)
        if mean_axes is None:
            return m.skip(why)
        var_axes, why = _reduce_axes(_node(m, "var"), rank)
        if var_axes is None:
            return m.skip(why)
        if mean_axes != var_axes:
            return m.skip(f"mean over axes {mean_axes} but variance over {var_axes}")
        k = _trailing(mean_axes, rank)
        if k is None:
            known = "" if rank is not None else " (rank unknown: only negative axes can be placed)"
            return m.skip(f"reduction over axes {mean_axes} is not over the trailing axes{known}")
        if m.get("two") is not None and scalar(m["two"].value) != 2.0:
            return m.skip(f"Pow exponent is {scalar(m['two'].value)}, not 2")
        eps = scalar(m["eps"].value)
        if eps is None or not eps >= 0:
            return m.skip("epsilon is not a non-negative one-element constant")
        dtype = np.asarray(m.array("eps")).dtype
        if dtype.kind not in _FLOAT_KINDS:
            return m.skip(f"the normalized tensor is {dtype}, not a float type")
        if version < MIN_OPSET and dtype not in ORT_CONTRIB_DTYPES:
            return m.skip(f"the normalized tensor is {dtype}; onnxruntime's LayerNormalization below opset "
                          f"{MIN_OPSET} runs float32, float16 and float64")
        norm_shape = _normalized_shape(x, k, m)
        params: dict[str, np.ndarray] = {}
        for name in ("gamma", "beta"):
            if m.get(name) is None:
                continue
            array, why = _param(m, name, norm_shape, k, dtype)
            if array is None:
                return m.skip(why)
            params[name] = array
        root = m.node
        assert root is not None
        if "gamma" in params and params["gamma"].shape == np.shape(m.array("gamma")):
            scale: Value = m["gamma"].value  # type: ignore[assignment]
        elif "gamma" in params:
            scale = m.constant(params["gamma"], name=f"{root.name}_scale")
        elif norm_shape is not None:
            scale = m.constant(np.ones(norm_shape, dtype), name=f"{root.name}_scale")
        else:
            return m.skip("no γ and the normalized shape is unknown, so no scale can be made")
        inputs: list[Value | None] = [x, scale]
        if "beta" in params:
            same = params["beta"].shape == np.shape(m.array("beta"))
            inputs.append(m["beta"].value if same else m.constant(params["beta"], name=f"{root.name}_bias"))
        dropped.extend(v for n in (_node(m, "mean"), _node(m, "var")) for v in n.inputs[1:] if v is not None)
        node = new_node("LayerNormalization", inputs, root,
                        attrs={"axis": Attr.int(-k), "epsilon": Attr.float(eps)})
        return Replacement([node])

    return rule


@transform("fuse_layer_norm", dialects={"onnx"})
def fuse_layer_norm(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse decomposed LayerNorm chains into LayerNormalization (opset >= 17, or any opset for onnxruntime)."""
    check_target("fuse_layer_norm", target)
    dropped: list[Value] = []
    rule = _make_rule(model, dropped, target)
    sweeps = []
    for forms in ((("layer_norm", _FULL),), (("layer_norm_gamma", _GAMMA_ONLY), ("layer_norm_beta", _BETA_ONLY)),
                  (("layer_norm_bare", _NORM),)):
        rules = RuleSet(name="fuse_layer_norm")
        for name, pattern in forms:
            rules.add(pattern, rule, name=name)
        sweeps.append(rules)
    report = ReplaceReport()
    for graph in all_graphs(model):  # graph by graph: the axes a fusion stopped reading go with their graph
        report.merge(apply_rules(model, sweeps, graphs=[graph]))
        drop_unused_constants(graph, dropped)
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
