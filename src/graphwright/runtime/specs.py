"""A model's inputs and outputs read from the IR (no runtime needed).

* ONNX: graph inputs that are not initializers; graph outputs.
* TFLite: subgraph 0's inputs and outputs.
* GraphDef: ``graph.inputs`` / ``graph.outputs`` when the caller bound them;
  otherwise the ``Placeholder`` nodes, and the nodes nothing consumes (by data
  or control edge) that are not constants, no-ops, placeholders, assignments
  or checkpoint ops.  GraphDef names are TF names: ``"node"`` for output 0,
  ``"node:N"`` otherwise.
"""

from __future__ import annotations

import os
from typing import Any

from .. import formats
from ..ir import DType, Model, Value
from ..ir.tensor import Shape
from .base import InputSpec
from .tensorflow import is_output_candidate

__all__ = ["input_specs", "output_names"]


def _as_model(model: Model | str | os.PathLike[str]) -> Model:
    if isinstance(model, Model):
        return model
    return formats.load(model)


def input_specs(model: Model | str | os.PathLike[str]) -> list[InputSpec]:
    """The inputs a caller must feed, in order (a path is read with ``graphwright.formats.load``).  O(N)."""
    m = _as_model(model)
    graph = m.graph
    if m.format == "graphdef" and not graph.inputs:
        return [
            InputSpec(node.name, _attr_dtype(node.attr("dtype")), _tf_shape(node.attr("shape", None), node))
            for node in graph
            if node.op == "Placeholder"
        ]
    tf_names = m.format == "graphdef"
    return [_spec(v, tf_names) for v in graph.inputs if not v.is_initializer]


def output_names(model: Model | str | os.PathLike[str]) -> list[str]:
    """The model's output names, in order (see the module docstring for GraphDef).  O(N + E)."""
    m = _as_model(model)
    graph = m.graph
    if m.format != "graphdef" or graph.outputs:
        return [_tf_name(v) if m.format == "graphdef" else v.name for v in graph.outputs]
    return [
        node.name
        for node in graph
        if is_output_candidate(node.op)
        and node.outputs
        and not node.control_users
        and all(v.num_uses == 0 for v in node.outputs)
    ]


def _spec(value: Value, tf_names: bool) -> InputSpec:
    name = _tf_name(value) if tf_names else value.name
    return InputSpec(name, value.dtype or DType.UNDEFINED, value.shape)


def _tf_name(value: Value) -> str:
    node = value.producer
    if node is None:
        return value.name
    return node.name if value.index == 0 else f"{node.name}:{value.index}"


def _attr_dtype(value: Any) -> DType:
    return value if isinstance(value, DType) else DType.UNDEFINED


def _tf_shape(value: Any, node: Any) -> Shape:
    """A Placeholder's ``shape`` attr: unknown rank -> None, ``-1`` dims -> None."""
    if value is None:
        return node.output.shape
    return tuple(None if d is None or (isinstance(d, int) and d < 0) else d for d in value)
