"""fuse_remapper's rules: contraction (+ BiasAdd | FusedBatchNorm) (+ Add) (+ activation), batch norms.

Every rule refuses with a reason: the Remapper's structural checks (``_why_not``), then whether
the target's kernels run the fused form (:func:`._remapper_kernels.why_no_kernel`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...formats.graphdef.op_registry import op_def
from ...ir import Attr, AttrKind, DType, Node, constant_value
from ...patterns import ANY, CONST, Match, P, Replacement, Skip, why_not_fusable
from .._channels import channel_count, node_of, output_channel_axis, per_channel, value_name
from ._remapper_kernels import same_device, why_no_kernel

DEFAULT_EPSILON = 1e-4
DEFAULT_LEAKYRELU_ALPHA = 0.2
ACTIVATIONS = "Relu|Relu6|Elu|LeakyRelu|Tanh|Sigmoid"

FUSED_BN = "FusedBatchNorm|FusedBatchNormV2|FusedBatchNormV3"
CONTRACTION = P("Conv2D|DepthwiseConv2dNative|MatMul", ANY(name="x"), ANY(name="w"), name="conv")
CONV = P("Conv2D", ANY(name="x"), ANY(name="w"), name="conv")
CONTRACTION_BIAS = P("BiasAdd", CONTRACTION, ANY(name="b"), name="bias")
CONV_BIAS = P("BiasAdd", CONV, ANY(name="b"), name="bias")
# The matcher yields one match per pattern, so the two operand orders are two patterns (Grappler
# tries port 0, then port 1): a refused order (a shortcut BiasAdd read twice) leaves the other.
CONV_BIAS_ADDS = (P("Add|AddV2", CONV_BIAS, ANY(name="addend"), name="add"),
                  P("Add|AddV2", ANY(name="addend"), CONV_BIAS, name="add"))
CONV_BN = P(FUSED_BN, CONV, ANY(name="gamma"), ANY(name="beta"), ANY(name="mean"), ANY(name="var"), name="bn")
BN = P(FUSED_BN, ANY(name="x"), ANY(name="gamma"), ANY(name="beta"), ANY(name="mean"), ANY(name="var"), name="bn")
BN_SIDES = (P("Add|AddV2", BN, ANY(name="side"), name="add"), P("Add|AddV2", ANY(name="side"), BN, name="add"))
SQUEEZE_BIAS = P("BiasAdd", P("Squeeze", CONV, name="squeeze"), ANY(name="b"), name="bias")
ADD_AFTER = P("Add|AddV2", P("Conv2D|DepthwiseConv2dNative|MatMul", ANY, CONST(name="w"), name="conv"),
              CONST(name="c"), name="add", commutative=True)

_OP_OF = {"Conv2D": "_FusedConv2D", "DepthwiseConv2dNative": "_FusedDepthwiseConv2dNative", "MatMul": "_FusedMatMul"}


def fmt(node: Node) -> str:
    raw = node.attr("data_format", b"NHWC")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _t(node: Node) -> DType | None:
    value = node.attrs.get("T")
    return node.attr("T") if value is not None else None


def why_not_structure(m: Match) -> str | None:
    """Grappler's checks on the whole match, as TF 2.21 applies them.

    Intermediates: read once, no control edges, not fetched (a graph output) — the root may be a
    graph output: the fused node takes its name, as a TF 2.21 Session does when the chain is
    fetched at its end.  All matched nodes share one element type ``T`` and one device;
    a FusedBatchNorm is in inference mode with its batch statistics unread.
    """
    reason = why_not_fusable(m, check_root=True)
    if reason:
        return reason
    types = {_t(n) for n in m.nodes if n.op != "Squeeze" or n.attrs.get("T") is not None}
    if len(types) != 1 or None in types:
        names = ", ".join(f"{n.name!r}: {(_t(n).name.lower() if _t(n) else '?')}" for n in m.nodes)
        return f"the matched nodes do not share one element type ({names})"
    _, why = same_device(list(m.nodes))
    if why:
        return why
    bn = m.get("bn")
    if bn is not None and bn.node is not None:
        node = bn.node
        if node.attr("is_training", True):
            return f"{node.name!r} is in training mode"
        if any(v.num_uses or v.is_graph_output for v in node.outputs[1:]):
            return f"{node.name!r} has its batch statistics read"
        if node.attrs.get("U") is not None and node.attr("U") is not DType.FLOAT32:
            return f"{node.name!r} keeps its statistics in {node.attr('U').name.lower()}, not float32"
    return None


def _spatial(m: Match) -> bool:
    w = m.get("w")
    shape = w.value.shape if w is not None and w.value is not None else None
    return not (shape is not None and len(shape) == 4 and shape[0] == 1 and shape[1] == 1)


def fused_contraction(m: Match, fused_ops: list[str], args: list[str], name: str, act: Node | None) -> Node:
    """The _FusedConv2D / _FusedDepthwiseConv2dNative / _FusedMatMul node replacing the match."""
    conv = node_of(m, "conv")
    op = _OP_OF[conv.op]
    inputs = [m["x"].value, m["w"].value] + [m[a].value for a in args]
    alpha = (act.attr("alpha", DEFAULT_LEAKYRELU_ALPHA) if act is not None and act.op == "LeakyRelu"
             else DEFAULT_LEAKYRELU_ALPHA)
    attrs: dict[str, Attr | None] = {
        "fused_ops": Attr.strings(fused_ops),
        "num_args": Attr.int(len(args)),
        "epsilon": Attr.float(node_of(m, "bn").attr("epsilon", DEFAULT_EPSILON) if m.get("bn") else DEFAULT_EPSILON),
        "leakyrelu_alpha": Attr.float(alpha),
    }
    if op == "_FusedConv2D":
        attrs["TArgs"] = Attr(AttrKind.DTYPES, (conv.attr("T"),) * len(args))
        attrs["num_host_args"] = Attr.int(0)
    fused = m.clone(conv, op=op, inputs=inputs, name=name, attrs=attrs)
    # Attributes the fused op does not declare (MatMul's grad_a/grad_b in TF >= 2.17) would make
    # TensorFlow log an error for every such node: drop them.
    definition = op_def(op)
    if definition is not None:
        known = {a.name for a in definition.attr}
        for key in [k for k in fused.attrs if k not in known and not k.startswith("_")]:
            del fused.attrs[key]
    return fused


def _kernel_reason(m: Match, op: str, fused_ops: list[str], target: str, *, fmt_node: Node,
                   channels: int | None = None) -> str | None:
    device, _ = same_device(list(m.nodes))
    return why_no_kernel(op, fused_ops, _t(fmt_node), fmt(fmt_node), target=target, device=device or "",
                         filter_spatial=_spatial(m), channels=channels)


def contraction_rule(target: str, first: str, args: list[str], *, with_act: bool,
                     with_add: bool = False) -> Callable[[Match], Replacement | Skip]:
    """Contraction + ``first`` (BiasAdd | FusedBatchNorm, reading ``args``) [+ Add] [+ activation]."""
    def rule(m: Match) -> Replacement | Skip:
        reason = why_not_structure(m)
        if reason:
            return m.skip(reason)
        root = node_of(m)
        conv = node_of(m, "conv")
        act = root if with_act else None
        fused_ops = [first] + (["Add"] if with_add else []) + ([act.op] if act is not None else [])
        if conv.attr("padding", b"") in (b"EXPLICIT", "EXPLICIT") and conv.op != "Conv2D":
            return m.skip(f"{conv.name!r} has explicit padding, which {_OP_OF[conv.op]} does not take")
        why = _kernel_reason(m, _OP_OF[conv.op], fused_ops, target, fmt_node=conv)
        if why:
            return m.skip(why)
        all_args = args + (["addend"] if with_add else [])
        if with_add:
            shapes = (conv.output.shape, m["addend"].value.shape)
            if None in shapes or any(d is None for s in shapes for d in s) or shapes[0] != shapes[1]:
                return m.skip(f"the Add's operands are not of one known shape {shapes}; the fused Add does not broadcast")
        node = fused_contraction(m, fused_ops, all_args, root.name, act)
        return Replacement([node], {root.outputs[0]: node.output})
    return rule


def squeeze_rule(target: str) -> Callable[[Match], Replacement | Skip]:
    """Conv2D + Squeeze + BiasAdd -> Squeeze(_FusedConv2D): the channel axis must survive the Squeeze."""
    def rule(m: Match) -> Replacement | Skip:
        reason = why_not_structure(m)
        if reason:
            return m.skip(reason)
        squeeze, conv = node_of(m, "squeeze"), node_of(m, "conv")
        dims = [int(d) for d in squeeze.attr("squeeze_dims", ()) or ()]
        shape = conv.output.shape
        channel = 1 if fmt(conv) == "NCHW" else 3
        if not dims:  # every size-1 dim: the channel axis must be known not to be one
            if shape is None or shape[channel] is None or any(d is None for d in shape):
                return m.skip(f"{squeeze.name!r} squeezes every size-1 dim of a shape not fully known")
            if shape[channel] == 1:
                return m.skip(f"{squeeze.name!r} squeezes the channel axis (size 1)")
        elif any(d % 4 == channel for d in dims):
            return m.skip(f"{squeeze.name!r} squeezes {dims}; the channel axis must stay")
        why = _kernel_reason(m, "_FusedConv2D", ["BiasAdd"], target, fmt_node=conv)
        if why:
            return m.skip(why)
        root = node_of(m)
        fused = fused_contraction(m, ["BiasAdd"], ["b"], conv.name, None)
        new_squeeze = m.clone(squeeze, inputs=[fused.output], name=root.name)
        return Replacement([fused, new_squeeze], {root.outputs[0]: new_squeeze.output})
    return rule


def add_to_bias_add(m: Match) -> Replacement | Skip:
    """Add|AddV2(contraction, per-channel constant) -> BiasAdd(contraction, [C] vector)."""
    conv, add = node_of(m, "conv"), node_of(m)
    c = m.const("c")
    dtype = add.attr("T")
    if conv.output.num_uses != 1 or c.dtype is not dtype or dtype not in (DType.FLOAT32, DType.FLOAT64):
        return m.skip("not a single-use float32/float64 contraction")
    rank, axis = output_channel_axis(conv)
    vector = per_channel(c.numpy(), rank, axis, channel_count(conv, m.array("w")))
    if vector is None:
        return m.skip(f"{value_name(m, 'c')!r} is not one value per output channel")
    bias = m.constant(vector.astype(c.numpy().dtype), name=f"{add.name}/bias", dtype=dtype)
    attrs = {"T": Attr.dtype(dtype)}
    if conv.op != "MatMul":
        attrs["data_format"] = Attr.string(fmt(conv).encode())
    new = Node("BiasAdd", [conv.output, bias], dialect="tf", name=add.name, attrs=attrs,
               device=add.device, control_inputs=add.control_inputs)
    new.output.dtype, new.output.shape = add.output.dtype, add.output.shape
    return Replacement([conv, new], {add.outputs[0]: new.output})  # the contraction stays


def _channels(m: Match) -> int | None:
    shape = m["gamma"].value.shape if m["gamma"].value is not None else None
    return int(shape[0]) if shape and len(shape) == 1 and shape[0] is not None else None


def batch_norm_ex_rule(target: str, *, side: bool) -> Callable[[Match], Replacement | Skip]:
    """Relu(FusedBatchNorm [+ side input]) -> _FusedBatchNormEx(activation_mode=Relu)."""
    def rule(m: Match) -> Replacement | Skip:
        reason = why_not_structure(m)
        if reason:
            return m.skip(reason)
        bn, root = node_of(m, "bn"), node_of(m)
        fused_ops = ["FusedBatchNorm"] + (["Add"] if side else []) + [root.op]
        why = _kernel_reason(m, "_FusedBatchNormEx", fused_ops, target, fmt_node=bn, channels=_channels(m))
        if why:
            return m.skip(why)
        if side:
            shapes = (bn.output.shape, m["side"].value.shape)
            if None in shapes or shapes[0] != shapes[1]:
                return m.skip(f"the side input's shape differs from the batch norm's {shapes}")
        inputs = [m[k].value for k in ("x", "gamma", "beta", "mean", "var")] + ([m["side"].value] if side else [])
        attrs: dict[str, Attr | None] = {
            "U": Attr.dtype(DType.FLOAT32), "num_side_inputs": Attr.int(1 if side else 0),
            "activation_mode": Attr.string(b"Relu"), "exponential_avg_factor": Attr.float(1.0),
            "is_training": Attr.bool(False), "epsilon": Attr.float(bn.attr("epsilon", DEFAULT_EPSILON)),
            "data_format": Attr.string(fmt(bn).encode()),
        }
        fused = m.clone(bn, op="_FusedBatchNormEx", inputs=inputs, name=root.name, attrs=attrs)
        return Replacement([fused], {root.outputs[0]: fused.output})
    return rule


def decompose_batch_norm(m: Match) -> Replacement | Skip:
    """A standalone inference FusedBatchNorm -> x * scale' + offset' (Grappler's primitive form, folded).

    As Grappler: only when the scaling factor ``γ / sqrt(σ² + ε)`` is constant (γ and σ² constant)
    and only output 0 is read.  ``scale'`` is computed in float32 as TensorFlow's Rsqrt/Mul would;
    ``offset' = β - μ·scale'`` is folded too when μ and β are constant, else it stays as Mul/Sub.
    """
    bn = node_of(m)
    if bn.attr("is_training", True):
        return m.skip(f"{bn.name!r} is in training mode")
    if any(v.num_uses or v.is_graph_output for v in bn.outputs[1:]):
        return m.skip(f"{bn.name!r} has its batch statistics read")
    if _t(bn) is not DType.FLOAT32:
        return m.skip(f"{bn.name!r} is not float32 (Grappler decomposes float32 batch norms only)")
    if bn.control_inputs or bn.control_users:
        return m.skip(f"{bn.name!r} has control edges")
    gamma, var = (constant_value(m[k].value) for k in ("gamma", "var"))
    if gamma is None or var is None:
        return m.skip(f"{bn.name!r}: scale or variance is not constant, so neither is the scaling factor")
    layout = fmt(bn)
    if layout not in ("NHWC", "NCHW", "NDHWC", "NCDHW"):
        return m.skip(f"{bn.name!r} has data format {layout}")
    tail = (1,) * (len(layout) - 2) if layout.startswith("NC") else ()
    eps = np.float32(bn.attr("epsilon", DEFAULT_EPSILON))
    g32, v32 = gamma.numpy().astype(np.float32), var.numpy().astype(np.float32)
    scaled = (np.float32(1) / np.sqrt(v32 + eps)).astype(np.float32) * g32
    beta, mean = (constant_value(m[k].value) for k in ("beta", "mean"))
    new: list[Node] = []

    def op(kind: str, inputs: list, name: str) -> Node:
        node = Node(kind, inputs, dialect="tf", name=name, attrs={"T": Attr.dtype(DType.FLOAT32)}, device=bn.device)
        node.output.dtype = DType.FLOAT32
        new.append(node)
        return node

    c_scaled = m.constant(scaled.reshape(scaled.shape + tail), name=f"{bn.name}/Scaled", dtype=DType.FLOAT32)
    mul = op("Mul", [m["x"].value, c_scaled], f"{bn.name}/Mul")
    mul.output.shape = bn.output.shape
    if beta is not None and mean is not None:
        offset = beta.numpy().astype(np.float32) - mean.numpy().astype(np.float32) * scaled
        c_offset = m.constant(offset.reshape(offset.shape + tail), name=f"{bn.name}/Offset", dtype=DType.FLOAT32)
    else:
        if tail:
            return m.skip(f"{bn.name!r}: mean or offset is not constant in {layout}")
        c_flat = m.constant(scaled, name=f"{bn.name}/ScaledFlat", dtype=DType.FLOAT32)
        mul2 = op("Mul", [m["mean"].value, c_flat], f"{bn.name}/Mul2")
        c_offset = op("Sub", [m["beta"].value, mul2.output], f"{bn.name}/Offset").output
    add = op("Add", [mul.output, c_offset], bn.name)
    add.output.shape = bn.output.shape
    return Replacement(new, {bn.outputs[0]: add.output})
