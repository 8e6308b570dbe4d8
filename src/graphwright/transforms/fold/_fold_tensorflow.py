"""``backend=tensorflow``: decide constant sub-graphs here, compute them with TensorFlow in one session run.

The candidate ops are those with a NumPy kernel plus every op TensorFlow
knows that is stateless and not control flow.  The whole graph is imported
once and the frontier values (see :mod:`._fold_tf`) are fetched together
(:class:`graphwright.runtime.tensorflow.GraphDefEvaluator`, the one place that
runs TensorFlow); when TensorFlow fails on one, that node is made non-constant
and the (cheap) decision pass runs again.  Static-shape folding of ``Shape`` on
placeholders is a NumPy-backend feature (TensorFlow would ask for the feed).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import BackendUnavailableError, TransformError
from ...formats import serialize
from ...formats.graphdef.op_registry import op_def
from ...ir import Model, Node, Value
from ...runtime import numpy_tf
from ...runtime.tensorflow import GraphDefEvaluator, GraphImportError, UnknownTensorError
from ._fold_tf import NEVER_FOLDED, FoldOptions, FoldOutcome, TfFolder

__all__ = ["fold_with_tensorflow"]

#: Ops TensorFlow can run that still must never be folded (control flow, feeds, function calls).
_NEVER = NEVER_FOLDED | {
    "PlaceholderV2", "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
    "SymbolicGradient", "FakeParam",
}

_MISSING = (
    "fold_constants(backend=tensorflow) needs TensorFlow: pip install 'graphwright[tf]' "
    "(or use the default backend=numpy)"
)


def _tf_can_evaluate(op: str) -> bool:
    if op in numpy_tf.KERNELS:
        return True
    definition = op_def(op)
    return definition is not None and not definition.is_stateful and op not in _NEVER and not op.startswith("_")


def fold_with_tensorflow(model: Model, options: FoldOptions) -> FoldOutcome:
    """Fold ``model.graph`` in place, computing constants with TensorFlow."""
    try:
        evaluator = GraphDefEvaluator(serialize(model), missing=BackendUnavailableError(_MISSING))
    except GraphImportError as e:
        raise TransformError(f"fold_constants: TensorFlow cannot import the graph: {e}") from None
    failures: list[str] = []
    excluded = set(options.exclude_nodes)
    with evaluator:
        while True:
            opts = FoldOptions(options.exclude_ops, frozenset(excluded), options.max_bytes)
            folder = TfFolder(model.graph, opts, _tf_can_evaluate, evaluator=None)
            folder.decide()
            values, bad = _fetch(evaluator.evaluate, folder.frontier(), options.max_bytes)
            if not bad:
                break
            for node, reason in bad:
                failures.append(f"{node.name!r} ({node.op}): {reason}")
                excluded.add(node.name)
    outcome = folder.apply(dict(values))
    outcome.failures.extend(failures)
    return outcome


def _fetch(evaluate: Callable[[list[str]], tuple[dict[str, np.ndarray], dict[str, str]]], frontier: list[Value],
           max_bytes: int) -> tuple[dict[Value, np.ndarray], list[tuple[Node, str]]]:
    """The frontier's arrays, and the nodes TensorFlow failed on (or whose result cannot be a constant)."""
    by_name = {_tensor_name(v): v for v in frontier}
    try:
        arrays, failed = evaluate(list(by_name))
    except UnknownTensorError as e:
        producer = by_name[e.name].producer
        assert producer is not None
        raise TransformError(f"fold_constants: TensorFlow has no tensor for {producer.name!r}: {e}") from None
    bad = [(_producer(by_name[name]), reason) for name, reason in failed.items()]
    return _checked({by_name[name]: array for name, array in arrays.items()}, max_bytes, bad)


def _checked(values: dict[Value, np.ndarray], max_bytes: int,
             bad: list[tuple[Node, str]]) -> tuple[dict[Value, np.ndarray], list[tuple[Node, str]]]:
    for value, array in values.items():
        assert value.producer is not None
        if array.dtype.kind not in "biufcO":
            bad.append((value.producer, f"TensorFlow returned {array.dtype}, which has no NumPy form"))
        elif array.nbytes > max_bytes:
            bad.append((value.producer, f"{array.nbytes} bytes (limit {max_bytes})"))
        elif array.dtype.kind == "O":
            values[value] = np.array([x if isinstance(x, bytes) else bytes(x) for x in array.ravel()],
                                     dtype=object).reshape(array.shape)
    return values, bad


def _tensor_name(value: Value) -> str:
    return f"{_producer(value).name}:{value.index}"


def _producer(value: Value) -> Node:
    assert value.producer is not None
    return value.producer
