"""fuse_embed_layer_norm: BERT's embeddings and their LayerNorm become onnxruntime's EmbedLayerNormalization.

Before → after (``target="onnxruntime"``; run after ``fuse_layer_norm``, which produces the
``LayerNormalization`` it reads)::

    w = Gather(W[V, H], ids)        s = Gather(S[T, H], segment_ids)       (segment: optional)
    p = Gather(P[N, H], positions)  positions = 0, 1, …, seq - 1 (proved, see below)
    y = LayerNormalization(w + s + p, γ[H], β[H]; axis = last)             (the Adds in any order)
        → y = com.microsoft::EmbedLayerNormalization(Cast(ids, int32)[, Cast(segment_ids, int32)],
                                                     W, P[, S], γ, β; epsilon)

The maths: the fused op looks up ``W[ids]``, ``S[segment_ids]`` and ``P[j]`` for the token at
sequence position ``j``, sums them and normalizes the sum over the hidden axis with γ, β and the
LayerNorm's epsilon: the same sum and the same normalization.  It reads int32 ids only, so
int64 ids go through a ``Cast``.  No mask is given to it (its ``mask_index`` output is
left unread): the attention mask keeps its own path, because ``mask_index`` is the number of
ones per row, which equals the mask only for right-padded masks.

The positions must be provably ``0 … seq − 1`` where ``seq`` is the ids' second dim, since the
fused op makes them itself: a ``Slice`` of a constant position table ``[1, N]`` (or ``[N]``)
that holds ``0 … N − 1``, from 0 with step 1 on its last axis, up to a length that is the ids'
second dim (``Shape(ids)[1:2]``, ``Unsqueeze``/``Reshape`` of ``Gather(Shape(ids), 1)``, or a
constant equal to a static second dim); or such a constant table ``[1, seq]`` itself.  This is
what the TorchScript and dynamo exports of transformers' BERT (and DistilBERT, without a
segment) compute from their ``position_ids`` buffer.

Not part of ``simplify --target onnxruntime`` (run it on request, like ``fuse_skip_layer_norm``):
on onnxruntime 1.32's CPU provider the fused op itself costs what it replaces (BERT, hidden
256, sequence 128, graph optimizations off: within 0.5 %), but with ``ORT_ENABLE_ALL`` its
typed output lets onnxruntime's own optimizer fuse the eight residual sums of the BERT
encoder into ``SkipLayerNormalization``, whose CPU kernel is slower than what it replaces:
the whole model gets 10–12 % slower (``benchmarks/ort_transformers.md``).

One difference stays: a negative id, which ``Gather`` reads from the end of the table, is out of
range for the fused op (onnxruntime fails the run); token ids are never negative.

Refused, with the reason in the report's notes: ``target="standard"``; ids that are not 2-D
integer tensors of one shape (word and segment ids); tables that are not 2-D float32 constants
of one hidden size; a ``Gather`` on another axis; positions not proved as above; γ/β that are
not float32 vectors of the hidden size; a normalization over more than the last axis or whose
mean/inverse-std outputs are read; intermediate sums or lookups read elsewhere, graph outputs
or with control edges.

Cost: one sweep, O(N); O(table rows) per fusion to check the position table.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Model, Node, Value, constant_value
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip, why_not_closed
from .._onnx import Names
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of
from ._common_onnx import MS_DOMAIN, ONNXRUNTIME, STANDARD, check_target, new_node, require_ms_domain
from .fuse_ort_contrib_onnx import DEFAULT_LN_EPSILON

__all__ = ["fuse_embed_layer_norm"]

#: ONNX's TensorProto code of int32 (Cast's ``to``).
_INT32 = 6
_INT_IDS = (DType.INT32, DType.INT64)


def _lookup(tag: str) -> Pattern:
    return P("Gather", CONST(name=f"{tag}_table"), ANY(name=f"{tag}_ids"), name=f"{tag}_gather", domain="")


def _ln(summed: Pattern) -> Pattern:
    return P("LayerNormalization", summed, CONST(name="gamma"), CONST(name="beta"), name="ln", domain="")


#: three lookups summed in any order, and two (no segment embedding)
_THREE = _ln(P("Add", P("Add", _lookup("a"), _lookup("b"), commutative=True, name="inner", domain=""),
               _lookup("c"), commutative=True, name="add", domain=""))
_TWO = _ln(P("Add", _lookup("a"), _lookup("c"), commutative=True, name="add", domain=""))


def _ints(value: Value | None) -> list[int] | None:
    tensor = constant_value(value) if value is not None else None
    if tensor is None or tensor.dtype not in _INT_IDS:
        return None
    return [int(v) for v in tensor.numpy().reshape(-1)]


def _same_shape(a: Value, b: Value) -> bool:
    """Statically the same shape: equal ints or the same named dims (never unknown dims)."""
    return a.shape is not None and a.shape == b.shape and None not in a.shape


def _is_seq_len(vector: Value, ids: tuple[Value, ...]) -> bool:
    """``vector`` is a one-element int vector holding the second dim of the (equal-shaped) ids."""
    first = ids[0]
    known = _ints(vector)
    if known is not None:
        seq = first.shape[1] if first.shape is not None and len(first.shape) == 2 else None
        return len(known) == 1 and isinstance(seq, int) and known[0] == seq
    node = vector.producer
    if node is None or node.domain not in ("", "ai.onnx") or vector.shape not in ((1,), None):
        return False
    if node.op == "Shape":  # Shape(ids, start=1, end=2)
        start, end = int(node.attr("start", 0)), node.attr("end", None)
        return node.inputs[0] in ids and start in (1, -1) and (end is not None and int(end) in (2,))
    if node.op in ("Unsqueeze", "Reshape") and node.inputs:
        if node.op == "Unsqueeze":
            axes = _ints(node.inputs[1]) if len(node.inputs) > 1 else list(node.attr("axes", ()) or ())
            if axes not in ([0], [-1]):
                return False
        elif _ints(node.inputs[1]) not in ([1], [-1]):
            return False
        scalar = node.inputs[0]
        gather = scalar.producer if scalar is not None else None
        if (gather is None or gather.op != "Gather" or gather.domain not in ("", "ai.onnx")
                or int(gather.attr("axis", 0)) != 0 or scalar.shape not in ((), None)):
            return False
        index = constant_value(gather.inputs[1])
        shape = gather.inputs[0].producer if gather.inputs[0] is not None else None
        return (index is not None and index.shape == () and _ints(gather.inputs[1]) in ([1], [-1])
                and shape is not None and shape.op == "Shape" and shape.domain in ("", "ai.onnx")
                and shape.inputs[0] in ids and "start" not in shape.attrs and "end" not in shape.attrs)
    return False


def _why_not_positions(positions: Value, ids: tuple[Value, ...]) -> str | None:
    """Why ``positions`` is not provably ``0 … seq − 1`` for the ids (see the module docstring), or None."""
    name = positions.name
    table = constant_value(positions)
    if table is not None:  # a constant [1, seq] (a fixed-shape export after folding)
        seq = ids[0].shape[1] if ids[0].shape is not None and len(ids[0].shape) == 2 else None
        values = _ints(positions)
        if (values is not None and isinstance(seq, int) and table.shape in ((1, seq), (seq,))
                and values == list(range(seq))):
            return None
        return f"positions {name!r} are a constant other than 0 … seq-1 for ids of shape {ids[0].shape}"
    node = positions.producer
    if node is None or node.op != "Slice" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
        return f"positions {name!r} are not a Slice of a constant position table"
    data = constant_value(node.inputs[0])
    if data is None or data.dtype not in _INT_IDS or len(data.shape) not in (1, 2) \
            or (len(data.shape) == 2 and data.shape[0] != 1):
        return f"positions {name!r} slice {node.inputs[0].name!r}, not a constant table [1, N] or [N]"
    rows = int(data.shape[-1])
    if [int(v) for v in data.numpy().reshape(-1)] != list(range(rows)):
        return f"position table {node.inputs[0].name!r} does not hold 0 … {rows - 1}"
    rank = len(data.shape)
    axes = _ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else list(range(rank))
    steps = _ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1] * len(axes or [])
    if axes is None or steps is None or [a % rank for a in axes] != [rank - 1] or steps != [1] \
            or _ints(node.inputs[1]) != [0]:
        return f"positions {name!r} are not the slice [0, seq) of the table's last axis"
    if node.inputs[2] is None or not _is_seq_len(node.inputs[2], ids):
        return f"positions {name!r} end at {getattr(node.inputs[2], 'name', None)!r}, not provably the ids' second dim"
    return None


def _as_int32(ids: Value, ln: Node, names: Names) -> tuple[Value, Node | None]:
    if ids.dtype is DType.INT32:
        return ids, None
    graph = ln.graph
    assert graph is not None
    out = Value(names.fresh(f"{ids.name}_int32"), DType.INT32, ids.shape)
    cast = Node("Cast", [ids], dialect="onnx", name=graph.unique_node_name(f"{ids.name}_cast_int32"),
                attrs={"to": Attr.int(_INT32)}, outputs=[out])
    return out, cast


def _rule(model: Model, names: Names):  # type: ignore[no-untyped-def]
    def rule(m: Match) -> Replacement | Skip:
        """Gather lookups summed + LayerNormalization -> com.microsoft::EmbedLayerNormalization."""
        ln = m.node
        assert ln is not None
        why = why_not_closed(m)
        if why:
            return m.skip(why)
        if any(out.num_uses or out.is_graph_output for out in ln.outputs[1:]):
            return m.skip(f"{ln.name!r} has its mean/inverse-std outputs read")
        tags = [t for t in ("a", "b", "c") if m.get(f"{t}_gather") is not None]
        lookups = {}
        for tag in tags:
            gather = m[f"{tag}_gather"].node
            assert gather is not None
            table = m.const(f"{tag}_table")
            if int(gather.attr("axis", 0)) != 0:
                return m.skip(f"{gather.name!r} gathers on axis {gather.attr('axis')}, not the table's rows")
            if table.dtype is not DType.FLOAT32 or len(table.shape) != 2:
                return m.skip(f"table {m[f'{tag}_table'].value.name!r} is not a 2-D float32 constant")
            lookups[tag] = (m[f"{tag}_ids"].value, m[f"{tag}_table"].value, table.shape[1])
        hidden = {h for _, _, h in lookups.values()}
        if len(hidden) != 1:
            return m.skip(f"the tables have different hidden sizes {sorted(hidden)}")
        (size,) = hidden
        # which lookup reads the positions: the others' ids are the model's ids (one shape, 2-D)
        chosen = None
        reasons = []
        for pos in tags:
            others = [t for t in tags if t != pos]
            ids = tuple(lookups[t][0] for t in others)
            if not all(v.dtype in _INT_IDS and v.shape is not None and len(v.shape) == 2 for v in ids):
                reasons.append(f"ids {[v.name for v in ids]} are not 2-D integer tensors")
                continue
            if len(ids) == 2 and not _same_shape(ids[0], ids[1]):
                reasons.append(f"ids {ids[0].name!r} {ids[0].shape} and {ids[1].name!r} {ids[1].shape} "
                               "are not statically of one shape")
                continue
            why = _why_not_positions(lookups[pos][0], ids)
            if why is None:
                chosen = pos, others
                break
            reasons.append(why)
        if chosen is None:
            return m.skip("; ".join(dict.fromkeys(reasons)))
        pos, others = chosen
        axis = int(ln.attr("axis", -1))
        if axis not in (-1, 2):
            return m.skip(f"{ln.name!r} normalizes from axis {axis}, not over the hidden axis only")
        for name in ("gamma", "beta"):
            array = np.asarray(m.array(name))
            if array.shape != (size,) or array.dtype != np.float32:
                return m.skip(f"{name} of shape {list(array.shape)} is not a float32 vector of size {size}")
        word_ids, cast_word = _as_int32(lookups[others[0]][0], ln, names)
        inputs: list[Value | None] = [word_ids]
        new: list[Node] = [] if cast_word is None else [cast_word]
        if len(others) == 2:
            segment_ids, cast_segment = _as_int32(lookups[others[1]][0], ln, names)
            inputs.append(segment_ids)
            if cast_segment is not None:
                new.append(cast_segment)
        else:
            inputs.append(None)
        inputs += [lookups[others[0]][1], lookups[pos][1], lookups[others[1]][1] if len(others) == 2 else None,
                   m["gamma"].value, m["beta"].value]
        attrs = {"epsilon": Attr.float(float(ln.attr("epsilon", DEFAULT_LN_EPSILON)))}
        node = new_node("EmbedLayerNormalization", inputs, ln, domain=MS_DOMAIN, attrs=attrs, outputs=2)
        node.outputs[1].dtype = DType.INT32  # mask_index: unread (no mask is given)
        require_ms_domain(model)
        return Replacement([*new, node], {ln.outputs[0]: node.outputs[0]})

    return rule


@transform("fuse_embed_layer_norm", dialects={"onnx"})
def fuse_embed_layer_norm(model: Model, ctx: TransformContext, *, target: str = STANDARD) -> TransformResult:
    """Fuse Gather embeddings (word, position[, segment]) + sum + LayerNormalization into EmbedLayerNormalization."""
    check_target("fuse_embed_layer_norm", target)
    if target != ONNXRUNTIME:
        return TransformResult(False, {"fused": 0}, [
            "fuse_embed_layer_norm: emits onnxruntime's com.microsoft::EmbedLayerNormalization; pass target=onnxruntime"])
    rule = _rule(model, Names(model))
    rules = RuleSet(name="fuse_embed_layer_norm")
    rules.add(_THREE, rule, name="embed_layer_norm")
    rules.add(_TWO, rule, name="embed_layer_norm")
    report = apply_rules(model, [rules])
    return result_of(report, stats={**report.by_rule, "fused": report.applied})
