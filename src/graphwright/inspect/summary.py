"""summarize: likely inputs and outputs, parameter counts, op histogram, sizes.

The content follows the Graph Transform Tool's ``summarize_graph`` (possible
inputs with type and shape, variables, possible outputs, constant and variable
parameter counts, control edges, devices, op histogram and a suggested command
line), computed the same way for all three formats.  O(N + E).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..ir import DType, Model, Value, constant_value, constant_values
from ..ir.tensor import Shape
from ..transforms.binding import possible_outputs

__all__ = ["IOSpec", "GraphSummary", "summarize"]

_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})


@dataclass
class IOSpec:
    name: str
    dtype: str
    shape: list[int | str | None] | None


@dataclass
class GraphSummary:
    format: str
    path: str | None
    file_bytes: int | None
    nodes: int
    inputs: list[IOSpec]
    outputs: list[IOSpec]
    variables: list[IOSpec]
    const_parameters: int
    const_bytes: int
    variable_parameters: int
    control_edges: int
    devices: dict[str, int]
    op_histogram: list[tuple[str, int]]
    subgraphs: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def suggested_command(self) -> str:
        """A transform command line with the guessed inputs and outputs filled in."""
        src = self.path or "MODEL"
        ins = ",".join(i.name for i in self.inputs)
        outs = ",".join(o.name for o in self.outputs)
        return (
            f"graphwright transform {src} OUT --inputs={ins} --outputs={outs} "
            "--transforms='strip_unused_nodes sort_by_execution_order'"
        )


def _shape_list(shape: Shape) -> list[int | str | None] | None:
    return None if shape is None else list(shape)


def _dtype_name(dtype: DType | None) -> str:
    return dtype.value if dtype is not None else "unknown"


def _tf_io(value: Value) -> IOSpec:
    node = value.producer
    assert node is not None
    dtype = node.attr("dtype") or node.attr("T")
    # a Placeholder's or a variable's declared shape is its ``shape`` attribute (a VarHandleOp's output is a handle)
    declared = node.op.startswith("Placeholder") or node.op in _VARIABLE_OPS
    shape = node.attr("shape") if declared else value.shape
    name = node.name if value.index == 0 else f"{node.name}:{value.index}"
    return IOSpec(name, _dtype_name(dtype if isinstance(dtype, DType) else value.dtype), _shape_list(shape))


def _value_io(value: Value) -> IOSpec:
    return IOSpec(value.name, _dtype_name(value.dtype), _shape_list(value.shape))


def summarize(model: Model, file_bytes: int | None = None) -> GraphSummary:
    """Summarise ``model``'s main graph (and count its subgraphs)."""
    graph = model.graph
    notes: list[str] = []
    if graph.dialect == "tf":
        inputs = [_tf_io(n.output) for n in graph if n.op in ("Placeholder", "PlaceholderWithDefault")]
        outs = list(graph.outputs) or possible_outputs(graph)
        outputs = [_tf_io(v) for v in outs]
        variables = [_tf_io(n.output) for n in graph if n.op in _VARIABLE_OPS]
    else:
        inputs = [_value_io(v) for v in graph.inputs if not v.is_initializer]
        outputs = [_value_io(v) for v in graph.outputs]
        variables = [_value_io(v) for v in graph.initializers if v.meta.get("tflite.is_variable")]
    const_params = const_bytes = 0
    for value in constant_values(graph):
        tensor = constant_value(value)
        if tensor is None:
            continue
        const_params += tensor.size
        const_bytes += tensor.nbytes or 0
    var_params = 0
    for spec in variables:
        if spec.shape is not None and all(isinstance(d, int) and d >= 0 for d in spec.shape):  # a scalar is 1
            count = 1
            for d in spec.shape:
                count *= int(d)  # type: ignore[arg-type]
            var_params += count
    histogram = Counter(
        f"{n.domain}::{n.op}" if n.domain and n.domain not in ("ai.onnx",) else n.op for n in graph
    )
    devices = Counter(n.device for n in graph if n.device)
    control_edges = sum(len(n.control_inputs) for n in graph)
    if graph.dialect == "tf" and not inputs:
        notes.append("no Placeholder nodes: inputs must be named with --inputs")
    return GraphSummary(
        format=model.format,
        path=str(model.source_path) if model.source_path else None,
        file_bytes=file_bytes,
        nodes=len(graph),
        inputs=inputs,
        outputs=outputs,
        variables=variables,
        const_parameters=const_params,
        const_bytes=const_bytes,
        variable_parameters=var_params,
        control_edges=control_edges,
        devices=dict(sorted(devices.items())),
        op_histogram=sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0])),
        subgraphs=len(model.subgraphs),
        notes=notes,
    )
