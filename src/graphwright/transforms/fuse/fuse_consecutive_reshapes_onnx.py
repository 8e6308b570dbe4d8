"""fuse_consecutive_reshapes: one Reshape instead of a chain of shape-only ops.

Before::  a = Unsqueeze(x[B, 64], [1]); b = Flatten(a); c = Reshape(b, [0, 4, 16])
After::   c = Reshape(x, [0, 4, 16])

Reshape, Flatten, Squeeze and Unsqueeze only relabel the dims of the same
elements in the same order, so a chain of them is one Reshape from the
chain's input ``x`` to the last output's shape.  The new shape constant is
read off the last output's (inferred) shape: concrete dims as they are, a
symbolic dim that ``x`` has at the same position as ``0`` (copy), and at
most one other dim as ``-1``; when that is not possible (two unknown dims,
or an empty dim) the chain is left alone.  A last Reshape whose own target
has no ``0`` (or only ``0`` copies of dims ``x`` shares) keeps its target.
The inner nodes go when nothing else reads them.  All graphs; O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Node, Value, topological_order
from .._onnx import Names, all_graphs, const_array, drop_node, is_standard, new_initializer, opset
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_consecutive_reshapes", "SHAPE_OPS"]

#: Ops that change only the shape, never the order of the elements.
SHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _target(x: Value, out: Value) -> list[int] | None:
    """A Reshape target taking ``x`` to ``out``'s shape, or None (see the module docstring)."""
    if out.shape is None:
        return None
    target: list[int] = []
    for j, dim in enumerate(out.shape):
        if isinstance(dim, int):
            if dim == 0:
                return None
            target.append(dim)
        elif isinstance(dim, str) and x.shape is not None and j < len(x.shape) and x.shape[j] == dim:
            target.append(0)
        else:
            target.append(-1)
    return target if target.count(-1) <= 1 else None


def _own_target(node: Node, x: Value, mid: Value) -> list[int] | None:
    """The last Reshape's own constant target, if it means the same when applied to ``x``."""
    if node.op != "Reshape" or len(node.inputs) < 2 or node.attr("allowzero", 0):
        return None
    target = const_array(node.inputs[1])
    if target is None or target.ndim != 1:
        return None
    for j, want in enumerate(target.tolist()):
        if want != 0:
            continue
        if mid.shape is None or x.shape is None or j >= len(x.shape) or j >= len(mid.shape):
            return None
        if mid.shape[j] is None or mid.shape[j] != x.shape[j]:
            return None  # 0 would copy a different dim from x
    return [int(t) for t in target.tolist()]


@transform("fuse_consecutive_reshapes", dialects={"onnx"})
def fuse_consecutive_reshapes(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace chains of Reshape/Flatten/Squeeze/Unsqueeze by one Reshape."""
    if opset(model) < 5:
        return TransformResult(False, {"chains_fused": 0}, ["Reshape takes its shape as an input from opset 5 on"])
    names = Names(model)
    fused = 0
    for graph in all_graphs(model):
        for node in topological_order(graph):
            if node.graph is None or node.op not in SHAPE_OPS or not is_standard(node) or not node.inputs:
                continue
            mid = node.inputs[0]
            inner = mid.producer if mid is not None else None
            if mid is None or inner is None or inner.op not in SHAPE_OPS or not is_standard(inner):
                continue
            if inner.graph is not graph or not inner.inputs or inner.inputs[0] is None:
                continue
            x = inner.inputs[0]
            target = _own_target(node, x, mid) or _target(x, node.output)
            if target is None:
                continue
            shape_value = new_initializer(graph, np.asarray(target, dtype=np.int64), f"{node.name or 'reshape'}_shape", names)
            node.op = "Reshape"
            node.attrs = {}
            node.set_inputs([x, shape_value])
            fused += 1
            if not any(v.num_uses or v.is_graph_output for v in inner.outputs):
                drop_node(inner)
    return TransformResult(bool(fused), {"chains_fused": fused})
