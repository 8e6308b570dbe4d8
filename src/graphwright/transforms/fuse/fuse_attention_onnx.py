"""fuse_attention: a transformer's self-attention written out op by op becomes onnxruntime's ``Attention``.

Before (BERT, ViT, GPT-2, T5's self-attention, every model exported with eager attention;
``x`` is (B, S, H_in))::

    q = Transpose(Reshape(x·Wq [+ bq], (B, S, N, d)), perm=[0, 2, 1, 3])
    kᵀ = Transpose(Reshape(x·Wk [+ bk], (B, S, N, d)), perm=[0, 2, 3, 1])
    v = Transpose(Reshape(x·Wv [+ bv], (B, S, N, d)), perm=[0, 2, 1, 3])
    p = Softmax(MatMul(q, kᵀ) [/ c | · c]  [+ M0 [+ M1]])
    y = Reshape(Transpose(MatMul(p, v), perm=[0, 2, 1, 3]), (B, S, N·d) | (B·S, N·d))

where the three projections may also be one, ``x·[Wq | Wk | Wv] [+ b]``, cut in three by a
``Split`` along the last axis (GPT-2's ``c_attn``).  After (``target="onnxruntime"``)::

    y = com.microsoft::Attention(x, [Wq | Wk | Wv], [bq | bk | bv], , , M; num_heads = N, scale = 1/c)
        [─► Reshape(·, (B·S, N·d))  when the merge flattened the batch, as GPT-2's does]
    (M = M0 + M1, one Add shared by the layers, when there are two: T5's position bias and mask)

The maths: ``Attention`` projects ``x`` with the packed weights (one matrix product instead of
three), splits heads, and computes ``softmax(scale · q·kᵀ + M)·v`` per head, exactly the chain
above (missing biases are zeros, a missing scale is 1, as in T5); ``M`` — the additive mask the
exporter built (``(1 - mask) · min``, a causal mask made with ``Where``, or T5's position bias
plus mask, summed first: a float reassociation) — goes in the ``attention_bias`` slot, which
onnxruntime adds before the softmax.

The reshapes are checked on the running model, since dynamic exports compute their targets
from ``Shape``: the shape probe (``_shape_probe_onnx``) runs the model at two sizes of every
dynamic dim and the fusion needs, at both, ``x`` of rank 3, each head split to take (B, S, H)
to (B, S, N, d) with ``N·d = H`` (the same leading dims, so the split is of the last axis
only; with a ``Split``, each cut H wide), the merge to take (B, S, N, d) back to (B, S, H) or
(B·S, H), and ``M`` broadcasting to (B or 1, N or 1, S, S) — the shapes ``attention_bias``
accepts.

Refused, with the reason in the report's notes: ``target="standard"`` (no such standard op
below opset 23); weights not 2-D float32 constants of one shape, biases not vectors of their
width; q, k, v not the three outputs of one ``Split`` of the last axis; a head split or merge
other than the above, or ``N``/``d`` differing between q, k and v; a Softmax over another
axis; a scale that is not a positive one-element constant; a mask of another shape; an
intermediate read outside the pattern or being a graph output; a model the shape probe cannot
run (its reason).

Cross-attention — k and v projected from another tensor ``e`` (B, L, H_e), as T5's decoder
reads its encoder's output — becomes ``com.microsoft::MultiHeadAttention(x·Wq, e·Wk, e·Wv,
[bq | bk | bv], , M; num_heads, scale)``: the three projections stay, the rest of the chain is
the same maths, checked the same way with (B, L, N, d) for k and v and ``M`` broadcasting to
(B or 1, N or 1, S, L).

Cost: one sweep, O(N), plus the shape probe's two onnxruntime runs when a candidate exists;
O(H_in·H) per fusion to pack the weights.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, Value
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip, why_not_closed
from .._onnx import opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, new_node, require_ms_domain, scalar, std_op
from ._shape_probe_onnx import ShapeProbe

__all__ = ["fuse_attention"]

_HEADS_FIRST = [0, 2, 1, 3]
#: From opset 13 Softmax's axis defaults to -1; before, to 1.
SOFTMAX_LAST_AXIS_OPSET = 13
_KEY_TRANSPOSED = [0, 2, 3, 1]


def _perm(expected: list[int]):
    return lambda node: [int(p) for p in (node.attr("perm") or ())] == expected


def _projection(t: str, biased: bool) -> Pattern:
    mm = std_op("MatMul", ANY(name="x"), CONST(name=f"w{t}"), name=f"mm{t}")
    return std_op("Add", mm, CONST(name=f"b{t}"), commutative=True, name=f"add{t}") if biased else mm


def _transpose(inner: Pattern, name: str, perm: list[int]) -> Pattern:
    return P("Transpose", inner, name=name, domain="", where=_perm(perm))


def _packed_projection(biased: bool) -> Pattern:
    mm = std_op("MatMul", ANY(name="x"), CONST(name="w"), name="mm")
    return std_op("Add", mm, CONST(name="b"), commutative=True, name="add") if biased else mm


def _attention(biased: bool, scaling: str, masks: int, packed: bool, cross: bool = False) -> Pattern:
    """One form: three projections, or one packed projection cut in three by a Split (GPT-2's
    c_attn), with or without biases; scores divided, multiplied or not scaled; zero, one or two
    additive masks (T5 adds its position bias, then the padding mask)."""
    def heads(t: str, perm: list[int]) -> Pattern:
        if packed:
            source: Pattern = P("Split", _packed_projection(biased), ..., name=f"cut{t}", domain="", port="qkv".index(t))
        elif cross:  # q from the decoder's stream (xq), k and v from the encoder's output (xkv)
            mm = std_op("MatMul", ANY(name="xq" if t == "q" else "xkv"), CONST(name=f"w{t}"), name=f"mm{t}")
            source = std_op("Add", mm, CONST(name=f"b{t}"), commutative=True, name=f"add{t}") if biased else mm
        else:
            source = _projection(t, biased)
        return _transpose(std_op("Reshape", source, ANY(name=f"shape{t}"), name=f"split{t}"), f"t{t}", perm)

    qk = std_op("MatMul", heads("q", _HEADS_FIRST), heads("k", _KEY_TRANSPOSED), name="qk")
    scores: Pattern = {"div": std_op("Div", qk, CONST(name="scale"), name="scaled"),
                       "mul": std_op("Mul", qk, CONST(name="scale"), commutative=True, name="scaled"),
                       "none": qk}[scaling]
    for i in range(masks):
        scores = std_op("Add", scores, ANY(name=f"mask{i}"), commutative=True, name=f"masked{i}")
    probs = P("Softmax", scores, name="softmax", domain="")
    context = std_op("MatMul", probs, heads("v", _HEADS_FIRST), name="context")
    return std_op("Reshape", _transpose(context, "tctx", _HEADS_FIRST), ANY(name="shapeout"), name="merge")


_ALL_PATTERNS = [(f"attention{'_packed' if packed else ''}{'_bias' if biased else ''}_{scaling}_{masks}mask",
                  _attention(biased, scaling, masks, packed))
                 for packed in (False, True) for biased in (True, False) for masks in (2, 1, 0)
                 for scaling in ("div", "mul", "none") if scaling != "none" or masks]
#: Cross-attention (k, v from another tensor), tried after the self-attention forms.
_CROSS_PATTERNS = [(f"cross_attention{'_bias' if biased else ''}_{scaling}_{masks}mask",
                    _attention(biased, scaling, masks, packed=False, cross=True))
                   for biased in (True, False) for masks in (2, 1, 0) for scaling in ("div", "mul", "none")
                   if scaling != "none" or masks]


def _candidates(model: Model) -> list[Value]:
    """Values whose runtime shapes the rules read: every Reshape's input and output, every MatMul's
    first input, every Softmax input's summands."""
    out: list[Value] = []
    for node in model.graph:
        if node.op == "Reshape" and node.domain in ("", "ai.onnx") and node.inputs and node.inputs[0] is not None:
            out += [node.inputs[0], node.output]
        elif node.op == "MatMul" and node.inputs and node.inputs[0] is not None:  # a projection's input
            out.append(node.inputs[0])
        elif node.op == "Softmax" and node.inputs and node.inputs[0] is not None:
            add = node.inputs[0].producer
            if add is not None and add.op == "Add":
                out += [v for v in add.inputs if v is not None]
                inner = add.inputs[0].producer if add.inputs[0] is not None else None
                if inner is not None and inner.op == "Add":
                    out += [v for v in inner.inputs if v is not None]
    return out


def _node(m: Match, name: str) -> Node:
    node = m[name].node
    assert node is not None
    return node


def _rule(model: Model, probe: ShapeProbe):
    version = opset_version(model)
    summed: dict[tuple[int, int], Value] = {}  # one M0 + M1 per pair of masks, shared by the layers reading it

    def rule(m: Match) -> Replacement | Skip:
        """Check weights, scale, head split/merge and mask shapes; emit com.microsoft::Attention."""
        reason = why_not_closed(m)
        if reason:
            return m.skip(reason)
        if m.get("w") is not None:  # one packed projection, cut in three
            reason = _packed_split(m)
            if reason:
                return m.skip(reason)
            w, third = np.asarray(m.array("w")), np.asarray(m.array("w")).shape[-1] // 3
            weights = [w[:, i * third:(i + 1) * third] for i in range(3)] if w.ndim == 2 else [w] * 3
            if m.get("b") is not None:
                b = np.asarray(m.array("b"))
                m_biases = [b[i * third:(i + 1) * third] for i in range(3)] if b.ndim == 1 else [b] * 3
        else:
            weights = [np.asarray(m.array(f"w{t}")) for t in "qkv"]
        width = weights[0].shape[-1] if weights[0].ndim else 0
        if m.get("b") is not None:
            biases = m_biases
        else:
            biases = [np.asarray(m.array(f"b{t}")) if m.get(f"b{t}") is not None else np.zeros(width, np.float32)
                      for t in "qkv"]
        if any(w.dtype != np.float32 or w.ndim != 2 or w.shape != weights[0].shape for w in weights):
            return m.skip(f"the projections are not 2-D float32 constants of one shape: {[w.shape for w in weights]}")
        hidden = weights[0].shape[1]
        if any(b.dtype != np.float32 or b.shape != (hidden,) for b in biases):
            return m.skip(f"the biases are not float32 vectors of size {hidden}: {[b.shape for b in biases]}")
        scale, why = _softmax_scale(m, version)
        if scale is None:
            return m.skip(why)
        heads, flat, why = _check_shapes(m, probe, hidden)
        if heads is None:
            return m.skip(why)
        root = m.node
        assert root is not None
        packed_w = m.constant(np.concatenate(weights, axis=1), name=f"{root.name}_qkv_weight")
        packed_b = m.constant(np.concatenate(biases), name=f"{root.name}_qkv_bias")
        masks: list[Value] = [m[f"mask{i}"].value for i in range(2) if m.get(f"mask{i}") is not None]  # type: ignore[misc]
        nodes: list[Node] = []
        inputs: list[Value | None] = [m["x"].value, packed_w, packed_b]
        if len(masks) == 2:  # (s + b0) + b1 -> s + (b0 + b1): one bias for the kernel
            key = (id(masks[0]), id(masks[1]))
            if key not in summed:
                combined = new_node("Add", masks, _node(m, "masked1"))  # type: ignore[arg-type]
                combined.output.name, combined.output.shape = f"{root.name}_attention_bias", None
                nodes.append(combined)
                summed[key] = combined.output
            masks = [summed[key]]
        if masks:
            inputs += [None, None, masks[0]]
        attrs = {"num_heads": Attr.int(heads), "scale": Attr.float(float(scale))}
        require_ms_domain(model)
        attention = new_node("Attention", inputs, root, domain=MS_DOMAIN, attrs=attrs)
        if flat:  # the merge flattened to (B·S, H) for a 2-D product after it: keep that reshape
            attention.output.name, attention.output.shape = f"{root.output.name}_attention", None
            reshape = new_node("Reshape", [attention.output, root.inputs[1]], root, attrs=dict(root.attrs))
            return Replacement([*nodes, attention, reshape])
        return Replacement([*nodes, attention])

    return rule


def _packed_split(m: Match) -> str | None:
    """Why the three cuts are not one Split of the packed projection along its last axis, or None."""
    cuts = [_node(m, f"cut{t}") for t in "qkv"]
    if cuts[0] is not cuts[1] or cuts[0] is not cuts[2] or len(cuts[0].outputs) != 3:
        return "q, k and v are not the three outputs of one Split"
    axis = int(cuts[0].attr("axis", 0))
    if axis not in (-1, 2):
        return f"the Split cuts axis {axis}, not the last"
    return None  # equal thirds: checked with the head split's runtime shapes (each H wide)


def _check_shapes(m: Match, probe: ShapeProbe, hidden: int) -> tuple[int | None, bool, str]:
    """(head count, whether the merge flattens to (B·S, H)) when every reshape and the mask have
    the shapes Attention computes with; else (None, False, why)."""
    x: Value = m["x"].value  # type: ignore[assignment]
    runs = probe.shapes(x)
    if runs is None:
        return None, False, f"the runtime shapes of {x.name!r} are unknown ({probe.error or 'not probed'})"
    heads: set[tuple[int, int]] = set()
    for t in "qkv":
        split = _node(m, f"split{t}")
        before, after = probe.shapes(split.inputs[0]), probe.shapes(split.output)  # type: ignore[arg-type]
        if before is None or after is None:
            return None, False, f"the runtime shapes around {split.name!r} are unknown ({probe.error or 'not probed'})"
        for b, a in zip(before, after, strict=True):
            if len(b) != 3 or len(a) != 4 or a[:2] != b[:2] or a[2] * a[3] != b[2] or b[2] != hidden:
                return None, False, f"{split.name!r} takes {b} to {a}, not (B, S, {hidden}) to (B, S, N, d)"
            heads.add((a[2], a[3]))
    if len(heads) != 1:
        return None, False, f"q, k and v split into different heads: {sorted(heads)}"
    ((n, d),) = heads
    flats, why = _merge_flattens(m, probe, runs, n, d)
    if flats is None:
        return None, False, why
    if len(flats) != 1:
        return None, False, f"{m.node.name!r} flattens the batch at one size and not at the other"
    names = [f"mask{i}" for i in range(2) if m.get(f"mask{i}") is not None]
    if names:
        found = [probe.shapes(m[name].value) for name in names]  # type: ignore[arg-type]
        if any(f is None for f in found):
            return None, False, f"the runtime shape of the mask is unknown ({probe.error or 'not probed'})"
        for i, xs in enumerate(runs):
            parts = [f[i] for f in found]  # type: ignore[index]
            if any(len(p) != 4 for p in parts):
                return None, False, f"the mask of shapes {parts} is not 4-D"
            shape = tuple(int(d) for d in np.broadcast_shapes(*parts))
            if shape[0] not in (1, xs[0]) or shape[1] not in (1, n) or shape[2:] != (xs[1], xs[1]):
                return None, False, f"the mask of shape {shape} is not (B or 1, N or 1, S, S) for x of shape {xs}"
    return n, flats.pop(), ""


def _merge_flattens(m: Match, probe: ShapeProbe, runs: list, n: int, d: int) -> tuple[set[bool] | None, str]:
    """Whether the head merge (the match's root) flattens the batch, at each probed size ``runs``
    (the query's (B, S) first): it must take (B, S, N, d) to (B, S, N·d) or (B·S, N·d); None and
    the reason otherwise."""
    merge = m.node
    assert merge is not None
    before, after = probe.shapes(merge.inputs[0]), probe.shapes(merge.output)  # type: ignore[arg-type]
    if before is None or after is None:
        return None, f"the runtime shapes around {merge.name!r} are unknown ({probe.error or 'not probed'})"
    flats = set()
    for b, a, xs in zip(before, after, runs, strict=True):
        flats.add(a == (xs[0] * xs[1], n * d))
        if b != (xs[0], xs[1], n, d) or a not in ((xs[0], xs[1], n * d), (xs[0] * xs[1], n * d)):
            return None, f"{merge.name!r} takes {b} to {a}, not (B, S, N, d) to (B, S, N·d) or (B·S, N·d)"
    return flats, ""


def _softmax_scale(m: Match, version: int) -> tuple[float | None, str]:
    """The scores' scale (1.0 without one), or None and the reason the match is not ours: the Softmax
    must run over the last axis — before opset 13 its axis defaults to 1 (and flattens from it), so
    only an explicit last axis counts — and a scale must be a positive one-element float32 constant."""
    axis = int(_node(m, "softmax").attr("axis", -1 if version >= SOFTMAX_LAST_AXIS_OPSET else 1))
    if axis not in (-1, 3):
        return None, f"Softmax over axis {axis}, not the last"
    if m.get("scale") is None:
        return 1.0, ""
    c = scalar(m["scale"].value)
    if c is None or not c > 0 or np.asarray(m.array("scale")).dtype != np.float32:
        return None, "the scale is not a positive one-element float32 constant"
    return (1.0 / c if _node(m, "scaled").op == "Div" else c), ""


def _cross_rule(model: Model, probe: ShapeProbe):
    version = opset_version(model)
    summed: dict[tuple[int, int], Value] = {}

    def rule(m: Match) -> Replacement | Skip:
        """Cross-attention -> the projections' MatMuls + com.microsoft::MultiHeadAttention."""
        reason = why_not_closed(m)
        if reason:
            return m.skip(reason)
        weights = [np.asarray(m.array(f"w{t}")) for t in "qkv"]
        if any(w.dtype != np.float32 or w.ndim != 2 or w.shape[1] != weights[0].shape[1] for w in weights):
            return m.skip(f"the projections are not 2-D float32 constants of one width: {[w.shape for w in weights]}")
        hidden = weights[0].shape[1]
        biases = [np.asarray(m.array(f"b{t}")) if m.get(f"b{t}") is not None else np.zeros(hidden, np.float32)
                  for t in "qkv"]
        if any(b.dtype != np.float32 or b.shape != (hidden,) for b in biases):
            return m.skip(f"the biases are not float32 vectors of size {hidden}: {[b.shape for b in biases]}")
        scale, why = _softmax_scale(m, version)
        if scale is None:
            return m.skip(why)
        heads, flat, why = _cross_shapes(m, probe, hidden)
        if heads is None:
            return m.skip(why)
        root = m.node
        assert root is not None
        kept = [_node(m, f"mm{t}") for t in "qkv"]  # the projections stay; MultiHeadAttention takes their outputs
        nodes: list[Node] = list(kept)
        inputs: list[Value | None] = [n.output for n in kept]
        inputs.append(m.constant(np.concatenate(biases), name=f"{root.name}_qkv_bias") if m.get("bq") is not None
                      else None)
        masks: list[Value] = [m[f"mask{i}"].value for i in range(2) if m.get(f"mask{i}") is not None]  # type: ignore[misc]
        if len(masks) == 2:
            key = (id(masks[0]), id(masks[1]))
            if key not in summed:
                combined = new_node("Add", masks, _node(m, "masked1"))  # type: ignore[arg-type]
                combined.output.name, combined.output.shape = f"{root.name}_attention_bias", None
                nodes.append(combined)
                summed[key] = combined.output
            masks = [summed[key]]
        if masks:
            inputs += [None, masks[0]]
        attrs = {"num_heads": Attr.int(heads), "scale": Attr.float(float(scale))}
        require_ms_domain(model)
        attention = new_node("MultiHeadAttention", inputs, root, domain=MS_DOMAIN, attrs=attrs)
        if flat:
            attention.output.name, attention.output.shape = f"{root.output.name}_attention", None
            reshape = new_node("Reshape", [attention.output, root.inputs[1]], root, attrs=dict(root.attrs))
            return Replacement([*nodes, attention, reshape])
        return Replacement([*nodes, attention])

    return rule


def _cross_shapes(m: Match, probe: ShapeProbe, hidden: int) -> tuple[int | None, bool, str]:
    """(head count, merge flattens) when q splits (B, S, H) and k, v split (B, L, H) into (·, ·, N, d),
    the merge gives (B, S, H) or (B·S, H), and the mask broadcasts to (B or 1, N or 1, S, L)."""
    xq, xkv = probe.shapes(m["xq"].value), probe.shapes(m["xkv"].value)  # type: ignore[arg-type]
    if xq is None or xkv is None:
        return None, False, f"the runtime shapes of the attention's inputs are unknown ({probe.error or 'not probed'})"
    heads: set[tuple[int, int]] = set()
    for t, runs in (("q", xq), ("k", xkv), ("v", xkv)):
        split = _node(m, f"split{t}")
        before, after = probe.shapes(split.inputs[0]), probe.shapes(split.output)  # type: ignore[arg-type]
        if before is None or after is None:
            return None, False, f"the runtime shapes around {split.name!r} are unknown ({probe.error or 'not probed'})"
        for b, a, xs in zip(before, after, runs, strict=True):
            if (len(b) != 3 or len(a) != 4 or b[:2] != xs[:2] or a[:2] != b[:2] or b[2] != hidden
                    or a[2] * a[3] != hidden):
                return None, False, f"{split.name!r} takes {b} to {a}, not (B, ·, {hidden}) to (B, ·, N, d)"
            heads.add((a[2], a[3]))
    if len(heads) != 1:
        return None, False, f"q, k and v split into different heads: {sorted(heads)}"
    ((n, d),) = heads
    flats, why = _merge_flattens(m, probe, xq, n, d)
    if flats is None:
        return None, False, why
    if len(flats) != 1 or any(q[0] != k[0] for q, k in zip(xq, xkv, strict=True)):
        return None, False, "the merge or the batch of q and k/v differ between the two sizes"
    names = [f"mask{i}" for i in range(2) if m.get(f"mask{i}") is not None]
    if names:
        found = [probe.shapes(m[name].value) for name in names]  # type: ignore[arg-type]
        if any(f is None for f in found):
            return None, False, f"the runtime shape of the mask is unknown ({probe.error or 'not probed'})"
        for i, (qs, ks) in enumerate(zip(xq, xkv, strict=True)):
            parts = [f[i] for f in found]  # type: ignore[index]
            if any(len(p) != 4 for p in parts):
                return None, False, f"the mask of shapes {parts} is not 4-D"
            shape = tuple(int(x) for x in np.broadcast_shapes(*parts))
            if shape[0] not in (1, qs[0]) or shape[1] not in (1, n) or shape[2:] != (qs[1], ks[1]):
                return None, False, f"the mask of shape {shape} is not (B or 1, N or 1, S, L) for q {qs} and k/v {ks}"
    return n, flats.pop(), ""


@transform("fuse_attention", dialects={"onnx"})
def fuse_attention(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse written-out multi-head self-attention into onnxruntime's com.microsoft::Attention."""
    check_target("fuse_attention", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_attention: emits onnxruntime's com.microsoft::Attention; pass target=onnxruntime"])
    probe = ShapeProbe(model, lambda: _candidates(model))
    needed = any(node.op == "Softmax" and any(reader.op == "MatMul" for reader, _ in node.output.uses())
                 for node in model.graph)  # an attention's probabilities: else no probe is run
    probe.measure_if(needed)  # before the sweep rewrites anything
    rules = RuleSet(name="fuse_attention")
    rule = _rule(model, probe)
    for name, pattern in _ALL_PATTERNS:
        rules.add(pattern, rule, name=name)
    cross = _cross_rule(model, probe)
    for name, pattern in _CROSS_PATTERNS:
        rules.add(pattern, cross, name=name)
    report = apply_rules(model, [rules])
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
