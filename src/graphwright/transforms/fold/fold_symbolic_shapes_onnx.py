"""fold_symbolic_shapes: constant Reshape/Expand targets from shape glue whose dims are symbolic.

Before::  s = Shape(h[B, S, 64]); b = Unsqueeze(Gather(s, 0), [0]); q = Unsqueeze(Gather(s, 1), [0])
          t = Concat(b, q, [-1], [16]); y = Reshape(h2[B, S, 64], t)
After::   y = Reshape(h2, [0, 0, -1, 16])      (the glue goes when nothing else reads it)

Exporters compute shapes at run time from ``Shape`` when dims are dynamic, so
constant folding cannot remove that glue.  This pass evaluates 1-D integer
glue *symbolically*: each element is an int or a dim symbol taken from the
inferred shapes (``B``, ``S``; ONNX names unknown dims ``unk__N``; the same
symbol is the same size, an unnamed dim is equal to nothing).  It follows
Shape (start/end), Gather with constant indices, Unsqueeze/Squeeze/Reshape
between scalars and 1-element vectors, Concat, Cast to integers, Identity,
Slice with constant bounds, and ``Where(Equal(v, c), a, v)`` (a dim is never
negative, so ``Equal(dim, -1)`` is false: torch's ``expand(-1)`` glue).

A ``Reshape(x, v)`` (``allowzero`` 0) whose target elements are all known
becomes ``Reshape(x, c)``: ints as they are; a symbol that ``x`` has at the
same position becomes ``0`` (copy that dim); one other symbol becomes ``-1``.
An ``Expand(x, v)`` gets ``c`` with ``1`` wherever the symbol is the dim ``x``
already has at that (right-aligned) position.  Anything else is left alone.

Two values of the same dtype and rank with the same elements are the same
vector: readers of the later one read the earlier one (e.g. ``Concat`` of
every ``Gather(Shape(x), i)`` in order is ``Shape(x)``, and torch's
``Where(Equal(s, -1), 1, s)`` is ``s``), and the glue that made it goes.
All graphs; O(N + E) (vectors are shape-sized).
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Node, Value, topological_order
from .._onnx import Names, all_graphs, const_array, is_standard, new_initializer
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fold_symbolic_shapes"]

#: One element of a shape vector: a size, a dim symbol, or an opaque unknown.
Elem = object
_MAX_LEN = 64


class _Unknown:
    """A dim nothing else is known to equal."""

    __slots__ = ()


def _dims(value: Value) -> list[Elem] | None:
    if value.shape is None:
        return None
    return [d if isinstance(d, (int, str)) else _Unknown() for d in value.shape]


class _Eval:
    def __init__(self) -> None:
        self.vectors: dict[Value, list[Elem]] = {}
        self.scalars: set[Value] = set()  # vectors that are 0-d scalars of one element
        self.seen: dict[tuple[object, ...], Value] = {}  # (dtype, scalar, elements) -> first value

    def get(self, value: Value | None) -> list[Elem] | None:
        if value is None:
            return None
        found = self.vectors.get(value)
        if found is not None:
            return found
        array = const_array(value)
        if array is None or array.dtype.kind not in "iu" or array.ndim > 1 or array.size > _MAX_LEN:
            return None
        if array.ndim == 0:
            self.scalars.add(value)
        return [int(x) for x in array.reshape(-1)]

    def visit(self, node: Node) -> Value | None:
        """Evaluate ``node``; returns an earlier value holding the same vector, if there is one."""
        out = self._evaluate(node)
        if out is None or len(out) > _MAX_LEN or len(node.outputs) != 1:
            return None
        value = node.output
        self.vectors[value] = out
        if value.dtype is None or value.shape is None or len(value.shape) > 1:
            return None
        key = (value.dtype, len(value.shape), tuple(out))
        first = self.seen.setdefault(key, value)
        return first if first is not value else None

    def _evaluate(self, node: Node) -> list[Elem] | None:
        op, ins = node.op, node.inputs
        if op == "Shape" and ins and ins[0] is not None:
            dims = _dims(ins[0])
            if dims is None:
                return None
            n = len(dims)
            start = int(node.attr("start", 0))
            end = node.attr("end")
            lo = max(0, min(n, start + n if start < 0 else start))
            hi = n if end is None else max(0, min(n, int(end) + n if int(end) < 0 else int(end)))
            return dims[lo:hi]
        data = self.get(ins[0]) if ins else None
        if data is None:
            return None
        if op in ("Identity", "Cast") and (op == "Identity" or node.attr("to") in (6, 7)):
            self._same_rank(node, ins[0])
            return data
        if op == "Gather" and len(ins) == 2:
            idx = const_array(ins[1])
            if idx is None or idx.ndim > 1 or int(node.attr("axis", 0)) != 0:
                return None
            picked = []
            for i in idx.reshape(-1).tolist():
                if not -len(data) <= i < len(data):
                    return None
                picked.append(data[i])
            if idx.ndim == 0:
                self.scalars.add(node.output)
            return picked
        if op in ("Unsqueeze", "Squeeze", "Reshape"):
            return data if len(data) == 1 else None
        if op == "Concat":
            parts = [self.get(v) for v in ins]
            if any(p is None for p in parts):
                return None
            return [e for p in parts for e in p]  # type: ignore[union-attr]
        if op == "Slice" and len(ins) >= 3:
            bounds = [const_array(v) if v is not None else None for v in ins[1:]]
            if bounds[0] is None or bounds[1] is None or any(b is None for b, v in zip(bounds, ins[1:]) if v is not None):
                return None
            step = int(bounds[3].reshape(-1)[0]) if len(bounds) > 3 and bounds[3] is not None else 1
            return data[slice(int(bounds[0].reshape(-1)[0]), int(bounds[1].reshape(-1)[0]), step)]
        if op == "Equal" and len(ins) == 2:
            other = self.get(ins[1])
            if other is None:
                return None
            return _equal(data, other)
        if op == "Where" and len(ins) == 3:
            a, b = self.get(ins[1]), self.get(ins[2])
            if a is None or b is None or not all(isinstance(c, bool) for c in data):
                return None
            n = max(len(data), len(a), len(b))
            if any(len(v) not in (1, n) for v in (data, a, b)):
                return None
            pick = [(a if data[i if len(data) > 1 else 0] else b) for i in range(n)]
            return [p[i if len(p) > 1 else 0] for i, p in enumerate(pick)]
        return None

    def _same_rank(self, node: Node, source: Value | None) -> None:
        if source is not None and source in self.scalars:
            self.scalars.add(node.output)


def _equal(a: list[Elem], b: list[Elem]) -> list[Elem] | None:
    n = max(len(a), len(b))
    if len(a) not in (1, n) or len(b) not in (1, n):
        return None
    out: list[Elem] = []
    for i in range(n):
        x, y = a[i if len(a) > 1 else 0], b[i if len(b) > 1 else 0]
        if isinstance(x, int) and isinstance(y, int):
            out.append(x == y)
        elif (isinstance(x, int) and x < 0) or (isinstance(y, int) and y < 0):
            out.append(False)  # a dim is never negative
        else:
            return None
    return out


def _reshape_target(x: Value, elems: list[Elem]) -> list[int] | None:
    target: list[int] = []
    for j, e in enumerate(elems):
        if isinstance(e, bool):
            return None
        if isinstance(e, int):
            target.append(e)
        elif isinstance(e, str) and x.shape is not None and j < len(x.shape) and x.shape[j] == e:
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1 or any(t < -1 for t in target):
        return None
    return target


def _expand_target(x: Value, elems: list[Elem]) -> list[int] | None:
    if x.shape is None:
        return None
    offset = len(elems) - len(x.shape)
    target: list[int] = []
    for j, e in enumerate(elems):
        if isinstance(e, int) and not isinstance(e, bool):
            target.append(e)
        elif isinstance(e, str) and 0 <= j - offset < len(x.shape) and x.shape[j - offset] == e:
            target.append(1)
        else:
            return None
    return target


@transform("fold_symbolic_shapes", dialects={"onnx"})
def fold_symbolic_shapes(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace Reshape/Expand targets computed from dynamic shapes by constants where dims match."""
    names = Names(model)
    rewritten = merged = 0
    for graph in all_graphs(model):
        evaluator = _Eval()
        for node in topological_order(graph):
            if not is_standard(node):
                continue
            if node.op in ("Reshape", "Expand") and len(node.inputs) == 2 and node.inputs[0] is not None:
                shape_in = node.inputs[1]
                if shape_in is not None and shape_in.producer is not None and const_array(shape_in) is None:
                    elems = evaluator.get(shape_in)
                    if elems is not None:
                        if node.op == "Reshape" and not node.attr("allowzero", 0):
                            target = _reshape_target(node.inputs[0], elems)
                        elif node.op == "Expand":
                            target = _expand_target(node.inputs[0], elems)
                        else:
                            target = None
                        if target is not None:
                            const = new_initializer(graph, np.asarray(target, dtype=np.int64),
                                                    f"{node.name or node.op}_shape", names)
                            node.replace_input(1, const)
                            rewritten += 1
            same = evaluator.visit(node)
            if same is not None and not node.output.is_graph_output:
                node.output.replace_all_uses_with(same, graph_outputs=False)
                merged += 1
    return TransformResult(bool(rewritten or merged), {"targets_folded": rewritten, "vectors_merged": merged})
