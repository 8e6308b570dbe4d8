"""Helpers shared by the ONNX simplification passes (IR only: no onnx import here).

Everything works through the IR's def-use; nothing scans a graph to find a
value's readers.  All functions are O(degree) of what they touch unless
stated otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..ir import Attr, DType, Graph, Model, Node, Tensor, Value, all_graphs, constant_value, subgraphs

__all__ = [
    "all_graphs", "const_array", "is_const", "opset_version", "OPSET_IMPORT", "new_initializer",
    "bypass", "drop_node",
    "static_shape", "tensor_nbytes", "is_standard", "only_reader", "Names", "STANDARD_DOMAINS",
]

#: Domains of the standard operator set.
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})


def is_standard(node: Node) -> bool:
    """Whether ``node`` is an operator of the default ONNX domain."""
    return node.domain in STANDARD_DOMAINS


#: Where the IR keeps an ONNX model's opset imports (``{domain: version}``, in file order).
OPSET_IMPORT = "onnx.opset_import"


def opset_version(model: Model, domain: str = "", *, default: int = 0) -> int:
    """The model's imported version of ``domain`` (``""`` and ``"ai.onnx"`` are the same), or
    ``default`` when the model does not import it.  O(1)."""
    imports = model.meta.get(OPSET_IMPORT) or {}
    for key in (("", "ai.onnx") if domain in STANDARD_DOMAINS else (domain,)):
        if key in imports:
            return int(imports[key] or 0)
    return default



def const_array(value: Value | None) -> np.ndarray | None:
    """The constant array behind ``value``, or None.

    Initializers that are also graph inputs are *not* constant: a caller may
    feed another value at run time.  Tensors of types NumPy cannot hold
    (bfloat16, float8, int4) are not constant here either.
    """
    if value is None or value.is_graph_input:
        return None
    tensor = constant_value(value)
    if tensor is None or tensor.dtype.numpy is None:
        return None
    return tensor.numpy()


def is_const(value: Value | None) -> bool:
    """Whether :func:`const_array` would return an array (without reading the data)."""
    if value is None or value.is_graph_input:
        return False
    tensor = constant_value(value)
    return tensor is not None and tensor.dtype.numpy is not None


def static_shape(value: Value | None) -> tuple[int, ...] | None:
    """The value's shape when every dim is a known non-negative int, else None."""
    if value is None or value.shape is None:
        return None
    if all(isinstance(d, int) and d >= 0 for d in value.shape):
        return tuple(int(d) for d in value.shape)  # type: ignore[arg-type]
    return None


def tensor_nbytes(dtype: DType | None, shape: Sequence[int]) -> int | None:
    """Bytes of a tensor of ``dtype`` and ``shape`` (None when the element size is not fixed)."""
    if dtype is None:
        return None
    itemsize = dtype.itemsize
    if itemsize is None or dtype is DType.STRING:
        return None
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def only_reader(value: Value) -> Node | None:
    """The single node reading ``value`` once, when it is not a graph output; else None."""
    if value.num_uses != 1 or value.is_graph_output:
        return None
    (node, _), = value.uses()
    return node


class Names:
    """Every value name of a model (all graphs), to make new names that collide with none.

    A new initializer named like an existing value would take that name at
    export and push the other value (maybe a graph output) to ``name_1``.
    Built in O(N); each :meth:`fresh` is O(1) expected.
    """

    __slots__ = ("_taken", "constant_nodes")

    def __init__(self, model: Model) -> None:
        #: IR version < 4 requires every initializer to be a graph input: new constants are nodes there.
        self.constant_nodes = int(model.meta.get("onnx.ir_version") or 10) < 4
        taken: set[str] = set()
        for graph in all_graphs(model):
            taken.update(v.name for v in graph.inputs)
            taken.update(v.name for v in graph.initializers)
            for node in graph:
                taken.update(v.name for v in node.outputs)
        self._taken = taken

    def fresh(self, base: str) -> str:
        name = base
        i = 1
        while name in self._taken:
            name = f"{base}_{i}"
            i += 1
        self._taken.add(name)
        return name


def new_initializer(graph: Graph, array: np.ndarray, base: str, names: Names, dtype: DType | None = None) -> Value:
    """A new constant ``array`` in ``graph`` with a fresh name derived from ``base``.

    An initializer; a ``Constant`` node at the head of the graph in models of
    IR version < 4 (where initializers must also be graph inputs).
    """
    tensor = Tensor.from_numpy(np.asarray(array), dtype)
    name = names.fresh(base)
    if names.constant_nodes:
        node = Node("Constant", (), dialect="onnx", name=name, attrs={"value": Attr.tensor(tensor)},
                    outputs=[Value(name, tensor.dtype, tensor.shape)])
        first = next(iter(graph), None)
        if first is None:
            graph.append(node)
        else:
            graph.insert_before(first, node)
        return node.output
    value = Value(name, const=tensor)
    graph.add_initializer(value)
    return value


def _nested_nodes(node: Node) -> Iterator[Node]:
    pending = list(subgraphs(node))
    while pending:
        graph = pending.pop()
        for inner in graph:
            yield inner
            pending.extend(subgraphs(inner))


def drop_node(node: Node) -> None:
    """Remove ``node`` (whose outputs nobody reads), detaching the nodes of its subgraphs too.

    Nodes inside an If/Loop body may read values of the enclosing graphs;
    their uses are dropped so that those values no longer look used.
    """
    for inner in list(_nested_nodes(node)):
        inner.set_inputs(())
    graph = node.graph
    assert graph is not None
    graph.remove(node)


def bypass(node: Node, source: Value, output: int = 0) -> bool:
    """Make the readers of ``node.outputs[output]`` read ``source`` and remove ``node``.

    Refuses (returns False, graph untouched) when another output of the node
    is read.  When the bypassed value is a graph output, its name must
    survive: ``source`` then takes that name, which is only possible when
    ``source`` is produced by a node of the same graph and is neither a graph
    input nor already a graph output.
    """
    graph = node.graph
    if graph is None:
        return False
    out = node.outputs[output]
    if any(v.num_uses or v.is_graph_output for i, v in enumerate(node.outputs) if i != output):
        return False
    if out.is_graph_output:
        producer = source.producer
        if producer is None or producer.graph is not graph or source.is_graph_output or source.is_graph_input:
            return False
        name = out.name
        out.name = f"{name}__bypassed"
        source.name = name
        if out.dtype is not None and source.dtype is None:
            source.dtype = out.dtype
        if source.shape is None:
            source.shape = out.shape
    out.replace_all_uses_with(source, graph_outputs=True)
    drop_node(node)
    return True
