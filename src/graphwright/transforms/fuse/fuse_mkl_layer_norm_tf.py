"""fuse_mkl_layer_norm: a LayerNorm over the last axis, written out op by op in a GraphDef, becomes
one ``_MklLayerNorm`` (the oneDNN kernel TensorFlow's x86 builds register).

Before, as Keras 3's ``LayerNormalization`` freezes (``m`` = ``Mean(x, -1, keep_dims)``, read
through ``StopGradient`` or directly)::

    v = Mean(SquaredDifference(x, m), -1);  s = Rsqrt(v + ε) · γ
    y = x · s + (Neg(m) · s + β)          (Keras 3)
    y = x · s + (β − m · s)               (tf.nn.batch_normalization's form)
    y = x · s + Neg(m) · s                (no β)         and s = Rsqrt(v + ε) with no γ

and tf-keras' fused path (its default ε = 1e-3): each row of the last axis made a channel of a
training-mode NCHW batch norm with unit scale and zero offset::

    y = Reshape(FusedBatchNormV3(Reshape(x, [1, R, C, 1]), 1, 0, [], []; ε), shape) · γ + β

After::

    y = _MklLayerNorm(x, γ[C], β[C]; epsilon=ε)                    x of static rank 2 or 3
    y = Reshape(_MklLayerNorm(Reshape(x, [-1, C]), γ, β), Shape(x))  otherwise
    y = Reshape(_MklLayerNorm(Reshape(x, [-1, C]), γ, β), shape)     the batch-norm form

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
from .fuse_lstm_while_tf import constant_expression, drop_unread_producers

__all__ = ["TARGETS", "fuse_mkl_layer_norm", "rename_roots", "static_rank"]

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


#: tf-keras' LayerNormalization when its epsilon allows the fused path (its default 1e-3): rows of the
#: input become the channels of a training-mode NCHW FusedBatchNorm with unit scale and zero offset.
_BATCH_NORM_FORM = P("Add|AddV2", P("Mul", P("Reshape", P(
    "FusedBatchNorm|FusedBatchNormV2|FusedBatchNormV3", P("Reshape", _X, ANY(name="rows_shape"), name="rows"),
    ANY(name="bn_scale"), ANY(name="bn_offset"), ANY(name="bn_mean"), ANY(name="bn_var"), name="bn", port=0),
    ANY(name="back_shape"), name="back"), ANY(name="gamma"), commutative=True, name="scaled"), ANY(name="beta"),
    commutative=True)


def _batch_norm_geometry(m: Match) -> tuple[int, float] | str:
    """``(C, ε)`` when the FusedBatchNorm normalizes each row of the last axis of width C, or why not."""
    bn = m["bn"].node
    assert bn is not None
    fmt = bn.attr("data_format", b"NHWC")
    if not bn.attr("is_training", True) or (fmt if isinstance(fmt, bytes) else str(fmt).encode()) != b"NCHW":
        return f"{bn.name!r} is not a training-mode NCHW batch norm (the layer-norm trick)"
    rows = constant_expression(m["rows_shape"].value)
    back = constant_expression(m["back_shape"].value)
    if rows is None or back is None:
        return "the reshapes around the batch norm do not have constant shapes"
    rows, back = rows.reshape(-1).tolist(), back.reshape(-1).tolist()
    if (len(rows) != 4 or rows[0] != 1 or rows[3] != 1 or not back or back[-1] != rows[2]
            or int(np.prod(back[:-1])) != rows[1]):
        return f"reshapes {rows} and {back} do not put each row of the last axis in a channel"
    scale, offset = constant_expression(m["bn_scale"].value), constant_expression(m["bn_offset"].value)
    if scale is None or offset is None or not (scale == 1).all() or (offset != 0).any():
        return "the batch norm's own scale and offset are not ones and zeros"
    return int(rows[2]), float(bn.attr("epsilon", 1e-4))


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


_SAME_RANK = frozenset({"BiasAdd", "Identity", "Relu", "Relu6", "Tanh", "Sigmoid", "Neg", "StopGradient"})
_BROADCAST = frozenset({"Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"})


def static_rank(value: Value | None, depth: int = 8) -> int | None:
    """The rank of ``value`` when the graph fixes it (a known shape, a Reshape to a constant shape,
    through rank-keeping and broadcasting ops), else None.  O(depth)."""
    if value is None or depth < 0:
        return None
    if value.shape is not None:
        return len(value.shape)
    node = value.producer
    if node is None:
        return None
    if node.op == "Reshape":
        shape = constant_expression(node.inputs[1]) if len(node.inputs) > 1 else None
        return int(shape.size) if shape is not None else None
    if node.op in _SAME_RANK:
        return static_rank(node.inputs[0], depth - 1)
    if node.op in _BROADCAST:
        ranks = [static_rank(v, depth - 1) for v in node.inputs[:2]]
        return max(ranks) if None not in ranks else None  # type: ignore[type-var]
    return None


def _last_axis(m: Match, name: str) -> str | None:
    node = m[name].node
    assert node is not None
    axes = m.const(f"{name}_axes").numpy().reshape(-1)
    if not node.attr("keep_dims", False):
        return f"{node.name!r} does not keep the reduced axis (keep_dims=false)"
    if axes.tolist() != [-1]:
        rank = static_rank(m["x"].value)
        if rank is None or axes.tolist() != [rank - 1]:
            return f"{node.name!r} reduces axes {axes.tolist()}, not the last axis only"
    return None


def _make_rule(target: str, renames: list[tuple[Node, str]], former: list[Value | None]):
    def rule(m: Match) -> Replacement | Skip:
        """The whole chain checked, then one _MklLayerNorm (reshaped around when x is not 2-D/3-D)."""
        if target in _NOT_ON:
            return m.skip(_NOT_ON[target])
        geometry: tuple[int, float] | str | None = None
        if m.get("bn") is not None:
            geometry = why_not_closed(m) or _batch_norm_geometry(m)
            if isinstance(geometry, str):
                return m.skip(geometry)
        else:
            reason = why_not_closed(m) or _last_axis(m, "mean") or _last_axis(m, "var")
            if reason:
                return m.skip(reason)
        x = m["x"].value
        root = m.node
        assert x is not None and root is not None
        if x.dtype is not DType.FLOAT32:
            return m.skip(f"the normalized tensor is {x.dtype}, not float32")
        eps = np.float32(geometry[1]) if geometry is not None else m.const("eps").numpy()
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
        if geometry is not None and geometry[0] != width:
            return m.skip(f"γ/β have {width} values, the normalized rows {geometry[0]}")
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
        rank = static_rank(x)
        rows = x
        if rank not in (2, 3) or geometry is not None:
            rows = op("Reshape", [x, const(np.array([-1, width], np.int32), "rows_shape", DType.INT32)], "rows",
                      DType.FLOAT32, T=t32, Tshape=i32).output
        norm = op("_MklLayerNorm", [rows, scale, offset], "layer_norm", DType.FLOAT32, T=t32,
                  epsilon=Attr.float(float(eps.reshape(-1)[0])))
        if geometry is not None:  # back to the shape the original reshaped to
            back = m["back_shape"].value
            assert back is not None
            norm = op("Reshape", [norm.output, back], "restore", DType.FLOAT32, T=t32,
                      Tshape=Attr.dtype(back.dtype or DType.INT32))
        elif rank not in (2, 3):
            shape = op("Shape", [x], "shape", DType.INT32, T=t32, out_type=i32)
            norm = op("Reshape", [norm.output, shape.output], "restore", DType.FLOAT32, T=t32, Tshape=i32)
        norm.output.shape = x.shape
        if geometry is not None:  # the batch norm's computed inputs, unread once it is gone
            former.extend(m[name].value for name in ("rows_shape", "bn_scale", "bn_offset", "bn_mean", "bn_var"))
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
    former: list[Value | None] = []
    rule = _make_rule(target, renames, former)
    for scale_name, scale in (("gamma", _SCALED), ("no_gamma", _INV)):
        for name, pattern in _forms(scale):
            rules.add(pattern, rule, name=f"layer_norm_{name}_{scale_name}")
    rules.add(_BATCH_NORM_FORM, rule, name="layer_norm_fused_batch_norm")
    report = apply_rules(model, [rules])
    rename_roots(renames)
    for value in dict.fromkeys(former):
        drop_unread_producers(value)
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
