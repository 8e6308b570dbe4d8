"""Whole-graph algorithms: topological order, reachability, structural check, naming.

All traversals are iterative (no recursion limit on deep graphs) and run in
O(N + E), except the stable topological order, which is O((N + E) log N)
because it keeps the existing order wherever the dependencies allow it.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable

import numpy as np

from ..errors import GraphCheckError
from .attributes import Attr, AttrKind
from .graph import Graph
from .model import Model
from .node import Node, Value
from .tensor import Tensor

__all__ = [
    "all_graphs",
    "topological_order", "ancestors", "check", "make_names_unique", "constant_value", "subgraphs",
]


#: Ops whose output feeds back into a loop (TF v1 while loops: NextIteration -> Merge).
#: Their data edges are back edges: ordering and cycle checks ignore them.
LOOP_BACK_OPS = frozenset({("tf", "NextIteration"), ("tf", "RefNextIteration")})


def _is_back_edge(producer: Node) -> bool:
    return (producer.dialect, producer.op) in LOOP_BACK_OPS


def _order_preds(node: Node) -> list[Node]:
    preds = [v._producer for v in node._inputs
             if v is not None and v._producer is not None and not _is_back_edge(v._producer)]
    preds.extend(node._control_inputs)
    return preds


def topological_order(graph: Graph) -> list[Node]:
    """Nodes ordered so every node follows its data and control inputs.

    Stable: among nodes whose inputs are ready, the one earliest in the current
    order goes first, so an already sorted graph keeps its order exactly (that
    case is detected in O(N + E) and returned at once).  Otherwise
    O((N + E) log N).  Raises :class:`GraphCheckError` naming nodes on a cycle.
    """
    nodes = list(graph)
    position = {node: i for i, node in enumerate(nodes)}
    if _is_sorted(nodes, position):
        return nodes
    pending = [0] * len(nodes)
    for i, node in enumerate(nodes):
        pending[i] = sum(1 for p in _order_preds(node) if p in position)
    ready = [i for i, count in enumerate(pending) if count == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        succs = list(node._control_users)
        if not _is_back_edge(node):
            succs.extend(user for value in node._outputs for user, _ in value._uses)
        for succ in succs:
            j = position.get(succ)
            if j is not None:
                pending[j] -= 1
                if pending[j] == 0:
                    heapq.heappush(ready, j)
    if len(order) != len(nodes):
        stuck = [n.name or n.op for i, n in enumerate(nodes) if pending[i] > 0][:5]
        raise GraphCheckError(f"graph has a cycle through nodes {stuck}; it cannot be ordered")
    return order


def _is_sorted(nodes: list[Node], position: dict[Node, int]) -> bool:
    """Whether every node already follows its (same-graph) inputs.  O(N + E)."""
    get = position.get
    for i, node in enumerate(nodes):
        for value in node._inputs:
            if value is not None and value._producer is not None and not _is_back_edge(value._producer):
                j = get(value._producer)
                if j is not None and j >= i:
                    return False
        for ctrl in node._control_inputs:
            j = get(ctrl)
            if j is not None and j >= i:
                return False
    return True


def ancestors(
    values: Iterable[Value], *, control: bool = True, stop: Collection[Node] = ()
) -> dict[Node, None]:
    """Every node the given values depend on, through data and (if asked) control edges.

    Nodes in ``stop`` are included but not looked past (a cut at the inputs).
    Values read from an enclosing graph by a node's subgraphs count as that
    node's inputs.  Iterative, O(N + E).
    """
    seen: dict[Node, None] = {}
    stack = [v.producer for v in values if v.producer is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen[node] = None
        if node in stop:
            continue
        for value in node.inputs:
            if value is not None and value.producer is not None and value.producer not in seen:
                stack.append(value.producer)
        if control:
            stack.extend(n for n in node.control_inputs if n not in seen)
        for sub in subgraphs(node):  # values captured from the outer scope
            for inner in _nested_nodes(sub):
                for value in inner.inputs:
                    if value is not None and value.producer is not None and value.producer.graph is node.graph:
                        stack.append(value.producer)
    return seen


def _nested_nodes(graph: Graph) -> list[Node]:
    """Nodes of ``graph`` and of all graphs nested in it.  Iterative."""
    out: list[Node] = []
    pending = [graph]
    while pending:
        g = pending.pop()
        for node in g:
            out.append(node)
            pending.extend(subgraphs(node))
    return out


def all_graphs(model: Model) -> list[Graph]:
    """The model's graphs and every graph nested in node attributes (If/Loop/Scan bodies), outer first.

    Iterative; O(N) over all graphs.
    """
    found: list[Graph] = []
    pending = list(model.graphs)
    graph_kind, graphs_kind = AttrKind.GRAPH, AttrKind.GRAPHS
    while pending:
        graph = pending.pop(0)
        found.append(graph)
        for node in graph:  # subgraphs(node), inlined: simplify calls this hundreds of times per model
            if node.attrs:
                for attr in node.attrs.values():
                    if attr.kind is graph_kind:
                        pending.append(attr.value)
                    elif attr.kind is graphs_kind:
                        pending.extend(attr.value)
    return found


def subgraphs(node: Node) -> list[Graph]:
    """Graphs held in the node's attributes (ONNX If/Loop/Scan bodies)."""
    found: list[Graph] = []
    if not node.attrs:
        return found
    for attr in node.attrs.values():
        if attr.kind is AttrKind.GRAPH:
            found.append(attr.value)
        elif attr.kind is AttrKind.GRAPHS:
            found.extend(attr.value)
    return found


def _visible(value: Value, graph: Graph) -> bool:
    """Whether ``value`` is defined in ``graph`` or in a graph enclosing it."""
    producer = value._producer
    owner = producer.graph if producer is not None else value.owner
    if owner is graph:
        return True
    scope: Graph | None = graph
    while scope is not None:
        if owner is scope:
            return True
        scope = scope.parent.graph if scope.parent is not None else None
    return False


def check(graph: Graph) -> None:
    """Structural check: inputs defined, control edges inside, acyclic, outputs produced.

    Recurses into subgraphs.  O(N + E) plus the topological sort.  Raises
    :class:`GraphCheckError` with the first problem found.
    """
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g:
            for i, value in enumerate(node.inputs):
                if value is not None and not _visible(value, g):
                    raise GraphCheckError(
                        f"node {node.name!r} ({node.op}) input {i} reads {value.name!r}, which nothing defines"
                    )
            for ctrl in node.control_inputs:
                if ctrl.graph is not g:
                    raise GraphCheckError(
                        f"node {node.name!r} has a control edge from {ctrl.name!r}, which is not in the graph"
                    )
            stack.extend(subgraphs(node))
        for value in g.outputs:
            if not _visible(value, g):
                raise GraphCheckError(f"graph output {value.name!r} is not produced by the graph")
        topological_order(g)


def make_names_unique(graph: Graph, *, nodes: bool = True, values: bool = True) -> int:
    """Rename duplicates (the later ones get ``_1``, ``_2``...).  Returns how many were renamed.

    Empty node names are left empty (ONNX allows them).  Deterministic; O(N + E).
    """
    renamed = 0
    if nodes:
        taken: set[str] = set()
        for node in graph:
            if node.name and node.name in taken:
                node.name = _fresh(node.name, taken)
                renamed += 1
            taken.add(node.name)
    if values:
        seen: set[str] = set()
        pool = list(graph.inputs) + list(graph.initializers)
        pool += [v for node in graph for v in node.outputs]
        for value in pool:
            if value.name in seen:
                value.name = _fresh(value.name, seen)
                renamed += 1
            seen.add(value.name)
    return renamed


def _fresh(base: str, taken: set[str]) -> str:
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def constant_value(value: Value) -> Tensor | None:
    """The constant data behind ``value`` in any dialect, or None if it is not constant.

    Knows initializers (ONNX, TFLite), TF ``Const`` nodes and ONNX ``Constant`` nodes.
    """
    if value.const is not None:
        return None if value._state_of is not None else value.const
    node = value.producer
    if node is None:
        return None
    if node.dialect == "tf" and node.op == "Const":
        attr = node.attrs.get("value")
        return attr.value if attr is not None and attr.kind is AttrKind.TENSOR else None
    if node.dialect == "onnx" and node.op == "Constant" and node.domain in ("", "ai.onnx"):
        for key, attr in node.attrs.items():
            if key == "value" and attr.kind is AttrKind.TENSOR:
                return attr.value
            if key in ("value_float", "value_floats"):
                return Tensor.from_numpy(np.asarray(attr.value, dtype=np.float32))
            if key in ("value_int", "value_ints"):
                return Tensor.from_numpy(np.asarray(attr.value, dtype=np.int64))
        return None
    return None




def set_constant_value(value: Value, tensor: Tensor) -> None:
    """Give the constant behind ``value`` new data (every reader sees it).

    The inverse of :func:`constant_value`: updates the initializer, or the
    ``value`` attribute of a TF ``Const`` / ONNX ``Constant`` node.  The old
    tensor is not modified (it may be shared).
    """
    if value.const is not None:
        value.const = tensor
        value.dtype, value.shape = tensor.dtype, tensor.shape
        return
    node = value.producer
    if node is not None and node.op in ("Const", "Constant"):
        node.attrs["value"] = Attr.tensor(tensor)
        for key in [k for k in node.attrs if k.startswith("value_")]:
            del node.attrs[key]  # ONNX Constant: exactly one value attribute
        if node.dialect == "tf":
            node.attrs["dtype"] = Attr.dtype(tensor.dtype)
        return
    raise ValueError(f"value {value.name!r} is not a constant")


def constant_values(graph: Graph) -> list[Value]:
    """Every constant value of the graph: initializers, then outputs of Const/Constant nodes.  O(N)."""
    found = [v for v in graph.initializers]
    for node in graph:
        if node.outputs and constant_value(node.outputs[0]) is not None and node.op in ("Const", "Constant"):
            found.append(node.outputs[0])
    return found
