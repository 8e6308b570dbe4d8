"""fold_constants: replace every sub-graph whose inputs are all constant by the constant it computes.

Before (a batch norm as graphs frozen from Keras 3 carry it)::

    var ─► AddV2(·, ε) ─► Rsqrt ─► Mul(·, γ) ─┬─────────────────► Mul(conv, ·) ─► AddV2(·, ·) ─►
                                               └─► Mul(μ, ·) ─► Sub(β, ·) ──────────────────┘
After::

    s = Const[γ/√(var+ε)] ─► Mul(conv, s) ─► AddV2(·, t) ─►        t = Const[β − μ·s]

On a TensorFlow graph the values are computed, without TensorFlow, by the NumPy
reference kernels of :mod:`graphwright.runtime.numpy_tf` (TF's types and rounding;
float32 in float32), or by TensorFlow itself with ``backend=tensorflow``.  What is
folded, how control edges are kept and what is left alone is described in
:mod:`graphwright.transforms.fold._fold_tf`: in short, a folded value keeps its node's
name, inherits the control inputs of the folded sub-graph (as TensorFlow's constant
folding does), ops without a kernel and evaluations TF would refuse are left in place
and listed in the notes, and no result over ``max_constant_size_in_bytes`` is made.  Then, as in the original tool,
when the outputs are named, every node that neither the outputs nor the inputs depend on
(through data or control edges) is removed: dead branches, and constants nothing reads.

Parameters are the Graph Transform Tool's: ``clear_output_shapes`` (drop the stale
``_output_shapes`` attributes, default true), ``exclude_op``/``exclude_node`` (never fold
these ops / nodes; a ``Const`` is a constant regardless), ``max_constant_size_in_bytes``
(default 10 MiB, TensorFlow's own limit), plus ``backend`` (``numpy`` or ``tensorflow``)
and ``fold_budget``: the most bytes of computed arrays the NumPy folding holds at once
(default: 256 MiB plus the bytes of the model's own ``Const`` tensors), checked before each
kernel runs, so a graph of a few KB whose ``Fill``/``Tile`` nodes each stay under the
per-tensor limit cannot make hundreds of MB (with ``backend=tensorflow``, TensorFlow
computes and only the per-tensor limit applies).  Nodes left in place by either limit
are named in one warning line per limit.

Differences from the original tool, on purpose: a folded node keeps its name (the
original names it ``<name>/_<k>__cf__<k>``); graph outputs computed from constants are
folded too; ``NoOp``s that only wait on constants go, and the nodes waiting on them wait
on nothing (the original keeps every ``Identity`` such a ``NoOp`` depends on); when the
outputs are not named (``--outputs``) nothing is stripped, as guessed outputs would take init
``NoOp``s and savers with them (the original refuses to run without outputs);
with the NumPy kernels, intermediate values are bounded by
``max_constant_size_in_bytes`` too (the original bounds only the values it writes), so a
tiny graph cannot expand to gigabytes while folding.

Dispatch by dialect: :data:`FOLDERS` maps a dialect to its folding function and backends, so
another dialect's implementation plugs in under the same transform name (adding its dialect
to the ``@transform`` declaration below).

Cost: O(N + E) plus the kernels' work on the constant data.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import TransformError
from ...ir import Graph, Model, ancestors, constant_value
from ...runtime import numpy_tf
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._fold_tensorflow import fold_with_tensorflow
from ._fold_tf import FoldOptions, FoldOutcome, TfFolder, numpy_evaluator
from .onnx_fold_constants import DEFAULT_FOLD_BUDGET, MAX_NAMED, human_size, onnx_fold_constants

__all__ = ["fold_constants", "FOLDERS", "DEFAULT_MAX_CONSTANT_BYTES", "fold_tf", "tf_fold_budget"]

#: Results larger than this are not folded (TensorFlow's ConstantFoldingOptions default).
DEFAULT_MAX_CONSTANT_BYTES = 10 * 1024 * 1024
#: How many failed evaluations the notes list by name.
MAX_LISTED = 5


def fold_tf(model: Model, options: FoldOptions, backend: str) -> FoldOutcome:
    """Fold the constant sub-graphs of a ``tf``-dialect model in place."""
    if backend == "tensorflow":
        return fold_with_tensorflow(model, options)
    folder = TfFolder(model.graph, options, numpy_tf.KERNELS.__contains__, numpy_evaluator(options.max_bytes))
    folder.decide()
    return folder.apply()


def tf_fold_budget(model: Model, extra: int = DEFAULT_FOLD_BUDGET) -> int:
    """The default budget: ``extra`` plus the bytes of the model's ``Const`` tensors (from their headers)."""
    total = 0
    for graph in model.graphs:
        for node in graph:
            if node.op == "Const" and node.outputs:
                tensor = constant_value(node.outputs[0])
                total += (tensor.nbytes or 0) if tensor is not None else 0
    return extra + total


#: dialect -> (folding function, the backends it accepts; the default, "numpy", among them).
FOLDERS: dict[str, tuple[Callable[[Model, FoldOptions, str], FoldOutcome], tuple[str, ...]]] = {
    "tf": (fold_tf, ("numpy", "tensorflow")),
}


@transform("fold_constants", dialects={"tf", "onnx"})
def fold_constants(
    model: Model,
    ctx: TransformContext,
    *,
    clear_output_shapes: bool = True,
    exclude_op: list[str] | None = None,
    exclude_node: list[str] | None = None,
    max_constant_size_in_bytes: int = DEFAULT_MAX_CONSTANT_BYTES,
    backend: str = "numpy",
    fold_budget: int | None = None,
) -> TransformResult:
    """Replace sub-graphs whose inputs are all constant by the constants they compute."""
    dialect = model.graph.dialect
    if fold_budget is not None and fold_budget < 0:
        raise TransformError(f"fold_constants: fold_budget must be at least 0, got {fold_budget}")
    if dialect == "onnx":
        return _fold_onnx(model, ctx, exclude_op, exclude_node, max_constant_size_in_bytes, backend, fold_budget)
    entry = FOLDERS.get(dialect)
    if entry is None:
        raise TransformError(f"fold_constants: no constant folding for the {dialect!r} dialect")
    folder, backends = entry
    if backend not in backends:
        raise TransformError(
            f"fold_constants: parameter backend={backend!r} is not valid; expected one of: {', '.join(backends)}"
        )
    if max_constant_size_in_bytes < 0:
        raise TransformError(
            f"fold_constants: max_constant_size_in_bytes must be at least 0, got {max_constant_size_in_bytes}"
        )
    cleared = _clear_output_shapes(model) if clear_output_shapes else 0
    budget = tf_fold_budget(model) if fold_budget is None else fold_budget
    options = FoldOptions(frozenset(exclude_op or ()), frozenset(exclude_node or ()), max_constant_size_in_bytes,
                          budget)
    outcome = folder(model, options, backend)
    unused = _remove_unused(model.graph) if ctx.outputs else 0
    for warning in _warnings(outcome, options):
        ctx.warn(warning)
    stats = {
        "nodes_folded": outcome.nodes_folded,
        "constants_created": outcome.constants_created,
        "bytes_created": outcome.bytes_created,
        "constants_removed": outcome.constants_removed,
        "control_edges_moved": outcome.control_edges_moved,
        "output_shapes_cleared": cleared,
        "not_evaluated": sum(outcome.unsupported.values()) + len(outcome.failures) + len(outcome.too_large)
        + len(outcome.over_budget),
        "peak_bytes": outcome.peak_bytes,
        "unused_nodes_removed": unused,
    }
    return TransformResult(bool(outcome.nodes_folded or cleared or unused), stats, _notes(outcome, options))


def _fold_onnx(model: Model, ctx: TransformContext, exclude_op: list[str] | None, exclude_node: list[str] | None,
               max_bytes: int, backend: str, fold_budget: int | None) -> TransformResult:
    """ONNX: simplify's folding (NumPy for exact ops, one onnxruntime session per graph)."""
    if exclude_op or exclude_node:
        raise TransformError("fold_constants: exclude_op/exclude_node are not supported on ONNX models; "
                             "use graphwright simplify --skip-optimization for finer control")
    if backend not in ("numpy", "onnxruntime"):
        raise TransformError(f"fold_constants: backend={backend!r} does not apply to ONNX; use onnxruntime")
    return onnx_fold_constants(model, ctx, size_limit=max_bytes, fold_budget=fold_budget)


def _remove_unused(graph: Graph) -> int:
    """Remove the nodes neither the graph outputs nor the inputs depend on (data or control edges), as the
    original tool does after folding.  O(N + E)."""
    keep = ancestors([*graph.outputs, *graph.inputs])
    doomed = [node for node in graph if node not in keep]
    graph.remove(doomed)
    return len(doomed)


def _clear_output_shapes(model: Model) -> int:
    cleared = 0
    for graph in model.graphs:
        for node in graph:
            if node.attrs.pop("_output_shapes", None) is not None:
                cleared += 1
    return cleared


def _warnings(outcome: FoldOutcome, options: FoldOptions) -> list[str]:
    """One line per limit that left nodes in place, naming them and the parameter to raise."""
    lines = []
    too_large = [item.split(":", 1)[0] for item in outcome.too_large]
    for items, what in ((too_large, f"larger than max_constant_size_in_bytes={options.max_bytes}"),
                        (outcome.over_budget, f"over fold_budget={options.budget} "
                                              f"({human_size(options.budget or 0)} of results held at once)")):
        if items:
            more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
            lines.append(f"left {len(items)} node(s) in place, results {what}: "
                         f"{', '.join(items[:MAX_NAMED])}{more}")
    return lines


def _notes(outcome: FoldOutcome, options: FoldOptions) -> list[str]:
    notes = []
    if outcome.unsupported:
        ops = ", ".join(f"{op} ×{n}" for op, n in sorted(outcome.unsupported.items()))
        notes.append(f"left in place, no kernel to evaluate them although their inputs are constant: {ops}")
    for label, items in (("evaluation failed", outcome.failures),
                         (f"over max_constant_size_in_bytes={options.max_bytes}", outcome.too_large),
                         (f"over fold_budget={options.budget}", outcome.over_budget)):
        if items:
            shown = "; ".join(items[:MAX_LISTED])
            more = f"; and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
            notes.append(f"left in place, {label}: {shown}{more}")
    return notes
