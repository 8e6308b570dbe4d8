"""onnx_fold_constants: evaluate constant subgraphs once and store the results as initializers.

Before::  s = Shape(x[1, 3, 8, 8]); d = Gather(s, 0); u = Unsqueeze(d, [0])
          t = Concat(u, [-1]); y = Reshape(x, t); k = Constant(2.0); z = Mul(y, Sqrt(k))
After::   y = Reshape(x, t=[1, -1]); z = Mul(y, c) with initializers t and c = sqrt(2)

A node is constant when every input is an initializer, a ``Constant`` output
or an already folded value; ``Shape`` and ``Size`` are constant as soon as
their input's dims are static.  Integer shape arithmetic and data movement
run in NumPy (``_kernels.py``, exact); everything else in a graph runs on
onnxruntime in **one** session per graph (``_ort_eval.py``).  Only values
read by a node that stays (or that are graph outputs) become initializers;
the folded nodes are removed.  ``Constant`` nodes become initializers too,
except those producing graph outputs: a constant graph output stays (or
becomes) a ``Constant`` node.

Never folded: non-deterministic ops (Random*, Bernoulli, Multinomial),
QuantizeLinear/DequantizeLinear (a quantized model is spelled with them),
ops with subgraphs or sequence/optional values, Dropout (see
``eliminate_identity``), nodes of custom domains, and anything reading an
initializer that is also a graph input (callers may override it).

Size control, in bytes: no folded tensor larger than ``size_limit``; and a
folded tensor larger than ``growth_limit`` is only kept when the constants it
replaces (those read by nothing else) are at least as large, so folding never
grows the model much: ``ConstantOfShape``/``Expand``/``Tile`` blow-ups and
``Transpose`` of a weight that stays in use elsewhere remain unfolded.  Sizes
are predicted from static shapes before anything runs (expanding ops whose
output size cannot be predicted are not folded) and checked on the results.

O(N + E) per graph plus the evaluation; the growth check walks the folded
cone of a tensor only when that tensor exceeds ``growth_limit``.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Graph, Model, Node, Tensor, Value, constant_value, subgraphs, topological_order
from ...runtime.numpy_onnx import KERNELS, SHAPE_ONLY, broadcast_shape, evaluate
from ...runtime.ort_eval import array_dtype, evaluate_on_ort
from .._onnx import Names, all_graphs, const_array, drop_node, is_const, is_standard, static_shape, tensor_nbytes
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["onnx_fold_constants", "DEFAULT_SIZE_LIMIT", "DEFAULT_GROWTH_LIMIT", "NEVER_FOLD", "EXPANDING"]

#: Largest tensor constant folding may create (bytes).
DEFAULT_SIZE_LIMIT = 1 << 30
#: Folded tensors up to this size may grow the model; larger ones must replace as many bytes.
DEFAULT_GROWTH_LIMIT = 1 << 20

NEVER_FOLD = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    "If", "Loop", "Scan", "Dropout",
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
    "SplitToSequence", "ConcatFromSequence", "SequenceMap",
    "Optional", "OptionalGetElement", "OptionalHasElement",
})
#: Ops whose output may be far larger than their inputs: folded only with a predictable output size.
EXPANDING = frozenset({
    "ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot", "EyeLike",
    "Gather", "GatherElements", "GatherND", "MatMul", "Einsum", "Gemm", "ConvTranspose", "Col2Im",
})


class _Fold:
    """The folding state of one graph."""

    def __init__(self, graph: Graph, size_limit: int, growth_limit: int, main: bool, constant_nodes: bool) -> None:
        self.graph = graph
        self.constant_nodes = constant_nodes
        self.size_limit = size_limit
        self.growth_limit = min(growth_limit, size_limit)
        self.main = main
        self.known: dict[Value, np.ndarray] = {}     # evaluated values
        self.pending: dict[Value, None] = {}         # values onnxruntime will evaluate
        self.folded: dict[Node, None] = {}           # nodes whose outputs are all known or pending
        self.batch: list[Node] = []
        self.notes: list[str] = []
        self.refused_large = 0
        self.evaluated = False

    # -- selection --------------------------------------------------------------
    def _available(self, value: Value) -> bool:
        return value in self.known or value in self.pending or is_const(value)

    def _array(self, value: Value) -> np.ndarray | None:
        found = self.known.get(value)
        return found if found is not None else const_array(value)

    def _predict(self, node: Node) -> int | None:
        """Bytes of the node's largest output, from static shapes or known inputs; None if unknown."""
        sizes = []
        for value in node.outputs:
            shape = static_shape(value)
            nbytes = tensor_nbytes(value.dtype, shape) if shape is not None else None
            if nbytes is None:
                shape = self._shape_from_inputs(node)
                nbytes = tensor_nbytes(value.dtype, shape) if shape is not None and value.dtype else None
            if nbytes is None:
                return None
            sizes.append(nbytes)
        return max(sizes, default=0)

    def _shape_from_inputs(self, node: Node) -> tuple[int, ...] | None:
        ins = [None if v is None else self.known.get(v) for v in node.inputs]
        if node.op == "ConstantOfShape" and ins and ins[0] is not None:
            return tuple(int(d) for d in ins[0].reshape(-1))
        if node.op == "Expand" and len(ins) == 2 and ins[1] is not None:
            data = static_shape(node.inputs[0])
            return None if data is None else broadcast_shape(data, [int(d) for d in ins[1].reshape(-1)])
        if node.op == "Tile" and len(ins) == 2 and ins[1] is not None:
            data = static_shape(node.inputs[0])
            reps = [int(d) for d in ins[1].reshape(-1)]
            return None if data is None or len(reps) != len(data) else tuple(a * b for a, b in zip(data, reps))
        return None

    def _candidate(self, node: Node) -> bool:
        if not is_standard(node) or node.op in NEVER_FOLD or node.op == "Constant" or subgraphs(node):
            return False
        return bool(node.inputs) and not node.control_inputs

    def select(self) -> None:
        for node in topological_order(self.graph):
            if not self._candidate(node):
                continue
            if node.op in SHAPE_ONLY:
                self._fold_shape(node)
                continue
            if not all(v is None or self._available(v) for v in node.inputs):
                continue
            predicted = self._predict(node)
            if predicted is None and node.op in EXPANDING:
                continue
            if predicted is not None and predicted > self.size_limit:
                self.refused_large += 1
                continue
            if node.op in KERNELS and not any(v in self.pending for v in node.inputs if v is not None):
                arrays = [None if v is None else self._array(v) for v in node.inputs]
                out = evaluate(node, arrays)
                if out is not None and all(a.nbytes <= self.size_limit for a in out):
                    self.known.update(zip(node.outputs, out))
                    self.folded[node] = None
                    continue
            self.batch.append(node)
            self.folded[node] = None
            self.pending.update(dict.fromkeys(node.outputs))

    def _fold_shape(self, node: Node) -> None:
        source = node.inputs[0] if node.inputs else None
        shape = static_shape(source)
        if source is None or shape is None:
            return
        if not self.main and source.owner is self.graph and not is_const(source):
            return  # inside a loop body a value's shape may change between iterations
        out = evaluate(node, [np.asarray(shape, dtype=np.int64)])
        if out is not None:
            self.known.update(zip(node.outputs, out))
            self.folded[node] = None

    # -- frontier and size checks ----------------------------------------------------
    def _frontier(self) -> list[Value]:
        """Folded values read by a node that stays, or that are graph outputs (graph order)."""
        found = []
        for node in self.folded:
            for value in node.outputs:
                if value.is_graph_output or any(user not in self.folded for user, _ in value.uses()):
                    found.append(value)
        return found

    def _unfold(self, node: Node) -> None:
        """Keep ``node`` in the graph, and whatever that forces.

        Readers of its outputs that are not evaluated can no longer be
        evaluated (downward); after evaluation, producers of its inputs that
        were not fetched cannot be materialized (upward).
        """
        stack = [node]
        while stack:
            current = stack.pop()
            if current not in self.folded:
                continue
            del self.folded[current]
            for value in current.outputs:
                if value not in self.known:
                    stack.extend(user for user, _ in value.uses() if user in self.folded)
            if self.evaluated:
                for value in current.inputs:
                    if value is not None and value not in self.known and value.producer in self.folded:
                        stack.append(value.producer)  # type: ignore[arg-type]

    def _replaced_bytes(self, value: Value) -> int:
        """Bytes of the constants only ``value``'s folded cone reads (they go away with it)."""
        total = 0
        seen: set[int] = set()
        stack = [value.producer] if value.producer is not None else []
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen or node not in self.folded:
                continue
            seen.add(id(node))
            for inp in node.inputs:
                if inp is None:
                    continue
                if inp.producer is not None and inp.producer in self.folded:
                    stack.append(inp.producer)
                elif is_const(inp) and all(user in self.folded for user, _ in inp.uses()):
                    tensor = constant_value(inp)
                    total += (tensor_nbytes(tensor.dtype, tensor.shape) or 0) if tensor is not None else 0
        return total

    def _too_big(self, value: Value, nbytes: int) -> bool:
        if nbytes > self.size_limit:
            return True
        return nbytes > self.growth_limit and nbytes > self._replaced_bytes(value)

    def check_sizes(self, *, predicted: bool) -> None:
        changed = True
        while changed:
            changed = False
            for value in self._frontier():
                if predicted:
                    shape = static_shape(value)
                    nbytes = tensor_nbytes(value.dtype, shape) if shape is not None else None
                else:
                    array = self.known.get(value)
                    nbytes = None if array is None else int(array.nbytes)
                if nbytes is not None and self._too_big(value, nbytes):
                    producer = value.producer
                    assert producer is not None
                    self._unfold(producer)
                    self.refused_large += 1
                    changed = True
                    break

    # -- evaluation and rewrite -----------------------------------------------------
    def evaluate_batch(self, meta: dict[str, object]) -> int:
        batch = [n for n in self.batch if n in self.folded]
        if not batch:
            return 0
        wanted = [v for v in self._frontier() if v in self.pending and v not in self.known]
        result = evaluate_on_ort(batch, wanted, self.known, meta)
        self.evaluated = True
        self.known.update(result.values)
        for failure in result.failures:
            self.notes.append(f"not folded, onnxruntime cannot evaluate {failure}")
        for value in wanted:
            if value not in self.known and value.producer is not None:
                self._unfold(value.producer)
        return result.sessions

    def materialize(self) -> tuple[int, int]:
        self.evaluated = True
        while True:
            missing = [v for v in self._frontier() if v not in self.known]
            if not missing:
                break
            for value in missing:  # not evaluated: its producer stays
                assert value.producer is not None
                self._unfold(value.producer)
        made = 0
        for value in self._frontier():
            array = self.known[value]
            tensor = Tensor.from_numpy(array, array_dtype(array, value.dtype))
            _as_initializer(self.graph, value, tensor, self.constant_nodes)
            made += 1
        removed = 0
        for node in reversed(list(self.folded)):
            if node.graph is self.graph and not any(v.num_uses or v.is_graph_output for v in node.outputs):
                drop_node(node)
                removed += 1
        return made, removed


def _as_initializer(graph: Graph, value: Value, tensor: Tensor, as_node: bool = False) -> Value:
    """Replace ``value`` (a node output) everywhere by a constant of the same name.

    An initializer, except for graph outputs (those stay produced by a node,
    a ``Constant``, as runtimes and the IR's checks expect of outputs) and
    with ``as_node`` (models of IR version < 4, whose initializers must be inputs).
    """
    name = value.name
    value.name = f"{name}__folded"
    if value.is_graph_output or as_node:
        node = Node("Constant", (), dialect="onnx", name=name, attrs={"value": Attr.tensor(tensor)},
                    outputs=[Value(name, tensor.dtype, tensor.shape)])
        producer = value.producer
        if producer is not None and producer.graph is graph:
            graph.insert_before(producer, node)
        else:
            graph.append(node)
        new = node.output
    else:
        new = Value(name, const=tensor)
        graph.add_initializer(new)
    value.replace_all_uses_with(new, graph_outputs=True)
    return new


def extract_constants(graph: Graph) -> int:
    """Turn ``Constant`` nodes into initializers (same tensor, no copy).  O(N)."""
    moved = 0
    for node in list(graph):
        if node.op != "Constant" or not is_standard(node) or len(node.outputs) != 1 or node.output.is_graph_output:
            continue
        tensor = constant_value(node.output)
        if tensor is None:
            continue  # sparse_value: kept as a node
        _as_initializer(graph, node.output, tensor)
        drop_node(node)
        moved += 1
    return moved


@transform("onnx_fold_constants", dialects={"onnx"})
def onnx_fold_constants(
    model: Model,
    ctx: TransformContext,
    *,
    size_limit: int = DEFAULT_SIZE_LIMIT,
    growth_limit: int = DEFAULT_GROWTH_LIMIT,
) -> TransformResult:
    """Evaluate constant subgraphs (NumPy + one onnxruntime session per graph) into initializers."""
    stats = {"constants_extracted": 0, "nodes_folded": 0, "initializers_added": 0, "sessions": 0,
             "refused_large": 0}
    notes: list[str] = []
    names = Names(model)
    for graph in all_graphs(model):
        if graph is not model.graph and graph.parent is not None and graph.parent.graph is None:
            continue  # the node holding this body was removed by an earlier graph's folding
        if not names.constant_nodes:
            stats["constants_extracted"] += extract_constants(graph)
        state = _Fold(graph, size_limit, growth_limit, graph is model.graph, names.constant_nodes)
        state.select()
        state.check_sizes(predicted=True)
        stats["sessions"] += state.evaluate_batch(model.meta)
        state.check_sizes(predicted=False)
        made, removed = state.materialize()
        stats["initializers_added"] += made
        stats["nodes_folded"] += removed
        stats["refused_large"] += state.refused_large
        notes.extend(state.notes)
    for note in notes:
        ctx.warn(note)
    changed = bool(stats["constants_extracted"] or stats["nodes_folded"] or stats["initializers_added"])
    return TransformResult(changed, stats, notes)
