"""fuse_consecutive_slices: one Slice instead of two.

Before::  a = Slice(x, starts=[0], ends=[H], axes=[1]); y = Slice(a, starts=[0], ends=[W], axes=[2])
After::   y = Slice(x, starts=[0, 0], ends=[H, W], axes=[1, 2])

Slicing one axis does not move the elements along any other axis, so two Slices over disjoint
axes are one Slice over the union: the outer node keeps its name and output, takes the inner
node's input and the concatenated starts/ends/axes/steps (int64).  Two cuts of the same axis
compose when both step by 1 and the axis's size is known: ``[s2, e2)`` of ``[s1, e1)`` is
``[s1 + s2, s1 + e2)`` once negative and overshooting bounds are resolved against the sizes.
An inner Slice read by several Slices merges into each of them when every one of its readers
can take it (all Slices of this graph, reading it as their data): each is rewritten in turn, the
inner staying until the last one takes it — ``x[:, 0::2][:, :, 0::2]`` and
``x[:, 0::2][:, :, 1::2]`` (Swin's patch merging) are two Slices, not three.  Node count never
grows, and no reader is rewritten while another one still needs the inner.  Where the inner
Slice is read by anything else, or a parameter is not a constant, or a shared axis can't be
composed, or a negative axis can't be resolved for want of the input's rank, the pair is left
alone with the reason.  torchvision's Swin crops its padded windows this way
(``x[:, :H, :W, :]`` exported as one Slice per axis).  Opset ≥ 10 (Slice's parameters as
inputs).  All graphs; a rule of the rewrite engine, O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Node, Value
from ...patterns import (
    ANY,
    Match,
    P,
    Replacement,
    RuleSet,
    Skip,
    no_control_edges,
    not_graph_io,
    same_graph,
    why_not_fusable,
)
from .._onnx import const_array, opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_consecutive_slices"]

#: A sweep rewrites matches that do not overlap, so one reader of a shared inner Slice each: up to
#: this many sweeps (stopping at the first that changes nothing) take a Slice read by that many.
SWEEPS = 8

PATTERN = P("Slice", P("Slice", ANY(name="x"), ..., domain="", name="inner"), ..., domain="")


def _params(node: Node, rank: int | None) -> tuple[list[np.ndarray], str | None]:
    """``[starts, ends, axes, steps]`` as int64 with the axes made non-negative, or the reason not."""
    inputs = list(node.inputs[1:]) + [None] * (5 - len(node.inputs))
    starts, ends = const_array(inputs[0]), const_array(inputs[1])
    if starts is None or ends is None:
        return [], f"{node.name!r}: starts/ends are not constants"
    count = starts.size
    axes = np.arange(count) if inputs[2] is None else const_array(inputs[2])
    steps = np.ones(count, np.int64) if inputs[3] is None else const_array(inputs[3])
    if axes is None or steps is None:
        return [], f"{node.name!r}: axes/steps are not constants"
    axes = axes.astype(np.int64).reshape(-1)
    if (axes < 0).any():
        if rank is None:
            return [], f"{node.name!r}: a negative axis and the input's rank is not known"
        axes = np.where(axes < 0, axes + rank, axes)
    return [starts.astype(np.int64).reshape(-1), ends.astype(np.int64).reshape(-1), axes,
            steps.astype(np.int64).reshape(-1)], None


def _bounds(start: int, end: int, size: int) -> tuple[int, int]:
    """Slice's ``[start, end)`` on an axis of ``size`` with step 1, negatives and overshoots resolved."""
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    return start, max(start, end)


def _compose(first: list[np.ndarray], second: list[np.ndarray], shared: set[int], x: Value
             ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Both slices with the shared axes' entries composed into the first (the second keeps the rest):
    on an axis of known size with steps 1, ``[s2, e2)`` of ``[s1, e1)`` is ``[s1 + s2, s1 + e2)``."""
    if x.shape is None:
        return None
    first = [a.copy() for a in first]
    keep = np.ones(second[2].size, bool)
    for j, axis in enumerate(second[2].tolist()):
        if axis not in shared:
            continue
        i = int(np.flatnonzero(first[2] == axis)[0])
        size = x.shape[axis] if axis < len(x.shape) else None
        if not isinstance(size, int) or first[3][i] != 1 or second[3][j] != 1:
            return None
        s1, e1 = _bounds(int(first[0][i]), int(first[1][i]), size)
        s2, e2 = _bounds(int(second[0][j]), int(second[1][j]), e1 - s1)
        first[0][i], first[1][i] = s1 + s2, s1 + e2
        keep[j] = False
    return first, [a[keep] for a in second]


def _merged(inner: Node, node: Node, x: Value) -> list[np.ndarray] | str:
    """``[starts, ends, axes, steps]`` of ``node(inner(x))`` as one Slice, or the reason not."""
    rank = len(x.shape) if x.shape is not None else None
    first, why = _params(inner, rank)
    second, why2 = _params(node, rank)
    if why or why2:
        return why or why2 or ""
    shared = set(first[2].tolist()) & set(second[2].tolist())
    if shared:
        composed = _compose(first, second, shared, x)
        if composed is None:
            return (f"{inner.name!r} and {node.name!r} both slice axis {sorted(shared)} "
                    "(composed only with steps 1 and that axis's size known)")
        first, second = composed
    return [np.concatenate([a, b]) for a, b in zip(first, second, strict=True)]


def _why_not_shared(inner: Node, x: Value) -> str | None:
    """Why an inner Slice with several readers can't merge into all of them, or None when it can."""
    if not not_graph_io(inner) or not no_control_edges(inner):
        return f"intermediate {inner.name!r} (Slice) is a graph output or has control edges"
    for reader, index in inner.output.uses():
        if reader.op != "Slice" or reader.domain not in ("", "ai.onnx") or index != 0 or not same_graph(inner, reader):
            return f"intermediate {inner.name!r} (Slice) is also read by {reader.name!r} ({reader.op}), not a Slice's data"
        merged = _merged(inner, reader, x)
        if isinstance(merged, str):
            return merged
    return None


def _rule(m: Match) -> Replacement | Skip:
    node, inner = m.node, m["inner"].node
    assert node is not None and inner is not None
    x: Value = m["x"].value  # type: ignore[assignment]
    reason = why_not_fusable(m)
    if reason and inner.output.num_uses > 1:
        reason = _why_not_shared(inner, x)
    if reason:
        return m.skip(reason)
    if not same_graph(inner, node):
        return m.skip(f"{inner.name!r} is in an enclosing graph")
    merged = _merged(inner, node, x)
    if isinstance(merged, str):
        return m.skip(merged)
    names = ("starts", "ends", "axes", "steps")
    params = [m.constant(array, name=f"{node.name or 'slice'}_{what}") for array, what in zip(merged, names, strict=True)]
    kept = [inner] if inner.output.num_uses > 1 else []  # still read by the other Slices: it stays
    node.set_inputs([x, *params])  # re-emitted in place: its output value (and its readers) stay
    return Replacement([*kept, node])


@transform("fuse_consecutive_slices", dialects={"onnx"})
def fuse_consecutive_slices(model: Model, ctx: TransformContext) -> TransformResult:
    """Merge Slice(Slice(x)) over disjoint axes into one Slice."""
    if opset_version(model) < 10:
        return TransformResult(False, {"slices_fused": 0}, ["Slice takes its parameters as inputs from opset 10 on"])
    rules = RuleSet(name="fuse_consecutive_slices")
    rules.add(PATTERN, _rule, name="slices_fused")
    report = apply_rules(model, [rules], sweeps=SWEEPS)
    return result_of(report, stats={"slices_fused": report.by_rule.get("slices_fused", 0)})
