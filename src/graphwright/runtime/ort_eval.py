"""Evaluate a batch of constant nodes on onnxruntime in one session.

The nodes (in topological order) are cloned into a small model whose
initializers are the constants they read and whose outputs are the values
wanted; the model is run once with graph optimizations disabled (the
kernels' own results, no fusions).  If onnxruntime refuses the batch (an op
it lacks, a malformed node), the nodes are retried one per session so that
one bad node does not stop the others; a node that still fails, and any node
reading its outputs, is left unevaluated.  Temporary value names are
generated (``c0``, ``v0``...), so names in the model never collide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import GraphwrightError
from ..ir import DType, Graph, Model, Node, Tensor, Value, constant_value
from . import prepare

__all__ = ["evaluate_on_ort", "OrtEvaluation", "array_dtype"]

_OPTIONS = {"graph_optimization_level": "disable", "intra_op_num_threads": 1}


class OrtEvaluation:
    """Results of a batch: arrays by IR value, and one line per node that could not run."""

    __slots__ = ("values", "failures", "sessions")

    def __init__(self) -> None:
        self.values: dict[Value, np.ndarray] = {}
        self.failures: list[str] = []
        self.sessions = 0


def _input_tensor(value: Value, known: Mapping[Value, np.ndarray]) -> Tensor | None:
    array = known.get(value)
    if array is not None:
        return Tensor.from_numpy(array)
    return constant_value(value)


def _build(nodes: Sequence[Node], wanted: Sequence[Value], known: Mapping[Value, np.ndarray],
           meta: Mapping[str, object]) -> tuple[Model, list[str]] | None:
    graph = Graph("onnx", "graphwright_fold")
    mapping: dict[Value, Value] = {}
    counter = 0

    def source(value: Value) -> Value | None:
        nonlocal counter
        mapped = mapping.get(value)
        if mapped is not None:
            return mapped
        tensor = _input_tensor(value, known)
        if tensor is None:
            return None
        mapped = Value(f"c{len(mapping)}", const=tensor)
        graph.add_initializer(mapped)
        mapping[value] = mapped
        return mapped

    for i, node in enumerate(nodes):
        inputs: list[Value | None] = []
        for value in node.inputs:
            if value is None:
                inputs.append(None)
                continue
            mapped = source(value)
            if mapped is None:
                return None
            inputs.append(mapped)
        outputs = []
        for value in node.outputs:
            omitted = not value.name and not value.num_uses and not value.is_graph_output
            outputs.append(Value("" if omitted else f"v{counter}"))
            counter += 1
        clone = Node(node.op, inputs, dialect="onnx", domain=node.domain, name=f"n{i}",
                     attrs=dict(node.attrs), outputs=outputs)
        graph.append(clone)
        mapping.update(zip(node.outputs, outputs))
    targets = [mapping[v] for v in wanted]
    graph.set_outputs(targets)
    model = Model(graph, "onnx", meta={k: v for k, v in meta.items() if k in ("onnx.ir_version", "onnx.opset_import")})
    return model, [v.name for v in targets]


def _run(nodes: Sequence[Node], wanted: Sequence[Value], known: Mapping[Value, np.ndarray],
         meta: Mapping[str, object], result: OrtEvaluation) -> str | None:
    """Run one session; returns None on success, else the runtime's one-line complaint."""
    built = _build(nodes, wanted, known, meta)
    if built is None:
        return "an input is not available"
    model, names = built
    result.sessions += 1
    try:
        session = prepare(model, backend="onnxruntime", options=_OPTIONS)
        arrays = session.run({}, names)
    except GraphwrightError as e:
        return str(e)
    for value, name in zip(wanted, names):
        array = arrays[name]
        if not isinstance(array, np.ndarray) or (array.dtype.kind not in "biufcOSU"):
            return f"output of type {type(array).__name__} is not a tensor"
        result.values[value] = array
    return None


def evaluate_on_ort(nodes: Sequence[Node], wanted: Sequence[Value], known: Mapping[Value, np.ndarray],
                    meta: Mapping[str, object]) -> OrtEvaluation:
    """Values ``wanted`` (outputs of ``nodes``) computed on onnxruntime; see the module docstring."""
    result = OrtEvaluation()
    if not wanted:
        return result
    if _run(nodes, wanted, known, meta, result) is None:
        return result
    # One node per session, in order; outputs computed so far feed the next nodes.
    result.values.clear()
    have: dict[Value, np.ndarray] = dict(known)
    for node in nodes:
        outs = [v for v in node.outputs if v.name or v.num_uses or v.is_graph_output]
        if not outs:
            continue
        missing = [v for v in node.inputs if v is not None and v not in have and constant_value(v) is None]
        if missing:
            continue  # reads the output of a node that failed
        local = OrtEvaluation()
        error = _run([node], outs, have, meta, local)
        result.sessions += local.sessions
        if error is not None:
            result.failures.append(f"{node.name or node.op} ({node.op}): {error}")
            continue
        have.update(local.values)
        result.values.update({v: a for v, a in local.values.items() if v in set(wanted)})
    return result


def array_dtype(array: np.ndarray, declared: DType | None) -> DType:
    """The IR dtype of a computed array (the declared one when it has the same storage)."""
    if array.dtype.kind in "OSU":
        return DType.STRING
    found = DType.from_numpy(array.dtype)
    if declared is not None and declared.numpy == array.dtype:
        return declared
    return found

