"""Fusion safety checks, written once so rules don't copy them.

Each predicate takes what a ``where=`` receives (a node for ``P``, a value for
``ANY``/``CONST``) where that makes sense, so it can be passed directly:
``CONST(name="w", where=weight_not_shared)``.  :func:`fusable_chain` and
:func:`why_not_fusable` take a whole :class:`Match` (use them as a rule's
``check=`` or inside the replacement function).  Every check is O(degree) of
what it looks at, through the IR's def-use: none scans the graph.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir import Node, Value, constant_value
from .matcher import Match

__all__ = [
    "single_use", "no_control_edges", "not_graph_io", "same_dtype", "compatible_dtype", "is_constant",
    "weight_not_shared", "read_only_by", "same_graph", "fusable_chain", "why_not_fusable", "why_not_closed",
    "why_not_absorbed", "why_not_bypassable", "why_not_editable",
]


def single_use(item: Value | Node) -> bool:
    """Exactly one reader slot: the value's single use, or one use over all of a node's outputs.

    Graph outputs are not uses; combine with :func:`not_graph_io` to forbid them.
    """
    if isinstance(item, Node):
        return sum(out.num_uses for out in item.outputs) == 1
    return item.num_uses == 1


def no_control_edges(item: Node | Value) -> bool:
    """No control inputs and no control users (for a value: on its producer, if any)."""
    node = item.producer if isinstance(item, Value) else item
    return node is None or (not node.control_inputs and not node.control_users)


def not_graph_io(item: Value | Node) -> bool:
    """Neither a graph input nor a graph output (for a node: none of its outputs is)."""
    values = item.outputs if isinstance(item, Node) else (item,)
    return not any(v.is_graph_input or v.is_graph_output for v in values)


def same_dtype(*values: Value | None) -> bool:
    """All given values have the same, known dtype (an unknown dtype fails: we can't tell)."""
    dtypes = {v.dtype if v is not None else None for v in values}
    return len(dtypes) == 1 and None not in dtypes


def is_constant(value: Value | None) -> bool:
    """The value is constant in its dialect (:func:`graphwright.ir.constant_value`)."""
    return value is not None and constant_value(value) is not None


def weight_not_shared(value: Value | None) -> bool:
    """A constant read exactly once, so a rule may replace it with a rewritten copy.

    Also requires it not to be a graph input/output and, when a node produces
    it (a TF ``Const``, an ONNX ``Constant``), that node to have no other
    reader on any output and no control users.
    """
    if value is None or constant_value(value) is None or value.num_uses != 1 or not not_graph_io(value):
        return False
    node = value.producer
    return node is None or (single_use(node) and not node.control_users and not_graph_io(node))


def why_not_fusable(match: Match, *, check_root: bool = False, shared_inside: bool = False,
                    ignore: Iterable[Node] = ()) -> str | None:
    """Why the match's intermediates can't be fused away, or None when they can (Grappler Remapper's checks).

    Intermediates are the matched nodes other than the root: each must have a
    single reader over all its outputs, produce no graph input/output, and have
    no control inputs or users.  ``check_root=True`` also forbids control edges
    on the root.  ``shared_inside=True`` lets an intermediate have several readers
    as long as all of them are in the match (a LayerNorm's centred ``x - mean``
    feeds both the variance and the division).  ``ignore`` names matched nodes a rule checks by
    its own rule (weights whose control users may stay).  O(uses of the matched nodes).
    """
    root = match.root.node
    inside = set(match.nodes) if shared_inside else set()
    skipped = set(ignore)
    for node in match.nodes:
        if node is root or node in skipped:
            continue
        if shared_inside:
            outside = next((reader for out in node.outputs for reader, _ in out.uses() if reader not in inside), None)
            if outside is not None:
                return (f"intermediate {node.name!r} ({node.op}) is also read by "
                        f"{outside.name!r} ({outside.op}) outside the pattern")
        elif not single_use(node):
            count = sum(out.num_uses for out in node.outputs)
            return f"intermediate {node.name!r} ({node.op}) has {count} readers, not 1"
        if not not_graph_io(node):
            return f"intermediate {node.name!r} ({node.op}) is a graph input/output"
        if not no_control_edges(node):
            return f"intermediate {node.name!r} ({node.op}) has control edges"
    if check_root and root is not None and not no_control_edges(root):
        return f"root {root.name!r} ({root.op}) has control edges"
    return None


def fusable_chain(match: Match) -> bool:
    """:func:`why_not_fusable` as a boolean, for a rule's ``check=``."""
    return why_not_fusable(match) is None


def why_not_closed(match: Match) -> str | None:
    """Why the match can't be replaced as a closed sub-graph, or None when it can (the ONNX fusions' check).

    :func:`why_not_fusable` with ``shared_inside=True``: an intermediate may have several readers
    as long as all of them are in the match (a LayerNorm's centred ``x - mean`` feeds both the
    variance and the division); it is not a graph input/output and has no control edges.  The
    root may have control users (they move to the fused node) but no control inputs (the fused
    node would drop them).  O(uses of the matched nodes).
    """
    reason = why_not_fusable(match, shared_inside=True)
    root = match.root.node
    if reason is None and root is not None and root.control_inputs:
        return f"root {root.name!r} ({root.op}) has control inputs"
    return reason


def why_not_absorbed(node: Node) -> str | None:
    """Why ``node`` can't disappear into a fusion of its single reader, or None when it can.

    For an intermediate of a fusion that copies the control inputs of the nodes it replaces
    onto the fused node (the Graph Transform Tool's Resize/MirrorPad+Conv2D fusions), so,
    unlike :func:`why_not_fusable`, control *inputs* are allowed: all the node's outputs
    together have exactly one reader, none is a graph input or output, and no node waits on it
    (no control users).  Use it per intermediate in a rule's ``check``.  O(degree of the node).
    """
    if not single_use(node):
        count = sum(out.num_uses for out in node.outputs)
        return f"intermediate {node.name!r} ({node.op}) has {count} readers, not 1"
    if not not_graph_io(node):
        return f"intermediate {node.name!r} ({node.op}) is a graph input/output"
    if node.control_users:
        return f"intermediate {node.name!r} ({node.op}) has control users"
    return None


def read_only_by(item: Value | Node, readers: set[Node] | frozenset[Node]) -> bool:
    """Every reader of the value (for a node: of any of its outputs) is one of ``readers``, and no
    such value is a graph output: once ``readers`` are rewritten not to read it, it is dead (the
    first node of a chain a fusion folds into its reader).  O(uses)."""
    values = item.outputs if isinstance(item, Node) else (item,)
    return all(not v.is_graph_output and all(user in readers for user, _ in v.uses()) for v in values)


def same_graph(*nodes: Node | None) -> bool:
    """All the nodes are in one graph.  A pattern walks producers across an If/Loop body's
    boundary into the enclosing graph; a rewrite must not remove or move nodes there.  O(count)."""
    graphs = {id(node.graph) if node is not None else None for node in nodes}
    return len(graphs) == 1 and None not in graphs


def compatible_dtype(a: Value | None, b: Value | None) -> bool:
    """``a`` and ``b`` don't have two different known dtypes.  Unlike :func:`same_dtype`, an
    unknown dtype passes (nothing says the two differ): the check a bypass makes so that readers
    of ``b`` reading ``a`` instead see the element type they saw.  O(1)."""
    return a is None or b is None or a.dtype is None or b.dtype is None or a.dtype == b.dtype


def why_not_bypassable(old: Value, source: Value) -> str | None:
    """Why ``Replacement.bypass_to(old, source)`` would be refused, or None when it would apply.

    Outside the ``tf`` dialect a graph's output names are its interface: when ``old`` is a graph
    output, ``source`` takes its name, which it can only do as the output of a node of the same
    graph that is neither a graph input nor already a graph output (not an initializer, not a
    value of an enclosing graph).  The engine makes the same test when it applies the bypass;
    ask first when a rule must choose another rewrite instead.  O(1).
    """
    if not old.is_graph_output or old.producer is None:
        return None
    graph = old.producer.graph
    if graph is None or graph.dialect == "tf":
        return None
    producer = source.producer
    if producer is None or producer.graph is not graph or source.is_graph_input or source.is_graph_output:
        return (f"graph output {old.name!r} would be renamed: {source.name!r} cannot take its name "
                "(a graph input or output, a constant, or a value of an outer graph)")
    return None


def why_not_editable(node: Node, root: Node | None) -> str | None:
    """Why ``node`` can't be edited in place for a match rooted at ``root`` alone (a batch norm or
    a per-channel scale folded into the Conv that produces its input), or None when it can: the
    same graph as the root (a body's match may reach into the enclosing graph), one output, read
    once and not a graph input/output.  O(1)."""
    y = node.outputs[0] if node.outputs else None
    if y is None:
        return f"{node.op} {node.name!r} has no output"
    if not same_graph(node, root):
        return f"the {node.op} producing {y.name!r} is in an enclosing graph"
    if len(node.outputs) != 1:
        return f"the {node.op} producing {y.name!r} has {len(node.outputs)} outputs"
    if not (single_use(y) and not_graph_io(y)):
        return f"{y.name!r} is also read elsewhere or is a graph output"
    return None
