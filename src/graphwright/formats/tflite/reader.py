"""TFLite flatbuffer -> IR.

Subgraph 0 becomes ``model.graph``, the others ``model.subgraphs`` (dialect
``tflite``).  Tensors become values; tensors with data become initializers
whose :class:`Tensor` views the file bytes without copying (``source`` is the
:class:`TFLiteBuffer`, so the writer re-emits unchanged constants as read).
Operators become nodes in file order.  What the IR does not model is kept in
``meta`` under ``tflite.*`` keys (see :mod:`.carried` and the key list in the
package docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...ir import Attr, DType, Graph, Model, Node, QuantParams, Tensor, Value
from . import _schema as S
from .carried import QuantDetails, SignatureDef, SignatureRef, TFLiteBuffer
from .options import CUSTOM_OPTIONS_ATTR, options_to_attrs
from .sparsity import densify, sparse_form, stored_values
from .strings import decode_string_tensor
from .validate import Budget, check_model, corrupt, verify_flatbuffer

__all__ = ["load", "read_model"]

_fb = S.fb


def load(path: Path, data: bytes) -> Model:
    """Read a ``.tflite`` file's bytes into the IR (raises :class:`ModelLoadError`)."""
    return read_model(data, str(path))


def read_model(data: bytes | bytearray | memoryview, where: str = "<tflite>") -> Model:
    """Verify, unpack, check and convert a TFLite flatbuffer."""
    budget, unknown = verify_flatbuffer(data, where)
    try:
        model_t = _fb.ModelT.InitFromPackedBuf(data, 0)
    except Exception as e:  # the generated unpacker raises anything it hits
        corrupt(where, f"{type(e).__name__}: {e}")
    check_model(model_t, len(data), where)
    model = _Importer(model_t, data, where, budget).run()
    if unknown:
        model.meta["tflite.unknown_fields"] = unknown
    return model


def text(raw: bytes | str | None) -> str:
    """A schema string as ``str`` (undecodable bytes survive the round trip)."""
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def _ints(vector: Any) -> list[int]:
    return [] if vector is None else [int(x) for x in vector]


class _Importer:
    __slots__ = ("budget", "buffers", "data", "graphs", "mt", "used_buffers", "values", "where")

    def __init__(self, model_t: Any, data: bytes | bytearray | memoryview, where: str, budget: Budget) -> None:
        self.mt = model_t
        self.data = data
        self.where = where
        self.budget = budget
        self.buffers: dict[int, TFLiteBuffer] = {}
        self.used_buffers: set[int] = {0}
        self.values: list[list[Value]] = []
        self.graphs: list[Graph] = []

    # -- model ------------------------------------------------------------------
    def run(self) -> Model:
        mt = self.mt
        for s, sg in enumerate(mt.subgraphs):
            self.graphs.append(self._subgraph(s, sg))
        meta: dict[str, Any] = {
            "tflite.version": int(mt.version),
            "tflite.operator_codes": [_code_key(oc) for oc in mt.operatorCodes or []],
        }
        if mt.description is not None:
            meta["tflite.description"] = text(mt.description)
        if mt.metadata is not None:
            meta["tflite.metadata"] = [(text(md.name), self._buffer(md.buffer)) for md in mt.metadata]
        if mt.metadataBuffer is not None:
            meta["tflite.metadata_buffer"] = [self._buffer(i) for i in _ints(mt.metadataBuffer)]
        if mt.signatureDefs is not None:
            meta["tflite.signature_defs"] = [self._signature(sig) for sig in mt.signatureDefs]
        if mt.externalBufferGroups is not None:
            meta["tflite.external_buffer_groups"] = mt.externalBufferGroups
        if mt.externalBuffers is not None:
            meta["tflite.external_buffers"] = mt.externalBuffers
        buffers = mt.buffers or []
        unreferenced = [self._buffer(i) for i in range(1, len(buffers)) if i not in self.used_buffers]
        if unreferenced:
            meta["tflite.unreferenced_buffers"] = unreferenced
        if any(b.offset > 1 for b in buffers):
            meta["tflite.buffer_layout"] = "offsets"
        return Model(self.graphs[0], "tflite", subgraphs=self.graphs[1:], meta=meta)

    def _buffer(self, index: int) -> TFLiteBuffer:
        self.used_buffers.add(index)
        found = self.buffers.get(index)
        if found is None:
            raw = self.mt.buffers[index]
            if raw.offset > 1:
                array = np.frombuffer(self.data, np.uint8, count=int(raw.size), offset=int(raw.offset))
                found = TFLiteBuffer(index, _readonly(array), external=True)
            else:
                array = np.asarray(raw.data if raw.data is not None else (), dtype=np.uint8)
                found = TFLiteBuffer(index, _readonly(array), has_vector=raw.data is not None)
            self.buffers[index] = found
        return found

    def _signature(self, sig: Any) -> SignatureDef:
        graph = self.graphs[sig.subgraphIndex]
        values = self.values[sig.subgraphIndex]
        inputs = {v: i for i, v in reversed(list(enumerate(graph.inputs)))}
        outputs = {v: i for i, v in reversed(list(enumerate(graph.outputs)))}

        def ref(index: int) -> SignatureRef:
            value = values[index]
            if value in inputs:
                return ("input", inputs[value])
            if value in outputs:
                return ("output", outputs[value])
            return value

        return SignatureDef(
            None if sig.signatureKey is None else text(sig.signatureKey), graph,
            [(None if tm.name is None else text(tm.name), ref(tm.tensorIndex)) for tm in sig.inputs or []],
            [(None if tm.name is None else text(tm.name), ref(tm.tensorIndex)) for tm in sig.outputs or []],
        )

    # -- subgraphs ---------------------------------------------------------------
    def _subgraph(self, s: int, sg: Any) -> Graph:
        graph = Graph("tflite", text(sg.name))
        if sg.name is None:
            graph.meta["tflite.name_absent"] = True
        if sg.debugMetadataIndex != -1:
            graph.meta["tflite.debug_metadata_index"] = int(sg.debugMetadataIndex)
        tensors = sg.tensors or []
        values = [self._tensor(t, ten) for t, ten in enumerate(tensors)]
        self.values.append(values)
        for t, _ten in enumerate(tensors):
            self._resolve_quant_refs(values[t], values)
            if values[t].meta.get("tflite.is_variable"):
                graph.add_state(values[t])  # may hold its initial value in .const
            elif values[t].const is not None:
                graph.add_initializer(values[t])
        graph.set_inputs([values[i] for i in _ints(sg.inputs)])
        codes = self.mt.operatorCodes or []
        for op in sg.operators or []:
            graph.append(self._node(op, codes[op.opcodeIndex], values))
        graph.set_outputs([values[i] for i in _ints(sg.outputs)])
        unused = [v for v in values
                  if v.producer is None and not v.uses() and not v.is_graph_input
                  and not v.is_graph_output and not v.is_initializer and not v.is_state]
        if unused:
            referenced = {id(v) for n in graph for v in n.meta.get("tflite.intermediates", ())}
            referenced |= {id(r) for v in values if v.quant is not None
                           and isinstance(v.quant.extra, QuantDetails) for r in v.quant.extra.refs.values()}
            unused = [v for v in unused if id(v) not in referenced]
            if unused:
                graph.meta["tflite.unused_tensors"] = unused
        return graph

    def _tensor(self, t: int, ten: Any) -> Value:
        dtype = S.dtype_of(ten.type)
        shape = _ints(ten.shape)
        if ten.shapeSignature is not None:
            dims: tuple[int | None, ...] = tuple(None if d == -1 else d for d in _ints(ten.shapeSignature))
        else:
            dims = tuple(shape)
        meta: dict[str, Any] = {}
        value = Value(text(ten.name), dtype, dims, quant=self._quant(ten.quantization, meta))
        value.meta = meta
        meta["tflite.tensor_index"] = t
        if ten.name is None:
            meta["tflite.name_absent"] = True
        if dtype is DType.UNDEFINED:
            meta["tflite.type"] = int(ten.type)
        if ten.shapeSignature is not None:
            meta["tflite.shape"] = tuple(shape)
        if not ten.hasRank:
            meta["tflite.has_rank"] = False
        if ten.isVariable:
            meta["tflite.is_variable"] = True
        if ten.sparsity is not None:
            meta["tflite.sparsity"] = ten.sparsity
        if ten.variantTensors is not None:
            meta["tflite.variant_tensors"] = ten.variantTensors
        if ten.externalBuffer:
            meta["tflite.external_buffer"] = int(ten.externalBuffer)
        if ten.buffer and self.mt.buffers:
            buffer = self._buffer(ten.buffer)
            if buffer.nbytes:
                loader = _loader(buffer, dtype, value, tuple(shape))
                value.const = Tensor(dtype, shape, loader=loader, source=buffer, name=value.name)
            else:
                meta["tflite.buffer"] = buffer  # its own empty buffer, as the converter gives each tensor
        return value

    def _quant(self, q: Any, meta: dict[str, Any]) -> QuantParams | None:
        if q is None:
            meta["tflite.no_quantization"] = True
            return None
        fields = (q.scale, q.zeroPoint, q.min, q.max)
        if all(f is None for f in fields) and not q.detailsType and not q.quantizedDimension:
            return None  # the empty table the converter writes for float tensors
        empty = [n for n, f in zip(("scale", "zero_point"), fields) if f is not None and len(f) == 0]
        if empty:
            meta["tflite.quant_empty_fields"] = empty
        details = None
        if q.detailsType:
            kind = next(k for k, v in S.QUANT_DETAILS.items() if v == q.detailsType)
            details = QuantDetails(kind, q.details)
        return QuantParams(
            np.asarray(q.scale if q.scale is not None else (), np.float32),
            np.asarray(q.zeroPoint if q.zeroPoint is not None else (), np.int64),
            int(q.quantizedDimension), min=q.min, max=q.max, extra=details,
        )

    @staticmethod
    def _resolve_quant_refs(value: Value, values: list[Value]) -> None:
        """Blockwise / multi-axis details name tensors by index: keep the values instead."""
        details = value.quant.extra if value.quant is not None else None
        if not isinstance(details, QuantDetails):
            return
        for field in ("scales", "zeroPoints"):
            index = getattr(details.obj, field, None)
            if isinstance(index, int) and 0 <= index < len(values):
                details.refs[field] = values[index]

    # -- operators ----------------------------------------------------------------
    def _node(self, op: Any, oc: Any, values: list[Value]) -> Node:
        code = max(oc.deprecatedBuiltinCode, oc.builtinCode)
        attrs: dict[str, Attr] = {}
        meta: dict[str, Any] = {"tflite.version": int(oc.version)}
        if code == S.CUSTOM:
            name, domain = text(oc.customCode), "custom"
        else:
            name, domain = S.op_name(code), ""
            if oc.customCode is not None:
                meta["tflite.custom_code"] = oc.customCode
        if (oc.deprecatedBuiltinCode, oc.builtinCode) != canonical_codes(code):
            meta["tflite.opcode"] = (int(oc.deprecatedBuiltinCode), int(oc.builtinCode))
        # Both keys are always set (None: no table), which tells the writer the node
        # came from a file and must not get the table the converter would use.
        meta["tflite.options"] = meta["tflite.options2"] = None
        if op.builtinOptionsType:
            meta["tflite.options"] = _member(S.OPTIONS, op.builtinOptionsType)
            options_to_attrs(op.builtinOptions, attrs, self.budget)
        if op.builtinOptions2Type:
            meta["tflite.options2"] = _member(S.OPTIONS2, op.builtinOptions2Type)
            renamed = options_to_attrs(op.builtinOptions2, attrs, self.budget, prefix_on_clash="options2_")
            if renamed:
                meta["tflite.options2_renamed"] = renamed
        if op.largeCustomOptionsOffset > 1:
            start, size = int(op.largeCustomOptionsOffset), int(op.largeCustomOptionsSize)
            attrs[CUSTOM_OPTIONS_ATTR] = Attr.string(bytes(self.data[start:start + size]))
            meta["tflite.large_custom_options"] = True
        elif op.customOptions is not None:
            attrs[CUSTOM_OPTIONS_ATTR] = Attr.string(np.asarray(op.customOptions, np.uint8).tobytes())
        if op.customOptionsFormat:
            meta["tflite.custom_options_format"] = int(op.customOptionsFormat)
        if op.mutatingVariableInputs is not None:
            meta["tflite.mutating_variable_inputs"] = [bool(x) for x in op.mutatingVariableInputs]
        if op.intermediates is not None:
            meta["tflite.intermediates"] = [values[i] for i in _ints(op.intermediates)]
        if op.debugMetadataIndex != -1:
            meta["tflite.debug_metadata_index"] = int(op.debugMetadataIndex)
        outputs = []
        for i in _ints(op.outputs):
            if i < 0:
                placeholder = Value("")
                placeholder.meta["tflite.omitted"] = True
                outputs.append(placeholder)
            else:
                outputs.append(values[i])
        node = Node(
            name, [values[i] if i >= 0 else None for i in _ints(op.inputs)], dialect="tflite",
            name=next((v.name for v in outputs if v.name), name), domain=domain, attrs=attrs,
            outputs=outputs,
        )
        node.meta.update(meta)
        return node


def canonical_codes(code: int) -> tuple[int, int]:
    """``(deprecated_builtin_code, builtin_code)`` as current converters write them."""
    return min(code, S.PLACEHOLDER_FOR_GREATER_OP_CODES), code


def _code_key(oc: Any) -> tuple[int, int, bytes | None, int]:
    return (int(oc.deprecatedBuiltinCode), int(oc.builtinCode), oc.customCode, int(oc.version))


def _member(members: dict[str, int], value: int) -> str:
    return next(k for k, v in members.items() if v == value)


def _readonly(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def _loader(buffer: TFLiteBuffer, dtype: DType, value: Value, shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
    """The constant's values; a sparse one densified (its buffer, kept for writing, holds the stored values)."""
    name = value.name

    def load() -> np.ndarray:
        form = sparse_form(value)
        if form is not None:
            return densify(form, stored_values(value.const), shape, f"sparse tensor {name!r}")
        if dtype is DType.STRING:
            return decode_string_tensor(buffer.data)
        np_type = dtype.numpy
        if np_type is None:
            raise ValueError(f"tensor {name!r} has type {dtype.value}, which NumPy cannot hold; "
                             "its bytes are carried through unchanged")
        return buffer.data.view(np_type.newbyteorder("<"))

    return load
