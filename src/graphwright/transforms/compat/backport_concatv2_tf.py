"""backport_concatv2: rewrite ``ConcatV2`` as the old ``Concat`` for runtimes that predate it.

Before::  ConcatV2(v0, ..., vN-1, axis) {N, T, Tidx}
After::   Concat(axis, v0, ..., vN-1)   {N, T}

Same result: both concatenate the N values along ``axis``; only the position
of the axis input moves (last -> first) and ``Tidx`` goes, since ``Concat``
takes an int32 axis only.  Unlike the original tool, a ``ConcatV2`` with an
int64 axis is left alone (``Concat`` cannot read it) and reported, and control
inputs stay control inputs.  O(N + E).
"""

from __future__ import annotations

from ...ir import DType, Model
from ..context import TransformContext
from ..registry import TransformResult, transform


@transform("backport_concatv2", dialects={"tf"})
def backport_concatv2(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace ConcatV2 by Concat (axis input first)."""
    rewritten = 0
    notes: list[str] = []
    for node in model.graph:
        if node.op != "ConcatV2" or not node.inputs:
            continue
        if node.attr("Tidx", DType.INT32) is not DType.INT32:
            notes.append(f"{node.name}: ConcatV2 with a {node.attr('Tidx').value} axis left alone "
                         "(Concat takes an int32 axis only)")
            continue
        values = node.inputs
        node.set_inputs((values[-1], *values[:-1]))
        node.op = "Concat"
        node.attrs.pop("Tidx", None)
        rewritten += 1
    return TransformResult(rewritten > 0, {"concats_backported": rewritten}, notes)
