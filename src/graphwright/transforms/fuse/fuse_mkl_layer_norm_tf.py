"""fuse_mkl_layer_norm: a LayerNorm over the last axis, written out op by op in a GraphDef, becomes
one ``_MklLayerNorm`` (the oneDNN kernel TensorFlow's x86 builds register).

Before, as Keras 3's ``LayerNormalization`` freezes (``m`` = ``Mean(x, -1, keep_dims)``, read
through ``StopGradient`` or directly)::

    v = Mean(SquaredDifference(x, m), -1);  s = Rsqrt(v + ε) · γ
    y = x · s + (Neg(m) · s + β)          (Keras 3)
    y = x · s + (β − m · s)               (tf.nn.batch_normalization's form)
    y = x · s + Neg(m) · s                (no β)         and s = Rsqrt(v + ε) with no γ

After::

    y = _MklLayerNorm(x, γ[C], β[C]; epsilon=ε)                    x of static rank 2 or 3
    y = Reshape(_MklLayerNorm(Reshape(x, [-1, C]), γ, β), Shape(x))  otherwise

The maths: ``(x − E[x]) · rsqrt(Var[x] + ε) · γ + β`` over the last axis, which is what the
kernel computes (it takes 2-D or 3-D inputs and normalizes the last axis: checked in TF 2.21,
outputs within 4e-7 of the formula; other ranks are reshaped to rows first).  ``γ`` and ``β``
are constants, read through ``Identity``/``Reshape`` (Keras reshapes them to the input's
rank), varying along the last axis only; a missing one becomes ones/zeros.  The width ``C`` is
theirs, so the normalized axis is taken to have ``C > 1`` elements (a LayerNorm over a
one-element axis broadcast by a wider ``γ`` is not recognised).

``target``: ``onednn`` (default; TF's x86 builds, whose ``_MklLayerNorm`` kernel runs with
``TF_ENABLE_ONEDNN_OPTS`` 1 and 0 alike), ``eigen`` (a TF built without oneDNN: no such kernel)
and ``gpu`` (``_MklLayerNorm`` has no GPU kernel): under the last two every match is left
alone with that reason.  Also refused, with the reason: an intermediate read outside the
pattern or a graph output, reductions not over the last axis or without ``keep_dims``, a
non-constant ``ε``/``γ``/``β``, ``γ``/``β`` varying along another axis or of different widths,
no ``γ`` and no ``β`` (the width is unknown), a dtype other than float32.

Cost: one sweep, O(N); O(C) per fusion.
"""

from __future__ import annotations

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Model, Node, Value, constant_value
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip, make_constant, why_not_closed
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["TARGETS", "fuse_mkl_layer_norm", "rename_roots"]

#: What may be emitted: TF's x86 build (oneDNN), a build without oneDNN, a GPU.
TARGETS = ("onednn", "eigen", "gpu")
_NOT_ON = {
    "eigen": "target=eigen: _MklLayerNorm is a oneDNN kernel, which TF builds without oneDNN do not register",
    "gpu": "target=gpu: _MklLayerNorm has only a CPU (oneDNN) kernel",
}

_X = ANY(name="x")
_MEAN = P("Mean", _X, CONST(name="mean_axes"), name="mean")
_VAR = P("Mean", P("SquaredDifference", _X, _MEAN | P("StopGradient", _MEAN, name="stop"), name="sqdiff"),
         CONST(name="var_axes"), name="var")
_INV = P("Rsqrt", P("Add|AddV2", _VAR, CONST(name="eps"), commutative=True, name="add_eps"), name="rsqrt")
_SCALED = P("Mul", _INV, ANY(name="gamma"), commutative=True, name="scale")


def _forms(scale: Pattern) -> list[tuple[str, Pattern]]:
    """``x · s + offset`` for the three offsets (see the module docstring)."""
    x_scaled = P("Mul", _X, scale, commutative=True, name="x_scaled")
    neg_mean_scaled = P("Mul", P("Neg", _MEAN, name="neg"), scale, commutative=True, name="mean_scaled")
    offsets = {
        "keras": P("Add|AddV2", neg_mean_scaled, ANY(name="beta"), commutative=True, name="offset"),
        "sub": P("Sub", ANY(name="beta"), P("Mul", _MEAN, scale, commutative=True, name="mean_scaled"),
                 name="offset"),
        "no_beta": neg_mean_scaled,
    }
    return [(name, P("Add|AddV2", x_scaled, offset, commutative=True)) for name, offset in offsets.items()]


def _per_channel(value: Value) -> tuple[np.ndarray | None, str]:
    """A γ/β as a ``[C]`` array: a Const read through Identity/Reshape, varying along the last axis only."""
    shape: tuple[int, ...] | None = None
    while value.producer is not None and value.producer.op in ("Identity", "Reshape"):
        node = value.producer
        if node.op == "Reshape" and shape is None:
            target = constant_value(node.inputs[1]) if node.inputs[1] is not None else None
            if target is None:
                return None, f"{node.name!r} reshapes to a non-constant shape"
            shape = tuple(int(d) for d in target.numpy().reshape(-1))
        value = node.inputs[0]  # type: ignore[assignment]
    tensor = constant_value(value)
    if tensor is None:
        return None, f"{value.name!r} is not a constant"
    array = tensor.numpy()
    dims = shape if shape is not None and -1 not in shape else array.shape
    if array.size <= 1 or not dims or dims[-1] != array.size:
        return None, f"{value.name!r} of shape {list(dims)} does not vary along the last axis only"
    return array.reshape(-1), ""


def _last_axis(m: Match, name: str) -> str | None:
    node = m[name].node
    assert node is not None
    axes = m.const(f"{name}_axes").numpy().reshape(-1)
    if not node.attr("keep_dims", False):
        return f"{node.name!r} does not keep the reduced axis (keep_dims=false)"
    if axes.tolist() != [-1]:
        x = m["x"].value
        rank = len(x.shape) if x is not None and x.shape is not None else None
        if rank is None or axes.tolist() != [rank - 1]:
            return f"{node.name!r} reduces axes {axes.tolist()}, not the last axis only"
    return None


def _make_rule(target: str, renames: list[tuple[Node, str]]):
    def rule(m: Match) -> Replacement | Skip:
        """The whole chain checked, then one _MklLayerNorm (reshaped around when x is not 2-D/3-D)."""
        if target in _NOT_ON:
            return m.skip(_NOT_ON[target])
        reason = why_not_closed(m) or _last_axis(m, "mean") or _last_axis(m, "var")
        if reason:
            return m.skip(reason)
        x = m["x"].value
        root = m.node
        assert x is not None and root is not None
        if x.dtype is not DType.FLOAT32:
            return m.skip(f"the normalized tensor is {x.dtype}, not float32")
        eps = m.const("eps").numpy()
        if eps.size != 1 or not float(eps.reshape(-1)[0]) >= 0:
            return m.skip("epsilon is not a non-negative one-element constant")
        params: dict[str, np.ndarray] = {}
        for name in ("gamma", "beta"):
            if m.get(name) is not None:
                array, why = _per_channel(m[name].value)  # type: ignore[arg-type]
                if array is None:
                    return m.skip(f"{name}: {why}")
                params[name] = array.astype(np.float32)
        if not params:
            return m.skip("no γ and no β: the normalized width is not known")
        widths = {a.size for a in params.values()}
        if len(widths) != 1:
            return m.skip(f"γ and β have different widths {sorted(widths)}")
        (width,) = widths
        graph = root.graph
        assert graph is not None
        made: list[Node] = []

        def const(array: np.ndarray, name: str, dtype: DType) -> Value:
            node, value = make_constant(root, array, f"{root.name}/{name}", dtype)
            assert node is not None
            made.append(node)
            return value

        def op(kind: str, inputs: list[Value], name: str, dtype: DType, **attrs: Attr) -> Node:
            node = Node(kind, inputs, dialect="tf", name=graph.unique_node_name(f"{root.name}/{name}"),
                        attrs=attrs, device=root.device)
            node.output.dtype = dtype
            made.append(node)
            return node

        scale = const(params.get("gamma", np.ones(width, np.float32)), "scale", DType.FLOAT32)
        offset = const(params.get("beta", np.zeros(width, np.float32)), "offset", DType.FLOAT32)
        t32, i32 = Attr.dtype(DType.FLOAT32), Attr.dtype(DType.INT32)
        rank = len(x.shape) if x.shape is not None else None
        rows = x
        if rank not in (2, 3):
            rows = op("Reshape", [x, const(np.array([-1, width], np.int32), "rows_shape", DType.INT32)], "rows",
                      DType.FLOAT32, T=t32, Tshape=i32).output
        norm = op("_MklLayerNorm", [rows, scale, offset], "layer_norm", DType.FLOAT32, T=t32,
                  epsilon=Attr.float(float(eps.reshape(-1)[0])))
        if rank not in (2, 3):
            shape = op("Shape", [x], "shape", DType.INT32, T=t32, out_type=i32)
            norm = op("Reshape", [norm.output, shape.output], "restore", DType.FLOAT32, T=t32, Tshape=i32)
        norm.output.shape = x.shape
        renames.append((norm, root.name))  # the fused node answers to the root's name (fetches)
        return Replacement(made, {root.output: norm.output})

    return rule


def rename_roots(renames: list[tuple[Node, str]]) -> None:
    """Give each applied fused node the name of the root it replaced (refused ones never entered a graph)."""
    for node, name in renames:
        if node.graph is not None:
            node.name = name
            for i, value in enumerate(node.outputs):
                value.name = f"{name}:{i}" if i else name


@transform("fuse_mkl_layer_norm", dialects={"tf"})
def fuse_mkl_layer_norm(model: Model, ctx: TransformContext, *, target: str = "onednn") -> TransformResult:
    """Fuse LayerNorm chains (Mean/SquaredDifference/Rsqrt/Mul/Sub) into oneDNN's _MklLayerNorm."""
    if target not in TARGETS:
        raise TransformError(f"fuse_mkl_layer_norm: unknown target {target!r}; choose from {', '.join(TARGETS)}")
    rules = RuleSet(name="fuse_mkl_layer_norm")
    renames: list[tuple[Node, str]] = []
    rule = _make_rule(target, renames)
    for scale_name, scale in (("gamma", _SCALED), ("no_gamma", _INV)):
        for name, pattern in _forms(scale):
            rules.add(pattern, rule, name=f"layer_norm_{name}_{scale_name}")
    report = apply_rules(model, [rules])
    rename_roots(renames)
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
