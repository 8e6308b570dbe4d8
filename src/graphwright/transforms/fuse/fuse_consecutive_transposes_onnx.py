"""fuse_consecutive_transposes: one Transpose instead of a chain.

Before::  t1 = Transpose(x, perm=p1); t2 = Transpose(t1, perm=p2)
After::   t2 = Transpose(x, perm=q)  with q[i] = p1[p2[i]]   (x itself when q is the identity)

Output axis ``i`` of ``t2`` is axis ``p2[i]`` of ``t1``, which is axis
``p1[p2[i]]`` of ``x``.  A missing ``perm`` reverses the axes (the rank must
then be known).  The first Transpose is removed when nothing else reads it
(``eliminate_dead_code``).  Nodes are visited in topological order, so a chain
of any length collapses in one pass.  All graphs; O(N + E).
"""

from __future__ import annotations

from ...ir import Attr, Model, Node, topological_order
from .._onnx import all_graphs, bypass, drop_node, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_consecutive_transposes"]


def _perm(node: Node) -> list[int] | None:
    perm = node.attr("perm")
    if perm is not None:
        return [int(p) for p in perm]
    x = node.inputs[0] if node.inputs else None
    rank = len(x.shape) if x is not None and x.shape is not None else None
    return None if rank is None else list(reversed(range(rank)))


@transform("fuse_consecutive_transposes", dialects={"onnx"})
def fuse_consecutive_transposes(model: Model, ctx: TransformContext) -> TransformResult:
    """Compose Transpose(Transpose(x)) into one Transpose (or none)."""
    fused = removed = 0
    for graph in all_graphs(model):
        for node in topological_order(graph):
            if node.graph is None or node.op != "Transpose" or not is_standard(node) or not node.inputs:
                continue
            inner = node.inputs[0].producer if node.inputs[0] is not None else None
            if inner is None or inner.op != "Transpose" or not is_standard(inner) or inner.graph is not graph:
                continue
            p1, p2 = _perm(inner), _perm(node)
            if p1 is None or p2 is None or len(p1) != len(p2):
                continue
            composed = [p1[i] for i in p2]
            node.replace_input(0, inner.inputs[0])
            node.attrs["perm"] = Attr.ints(composed)
            fused += 1
            if not any(v.num_uses or v.is_graph_output for v in inner.outputs):
                drop_node(inner)
            if composed == list(range(len(composed))) and bypass(node, node.inputs[0]):  # type: ignore[arg-type]
                removed += 1
    return TransformResult(bool(fused), {"transposes_fused": fused, "identity_removed": removed})
