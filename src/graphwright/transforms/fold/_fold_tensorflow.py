"""``backend=tensorflow``: decide constant sub-graphs here, compute them with TensorFlow in one session run.

The candidate ops are those with a NumPy kernel plus every op TensorFlow
knows that is stateless and not control flow.  The whole graph is imported
once and the frontier values (see :mod:`._fold_tf`) are fetched together;
when TensorFlow fails on one, that node is made non-constant and the
(cheap) decision pass runs again.  Static-shape folding of ``Shape`` on
placeholders is a NumPy-backend feature (TensorFlow would ask for the feed).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

from ...errors import BackendUnavailableError, TransformError
from ...ir import Model, Node, Value
from ...runtime import numpy_tf
from ._fold_tf import NEVER_FOLDED, FoldOptions, FoldOutcome, TfFolder

__all__ = ["fold_with_tensorflow"]

#: Ops TensorFlow can run that still must never be folded (control flow, feeds, function calls).
_NEVER = NEVER_FOLDED | {
    "PlaceholderV2", "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
    "SymbolicGradient", "FakeParam",
}


def _import_tf() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf  # type: ignore[import-untyped]
    except ImportError:
        raise BackendUnavailableError(
            "fold_constants(backend=tensorflow) needs TensorFlow: pip install 'graphwright[tf]' "
            "(or use the default backend=numpy)"
        ) from None
    return tf


def _tf_can_evaluate() -> Any:
    from ...formats.graphdef.op_registry import op_def

    def can(op: str) -> bool:
        if op in numpy_tf.KERNELS:
            return True
        definition = op_def(op)
        return (definition is not None and not definition.is_stateful and op not in _NEVER
                and not op.startswith("_"))

    return can


def fold_with_tensorflow(model: Model, options: FoldOptions) -> FoldOutcome:
    """Fold ``model.graph`` in place, computing constants with TensorFlow."""
    tf = _import_tf()
    from ...formats import serialize

    can = _tf_can_evaluate()
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(serialize(model))
    with tf.Graph().as_default() as tf_graph:
        try:
            tf.import_graph_def(graph_def, name="")
        except Exception as e:  # TF raises ValueError or its own error types
            raise TransformError(f"fold_constants: TensorFlow cannot import the graph: {_first_line(e)}") from None
    failures: list[str] = []
    excluded = set(options.exclude_nodes)
    with tf.compat.v1.Session(graph=tf_graph) as session:
        while True:
            opts = FoldOptions(options.exclude_ops, frozenset(excluded), options.max_bytes)
            folder = TfFolder(model.graph, opts, can, evaluator=None)
            folder.decide()
            frontier = folder.frontier()
            values, bad = _fetch(tf, session, tf_graph, frontier, options.max_bytes)
            if not bad:
                break
            for node, reason in bad:
                failures.append(f"{node.name!r} ({node.op}): {reason}")
                excluded.add(node.name)
    outcome = folder.apply(dict(values))
    outcome.failures.extend(failures)
    return outcome


def _fetch(tf: ModuleType, session: Any, tf_graph: Any, frontier: list[Value],
           max_bytes: int) -> tuple[dict[Value, np.ndarray], list[tuple[Node, str]]]:
    """Fetch the frontier in one run; on failure, one value at a time to find the culprits."""
    if not frontier:
        return {}, []
    try:
        arrays = session.run([_tensor(tf_graph, v) for v in frontier])
    except tf.errors.OpError:
        arrays = None
    if arrays is None:
        values: dict[Value, np.ndarray] = {}
        bad: list[tuple[Node, str]] = []
        for v in frontier:
            try:
                values[v] = np.asarray(session.run(_tensor(tf_graph, v)))
            except tf.errors.OpError as e:
                assert v.producer is not None
                bad.append((v.producer, _first_line(e)))
        return _checked(values, max_bytes, bad)
    return _checked(dict(zip(frontier, (np.asarray(a) for a in arrays))), max_bytes, [])


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


def _tensor(tf_graph: Any, value: Value) -> Any:
    assert value.producer is not None
    try:
        return tf_graph.get_tensor_by_name(f"{value.producer.name}:{value.index}")
    except (KeyError, ValueError) as e:
        raise TransformError(f"fold_constants: TensorFlow has no tensor for {value.producer.name!r}: {e}") from None


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "message", None) or e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
