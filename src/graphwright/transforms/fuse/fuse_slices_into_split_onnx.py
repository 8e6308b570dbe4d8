"""fuse_slices_into_split: sibling Slices cutting one axis into disjoint pieces -> one Split.

Before::  a = Slice(x, starts=[0], ends=[C], axes=[1]); b = Slice(x, starts=[C], ends=[2C], axes=[1])
After::   a, b = Split(x, split=[C, C], axis=1)

The TorchScript exporter writes ``torch.chunk`` / ``split`` of a static dim as one Slice per piece
(YOLOv8's C2f: ``cv1(x).chunk(2, 1)``).  Slices of the same value that each cut one axis of known
size with step 1 and constant bounds are grouped by axis; pieces that do not overlap and are not
empty become the outputs of one Split along that axis (a gap between or after them becomes an
output nobody reads; a Split's sizes must add up to the axis).  Each Slice's readers then read the
matching Split output, which takes the Slice output's name.  Slices with another axis, a step other
than 1, a bound that is not a constant, or an axis whose size is unknown are left alone, as are
pieces that overlap (two Slices of the same piece are ``merge_duplicate_nodes``'s).  Opset >= 10
(Slice's parameters as inputs); Split's sizes are an input from opset 13 on, an attribute before.
All graphs, O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Graph, Model, Node, Value, all_graphs
from .._onnx import Names, const_array, is_standard, new_initializer, opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_slices_into_split"]


def _piece(node: Node, x: Value) -> tuple[int, int, int] | None:
    """``(axis, start, end)`` of a Slice of ``x`` cutting one axis of known size with step 1, else None."""
    if not is_standard(node) or node.op != "Slice" or node.inputs[0] is not x or node.control_inputs \
            or node.control_users or len(node.inputs) < 3 or x.shape is None:
        return None
    params = [const_array(v) if v is not None else None for v in list(node.inputs[1:]) + [None] * (5 - len(node.inputs))]
    starts, ends, axes, steps = params
    if starts is None or ends is None or starts.size != 1 or ends.size != 1:
        return None
    if (node.inputs[3:4] and node.inputs[3] is not None and axes is None) or \
            (node.inputs[4:5] and node.inputs[4] is not None and (steps is None or int(steps.reshape(-1)[0]) != 1)):
        return None
    rank = len(x.shape)
    axis = 0 if axes is None else int(axes.reshape(-1)[0])
    axis = axis + rank if axis < 0 else axis
    size = x.shape[axis] if 0 <= axis < rank else None
    if not isinstance(size, int):
        return None
    start, end = (int(v.reshape(-1)[0]) for v in (starts, ends))
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, 0), size)
    return (axis, start, end) if end > start else None


def _groups(graph: Graph) -> list[tuple[Value, int, list[tuple[int, int, Node]]]]:
    """Per (value, axis): its single-axis Slices in graph order, when two or more of them are disjoint."""
    found: dict[tuple[int, int], tuple[Value, int, list[tuple[int, int, Node]]]] = {}
    for node in graph:
        x = node.inputs[0] if node.op == "Slice" and node.inputs else None
        if x is None or x.num_uses < 2:
            continue
        piece = _piece(node, x)
        if piece is not None:
            found.setdefault((id(x), piece[0]), (x, piece[0], []))[2].append((piece[1], piece[2], node))
    groups = []
    for x, axis, pieces in found.values():
        kept, end = [], 0
        for start, stop, node in sorted(pieces, key=lambda p: (p[0], p[1])):
            if start >= end:  # overlapping pieces stay Slices
                kept.append((start, stop, node))
                end = stop
        if len(kept) >= 2:
            groups.append((x, axis, kept))
    return groups


def _split(graph: Graph, x: Value, axis: int, pieces: list[tuple[int, int, Node]], names: Names,
           sizes_as_input: bool) -> None:
    """Replace the Slices of ``pieces`` by one Split placed before the first of them in graph order."""
    sizes: list[int] = []
    outputs: list[Value] = []
    taken: list[tuple[Node, Value]] = []
    at = 0
    for start, stop, node in pieces:
        if start > at:  # a gap: an output nobody reads
            sizes.append(start - at)
            outputs.append(Value(names.fresh(f"{x.name}_split_gap"), x.dtype))
        old = node.output
        new = Value(old.name, old.dtype, old.shape)
        old.name = names.fresh(f"{old.name}__sliced")
        sizes.append(stop - start)
        outputs.append(new)
        taken.append((node, new))
        at = stop
    size = x.shape[axis]  # type: ignore[index]
    if at < size:
        sizes.append(size - at)
        outputs.append(Value(names.fresh(f"{x.name}_split_tail"), x.dtype))
    attrs = {"axis": Attr.int(axis)}
    inputs = [x]
    if sizes_as_input:
        inputs.append(new_initializer(graph, np.asarray(sizes, np.int64), f"{x.name}_split_sizes", names))
    else:
        attrs["split"] = Attr.ints(sizes)
    first = next(n for n in graph if any(n is p[2] for p in pieces))
    split = Node("Split", inputs, dialect="onnx", name=graph.unique_node_name(f"{first.name or 'Slice'}_split"),
                 attrs=attrs, outputs=outputs)
    graph.insert_before(first, split)
    for node, new in taken:
        old = node.output
        if old.is_graph_output:
            graph.set_outputs([new if v is old else v for v in graph.outputs])
        old.replace_all_uses_with(new, graph_outputs=False)
        graph.remove(node)


@transform("fuse_slices_into_split", dialects={"onnx"})
def fuse_slices_into_split(model: Model, ctx: TransformContext) -> TransformResult:
    """Merge sibling single-axis Slices of disjoint pieces of one value into one Split."""
    opset = opset_version(model)
    if opset < 10:
        return TransformResult(False, {"slices_to_split": 0}, ["Slice takes its parameters as inputs from opset 10 on"])
    names = Names(model)
    merged = splits = 0
    for graph in all_graphs(model):
        for x, axis, pieces in _groups(graph):
            _split(graph, x, axis, pieces, names, opset >= 13)
            merged += len(pieces)
            splits += 1
    return TransformResult(splits > 0, {"slices_to_split": merged, "splits": splits})
