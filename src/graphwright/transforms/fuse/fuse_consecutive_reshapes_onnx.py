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
The inner nodes go when nothing else reads them.

A rule of the rewrite engine; a chain that can't be written as one Reshape is
skipped with the reason.  The pattern matches the inner node unless an earlier
match of the same sweep claimed it (a chain of three or more), then looks at it
through ``where=``, so a chain collapses in one sweep, in the order the pass
always used (same shape constants, same names).  The outer node is re-emitted,
edited in place, so its output value (value_info, graph output record) is the
same object; a claimed inner node left unread goes in a clean-up rule set run
afterwards.  All graphs; O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Graph, Model, Node, Tensor, Value
from ...patterns import ANY, Match, P, Replacement, RuleSet, Skip, read_only_by, same_graph
from .._onnx import Names, const_array, is_standard, opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

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


def _made_by_shape_op(value: Value) -> bool:
    """``where=`` of the chain's middle value: a standard shape-only op with a data input made it."""
    inner = value.producer
    return (inner is not None and inner.op in SHAPE_OPS and is_standard(inner)
            and bool(inner.inputs) and inner.inputs[0] is not None)


_OPS = "|".join(sorted(SHAPE_OPS))
#: ``outer(inner(x, ...), ...)`` for two shape-only ops.  The inner node is matched (and removed
#: when nothing else reads it) -- or, when an earlier match of the same sweep claimed it (it is the
#: outer node of the previous link of a chain), seen through ``where=``: a chain collapses in one
#: sweep, root after root in graph order, exactly as the pass always did.
PATTERN = P(_OPS, P(_OPS, ANY, ..., domain="", name="inner") | ANY(name="mid", where=_made_by_shape_op), ...,
            domain="")


def _rules(model: Model) -> tuple[RuleSet, RuleSet, set[Node], list[Node]]:
    """The fusion rule; the clean-up rule removing the claimed inner nodes it left unread; the set
    of those; and the list the fusion appends its new ``Constant`` nodes to (IR version < 4 only)."""
    names = Names(model)
    unread: set[Node] = set()
    constant_nodes: list[Node] = []

    def fuse(m: Match) -> Replacement | Skip:  # outer(inner(x)) -> Reshape(x, shape of outer's output)
        node, matched = m.node, "inner" in m
        mid = m["inner" if matched else "mid"].value
        assert node is not None and mid is not None
        inner = mid.producer
        assert inner is not None
        if not same_graph(inner, node):
            return m.skip(f"the {inner.op} making {mid.name!r} is in an enclosing graph")
        x = inner.inputs[0]
        assert x is not None
        target = _own_target(node, x, mid) or _target(x, node.output)
        if target is None:
            if node.output.shape is None:
                return m.skip(f"the shape of {node.output.name!r} is not known")
            return m.skip(f"no Reshape target takes {x.name!r} {_dims(x)} to {_dims(node.output)} "
                          "(at most one dim may be unknown, none empty)")
        array = np.asarray(target, dtype=np.int64)
        name = names.fresh(f"{node.name or 'reshape'}_shape")
        made: list[Node] = []
        if names.constant_nodes:  # IR < 4: an initializer would have to be a graph input too
            tensor = Tensor.from_numpy(array)
            made.append(Node("Constant", (), dialect="onnx", name=name, attrs={"value": Attr.tensor(tensor)},
                             outputs=[Value(name, tensor.dtype, tensor.shape)]))
            shape = made[0].output
            constant_nodes.append(made[0])
        else:
            shape = m.constant(array, name=name)
        dead = read_only_by(inner, {node})
        if dead and not matched:
            unread.add(inner)
        # The root stays (re-emitted, edited in place): its output keeps its identity, so its
        # value_info, graph-output record and readers are untouched.  A matched inner node other
        # nodes still read stays too.
        node.op = "Reshape"
        node.attrs = {}
        node.set_inputs([x, shape])
        return Replacement([*made, *([inner] if matched and not dead else []), node])

    fusion = RuleSet(name="fuse_consecutive_reshapes")
    fusion.add(PATTERN, fuse, name="chains_fused")  # Unsqueeze/Flatten/Squeeze/Reshape(...(x)) -> Reshape(x, s)
    cleanup = RuleSet(name="fuse_consecutive_reshapes_cleanup")
    cleanup.add(P(_OPS, where=unread.__contains__), lambda m: Replacement([], {}),
                name="inner_removed")  # a claimed inner node nothing reads any more -> gone
    return fusion, cleanup, unread, constant_nodes


def _dims(value: Value) -> str:
    return "?" if value.shape is None else f"[{', '.join(str(d) for d in value.shape)}]"


def _constants_first(made: list[Node]) -> None:
    """Put the new ``Constant`` nodes (IR < 4) at the head of their graph, the newest first: where
    this pass has always put them (``new_initializer``), so its output stays byte-identical."""
    graphs: dict[Graph, list[Node]] = {}
    for node in made:
        if node.graph is not None:
            graphs.setdefault(node.graph, []).append(node)
    for graph, nodes in graphs.items():
        first = set(nodes)
        graph.sort([*reversed(nodes), *(n for n in graph if n not in first)])


@transform("fuse_consecutive_reshapes", dialects={"onnx"})
def fuse_consecutive_reshapes(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace chains of Reshape/Flatten/Squeeze/Unsqueeze by one Reshape."""
    if opset_version(model) < 5:
        return TransformResult(False, {"chains_fused": 0}, ["Reshape takes its shape as an input from opset 5 on"])
    fusion, cleanup, unread, constant_nodes = _rules(model)
    report = apply_rules(model, [fusion])
    if unread:  # dead until now, read by nothing: removing them later changes no other match
        report.merge(apply_rules(model, [cleanup], graphs=list(dict.fromkeys(n.graph for n in unread if n.graph))))
    _constants_first(constant_nodes)
    return result_of(report, stats={"chains_fused": report.by_rule.get("chains_fused", 0)})
