"""What a replacement function returns, and the helpers that build its nodes.

Kept apart from the matcher and from ``replace_matching`` so both can use it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ir import Attr, DType, Node, Tensor, Value

__all__ = ["Replacement", "Skip", "clone_node", "make_constant"]


class Replacement:
    """The sub-graph that takes a match's place.

    ``nodes``: new nodes (not yet in any graph), inserted in this order just
    before the match root; and/or nodes *of the match* that stay (re-emitted:
    they are kept where they are, possibly edited).  Matched nodes not listed
    are removed.

    ``values``: ``{old value: new value}`` for outputs of matched nodes.  Every
    reader outside the replacement (and every graph output) of ``old`` is moved
    to ``new``.  When omitted, the root's outputs map in order to the outputs
    of the last node of ``nodes`` (the usual "the new node stands for the root"
    case); pass ``{}`` to map nothing.

    ``control_to``: the node that takes over the control users of removed nodes
    that have no mapped output to follow.
    """

    __slots__ = ("nodes", "values", "bypass", "control_to")

    def __init__(self, nodes: Iterable[Node] = (), values: Mapping[Value, Value] | None = None, *,
                 control_to: Node | None = None) -> None:
        self.nodes: list[Node] = list(nodes)
        for node in self.nodes:
            if not isinstance(node, Node):
                raise TypeError(f"Replacement nodes must be Node objects, got {type(node).__name__}")
        self.values: dict[Value, Value] | None = None if values is None else dict(values)
        self.bypass = False
        #: Where control users of removed nodes go when no mapped output says (a fused node
        #: with no outputs, or whose outputs nobody reads); usually a node of ``nodes``.
        self.control_to = control_to

    @classmethod
    def bypass_to(cls, old: Value, source: Value) -> Replacement:
        """Remove the match and let ``old``'s readers read ``source`` (``x*1 -> x``).

        When ``old`` is a graph output of an ONNX/TFLite graph, ``source`` takes its name, so the
        graph's interface is unchanged; the replacement is refused when ``source`` cannot (it is
        a graph input or output, a constant, or a value of an outer graph).
        """
        repl = cls((), {old: source})
        repl.bypass = True
        return repl

    def __repr__(self) -> str:
        return f"Replacement({len(self.nodes)} nodes, {len(self.values or {})} mapped values)"


class Skip:
    """Returned by a replacement function to leave a match alone, saying why (shown in the report)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = "") -> None:
        self.reason = str(reason)

    def __repr__(self) -> str:
        return f"Skip({self.reason!r})"


def clone_node(
    node: Node,
    *,
    inputs: Sequence[Value | None] | None = None,
    op: str | None = None,
    name: str | None = None,
    attrs: Mapping[str, Attr | None] | None = None,
    control_inputs: Iterable[Node] | None = None,
) -> Node:
    """A new node like ``node`` (not in any graph), with the given fields changed.

    Copies dialect, domain, attributes, device, meta, doc string and control
    inputs; ``attrs`` overrides single attributes (``None`` deletes one).
    Outputs are new values with the old dtypes, shapes and quantization; in
    the ``tf`` dialect they are named after the (new) node name, elsewhere
    they keep the old value names (the old ones normally disappear with the
    old node).  Creating the node registers its input uses at once.
    """
    new_name = node.name if name is None else name
    merged: dict[str, Attr] = dict(node.attrs)
    for key, attr in (attrs or {}).items():
        if attr is None:
            merged.pop(key, None)
        else:
            merged[key] = attr
    outputs: list[Value] = []
    for i, old in enumerate(node.outputs):
        value_name = (f"{new_name}:{i}" if i else new_name) if node.dialect == "tf" else old.name
        value = Value(value_name, old.dtype, old.shape, quant=old.quant)
        value.meta = dict(old.meta)
        value.doc_string = old.doc_string
        outputs.append(value)
    new = Node(
        node.op if op is None else op,
        node.inputs if inputs is None else inputs,
        dialect=node.dialect,
        name=new_name,
        domain=node.domain,
        attrs=merged,
        outputs=outputs,
        control_inputs=node.control_inputs if control_inputs is None else control_inputs,
        device=node.device,
    )
    new.meta = dict(node.meta)
    new.doc_string = node.doc_string
    return new


def make_constant(
    anchor: Node, array: Any, name: str, dtype: DType | None = None
) -> tuple[Node | None, Value]:
    """A constant in ``anchor``'s dialect: ``(node, value)``.

    ``tf``: a ``Const`` node (``dtype`` and ``value`` attributes), named
    uniquely in the anchor's graph.  ``onnx``/``tflite``: no node; the value
    carries the data and must be added as an initializer.  The array is copied
    once into a read-only tensor (``dtype`` defaults to the array's).
    """
    data = np.array(array, copy=True)
    if dtype is not None and dtype.numpy is not None and data.dtype != dtype.numpy:
        data = data.astype(dtype.numpy)
    tensor = Tensor.from_numpy(data, dtype)
    if anchor.dialect == "tf":
        graph = anchor.graph
        node_name = graph.unique_node_name(name) if graph is not None else name
        node = Node(
            "Const", (), dialect="tf", name=node_name,
            attrs={"dtype": Attr.dtype(tensor.dtype), "value": Attr.tensor(tensor)},
        )
        node.output.dtype = tensor.dtype
        node.output.shape = tensor.shape
        return node, node.output
    return None, Value(name, tensor.dtype, tensor.shape, const=tensor)
