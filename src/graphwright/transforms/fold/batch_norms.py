"""fold_batch_norms, fold_old_batch_norms: fold inference batch norm into the weights before it.

**fold_batch_norms** (arithmetic batch norm, as graphs frozen from Keras 3 carry it once
``fold_constants`` has turned its Rsqrt/Sub sub-graphs into constants)::

    before:  x ─► Conv2D|DepthwiseConv2dNative|MatMul(x, W) [─► BiasAdd|Add(·, b)] ─► Mul(·, s) [─► Add|AddV2(·, t)]
    after:   x ─► Conv2D|DepthwiseConv2dNative|MatMul(x, W') [─► BiasAdd(·, b')]

with ``s``, ``b``, ``t`` one value per output channel (shape ``[C]``, ``[1,1,1,C]``, a scalar,
or anything that broadcasts along the channel axis only), and::

    W' = W·s   along the output-channel axis (Conv2D: axis 3 of HWIO; MatMul: axis 1, or 0 with
               transpose_b; DepthwiseConv2dNative [H,W,Cin,M]: channel c = i·M + m)
    b' = b·s + t   (missing b or t count as 0; no BiasAdd when both are missing)

On ONNX graphs (per-channel constants on axis 1, the NCHW channel)::

    before:  Conv(x, W[, B]) | Gemm(a, B[, C]) ─► Mul(·, s) [─► Add(·, t)]
    after:   Conv(x, W·s, B·s + t)            | Gemm(a, B·s, C·s + t/β)

**fold_old_batch_norms** (the monolithic ops, inference mode only; TF dialect)::

    before:  x ─► [Conv2D|DepthwiseConv2dNative|MatMul(·, W) [─► BiasAdd(·, b)] ─►]
             FusedBatchNorm{,V2,V3}(·, γ, β, μ, σ²)  |  BatchNormWithGlobalNormalization(·, μ, σ², β, γ)
    after:   Conv2D(x, W') ─► BiasAdd(·, b')          (after a contraction), else
             Mul(x, s) ─► BiasAdd(·, t)               (NCHW: s shaped [C,1,1])

with ``s = γ/√(σ²+ε)`` (``1/√(σ²+ε)`` when BatchNormWithGlobalNormalization has
``scale_after_normalization=false``), ``t = β − μ·s``, then ``W' = W·s`` and ``b' = b·s + t`` as
above.  Unlike the original tool, V2/V3 are folded too.  Training-mode FusedBatchNorm, and any
FusedBatchNorm whose batch statistics (outputs 1..5) are read, are left alone and reported.

Both transforms, unlike the original tool:

- are not blocked by control edges on the weights (in Keras 3 frozen graphs a ``NoOp`` depends on
  every weight, which makes the original silently fold nothing): the weights may be read through
  an ``Identity``, and their control edges move to the folded weights;
- accept a ``BiasAdd`` (or per-channel ``Add``) between the contraction and the ``Mul``
  (ResNet50) and scales of shape ``[1,1,1,C]`` (InceptionV3);
- handle ``data_format=NCHW`` (channel axis 1) and ``MatMul`` with ``transpose_b``;
- never rewrite a weight another node also reads: such a match is refused and listed in the
  result's notes (``weights_shared``), the graph is left as it was there.

The maths is exact up to float rounding (the products are computed in float64 and rounded once
to the weight's dtype).  Cost: each sweep is O(N) (pattern matching indexed by root op) plus
O(size of the weights folded); sweeps repeat until nothing changes (chained scales), at most
:data:`MAX_SWEEPS` times.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Model, Node
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip
from .._weights import scaled
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = [
    "CONTRACTION_OPS",
    "MAX_SWEEPS",
    "channel_count",
    "fold_batch_norms",
    "fold_old_batch_norms",
    "node_of",
    "output_channel_axis",
    "per_channel",
    "value_name",
]

#: Ops whose constant weights can absorb a per-output-channel scale.
CONTRACTION_OPS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")
#: Upper bound on repeated sweeps (each one folds one more scale of a chain like Mul(Mul(conv))).
MAX_SWEEPS = 8
FLOAT_DTYPES = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)

#: The weights: a Const, possibly read through an Identity.  Claimed (not just read) so that the
#: replacement can move their control users (Keras 3's freezing NoOp) onto the folded weights.
_WEIGHT = P("Const", name="w") | P("Identity", P("Const", name="w"), name="w_read")
_CONTRACTION = P("|".join(CONTRACTION_OPS), ANY(name="x"), _WEIGHT, name="conv")
#: The contraction, optionally followed by a constant per-channel bias.
_BIASED = (
    P("BiasAdd", _CONTRACTION, CONST(name="b"), name="bias")
    | P("Add|AddV2", _CONTRACTION, CONST(name="b"), name="bias", commutative=True)
    | _CONTRACTION
)
_SCALED = P("Mul", _BIASED, CONST(name="s"), name="mul", commutative=True)
#: fold_batch_norms: the full chain (root Add) first, then a lone scale (root Mul).
_BN_FULL = P("Add|AddV2", _SCALED, CONST(name="t"), name="add", commutative=True)
_BN_SCALE = _SCALED

_FUSED_BN_OPS = "FusedBatchNorm|FusedBatchNormV2|FusedBatchNormV3"


def _old_bn(x: Pattern) -> list[Pattern]:
    """The two monolithic batch-norm ops reading ``x``, constants captured by role."""
    return [
        P(_FUSED_BN_OPS, x, CONST(name="gamma"), CONST(name="beta"), CONST(name="mean"),
          CONST(name="var"), name="bn"),
        P("BatchNormWithGlobalNormalization", x, CONST(name="mean"), CONST(name="var"),
          CONST(name="beta"), CONST(name="gamma"), name="bn"),
    ]


# -- channel geometry ------------------------------------------------------------


def _data_format(node: Node) -> str:
    raw = node.attr("data_format", b"NHWC")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def output_channel_axis(conv: Node) -> tuple[int, int]:
    """``(rank, axis)`` of the output channel in the contraction's output."""
    if conv.op == "MatMul":
        return 2, 1
    return 4, (1 if _data_format(conv).startswith("NC") else 3)


def channel_count(conv: Node, w: np.ndarray) -> int | None:
    """Number of output channels of a contraction with weights ``w`` (None: weights of the wrong rank)."""
    if w.ndim != (2 if conv.op == "MatMul" else 4):
        return None
    if conv.op == "MatMul":
        return int(w.shape[0] if conv.attr("transpose_b", False) else w.shape[1])
    if conv.op == "DepthwiseConv2dNative":
        return int(w.shape[2] * w.shape[3])
    return int(w.shape[3])


def per_channel(arr: np.ndarray, rank: int, axis: int, channels: int | None) -> np.ndarray | None:
    """``arr`` as a ``[channels]`` vector if, broadcast against a rank-``rank`` tensor, it varies
    only along ``axis``; else None (it would broadcast across other axes or grow the rank)."""
    if channels is None or arr.ndim > rank:
        return None
    shape = (1,) * (rank - arr.ndim) + tuple(arr.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(np.asarray(arr, np.float64).reshape(-1), (channels,))


def _scaled_weights(conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``W·s`` along the output-channel axis, rounded once to W's dtype (no float64 copy of W)."""
    if conv.op == "MatMul":
        return scaled(w, s[:, None] if conv.attr("transpose_b", False) else s[None, :])
    if conv.op == "DepthwiseConv2dNative":
        return scaled(w, s.reshape(w.shape[2], w.shape[3]))
    return scaled(w, s)


# -- the shared rewrite -------------------------------------------------------------


def node_of(m: Match, name: str | None = None) -> Node:
    """The node captured as ``name`` (the root when None); patterns here always bind one."""
    node = m.node if name is None else m[name].node
    if node is None:
        raise TransformError(f"internal: capture {name or 'root'!r} has no node")
    return node


def value_name(m: Match, name: str) -> str:
    value = m[name].value
    return value.name if value is not None else name


def _why_not_foldable(m: Match) -> str | None:
    """The Remapper-style safety checks, with the weights' own rule (control users allowed)."""
    root, conv = m.node, node_of(m, "conv")
    w_node = node_of(m, "w")
    read = m.get("w_read")
    read_node = read.node if read is not None else None
    for node in m.nodes:
        if node is root or node is w_node or node is read_node:
            continue
        readers = sum(v.num_uses for v in node.outputs)
        if readers != 1:
            return f"intermediate {node.name!r} ({node.op}) has {readers} readers, not 1"
        if any(v.is_graph_output for v in node.outputs):
            return f"intermediate {node.name!r} ({node.op}) is a graph output"
        if node.control_inputs or node.control_users:
            return f"intermediate {node.name!r} ({node.op}) has control edges"
    for weight, reader in ((w_node, read_node or conv), (read_node, conv)):
        if weight is None:
            continue
        others = [u for u in weight.outputs[0].users() if u is not reader]
        if others or any(v.is_graph_output for v in weight.outputs):
            names = ", ".join(repr(n.name) for n in others[:3]) or "a graph output"
            return (f"weights {weight.name!r} of {conv.name!r} are also read by {names}; "
                    "not folding into shared weights")
    return None


def _fold_into_contraction(m: Match, s: np.ndarray | None, t: np.ndarray | None) -> Replacement | Skip:
    """Replace the match by ``contraction(x, W·s) [+ BiasAdd(b·s + t)]``; ``s``/``t`` are [C] or None.

    Returns a Replacement, or ``m.skip(reason)``.  Control inputs of the removed nodes move to
    the new contraction (the weights' to the new weights); control users of the old weights
    (and of an Identity reading them) move to the new weights.
    """
    conv = node_of(m, "conv")
    w_tensor = m.const("w")
    if w_tensor.dtype not in FLOAT_DTYPES:
        return m.skip(f"weights of {conv.name!r} are {w_tensor.dtype.value}, not float")
    reason = _why_not_foldable(m)
    if reason:
        return m.skip(reason)
    w = w_tensor.numpy()
    channels = channel_count(conv, w)
    if channels is None:
        return m.skip(f"weights of {conv.name!r} have rank {w.ndim}, not what {conv.op} takes")
    rank, axis = output_channel_axis(conv)
    bias = m.get("bias")
    b = None
    if bias is not None:
        if bias.node is not None and bias.node.op == "BiasAdd" and _data_format(bias.node) != _data_format(conv):
            return m.skip(f"BiasAdd {bias.node.name!r} and {conv.name!r} disagree on data_format")
        b = per_channel(m.array("b"), rank, axis, channels)
        if b is None:
            return m.skip(f"bias {value_name(m, 'b')!r} is not one value per output channel")
    scale = np.ones(channels) if s is None else s
    root = m.node
    assert root is not None
    weight_nodes = [node_of(m, "w")] + ([node_of(m, "w_read")] if m.get("w_read") is not None else [])
    w_value = m.constant(_scaled_weights(conv, w, scale), name=f"{conv.name}/folded_weights",
                         dtype=w_tensor.dtype)
    assert w_value.producer is not None
    for ctrl in dict.fromkeys(c for n in weight_nodes for c in n.control_inputs):
        w_value.producer.add_control_input(ctrl)
    controls = dict.fromkeys(c for n in m.nodes if n not in weight_nodes for c in n.control_inputs)
    has_bias = b is not None or t is not None
    new_conv = m.clone(conv, inputs=[conv.inputs[0], w_value], control_inputs=controls,
                       name=conv.name if has_bias else root.name)
    nodes: list[Node] = [new_conv]
    if has_bias:
        offset = (np.zeros(channels) if b is None else b * scale) + (0.0 if t is None else t)
        b_value = m.constant(offset.astype(w.dtype), name=f"{conv.name}/folded_bias", dtype=w_tensor.dtype)
        attrs = {"T": Attr.dtype(w_tensor.dtype)}
        if conv.op != "MatMul":
            attrs["data_format"] = Attr.string(_data_format(conv))
        add = Node("BiasAdd", [new_conv.output, b_value], dialect="tf", name=root.name, attrs=attrs,
                   device=conv.device)
        add.output.dtype, add.output.shape = root.output.dtype, root.output.shape
        nodes.append(add)
    mapping = {root.outputs[0]: nodes[-1].output}
    mapping.update({n.outputs[0]: w_value for n in weight_nodes})
    return Replacement(nodes, mapping)


def _scale_and_offset(m: Match) -> tuple[np.ndarray, np.ndarray | None] | str:
    """``(s, t)`` of the contraction chain's ``Mul``/``Add`` constants as [C] vectors, or why not."""
    conv = node_of(m, "conv")
    channels = channel_count(conv, m.array("w"))
    rank, axis = output_channel_axis(conv)
    s = per_channel(m.array("s"), rank, axis, channels)
    if s is None:
        return f"scale {value_name(m, 's')!r} of shape {list(m.const('s').shape)} is not one value per output channel"
    t = None
    if m.get("t") is not None:
        t = per_channel(m.array("t"), rank, axis, channels)
        if t is None:
            return f"offset {value_name(m, 't')!r} is not one value per output channel"
    return s, t


def _fold_arithmetic(m: Match) -> Replacement | Skip:
    found = _scale_and_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    s, t = found
    return _fold_into_contraction(m, s, t)


def _run_sweeps(model: Model, rule_sets: Sequence[RuleSet]) -> tuple[int, list[str]]:
    applied = 0
    notes: list[str] = []
    for rules in rule_sets:
        for _ in range(MAX_SWEEPS):
            report = rules.apply(model.graph)
            applied += report.applied
            if not report.applied:
                notes += [f"{o.node} ({o.op}): {o.reason}" for o in report.skipped + report.refused if o.reason]
                break
    return applied, list(dict.fromkeys(notes))


# -- ONNX: Conv / Gemm followed by a per-channel Mul (+ Add) ------------------------------

_ONNX_CONTRACTION = (
    P("Conv", ANY(name="x"), CONST(name="w"), CONST(name="b"), name="conv", dialect="onnx")
    | P("Conv", ANY(name="x"), CONST(name="w"), name="conv", dialect="onnx")
    | P("Gemm", ANY(name="x"), CONST(name="w"), CONST(name="b"), name="conv", dialect="onnx")
    | P("Gemm", ANY(name="x"), CONST(name="w"), name="conv", dialect="onnx")
)
_ONNX_SCALED = P("Mul", _ONNX_CONTRACTION, CONST(name="s"), name="mul", commutative=True, dialect="onnx")
_ONNX_FULL = P("Add", _ONNX_SCALED, CONST(name="t"), name="add", commutative=True, dialect="onnx")


def _fold_onnx(m: Match) -> Replacement | Skip:
    """``Mul(Conv(x, W, b), s) [+ t] -> Conv(x, W·s, b·s + t)``; Gemm alike (``C' = C·s + t/β``).

    Conv weights are ``[M, C/group, k...]`` (output channel on axis 0, on axis 1 of the output);
    Gemm's ``B`` is ``[K, N]`` (``[N, K]`` with transB) and its output channel is axis 1.
    """
    conv = node_of(m, "conv")
    w_tensor = m.const("w")
    if w_tensor.dtype not in FLOAT_DTYPES:
        return m.skip(f"weights of {conv.name!r} are {w_tensor.dtype.value}, not float")
    for node in m.nodes:
        if node is not m.node and (sum(v.num_uses for v in node.outputs) != 1
                                   or any(v.is_graph_output for v in node.outputs)):
            return m.skip(f"intermediate {node.name!r} ({node.op}) is read elsewhere")
    for key in ("w", "b"):
        value = m[key].value if m.get(key) is not None else None
        if value is not None and (value.num_uses != 1 or value.is_graph_output or value.is_graph_input):
            return m.skip(f"weights {value.name!r} of {conv.name!r} are also read elsewhere; "
                          "not folding into shared weights")
    w = w_tensor.numpy()
    gemm = conv.op == "Gemm"
    if gemm:
        trans_b, beta = bool(conv.attr("transB", 0)), float(conv.attr("beta", 1.0))
        if w.ndim != 2 or beta == 0.0 or float(conv.attr("alpha", 1.0)) == 0.0:
            return m.skip(f"Gemm {conv.name!r}: unsupported B rank or alpha/beta of 0")
        rank, channels = 2, int(w.shape[0] if trans_b else w.shape[1])
    else:
        rank, channels, beta = w.ndim, int(w.shape[0]), 1.0
    s = per_channel(m.array("s"), rank, 1, channels)
    t = per_channel(m.array("t"), rank, 1, channels) if m.get("t") is not None else np.zeros(channels)
    b: np.ndarray | None = np.zeros(channels)
    if m.get("b") is not None:
        raw = m.array("b")
        if gemm:  # C broadcasts against the [M, N] output
            b = per_channel(raw, rank, 1, channels)
        else:  # Conv's B is the [M] bias itself
            b = np.asarray(raw, np.float64).reshape(-1) if raw.size == channels else None
    if s is None or t is None or b is None:
        return m.skip(f"scale, offset or bias of {conv.name!r} is not one value per output channel")
    new_w = scaled(w, (s[:, None] if trans_b else s[None, :]) if gemm else s.reshape((channels,) + (1,) * (w.ndim - 1)))
    root = m.node
    assert root is not None
    w_value = m.constant(new_w, name=f"{conv.name or 'conv'}_folded_w", dtype=w_tensor.dtype)
    b_value = m.constant((b * s + t / beta).astype(w.dtype), name=f"{conv.name or 'conv'}_folded_b",
                         dtype=w_tensor.dtype)
    new = m.clone(conv, inputs=[conv.inputs[0], w_value, b_value])
    out, old = new.output, root.outputs[0]
    out.name, out.dtype, out.shape = old.name, old.dtype, old.shape  # stands for the root's value
    return Replacement([new], {old: out})


@transform("fold_batch_norms", dialects={"tf", "onnx"})
def fold_batch_norms(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold per-channel Mul (+ Add) after a contraction (TF Conv2D/Depthwise/MatMul, ONNX Conv/Gemm)."""
    full, scale = RuleSet(name="fold_batch_norms"), RuleSet(name="fold_batch_norms")
    if model.graph.dialect == "onnx":
        full.add(_ONNX_FULL, _fold_onnx, name="scale_and_offset")
        scale.add(_ONNX_SCALED, _fold_onnx, name="scale")
    else:
        full.add(_BN_FULL, _fold_arithmetic, name="scale_and_offset")
        scale.add(_BN_SCALE, _fold_arithmetic, name="scale")
    applied, notes = _run_sweeps(model, [full, scale])
    shared = sum("shared weights" in n for n in notes)
    return TransformResult(applied > 0, {"folded": applied, "weights_shared": shared}, notes)


# -- the monolithic batch-norm ops ---------------------------------------------------


def _bn_scale_offset(m: Match) -> tuple[np.ndarray, np.ndarray] | str:
    """``s = γ/√(σ²+ε)``, ``t = β − μ·s`` of a FusedBatchNorm* / BatchNormWithGlobalNormalization."""
    bn = node_of(m, "bn")
    if bn.op.startswith("FusedBatchNorm"):
        if bn.attr("is_training", True):
            return f"{bn.op} {bn.name!r} is in training mode (is_training=true); only inference batch norm folds"
        used = [i for i, v in enumerate(bn.outputs) if i and (v.num_uses or v.is_graph_output)]
        if used:
            return f"{bn.op} {bn.name!r} has its batch statistics (outputs {used}) read; they would be lost"
        eps = float(bn.attr("epsilon", 1e-4))
        gamma: np.ndarray | None = m.array("gamma")
    else:
        eps = float(bn.attr("variance_epsilon", 0.0))
        gamma = m.array("gamma") if bn.attr("scale_after_normalization", True) else None
    arrays = [m.array(k) for k in ("mean", "var", "beta")]
    if any(a.ndim != 1 for a in arrays) or (gamma is not None and gamma.ndim != 1):
        return f"{bn.op} {bn.name!r}: gamma/beta/mean/variance must be 1-D"
    mean, var, beta = (np.asarray(a, np.float64) for a in arrays)
    s = 1.0 / np.sqrt(var + eps)
    if gamma is not None:
        s = s * np.asarray(gamma, np.float64)
    return s, beta - mean * s


def _fold_old_into_contraction(m: Match) -> Replacement | Skip:
    found = _bn_scale_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    bn = node_of(m, "bn")
    conv = node_of(m, "conv")
    if conv.op != "MatMul" and _data_format(bn) != _data_format(conv):
        return m.skip(f"{bn.name!r} and {conv.name!r} disagree on data_format")
    s, t = found
    if s.shape[0] != channel_count(conv, m.array("w")):
        return m.skip(f"{bn.name!r} has {s.shape[0]} channels, {conv.name!r} produces a different count")
    return _fold_into_contraction(m, s, t)


def _old_to_arithmetic(m: Match) -> Replacement | Skip:
    """No contraction before it: ``bn(x) -> BiasAdd(Mul(x, s), t)``."""
    found = _bn_scale_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    s, t = found
    bn = node_of(m, "bn")
    dtype = bn.outputs[0].dtype or DType.FLOAT32
    if dtype not in FLOAT_DTYPES or dtype.numpy is None:
        return m.skip(f"{bn.name!r} computes {dtype.value}, not float")
    nchw = _data_format(bn).startswith("NC")
    s_value = m.constant((s.reshape(-1, 1, 1) if nchw else s).astype(dtype.numpy), name=f"{bn.name}/scale", dtype=dtype)
    t_value = m.constant(t.astype(dtype.numpy), name=f"{bn.name}/offset", dtype=dtype)
    mul = Node("Mul", [m["x"].value, s_value], dialect="tf", name=f"{bn.name}/mul",
               attrs={"T": Attr.dtype(dtype)}, device=bn.device, control_inputs=bn.control_inputs)
    add = Node("BiasAdd", [mul.output, t_value], dialect="tf", name=bn.name, device=bn.device,
               attrs={"T": Attr.dtype(dtype), "data_format": Attr.string("NCHW" if nchw else "NHWC")})
    mul.output.dtype = add.output.dtype = dtype
    add.output.shape = bn.outputs[0].shape
    return Replacement([mul, add], {bn.outputs[0]: add.output})


@transform("fold_old_batch_norms", dialects={"tf", "onnx"})
def fold_old_batch_norms(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold FusedBatchNorm{,V2,V3} / BatchNormWithGlobalNormalization (inference) into weights.

    On ONNX the monolithic batch-norm op is ``BatchNormalization``: the same folding is
    simplify's ``fuse_bn_into_conv`` (Conv, ConvTranspose, Gemm), which this delegates to.
    """
    if model.graph.dialect == "onnx":
        from ..fuse.fuse_bn_into_conv_onnx import fuse_bn_into_conv

        return fuse_bn_into_conv(model, ctx)
    into_conv, alone = RuleSet(name="fold_old_batch_norms"), RuleSet(name="fold_old_batch_norms")
    for pattern in _old_bn(_BIASED):
        into_conv.add(pattern, _fold_old_into_contraction, name="into_contraction")
    for pattern in _old_bn(ANY(name="x")):
        alone.add(pattern, _old_to_arithmetic, name="to_mul_add")
    before = sum(1 for n in model.graph if n.op in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
                                                    "BatchNormWithGlobalNormalization"))
    applied, notes = _run_sweeps(model, [into_conv])
    folded = applied
    converted, more = _run_sweeps(model, [alone])
    notes = list(dict.fromkeys(notes + more))
    left = before - folded - converted
    return TransformResult(applied + converted > 0,
                           {"folded_into_weights": folded, "to_mul_add": converted, "left": left}, notes)
