"""Constant folding on a TensorFlow (``tf``-dialect) graph: find, evaluate, replace.

**Which nodes are constant.**  A ``Const`` is; a node is when its op can be
evaluated (a NumPy kernel, or TensorFlow with ``backend=tensorflow``), it is
deterministic and side-effect free (only such ops have kernels), it is not
excluded by ``exclude_op``/``exclude_node``, it does not produce a graph
input, and every data input is constant (a ``NoOp`` nobody waits on is left
alone: it may be a target run by name).  Control inputs never block folding:
like TensorFlow's own constant folding, the folded constant inherits them
(see below).  Besides, with the NumPy kernels, ``Shape``/``ShapeN``/``Size``/
``Rank`` of a ``Placeholder`` whose declared shape is fully known (rank
known, for ``Rank``) are constant, as in TF.

**Evaluation.**  One iterative depth-first walk (no recursion) decides every
node after its inputs and evaluates constant nodes as it goes, each once;
intermediate arrays are dropped as soon as all their readers are evaluated.
Identity-like ops forward the constant's tensor unchanged, so a folded
``Identity(Const)`` keeps the original bytes without decoding them.  An output
larger than ``max_constant_size_in_bytes`` (checked before computing for the
ops whose output can outgrow their inputs) makes its node non-constant.  A
kernel that refuses its inputs (TF would fail, or its result is undefined) or
whose output type differs from the type the op table declares makes the node
non-constant too; that is reported, never an error.

**Budget.**  With the NumPy kernels, the arrays the walk holds at once (each
computed result until its last constant reader is done, the results that
become constants until the end) never exceed ``FoldOptions.budget`` bytes:
before a kernel runs, its output is predicted from its inputs
(:func:`~graphwright.runtime.numpy_tf.predicted_bytes`) and compared with what
is left; a node that would go over is left in place (and so are its
readers), listed in ``FoldOutcome.over_budget``.  Views and forwarded
tensors (``Identity`` of a ``Const``, a ``Reshape``) cost nothing.

**Replacement.**  A *frontier* value (computed by a constant node and read by
a non-constant one, a graph output, or the first output of a node nobody
reads, which may be fetched by name) becomes a new ``Const``; output 0 keeps
the node's name (the old node is renamed away first) so references by name
stay valid, other outputs get ``<name>/output_<i>``.  The new constant carries,
as control inputs, every non-constant node the folded sub-graph waited on
through control edges (transitively), exactly as TensorFlow's constant folding
does (this keeps constants inside while-loop frames and cond branches where
they were).  Nodes that waited on a folded node through a control edge wait
on its replacement, or, if it has none, directly on those inherited control
inputs.  Then every folded node is removed, and every ``Const`` that was read
only by folded nodes.

Cost: O(N + E) for the walk and the rewrite, plus the kernels' work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ...ir import Attr, DType, Graph, Node, Tensor, Value, constant_value
from ...runtime import numpy_tf
from .onnx_fold_constants import human_size

__all__ = [
    "FoldOptions", "FoldOutcome", "Entry", "Evaluator", "TfFolder", "numpy_evaluator", "SHAPE_OPS", "NEVER_FOLDED",
]

#: A constant value: a ``Const``'s (lazy) tensor, or an array computed by a kernel.
Entry = Tensor | np.ndarray
#: ``evaluate(node, inputs, room) -> outputs``, ``room`` the bytes the outputs may still take in all (None:
#: no budget); raises ``numpy_tf.KernelError`` when it cannot (``numpy_tf.BudgetExceeded`` over ``room``).
Evaluator = Callable[[Node, list[Entry], "int | None"], list[Entry]]

#: Ops answered from a Placeholder's declared static shape.
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
#: Ops never folded on purpose (control flow, feeds, randomness, effects): not reported as "no kernel".
NEVER_FOLDED = frozenset({
    "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge", "NextIteration",
    "RefNextIteration", "LoopCond", "ControlTrigger", "Placeholder", "PlaceholderWithDefault", "Assert",
    "Print", "PrintV2", "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "VariableV2",
    "VarHandleOp", "ReadVariableOp", "Assign", "AssignVariableOp", "PartitionedCall", "StatefulPartitionedCall",
})

_CONST, _NOT, _VISITING = 1, 2, 3
_EMPTY: frozenset[Node] = frozenset()


@dataclass(frozen=True)
class FoldOptions:
    exclude_ops: frozenset[str] = frozenset()
    exclude_nodes: frozenset[str] = frozenset()
    max_bytes: int = 10 * 1024 * 1024
    #: Bytes of computed arrays held at once (None: unbounded).
    budget: int | None = None


@dataclass
class FoldOutcome:
    """What one folding pass found and did."""

    nodes_folded: int = 0
    constants_created: int = 0
    bytes_created: int = 0
    constants_removed: int = 0
    control_edges_moved: int = 0
    #: op -> number of nodes whose inputs were all constant but that have no kernel.
    unsupported: Counter[str] = field(default_factory=Counter)
    #: "node (op): reason" for evaluations that failed.
    failures: list[str] = field(default_factory=list)
    #: "node (op): size" for results over the size limit.
    too_large: list[str] = field(default_factory=list)
    #: "'node' (op, size)" for results that would have taken the held arrays over the budget.
    over_budget: list[str] = field(default_factory=list)
    #: Most bytes of computed arrays held at once.
    peak_bytes: int = 0


def numpy_evaluator(max_bytes: int) -> Evaluator:
    """Evaluate with the NumPy kernels; identity-like ops forward their inputs' entries as they are."""

    def evaluate(node: Node, inputs: list[Entry], room: int | None = None) -> list[Entry]:
        if node.op in numpy_tf.PASS_THROUGH:
            if node.op != "IdentityN" and len(inputs) != 1:
                raise numpy_tf.KernelError(f"{node.op}: expected 1 input, got {len(inputs)}")
            for entry in inputs:
                if entry.nbytes is not None and entry.nbytes > max_bytes:
                    raise numpy_tf.ConstantTooLarge(f"{node.op}: {entry.nbytes} bytes (limit {max_bytes})")
            return list(inputs)
        arrays = [e.numpy() if isinstance(e, Tensor) else e for e in inputs]
        return list(numpy_tf.evaluate(node, arrays, max_bytes=max_bytes, budget=room))

    return evaluate


class TfFolder:
    """One folding pass over ``graph``: :meth:`decide` (and evaluate), then :meth:`apply`."""

    def __init__(self, graph: Graph, options: FoldOptions, can_evaluate: Callable[[str], bool],
                 evaluator: Evaluator | None) -> None:
        self.graph = graph
        self.options = options
        self.can_evaluate = can_evaluate
        #: None: decide structurally only (values are computed later, e.g. by TensorFlow in one run).
        self.evaluator = evaluator
        self.state: dict[Node, int] = {}
        self.values: dict[Value, Entry] = {}
        self.deps: dict[Node, frozenset[Node]] = {}
        self.folded: list[Node] = []  # constant non-Const nodes, inputs before readers
        self.pending: dict[Value, int] = {}
        self.input_nodes = {v.producer for v in graph.inputs if v.producer is not None}
        self.outcome = FoldOutcome()
        self.held = 0                          # bytes of computed arrays in self.values
        self.charged: dict[Value, int] = {}

    # -- deciding ----------------------------------------------------------------------
    def decide(self) -> None:
        """Decide every node (and evaluate the constant ones, given an evaluator).  O(N + E)."""
        for root in self.graph:
            if root in self.state:
                continue
            stack = [root]
            while stack:
                node = stack[-1]
                st = self.state.get(node)
                if st is None:
                    if not self._candidate(node):
                        self.state[node] = _NOT
                        stack.pop()
                        continue
                    self.state[node] = _VISITING
                    stack.extend(p for p in _predecessors(node) if p not in self.state)
                    continue
                stack.pop()
                if st == _VISITING:
                    self._decide(node)
        self._list_unsupported()

    def _candidate(self, node: Node) -> bool:
        if node in self.input_nodes or node.dialect != "tf":
            return False
        if node.op == "Const":
            return True
        if not self.can_evaluate(node.op) or node.op in self.options.exclude_ops:
            return False
        if node.name in self.options.exclude_nodes or any(v is None for v in node.inputs):
            return False
        return bool(node.outputs) or bool(node.control_users)  # a NoOp nobody waits on may be a target

    def _decide(self, node: Node) -> None:
        if node.op == "Const":
            tensor = constant_value(node.outputs[0]) if node.outputs else None
            if tensor is None or tensor.dtype.numpy is None:
                self.state[node] = _NOT
                return
            self.deps[node] = self._control_deps(node, [])
            self._store(node.outputs[0], tensor)
            self.state[node] = _CONST
            return
        inputs: list[Entry] = []
        sources: list[Node] = []
        for value in node.inputs:
            assert value is not None
            entry = self._constant_input(node, value)
            if entry is None:
                self.state[node] = _NOT
                return
            inputs.append(entry)
            if value.producer is not None and self.state.get(value.producer) == _CONST:
                sources.append(value.producer)
        deps = self._control_deps(node, sources)
        if self.evaluator is not None and not self._evaluate(node, inputs):
            self.state[node] = _NOT
            return
        self.deps[node] = deps
        self.state[node] = _CONST
        self.folded.append(node)
        for value in node.inputs:
            assert value is not None
            self._release(value)

    def _constant_input(self, node: Node, value: Value) -> Entry | None:
        producer = value.producer
        if producer is not None and self.state.get(producer) == _CONST:
            if self.evaluator is None:
                return np.empty(0)  # placeholder: decided structurally, computed later
            return self.values.get(value)
        if node.op in SHAPE_OPS and self.evaluator is not None and producer is not None and producer.op == "Placeholder":
            return _static_stand_in(value, rank_only=node.op == "Rank")
        return None

    def _control_deps(self, node: Node, sources: Iterable[Node]) -> frozenset[Node]:
        """Non-constant nodes this constant waits on, through control edges, transitively."""
        parts = [self.deps.get(p, _EMPTY) for p in sources]
        for ctrl in node.control_inputs:
            parts.append(self.deps.get(ctrl, _EMPTY) if self.state.get(ctrl) == _CONST else frozenset((ctrl,)))
        parts = [p for p in parts if p]
        if not parts:
            return _EMPTY
        if all(p is parts[0] for p in parts):
            return parts[0]
        return frozenset().union(*parts)

    def _evaluate(self, node: Node, inputs: list[Entry]) -> bool:
        assert self.evaluator is not None
        budget = self.options.budget
        room = None if budget is None else max(budget - self.held, 0)
        try:
            outputs = self.evaluator(node, inputs, room)
            if len(outputs) < len(node.outputs):
                raise numpy_tf.KernelError(f"{len(outputs)} outputs, the node has {len(node.outputs)}")
            for value, entry in zip(node.outputs, outputs):
                _check_type(value, entry)
        except numpy_tf.BudgetExceeded as e:
            self.outcome.over_budget.append(f"{node.name!r} ({node.op}, {human_size(e.nbytes)})")
            return False
        except numpy_tf.ConstantTooLarge as e:
            self.outcome.too_large.append(f"{node.name!r} ({node.op}): {e}")
            return False
        except numpy_tf.KernelError as e:
            self.outcome.failures.append(f"{node.name!r} ({node.op}): {e}")
            return False
        arrays = [e for e in inputs if isinstance(e, np.ndarray)]
        for value, entry in zip(node.outputs, outputs):
            self._store(value, entry)
            cost = numpy_tf.new_bytes([entry], arrays) if isinstance(entry, np.ndarray) else 0
            if cost:
                self.charged[value] = cost
                self.held += cost
        self.outcome.peak_bytes = max(self.outcome.peak_bytes, self.held)
        return True

    def _store(self, value: Value, entry: Entry) -> None:
        self.values[value] = entry
        self.pending[value] = value.num_uses

    def _release(self, value: Value) -> None:
        """One more constant reader of ``value`` is done; drop the array once no reader needs it."""
        left = self.pending.get(value)
        if left is None:
            return
        left -= 1
        self.pending[value] = left
        if left <= 0 and not value.is_graph_output:
            self.values.pop(value, None)
            self.held -= self.charged.pop(value, 0)

    def _list_unsupported(self) -> None:
        for node in self.graph:
            if (self.state.get(node) == _NOT and node.op != "Const" and node not in self.input_nodes
                    and not self.can_evaluate(node.op) and node.op not in NEVER_FOLDED and node.inputs
                    and all(v is not None and v.producer is not None and self.state.get(v.producer) == _CONST
                            for v in node.inputs)):
                self.outcome.unsupported[node.op] += 1

    # -- results -----------------------------------------------------------------------
    def is_constant(self, node: Node) -> bool:
        return self.state.get(node) == _CONST

    def frontier(self) -> list[Value]:
        """Values of folded nodes that survive folding: read by a non-constant node, or graph outputs."""
        return [v for node in self.folded for v in node.outputs if self._needed_outside(v)]

    def _needed_outside(self, value: Value) -> bool:
        if value.is_graph_output or any(self.state.get(user) != _CONST for user, _ in value.uses()):
            return True
        return value.index == 0 and value.producer is not None and not _is_read(value.producer)

    # -- rewriting -----------------------------------------------------------------------
    def apply(self, values: dict[Value, Entry] | None = None) -> FoldOutcome:
        """Replace the frontier by constants and remove the folded nodes.  O(N + E)."""
        values = self.values if values is None else values
        graph, out = self.graph, self.outcome
        if not self.folded:
            return out
        position = {node: i for i, node in enumerate(graph)}
        folded_set = set(self.folded)
        frontier = set(self.frontier())  # before any rewiring changes who reads what
        sources: dict[Node, None] = {}
        for node in self.folded:
            sources.update((v.producer, None) for v in node.inputs
                           if v is not None and v.producer is not None and v.producer.op == "Const")
            deps = sorted(self.deps.get(node, _EMPTY), key=lambda n: position.get(n, -1))
            first: Node | None = None
            base = node.name
            for value in node.outputs:
                if value not in frontier:
                    continue
                const = self._make_const(node, base, value, values[value], deps)
                first = const if value.index == 0 else first
            for user in node.control_users:
                if user in folded_set:
                    continue
                user.remove_control_input(node)
                for target in [first] if first is not None else deps:
                    user.add_control_input(target)
                out.control_edges_moved += 1
        graph.remove(self.folded)
        out.nodes_folded = len(self.folded)
        unused = [c for c in sources if c.graph is graph and not c.control_users
                  and not any(v.num_uses or v.is_graph_output or v.is_graph_input for v in c.outputs)]
        graph.remove(unused)
        out.constants_removed = len(unused)
        return out

    def _make_const(self, node: Node, base: str, value: Value, entry: Entry, deps: list[Node]) -> Node:
        graph = self.graph
        tensor = entry if isinstance(entry, Tensor) else Tensor.from_numpy(entry)
        if value.index == 0:
            name = base
            node.name = graph.unique_node_name(f"{base}/folded")
        else:
            name = graph.unique_node_name(f"{base}/output_{value.index}")
        const = Node("Const", [], dialect="tf", name=name, device=node.device, control_inputs=deps,
                     attrs={"dtype": Attr.dtype(tensor.dtype), "value": Attr.tensor(tensor)})
        const.output.dtype, const.output.shape = tensor.dtype, tensor.shape
        graph.insert_before(node, const)
        value.replace_all_uses_with(const.output, graph_outputs=True)
        self.outcome.constants_created += 1
        self.outcome.bytes_created += tensor.nbytes or 0
        return const


def _predecessors(node: Node) -> list[Node]:
    preds = [v.producer for v in node.inputs if v is not None and v.producer is not None]
    preds.extend(node.control_inputs)
    return preds


def _is_read(node: Node) -> bool:
    """Whether anything depends on the node (a data reader, a control user, or a graph output)."""
    return bool(node.control_users) or any(v.num_uses or v.is_graph_output for v in node.outputs)


def _static_stand_in(value: Value, *, rank_only: bool) -> np.ndarray | None:
    """A zero-stride array with the value's declared shape and type (no memory), or None if unknown."""
    shape, dtype = value.shape, value.dtype
    if shape is None or dtype is None or dtype.numpy is None:
        return None
    if rank_only:
        return np.broadcast_to(np.zeros((), dtype.numpy), (1,) * len(shape))
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return np.broadcast_to(np.zeros((), dtype.numpy), tuple(int(d) for d in shape))  # type: ignore[arg-type]


def _check_type(value: Value, entry: Entry) -> None:
    """The computed type must be the type the op table declares for this output."""
    if value.dtype is None:
        return
    try:
        got = entry.dtype if isinstance(entry, Tensor) else DType.from_numpy(entry.dtype)
    except ValueError as e:
        raise numpy_tf.KernelError(str(e)) from None
    if got is not value.dtype:
        raise numpy_tf.KernelError(f"computed {got.value}, the graph declares {value.dtype.value}")
