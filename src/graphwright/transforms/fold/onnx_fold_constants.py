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

Size control, in bytes: no folded tensor larger than ``size_limit``; no more
than ``fold_budget`` computed in all (by one pass, or by all the passes of one
``simplify`` run: see ``budget_spent``; every NumPy result and every node
onnxruntime runs counts; default: :data:`DEFAULT_FOLD_BUDGET` plus the
bytes of the model's own constants, so a model of a few hundred bytes cannot
make folding allocate gigabytes, while a large model may still have all its
weights rewritten); and a folded tensor larger than ``growth_limit`` is only
kept when the constants it replaces (those read by nothing else) are at least
as large, so folding never grows the model much: ``ConstantOfShape``/
``Expand``/``Tile`` blow-ups and ``Transpose`` of a weight that stays in use
elsewhere remain unfolded.  Sizes are predicted *before* anything runs: for
``ConstantOfShape``/``Expand``/``Tile``/``Range`` from their constant inputs
(declared shapes may lie), else from static shapes, else from the inputs'
sizes (expanding ops whose output size cannot be predicted are not folded);
results are checked again afterwards.  A node refused by ``size_limit`` or
``fold_budget`` stays in the graph (and so do its readers), and one warning
line per limit names the nodes and the limit.

O(N + E) per graph plus the evaluation; the growth check walks the folded
cone of a tensor only when that tensor exceeds ``growth_limit``.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import Attr, Graph, Model, Node, Tensor, Value, constant_value, subgraphs, topological_order
from ...runtime.numpy_onnx import (
    KERNELS,
    SHAPE_ONLY,
    OutputTooLarge,
    evaluate,
    output_nbytes,
    shape_nbytes,
)
from ...runtime.ort_eval import array_dtype, evaluate_on_ort
from .._onnx import Names, all_graphs, const_array, drop_node, is_const, is_standard, static_shape, tensor_nbytes
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["onnx_fold_constants", "DEFAULT_SIZE_LIMIT", "DEFAULT_GROWTH_LIMIT", "DEFAULT_FOLD_BUDGET", "NEVER_FOLD",
           "EXPANDING", "SHAPE_MAKING", "fold_budget_for", "human_size", "stand_in", "MAX_NAMED", "FLAGS"]

#: Largest tensor constant folding may create (bytes).
DEFAULT_SIZE_LIMIT = 1 << 30
#: Folded tensors up to this size may grow the model; larger ones must replace as many bytes.
DEFAULT_GROWTH_LIMIT = 1 << 20
#: Bytes one folding pass may compute beyond the size of the model's constants (the default budget).
DEFAULT_FOLD_BUDGET = 256 << 20
#: Ops whose output size is set by the values of their inputs (sized from them, not from declared shapes).
SHAPE_MAKING = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})
#: How many refused nodes a warning names.
MAX_NAMED = 3
#: The limits as users set them: simplify's flag, and the transform parameter.
FLAGS = {"size_limit": "--size-limit / size_limit", "fold_budget": "--fold-budget / fold_budget"}

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

    def __init__(self, graph: Graph, size_limit: int, growth_limit: int, main: bool, constant_nodes: bool,
                 budget: int | None = None, budget_total: int | None = None) -> None:
        self.graph = graph
        self.constant_nodes = constant_nodes
        self.size_limit = size_limit
        self.growth_limit = min(growth_limit, size_limit)
        self.budget = budget if budget is not None else fold_budget_for(graph)
        self.budget_total = budget_total if budget_total is not None else self.budget
        self.spent = 0                                # bytes computed (predicted) so far
        self.over: dict[str, list[str]] = {"size_limit": [], "fold_budget": []}
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
        """Bytes of the node's largest output, before running it; None if unknown.

        From the constant inputs for the shape-making ops (exact, and a declared
        shape cannot hide a blow-up), else from static shapes, else from the
        sizes of the inputs (non-expanding ops make no more than their broadcast).
        """
        if node.op in SHAPE_MAKING:
            found = output_nbytes(node, [None if v is None else self._stand_in(v, values=True) for v in node.inputs])
            if found is not None:
                return found
        sizes = []
        for value in node.outputs:
            shape = static_shape(value)
            itemsize = value.dtype.itemsize if value.dtype is not None else None
            if shape is None or not itemsize:
                sizes = []
                break
            sizes.append(shape_nbytes(shape, itemsize))
        if sizes:
            return max(sizes)
        if node.op in EXPANDING:
            return None
        stand_ins = [self._stand_in(v) for v in node.inputs if v is not None]
        return output_nbytes(node, [a for a in stand_ins if a is not None])

    def _stand_in(self, value: Value, *, values: bool = False) -> np.ndarray | None:
        return stand_in(value, self.known, values=values)

    def _refuse(self, node: Node, nbytes: int, limit: str) -> None:
        self.refused_large += 1
        self.over[limit].append(f"{node.name or '(unnamed)'!r} ({node.op}, {human_size(nbytes)})")

    def _within_limits(self, node: Node, predicted: int) -> bool:
        """Check ``predicted`` bytes against the per-tensor limit and what is left of the budget; spend them."""
        if predicted > self.size_limit:
            self._refuse(node, predicted, "size_limit")
            return False
        if self.spent + predicted > self.budget:
            self._refuse(node, predicted, "fold_budget")
            return False
        self.spent += predicted
        return True

    def warnings(self) -> list[str]:
        """One line per limit that left nodes unfolded, naming them and the flag."""
        lines = []
        for limit, items in self.over.items():
            if not items:
                continue
            value = self.size_limit if limit == "size_limit" else self.budget_total
            what = "larger than" if limit == "size_limit" else "over the total budget of"
            more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
            lines.append(f"left {len(items)} node(s) unfolded, their results {what} {human_size(value)} "
                         f"({FLAGS[limit]}): {', '.join(items[:MAX_NAMED])}{more}")
        return lines

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
            if not self._within_limits(node, predicted or 0):
                continue
            if node.op in KERNELS and not any(v in self.pending for v in node.inputs if v is not None):
                arrays = [None if v is None else self._array(v) for v in node.inputs]
                room = min(self.size_limit, self.budget - self.spent + (predicted or 0))
                try:
                    out = evaluate(node, arrays, max_bytes=room)
                except OutputTooLarge as e:
                    self.spent -= predicted or 0
                    self._refuse(node, e.nbytes, "size_limit" if e.nbytes > self.size_limit else "fold_budget")
                    continue
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


def stand_in(value: Value, known: dict[Value, np.ndarray] | None = None, *,
             values: bool = False) -> np.ndarray | None:
    """What sizing a node needs of an input: a zero-stride array of its shape and type (no memory).

    An evaluated value (in ``known``) is itself; with ``values``, small integer
    constants (shapes, repeats, bounds) come with their values.  None when the
    shape is not static.
    """
    found = known.get(value) if known else None
    if found is not None:
        return found
    tensor = constant_value(value)
    if tensor is not None and tensor.dtype.numpy is not None and not value.is_graph_input:
        if values and tensor.dtype.is_integer and math.prod(tensor.shape) <= 64:
            return tensor.numpy()
        return np.broadcast_to(np.zeros((), tensor.dtype.numpy), tensor.shape)
    shape = static_shape(value)
    if shape is None or value.dtype is None or value.dtype.numpy is None or math.prod(shape) > 1 << 62:
        return None
    return np.broadcast_to(np.zeros((), value.dtype.numpy), shape)


def fold_budget_for(graph: Graph, extra: int = DEFAULT_FOLD_BUDGET) -> int:
    """The default budget of a folding pass over ``graph``: ``extra`` plus the bytes of its constants.

    Sizes come from the tensors' headers (nothing is read).  O(initializers).
    """
    total = 0
    for value in graph.initializers:
        tensor = constant_value(value)
        if tensor is not None:
            total += tensor.nbytes or 0
    return extra + total


def human_size(nbytes: int) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024, as ``--size-limit`` reads them)."""
    size = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{nbytes} B"


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
    fold_budget: int | None = None,
    budget_spent: int = 0,
) -> TransformResult:
    """Evaluate constant subgraphs (NumPy + one onnxruntime session per graph) into initializers.

    ``fold_budget`` (bytes) bounds what folding computes in all; None: 256 MiB plus the model's
    constants.  ``budget_spent``: what earlier passes of the same run computed (``simplify``
    passes the sum of their ``bytes_computed``, so repeated passes share one budget).
    """
    if fold_budget is None:
        fold_budget = fold_budget_for(model.graph)
    remaining = max(fold_budget - budget_spent, 0)
    stats = {"constants_extracted": 0, "nodes_folded": 0, "initializers_added": 0, "sessions": 0,
             "refused_large": 0, "bytes_computed": 0}
    notes: list[str] = []
    names = Names(model)
    for graph in all_graphs(model):
        if graph is not model.graph and graph.parent is not None and graph.parent.graph is None:
            continue  # the node holding this body was removed by an earlier graph's folding
        if not names.constant_nodes:
            stats["constants_extracted"] += extract_constants(graph)
        state = _Fold(graph, size_limit, growth_limit, graph is model.graph, names.constant_nodes, remaining,
                      fold_budget)
        state.select()
        remaining = max(remaining - state.spent, 0)
        stats["bytes_computed"] += state.spent
        state.check_sizes(predicted=True)
        stats["sessions"] += state.evaluate_batch(model.meta)
        state.check_sizes(predicted=False)
        made, removed = state.materialize()
        stats["initializers_added"] += made
        stats["nodes_folded"] += removed
        stats["refused_large"] += state.refused_large
        notes.extend(state.notes)
        notes.extend(state.warnings())
    for note in notes:
        ctx.warn(note)
    changed = bool(stats["constants_extracted"] or stats["nodes_folded"] or stats["initializers_added"])
    return TransformResult(changed, stats, notes)
