"""IR -> ONNX protos, in pieces that can be streamed to a file.

:class:`Builder` turns a :class:`Model` into :class:`ModelParts`: the model
fields before ``graph``, the main graph's fields before its initializers
(nodes, name), one :class:`TensorEntry` per initializer, the graph fields
after them, and the model fields after ``graph``.  ``saving.py`` writes the
pieces one after the other, so the weights are never serialized into one big
buffer.  Building with one ModelProto as every piece gives a complete proto
instead (``to_proto``).

What the reader kept is put back: the model shell (with the mirrored fields
overridden only when they changed), graph and node shells, value_info protos
(verbatim while the value is unchanged), unchanged tensors' source protos.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from ...errors import ModelSaveError
from ...ir import Graph, Model, Node, Tensor, Value
from .attrs import write_attr
from .dtypes import onnx_code
from .external import ExternalTensor, Region
from .mapped import MappedTensor
from .meta import (
    FUNCTIONS,
    GRAPH_SHELL,
    INPUTS,
    METADATA_PROPS,
    MODEL_MIRRORS,
    MODEL_SHELL,
    NODE_SHELL,
    OPSET_IMPORT,
    OUTPUTS,
    QUANT_ANNOTATION,
    UNTYPED_ATTRS,
    VALUE_INFO,
    ValueInfoRecord,
)
from .naming import ExportNames
from .tensors import (
    EXTERNAL,
    ProtoEntry,
    RawEntry,
    TensorEntry,
    expected_nbytes,
    fresh_proto,
    header_protos,
    split_proto,
    tensor_buffer,
)
from .wire import copy_fields

__all__ = ["Builder", "ModelParts", "ExternalItem", "DEFAULT_IR_VERSION", "DEFAULT_OPSET"]

#: IR version and default-domain opset written for models that carry none (built by hand).
DEFAULT_IR_VERSION = 10
DEFAULT_OPSET = 21
#: Large external tensors start on a page boundary (so runtimes can map them directly).
_PAGE, _PAGE_FROM, _SMALL_ALIGN = 4096, 1 << 20, 64
_MODEL_GRAPH = 7
_G_NAME, _G_DOC = 2, 10


class ExternalItem:
    """One tensor's bytes in the external data file."""

    __slots__ = ("tensor", "name", "offset", "length")

    def __init__(self, tensor: Tensor, name: str, offset: int, length: int) -> None:
        self.tensor, self.name, self.offset, self.length = tensor, name, offset, length


class ModelParts:
    """A model split at its main graph's initializers (see the module docstring)."""

    __slots__ = ("head", "graph_head", "entries", "graph_tail", "tail", "external", "external_size")

    def __init__(
        self,
        head: onnx.ModelProto,
        graph_head: onnx.GraphProto,
        entries: list[TensorEntry],
        graph_tail: onnx.GraphProto,
        tail: onnx.ModelProto,
        external: list[ExternalItem],
        external_size: int,
    ) -> None:
        self.head, self.graph_head, self.entries = head, graph_head, entries
        self.graph_tail, self.tail = graph_tail, tail
        self.external, self.external_size = external, external_size


class Builder:
    """Builds the protos of one model.  ``external``: move tensors to ``data_location``."""

    __slots__ = ("model", "names", "external", "min_bytes", "data_location", "items", "end")

    def __init__(self, model: Model, *, external: bool = False, min_bytes: int = 0, data_location: str = "") -> None:
        if model.format != "onnx":
            raise ModelSaveError(f"cannot write a {model.format} model as ONNX; graphwright never converts formats")
        self.model = model
        self.names = ExportNames(model.graph)
        self.external = external
        self.min_bytes = min_bytes
        self.data_location = data_location
        self.items: list[ExternalItem] = []
        self.end = 0

    # -- whole model -----------------------------------------------------------
    def parts(self) -> ModelParts:
        fields = self._model_fields()
        head, tail = onnx.ModelProto(), onnx.ModelProto()
        head.CopyFrom(fields)
        tail.CopyFrom(fields)
        for fd, _ in fields.ListFields():
            (tail if fd.number < _MODEL_GRAPH else head).ClearField(fd.name)
        head.DiscardUnknownFields()  # unknown fields are serialized last: they belong to the tail
        graph_head, graph_tail = onnx.GraphProto(), onnx.GraphProto()
        entries: list[TensorEntry] = []
        self.graph(self.model.graph, graph_head, graph_tail, entries)
        return ModelParts(head, graph_head, entries, graph_tail, tail, self.items, self.end)

    def proto(self) -> onnx.ModelProto:
        proto = self._model_fields()
        proto.graph.SetInParent()
        self.graph(self.model.graph, proto.graph, proto.graph, None)
        return proto

    def _model_fields(self) -> onnx.ModelProto:
        meta = self.model.meta
        out = onnx.ModelProto()
        shell = meta.get(MODEL_SHELL)
        if isinstance(shell, onnx.ModelProto):
            out.CopyFrom(shell)
        else:
            out.ir_version = DEFAULT_IR_VERSION
            out.opset_import.add(domain="", version=DEFAULT_OPSET)
        for field in MODEL_MIRRORS:
            key = f"onnx.{field}"
            if key in meta and meta[key] != getattr(out, field):
                if meta[key]:
                    setattr(out, field, meta[key])
                else:
                    out.ClearField(field)
        opsets = meta.get(OPSET_IMPORT)
        if opsets is not None and dict(opsets) != {op.domain: op.version for op in out.opset_import}:
            out.ClearField("opset_import")
            for domain, version in opsets.items():
                out.opset_import.add(domain=domain, version=int(version))
        props = meta.get(METADATA_PROPS)
        if props is not None and dict(props) != {p.key: p.value for p in out.metadata_props}:
            out.ClearField("metadata_props")
            for key, value in props.items():
                out.metadata_props.add(key=str(key), value=str(value))
        out.ClearField("functions")
        out.functions.extend(meta.get(FUNCTIONS, ()))
        return out

    # -- graphs and nodes --------------------------------------------------------
    def graph(self, g: Graph, head: onnx.GraphProto, tail: onnx.GraphProto, entries: list[TensorEntry] | None) -> None:
        """Fill ``head`` (nodes, name) and ``tail`` (the rest); initializers go to ``entries`` if given."""
        meta = g.meta
        shell = meta.get(GRAPH_SHELL)
        if isinstance(shell, onnx.GraphProto):
            copy_fields(shell, tail, skip=(_G_NAME, _G_DOC))
        if g.name:
            head.name = g.name
        elif shell is not None and shell.HasField("name"):
            head.name = ""
        for node in g:
            self._node(node, head.node.add())
        names = self.names
        for value in g.initializers:
            name = names.value(value, "initializer")
            tensor = value.const
            assert tensor is not None
            if isinstance(tensor.source, onnx.SparseTensorProto):
                sparse = tail.sparse_initializer.add()
                sparse.CopyFrom(tensor.source)
                if sparse.values.name != name:
                    sparse.values.name = name
                continue
            entry = self.tensor(tensor, name, initializer=True)
            if entries is not None:
                entries.append(entry)
            else:
                entry.fill(head.initializer.add())
        if g.doc_string:
            tail.doc_string = g.doc_string
        elif shell is not None and shell.HasField("doc_string"):
            tail.doc_string = ""
        where = f"graph {g.name!r}"
        records = meta.get(INPUTS, {})
        for value in g.inputs:
            self._value_info(value, records.get(value), tail.input.add(), f"{where} input")
        records = meta.get(OUTPUTS, {})
        for value in g.outputs:
            self._value_info(value, records.get(value), tail.output.add(), f"{where} output")
        for value, record in meta.get(VALUE_INFO, {}).items():
            if value in names.values:  # values removed by a transform lose their entry
                self._value_info(value, record, tail.value_info.add(), f"{where} value_info")
        for annotation, refs in meta.get(QUANT_ANNOTATION, ()):
            self._annotation(annotation, refs, tail.quantization_annotation.add())

    def _node(self, node: Node, np_: onnx.NodeProto) -> None:
        where = f"node {node.name!r} ({node.op})"
        if node.dialect != "onnx":
            raise ModelSaveError(f"{where} is in dialect {node.dialect!r}; the ONNX writer writes onnx nodes only")
        if node.control_inputs:
            raise ModelSaveError(f"{where} has control inputs, which ONNX cannot express; remove them first")
        shell = node.meta.get(NODE_SHELL)
        if isinstance(shell, onnx.NodeProto):
            np_.CopyFrom(shell)
        names = self.names
        if node.inputs:
            np_.input.extend(["" if v is None else names.value(v, where) for v in node.inputs])
        np_.output.extend([names.values[v] for v in node.outputs])
        name = names.nodes[node]
        if name:
            np_.name = name
        if node.op:
            np_.op_type = node.op
        for key, attr in node.attrs.items():
            write_attr(key, attr, np_.attribute.add(), self._attr_tensor, self._subgraph, where)
        untyped = node.meta.get(UNTYPED_ATTRS)
        if untyped:
            for ap in np_.attribute:
                if ap.name in untyped:
                    ap.ClearField("type")
        if node.doc_string:
            np_.doc_string = node.doc_string
        if node.domain:
            np_.domain = node.domain

    def _attr_tensor(self, tensor: Tensor, dst: onnx.TensorProto) -> None:
        self.tensor(tensor, tensor.name, initializer=False).fill(dst)

    def _subgraph(self, g: Graph, dst: onnx.GraphProto) -> None:
        self.graph(g, dst, dst, None)

    def _value_info(self, value: Value, rec: ValueInfoRecord | None, dst: onnx.ValueInfoProto, where: str) -> None:
        name = self.names.value(value, where)
        same_type = rec is not None and rec.dtype == value.dtype and rec.shape == value.shape
        if same_type and rec is not None and rec.name == name and rec.doc_string == value.doc_string:
            dst.CopyFrom(rec.proto)
            return
        if name:
            dst.name = name
        if same_type and rec is not None:
            if rec.proto.HasField("type"):
                dst.type.CopyFrom(rec.proto.type)
        elif value.dtype is not None or value.shape is not None:
            tensor_type = dst.type.tensor_type
            if value.dtype is not None:
                tensor_type.elem_type = onnx_code(value.dtype, f"{where} {name!r}")
            if value.shape is not None:
                tensor_type.shape.SetInParent()
                for d in value.shape:
                    dim = tensor_type.shape.dim.add()
                    if isinstance(d, str):
                        dim.dim_param = d
                    elif d is not None:
                        dim.dim_value = int(d)
        if value.doc_string:
            dst.doc_string = value.doc_string
        if rec is not None:
            dst.metadata_props.extend(rec.proto.metadata_props)

    def _annotation(self, annotation: Any, refs: dict[str, Value], dst: onnx.TensorAnnotation) -> None:
        dst.CopyFrom(annotation)
        renamed = {old: self.names.values[v] for old, v in refs.items() if v in self.names.values}
        if dst.tensor_name in renamed:
            dst.tensor_name = renamed[dst.tensor_name]
        for kv in dst.quant_parameter_tensor_names:
            if kv.value in renamed:
                kv.value = renamed[kv.value]

    # -- tensors -----------------------------------------------------------------
    def tensor(self, tensor: Tensor, name: str, *, initializer: bool) -> TensorEntry:
        """How ``tensor`` is emitted under ``name``: its source as is, or header + streamed bytes."""
        source = tensor.source
        if self.external and self._goes_external(tensor, initializer):
            return self._external(tensor, name)
        if isinstance(source, onnx.TensorProto) and source.data_location != EXTERNAL:
            raw_len = expected_nbytes(tensor) if source.HasField("raw_data") else None
            if raw_len is not None:  # streamed as its own fields around raw_data: identical bytes
                head, tail = split_proto(source, name)
                return RawEntry(head, tail, raw_len, lambda: source.raw_data, name)
            if source.name == name:
                return ProtoEntry(source)
            copy = onnx.TensorProto()
            copy.CopyFrom(source)
            copy.name = name
            return ProtoEntry(copy)
        if isinstance(source, MappedTensor):  # inline data left in the source file: same bytes, streamed
            head, tail = split_proto(source.proto, name)
            return RawEntry(head, tail, source.length, lambda: Region(source), name)
        if isinstance(source, ExternalTensor):
            head, tail = header_protos(tensor, name)
            return RawEntry(head, tail, source.length, lambda: Region(source), name)
        length = expected_nbytes(tensor)
        if length is None:
            return ProtoEntry(fresh_proto(tensor, name))
        head, tail = header_protos(tensor, name)
        return RawEntry(head, tail, length, lambda: tensor_buffer(tensor, name), name)

    def _goes_external(self, tensor: Tensor, initializer: bool) -> bool:
        source = tensor.source
        if isinstance(source, ExternalTensor) and not isinstance(source, MappedTensor):
            return True
        if not initializer or isinstance(source, onnx.SparseTensorProto):
            return False
        length = expected_nbytes(tensor)
        return length is not None and length >= self.min_bytes

    def _external(self, tensor: Tensor, name: str) -> TensorEntry:
        source = tensor.source
        length = source.length if isinstance(source, ExternalTensor) else expected_nbytes(tensor)
        assert length is not None
        align = _PAGE if length >= _PAGE_FROM else _SMALL_ALIGN
        offset = -(-self.end // align) * align
        self.end = offset + length
        self.items.append(ExternalItem(tensor, name, offset, length))
        head, tail = header_protos(tensor, name)
        proto = onnx.TensorProto()
        proto.MergeFrom(head)
        proto.MergeFrom(tail)
        for key, value in (("location", self.data_location), ("offset", str(offset)), ("length", str(length))):
            proto.external_data.add(key=key, value=value)
        proto.data_location = EXTERNAL
        return ProtoEntry(proto)


def data_file_name(path: Path) -> str:
    """The external data file written beside ``path``: ``<model file name>.data``."""
    return f"{path.name}.data"
