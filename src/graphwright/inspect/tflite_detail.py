"""The detailed TFLite summary: per subgraph, the operators in execution order
with their input/output tensors (index and name), every tensor's shape, dtype,
buffer and quantization, and the signatures.  For people (:func:`render_tflite_detail`,
rich tables) and tools (:meth:`TFLiteDetail.to_json`).  O(tensors + operators).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table

from ..ir import Graph, Model, Value

__all__ = ["OperatorDetail", "SubgraphDetail", "TFLiteDetail", "TensorDetail", "render_tflite_detail",
           "tflite_detail"]

#: (tensor index or None, tensor name); None index: an omitted optional input
TensorRef = tuple[int | None, str | None]


@dataclass
class TensorDetail:
    index: int | None
    name: str
    dtype: str
    shape: list[int | None] | None
    shape_signature: list[int | None] | None
    buffer: int | None  # buffer index in the file (None: no data)
    buffer_bytes: int
    constant: bool
    variable: bool
    scale: list[float] | None = None
    zero_point: list[int] | None = None
    quantized_dimension: int | None = None  # only for per-channel quantization


@dataclass
class OperatorDetail:
    index: int
    op: str
    name: str
    version: int | None
    inputs: list[TensorRef]
    outputs: list[TensorRef]
    options: dict[str, Any]


@dataclass
class SubgraphDetail:
    index: int
    name: str
    inputs: list[TensorRef]
    outputs: list[TensorRef]
    operators: list[OperatorDetail]
    tensors: list[TensorDetail]


@dataclass
class TFLiteDetail:
    path: str | None
    version: int | None
    description: str | None
    subgraphs: list[SubgraphDetail]
    signatures: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _index(value: Value) -> int | None:
    idx = value.meta.get("tflite.tensor_index")
    return None if idx is None else int(idx)


def _ref(value: Value | None, numbering: dict[int, int]) -> TensorRef:
    if value is None:
        return (None, None)
    return (numbering.get(id(value)), value.name)


def _values(graph: Graph) -> list[Value]:
    seen: dict[int, Value] = {}
    for v in [*graph.inputs, *graph.initializers]:
        seen.setdefault(id(v), v)
    for node in graph:
        for maybe in [*node.inputs, *node.outputs]:
            if maybe is not None:
                seen.setdefault(id(maybe), maybe)
    for v in [*graph.outputs, *graph.meta.get("tflite.unused_tensors", ())]:
        seen.setdefault(id(v), v)
    return list(seen.values())


def _attr_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (list, tuple)):
        return [_attr_value(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


def _tensor(value: Value, index: int | None) -> TensorDetail:
    const = value.const
    buffer = None
    if const is not None and getattr(const.source, "index", None) is not None:
        buffer = int(const.source.index)
    static = value.meta.get("tflite.shape")
    shape = None if value.shape is None else [d if isinstance(d, int) else None for d in value.shape]
    detail = TensorDetail(
        index=index, name=value.name, dtype=value.dtype.value if value.dtype is not None else "undefined",
        shape=[int(d) for d in static] if static is not None else shape,
        shape_signature=shape if static is not None else None,
        buffer=buffer, buffer_bytes=int(const.nbytes or 0) if const is not None else 0,
        constant=const is not None, variable=bool(value.meta.get("tflite.is_variable", False)),
    )
    q = value.quant
    if q is not None and q.scale.size:
        detail.scale = [float(s) for s in q.scale.reshape(-1)]
        detail.zero_point = [int(z) for z in q.zero_point.reshape(-1)]
        detail.quantized_dimension = int(q.axis) if q.scale.size > 1 else None
    return detail


def _subgraph(i: int, graph: Graph) -> SubgraphDetail:
    values = _values(graph)
    ordered = sorted(values, key=lambda v: (_index(v) is None, _index(v) or 0))
    numbering: dict[int, int] = {}
    next_free = max((_index(v) or -1 for v in values), default=-1) + 1
    for v in ordered:  # values a transform added get the next free numbers, as the writer does
        idx = _index(v)
        if idx is None:
            idx, next_free = next_free, next_free + 1
        numbering[id(v)] = idx
    operators = [
        OperatorDetail(
            index=k, op=node.op if node.domain != "custom" else f"CUSTOM:{node.op}", name=node.name,
            version=node.meta.get("tflite.version"),
            inputs=[_ref(v, numbering) for v in node.inputs], outputs=[_ref(v, numbering) for v in node.outputs],
            options={key: _attr_value(node.attr(key)) for key in node.attrs if key != "custom_options"},
        )
        for k, node in enumerate(graph)
    ]
    return SubgraphDetail(
        index=i, name=graph.name, inputs=[_ref(v, numbering) for v in graph.inputs],
        outputs=[_ref(v, numbering) for v in graph.outputs], operators=operators,
        tensors=[_tensor(v, numbering[id(v)]) for v in ordered],
    )


def tflite_detail(model: Model) -> TFLiteDetail:
    """The detailed summary of a TFLite model (raises ValueError for other formats)."""
    if model.format != "tflite":
        raise ValueError(f"the detailed TFLite summary needs a TFLite model, not {model.format}")
    graphs = model.graphs
    subgraphs = [_subgraph(i, g) for i, g in enumerate(graphs)]
    signatures = []
    for sig in model.meta.get("tflite.signature_defs") or []:
        position = next((k for k, g in enumerate(graphs) if g is sig.graph), None)
        numbering = {}
        if position is not None:
            for t in subgraphs[position].tensors:
                numbering[t.name] = t.index

        def entries(items: list[Any], sig: Any = sig, numbering: dict[str, int | None] = numbering) -> list[dict[str, Any]]:
            out = []
            for key, ref in items:
                value = sig.resolve(ref)
                out.append({"name": key, "tensor_index": numbering.get(value.name), "tensor": value.name})
            return out

        signatures.append({"key": sig.key, "subgraph": position, "inputs": entries(sig.inputs),
                           "outputs": entries(sig.outputs)})
    return TFLiteDetail(
        path=str(model.source_path) if model.source_path is not None else None,
        version=model.meta.get("tflite.version"), description=model.meta.get("tflite.description"),
        subgraphs=subgraphs, signatures=signatures,
    )


def _fmt_ref(ref: TensorRef) -> str:
    index, name = ref
    return "-" if index is None and name is None else f"{index}:{name}"


def _fmt_quant(t: TensorDetail) -> str:
    if t.scale is None:
        return ""
    if len(t.scale) == 1:
        return f"s={t.scale[0]:.6g} zp={t.zero_point[0] if t.zero_point else 0}"
    return f"per-channel axis {t.quantized_dimension}: {len(t.scale)} scales [{min(t.scale):.3g}..{max(t.scale):.3g}]"


def render_tflite_detail(detail: TFLiteDetail, console: Any) -> None:
    """Print ``detail`` as rich tables on ``console``."""
    console.print(f"[bold]{detail.path or '<in-memory model>'}[/bold]  schema version {detail.version}"
                  + (f"  ({detail.description})" if detail.description else ""))
    for sub in detail.subgraphs:
        console.print(f"\n[bold]subgraph {sub.index}[/bold] {sub.name!r}: inputs "
                      f"{', '.join(map(_fmt_ref, sub.inputs))}; outputs {', '.join(map(_fmt_ref, sub.outputs))}")
        ops = Table(title=f"operators (execution order), subgraph {sub.index}")
        for col in ("#", "op", "v", "inputs", "outputs"):
            ops.add_column(col, overflow="fold")
        for op in sub.operators:
            ops.add_row(str(op.index), op.op, str(op.version or ""), "\n".join(map(_fmt_ref, op.inputs)),
                        "\n".join(map(_fmt_ref, op.outputs)))
        console.print(ops)
        tensors = Table(title=f"tensors, subgraph {sub.index}")
        for col in ("#", "name", "dtype", "shape", "buffer", "bytes", "quantization"):
            tensors.add_column(col, overflow="fold")
        for t in sub.tensors:
            shape = "?" if t.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
            tensors.add_row(str(t.index), t.name, t.dtype, shape, "" if t.buffer is None else str(t.buffer),
                            str(t.buffer_bytes) if t.constant else "", _fmt_quant(t))
        console.print(tensors)
    for sig in detail.signatures:
        ins = ", ".join(f"{e['name']}={e['tensor_index']}:{e['tensor']}" for e in sig["inputs"])
        outs = ", ".join(f"{e['name']}={e['tensor_index']}:{e['tensor']}" for e in sig["outputs"])
        console.print(f"signature {sig['key']!r} (subgraph {sig['subgraph']}): inputs {ins}; outputs {outs}")
