"""IR -> TFLite flatbuffer.

Builds a ``ModelT`` from the model (subgraph 0 = ``model.graph``, then
``model.subgraphs``) and packs it with ``file_identifier`` ``TFL3``.  Tensors
and buffers are renumbered from the IR: values keep the order of their
``tflite.tensor_index`` hints (new values after them, in graph order), buffers
the order of their original indices (new ones after), buffer 0 is the empty
sentinel, tensors that shared a buffer share it again, and an unchanged
constant re-emits the bytes it was read from.  Operators are written in a
stable topological order (the file order when it is already one).
"""

from __future__ import annotations

import copy
import struct
from pathlib import Path
from typing import Any

import flatbuffers  # type: ignore[import-untyped]
import numpy as np

from ...errors import GraphCheckError, ModelSaveError
from ...ir import DType, Graph, Model, Node, QuantParams, Value, topological_order
from ..files import atomic_write_chunks
from . import _schema as S
from ._pack import INLINE_LIMIT, ExternalBlob, PackedBuffer, pack_model
from .carried import QuantDetails, SignatureDef, TFLiteBuffer
from .options import CUSTOM_OPTIONS_ATTR, attrs_to_options
from .reader import canonical_codes
from .strings import encode_string_tensor

__all__ = ["save", "serialize", "to_chunks"]

fb = S.fb
_INT32 = (-(1 << 31), (1 << 31) - 1)
_PASS_THROUGH_DTYPES = frozenset({DType.INT4, DType.UINT4, DType.UNDEFINED, DType.STRING})


def serialize(model: Model) -> bytes:
    """The ``.tflite`` file content of ``model``."""
    return b"".join(to_chunks(model))


def save(model: Model, path: Path) -> None:
    """Write ``model`` to ``path`` atomically (the destination is never half-written)."""
    chunks = to_chunks(model)
    atomic_write_chunks(path, chunks)


def to_chunks(model: Model) -> list[memoryview | bytes]:
    """The file as chunks (no copy of the constant data beyond the flatbuffer builder's)."""
    if model.format != "tflite":
        raise ModelSaveError(f"cannot write a {model.format} model as TFLite; graphwright does not convert formats")
    unknown = model.meta.get("tflite.unknown_fields")
    if unknown:
        raise ModelSaveError(
            f"the model has fields unknown to the installed ai-edge-litert schema ({', '.join(unknown)}); "
            "writing it would drop them - upgrade ai-edge-litert"
        )
    exporter = _Exporter(model)
    model_t = exporter.build()
    try:
        return pack_model(model_t, exporter.blobs, exporter.size_hint())
    except (ValueError, TypeError, OverflowError, struct.error, flatbuffers.builder.BuilderSizeError) as e:
        raise ModelSaveError(f"cannot serialize the TFLite model: {type(e).__name__}: {e}") from None


def _raw(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


class _BufferRequest:
    __slots__ = ("hint", "index", "payload", "seq")

    def __init__(self, hint: int | None, seq: int, payload: np.ndarray | None) -> None:
        self.hint = hint
        self.seq = seq
        self.payload = payload
        self.index = 0


class _Exporter:
    __slots__ = (
        "blobs",
        "fixups",
        "graph_index",
        "keyed",
        "large_options",
        "model",
        "offsets",
        "opcodes",
        "payload_bytes",
        "pending_ops",
        "requests",
        "tensor_index",
    )

    def __init__(self, model: Model) -> None:
        self.model = model
        self.requests: list[_BufferRequest] = []
        self.keyed: dict[Any, _BufferRequest] = {}
        self.opcodes: dict[tuple[int, int, bytes | None, int], int] = {}
        self.graph_index: dict[int, int] = {id(g): i for i, g in enumerate(model.graphs)}
        self.tensor_index: list[dict[int, int]] = []
        self.blobs: list[ExternalBlob] = []
        self.payload_bytes = 0
        self.offsets = False
        #: (object, field, request): buffer index fields filled once buffers are numbered.
        self.fixups: list[tuple[Any, str, _BufferRequest]] = []
        #: (OperatorT, opcode key): opcode indices filled once the code table is known.
        self.pending_ops: list[tuple[Any, tuple[int, int, bytes | None, int]]] = []
        #: (OperatorT, custom options) kept after the flatbuffer in the large-model layout.
        self.large_options: list[tuple[Any, np.ndarray]] = []

    def size_hint(self) -> int:
        """Bytes the flatbuffer will roughly take (so the builder rarely has to grow)."""
        inline = 0 if self.offsets else self.payload_bytes + 16 * len(self.requests)
        tensors = sum(len(index) for index in self.tensor_index)
        return inline + 256 * (tensors + len(self.pending_ops)) + (1 << 16)

    # -- model ------------------------------------------------------------------
    def build(self) -> Any:
        meta = self.model.meta
        mt = fb.ModelT()
        mt.version = int(meta.get("tflite.version", 3))
        for key in meta.get("tflite.operator_codes", ()):  # keep the file's order
            self.opcodes.setdefault(tuple(key), -1)  # type: ignore[arg-type]
        mt.subgraphs = [self._subgraph(g) for g in self.model.graphs]
        if "tflite.description" in meta:
            mt.description = _raw(meta["tflite.description"])
        if "tflite.metadata" in meta:
            mt.metadata = []
            for name, data in meta["tflite.metadata"]:
                md = fb.MetadataT()
                md.name = _raw(name)
                self.fixups.append((md, "buffer", self._request_blob(data)))
                mt.metadata.append(md)
        metadata_buffer = [self._request_blob(b) for b in meta.get("tflite.metadata_buffer", ())]
        for b in meta.get("tflite.unreferenced_buffers", ()):
            self._request_blob(b)
        if "tflite.signature_defs" in meta:
            mt.signatureDefs = [self._signature(sig) for sig in meta["tflite.signature_defs"]]
        mt.externalBufferGroups = meta.get("tflite.external_buffer_groups")
        mt.externalBuffers = meta.get("tflite.external_buffers")
        mt.operatorCodes = self._operator_codes()
        mt.buffers = self._buffers(meta.get("tflite.buffer_layout") == "offsets")
        for owner, field, request in self.fixups:
            setattr(owner, field, request.index)
        if "tflite.metadata_buffer" in meta:
            mt.metadataBuffer = np.asarray([r.index for r in metadata_buffer], dtype=np.int32)
        return mt

    def _operator_codes(self) -> list[Any]:
        used = [key for key, index in self.opcodes.items() if index >= 0]
        codes = []
        for i, key in enumerate(used):
            self.opcodes[key] = i
            oc = fb.OperatorCodeT()
            oc.deprecatedBuiltinCode, oc.builtinCode, oc.customCode, oc.version = key
            codes.append(oc)
        for ot, key in self.pending_ops:
            ot.opcodeIndex = self.opcodes[key]
        return codes

    def _buffers(self, offsets: bool) -> list[Any]:
        total = sum(int(r.payload.size) for r in self.requests if r.payload is not None)
        self.offsets = offsets or total > INLINE_LIMIT
        self.payload_bytes = total
        ordered = sorted(self.requests, key=lambda r: (r.hint is None, r.hint or 0, r.seq))
        buffers: list[Any] = [PackedBuffer(None)]
        for i, request in enumerate(ordered, start=1):
            request.index = i
            if self.offsets and request.payload is not None and request.payload.size:
                buf = PackedBuffer(None)
                buf.size = int(request.payload.size)
                self.blobs.append(ExternalBlob(request.payload, buf, "offset"))
            else:
                buf = PackedBuffer(request.payload)
            buffers.append(buf)
        for ot, payload in self.large_options:
            if self.offsets:
                ot.largeCustomOptionsSize = int(payload.size)
                self.blobs.append(ExternalBlob(payload, ot, "largeCustomOptionsOffset"))
            else:
                ot.customOptions = payload
        return buffers

    def _request(self, key: Any, hint: int | None, payload: np.ndarray | None) -> _BufferRequest:
        found = self.keyed.get(key)
        if found is None:
            found = _BufferRequest(hint, len(self.requests), payload)
            self.requests.append(found)
            self.keyed[key] = found
        return found

    def _request_blob(self, data: Any) -> _BufferRequest:
        if isinstance(data, TFLiteBuffer):
            payload = data.data if data.data.size or (data.has_vector and not data.external) else None
            return self._request(("src", id(data)), data.index, payload)
        if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
            array = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
            return self._request(("obj", id(data)), None, np.ascontiguousarray(array).view(np.uint8).ravel())
        raise ModelSaveError(f"metadata buffer of type {type(data).__name__} cannot be written; use bytes")

    # -- subgraphs ---------------------------------------------------------------
    def _subgraph(self, graph: Graph) -> Any:
        try:
            nodes = topological_order(graph)
        except GraphCheckError as e:
            raise ModelSaveError(f"cannot write subgraph {graph.name!r}: {e}") from None
        values = _collect_values(graph, nodes)
        index = {id(v): i for i, v in enumerate(values)}
        self.tensor_index.append(index)
        sg = fb.SubGraphT()
        sg.tensors = [self._tensor(v, index) for v in values]
        sg.inputs = _indices(graph.inputs, index)
        sg.outputs = _indices(graph.outputs, index)
        sg.operators = [self._operator(n, index) for n in nodes]
        if graph.name or not graph.meta.get("tflite.name_absent"):
            sg.name = _raw(graph.name)
        sg.debugMetadataIndex = int(graph.meta.get("tflite.debug_metadata_index", -1))
        return sg

    def _tensor(self, value: Value, index: dict[int, int]) -> Any:
        meta = value.meta
        tt = fb.TensorT()
        tt.type = _tensor_type(value)
        static, signature, has_rank = _shapes(value)
        tt.shape = _int32(static, value.name)
        tt.shapeSignature = None if signature is None else _int32(signature, value.name)
        tt.hasRank = has_rank
        if value.name or not meta.get("tflite.name_absent"):
            tt.name = _raw(value.name)
        tt.quantization = self._quant(value, index)
        tt.isVariable = bool(meta.get("tflite.is_variable", False))
        tt.sparsity = meta.get("tflite.sparsity")
        tt.variantTensors = meta.get("tflite.variant_tensors")
        tt.externalBuffer = int(meta.get("tflite.external_buffer", 0))
        request = None
        if value.const is not None:
            request = self._const_request(value)
        elif isinstance(meta.get("tflite.buffer"), TFLiteBuffer):
            request = self._request_blob(meta["tflite.buffer"])
        if request is not None:
            self.fixups.append((tt, "buffer", request))
        return tt

    def _const_request(self, value: Value) -> _BufferRequest:
        tensor = value.const
        assert tensor is not None
        source = tensor.source
        if "tflite.sparsity" in value.meta and not isinstance(source, TFLiteBuffer):
            raise ModelSaveError(f"cannot write constant {value.name!r}: it is stored sparse and its values were "
                                 "replaced; graphwright writes sparse tensors only as they were read")
        if isinstance(source, TFLiteBuffer) and (
            tensor.nbytes in (None, source.nbytes) or tensor.dtype in _PASS_THROUGH_DTYPES
            or "tflite.sparsity" in value.meta
        ):
            return self._request(("src", id(source)), source.index, source.data)
        try:
            array = tensor.numpy()
        except ValueError as e:
            raise ModelSaveError(f"cannot write constant {value.name!r}: {e}") from None
        if tensor.dtype is DType.STRING:
            payload = np.frombuffer(encode_string_tensor(array), dtype=np.uint8)
        else:
            np_type = tensor.dtype.numpy
            if np_type is None:
                raise ModelSaveError(f"cannot write constant {value.name!r}: dtype {tensor.dtype.value} has no "
                                     "NumPy form and the tensor was not read from a TFLite buffer")
            little = np.ascontiguousarray(array, dtype=np_type.newbyteorder("<"))
            payload = little.reshape(-1).view(np.uint8)
        return self._request(("tensor", id(tensor)), None, payload)

    def _quant(self, value: Value, index: dict[int, int]) -> Any:
        q: QuantParams | None = value.quant
        if q is None:
            return None if value.meta.get("tflite.no_quantization") else fb.QuantizationParametersT()
        empty = value.meta.get("tflite.quant_empty_fields", ())
        qt = fb.QuantizationParametersT()
        if q.scale.size or "scale" in empty:
            qt.scale = np.ascontiguousarray(q.scale, dtype=np.float32).reshape(-1)
        if q.zero_point.size or "zero_point" in empty:
            qt.zeroPoint = np.ascontiguousarray(q.zero_point, dtype=np.int64).reshape(-1)
        if q.min is not None:
            qt.min = np.ascontiguousarray(q.min, dtype=np.float32).reshape(-1)
        if q.max is not None:
            qt.max = np.ascontiguousarray(q.max, dtype=np.float32).reshape(-1)
        qt.quantizedDimension = int(q.axis)
        if isinstance(q.extra, QuantDetails):
            details = copy.copy(q.extra.obj)
            for field, ref in q.extra.refs.items():
                if id(ref) not in index:
                    raise ModelSaveError(f"quantization of {value.name!r} refers to {ref.name!r}, "
                                         "which is no longer in the graph")
                setattr(details, field, index[id(ref)])
            qt.detailsType = S.QUANT_DETAILS[q.extra.kind]
            qt.details = details
        return qt

    # -- operators ----------------------------------------------------------------
    def _operator(self, node: Node, index: dict[int, int]) -> Any:
        where = f"node {node.name!r} ({node.op})"
        if node.dialect != "tflite":
            raise ModelSaveError(f"cannot write {where}: it is a {node.dialect} node, not a tflite one")
        meta = node.meta
        ot = fb.OperatorT()
        self.pending_ops.append((ot, self._opcode_key(node, where)))
        ot.inputs = np.asarray([index[id(v)] if v is not None else -1 for v in node.inputs], dtype=np.int32)
        ot.outputs = np.asarray([-1 if v.meta.get("tflite.omitted") else index[id(v)] for v in node.outputs],
                                dtype=np.int32)
        self._options(node, ot, where)
        custom = node.attrs.get(CUSTOM_OPTIONS_ATTR)
        if custom is not None:
            payload = np.frombuffer(bytes(custom.value), dtype=np.uint8)
            if meta.get("tflite.large_custom_options"):
                self.large_options.append((ot, payload))
            else:
                ot.customOptions = payload
        ot.customOptionsFormat = int(meta.get("tflite.custom_options_format", 0))
        mutating = meta.get("tflite.mutating_variable_inputs")
        if mutating is not None:
            if len(mutating) not in (0, len(node.inputs)):
                raise ModelSaveError(f"cannot write {where}: tflite.mutating_variable_inputs has "
                                     f"{len(mutating)} entries for {len(node.inputs)} inputs")
            ot.mutatingVariableInputs = np.asarray(mutating, dtype=np.bool_)
        if "tflite.intermediates" in meta:
            ot.intermediates = _indices(meta["tflite.intermediates"], index)
        ot.debugMetadataIndex = int(meta.get("tflite.debug_metadata_index", -1))
        return ot

    def _opcode_key(self, node: Node, where: str) -> tuple[int, int, bytes | None, int]:
        meta = node.meta
        custom: bytes | None
        if node.domain == "custom":
            code, custom = S.CUSTOM, _raw(node.op)
        elif node.domain:
            raise ModelSaveError(f"cannot write {where}: domain {node.domain!r} is not 'custom' or empty")
        else:
            found = S.op_code(node.op)
            if found is None:
                raise ModelSaveError(f"cannot write {where}: {node.op!r} is not a TFLite builtin operator; "
                                     "custom operators need domain='custom'")
            code, custom = found, meta.get("tflite.custom_code")
        pair = meta.get("tflite.opcode")
        dep, builtin = pair if pair is not None and max(pair) == code else canonical_codes(code)
        key = (int(dep), int(builtin), custom, int(meta.get("tflite.version", 1)))
        self.opcodes[key] = max(self.opcodes.get(key, 0), 0)  # -1: known from the file, not yet used
        return key

    def _options(self, node: Node, ot: Any, where: str) -> None:
        meta = node.meta
        if "tflite.options" in meta or "tflite.options2" in meta:
            name1, name2 = meta.get("tflite.options"), meta.get("tflite.options2")
        else:  # made by a transform: the table the converter would use
            inferred = S.options_for_op(node.op) if node.domain != "custom" else None
            name1 = inferred[1] if inferred and inferred[0] == 1 else None
            name2 = inferred[1] if inferred and inferred[0] == 2 else None
        claimed = {CUSTOM_OPTIONS_ATTR}
        try:
            if name2 is not None:
                ot.builtinOptions2Type = S.OPTIONS2[name2]
                ot.builtinOptions2 = attrs_to_options(
                    _options_class(name2, where), node.attrs, claimed, meta.get("tflite.options2_renamed"))
            if name1 is not None:
                ot.builtinOptionsType = S.OPTIONS[name1]
                ot.builtinOptions = attrs_to_options(_options_class(name1, where), node.attrs, claimed)
        except (KeyError, ValueError) as e:
            raise ModelSaveError(f"cannot write {where}: {e}") from None
        extra = sorted(set(node.attrs) - claimed)
        if extra:
            tables = " / ".join(n for n in (name1, name2) if n) or "no options table"
            raise ModelSaveError(f"cannot write {where}: attribute(s) {extra} are not fields of {tables}")

    # -- signatures --------------------------------------------------------------
    def _signature(self, sig: SignatureDef) -> Any:
        g = self.graph_index.get(id(sig.graph))
        if g is None:
            raise ModelSaveError(f"signature {sig.key!r} refers to a subgraph that is no longer in the model")
        index = self.tensor_index[g]
        st = fb.SignatureDefT()
        st.signatureKey = None if sig.key is None else _raw(sig.key)
        st.subgraphIndex = g
        maps = []
        for entries in (sig.inputs, sig.outputs):
            out = []
            for name, ref in entries:
                try:
                    value = sig.resolve(ref)
                except IndexError as e:
                    raise ModelSaveError(str(e)) from None
                if id(value) not in index:
                    raise ModelSaveError(f"signature {sig.key!r} entry {name!r} refers to {value.name!r}, "
                                         "which is no longer in its subgraph")
                tm = fb.TensorMapT()
                tm.name = None if name is None else _raw(name)
                tm.tensorIndex = index[id(value)]
                out.append(tm)
            maps.append(out)
        st.inputs, st.outputs = maps
        return st


def _options_class(name: str, where: str) -> type:
    cls = S.options_class(name)
    if cls is None:
        raise KeyError(f"options table {name!r} is unknown to the installed schema")
    return cls


def _collect_values(graph: Graph, nodes: list[Node]) -> list[Value]:
    """Every tensor of the subgraph, ordered by original index hint, then graph order."""
    seen: dict[int, Value] = {}

    def add(value: Value | None) -> None:
        if value is not None and id(value) not in seen and not value.meta.get("tflite.omitted"):
            seen[id(value)] = value

    v: Value | None
    for v in graph.inputs:
        add(v)
    for v in graph.initializers:
        add(v)
    for node in nodes:
        for v in node.inputs:
            add(v)
        for v in node.outputs:
            add(v)
        for v in node.meta.get("tflite.intermediates", ()):
            add(v)
    for v in graph.outputs:
        add(v)
    for v in graph.meta.get("tflite.unused_tensors", ()):
        add(v)
    for v in list(seen.values()):
        if v.quant is not None and isinstance(v.quant.extra, QuantDetails):
            for ref in v.quant.extra.refs.values():
                add(ref)
    order = list(seen.values())
    hints = [v.meta.get("tflite.tensor_index") for v in order]
    ranked = sorted(range(len(order)), key=lambda i: (hints[i] is None, hints[i] or 0, i))
    return [order[i] for i in ranked]


def _indices(values: Any, index: dict[int, int]) -> np.ndarray:
    try:
        return np.asarray([index[id(v)] for v in values], dtype=np.int32)
    except KeyError:
        raise ModelSaveError("a graph input, output or intermediate is not a tensor of its subgraph") from None


def _tensor_type(value: Value) -> int:
    dtype = value.dtype
    if dtype is None:
        raise ModelSaveError(f"cannot write tensor {value.name!r}: its dtype is unknown")
    code = S.type_of(dtype)
    if code is None:
        raw = value.meta.get("tflite.type")
        if dtype is DType.UNDEFINED and raw is not None:
            return int(raw)
        raise ModelSaveError(f"cannot write tensor {value.name!r}: TFLite has no {dtype.value} type")
    return code


def _shapes(value: Value) -> tuple[list[int], list[int] | None, bool]:
    """(shape, shape_signature or None, has_rank) of a tensor."""
    stored = value.meta.get("tflite.shape")
    has_rank = bool(value.meta.get("tflite.has_rank", True))
    dims: tuple[Any, ...]
    if value.const is not None:
        static = list(value.const.shape)
        dims = value.shape if value.shape is not None else tuple(static)
    elif value.shape is None:
        return [], None, False
    else:
        dims = value.shape
        if stored is not None and len(stored) == len(dims) and all(
            not isinstance(d, int) or d == s for d, s in zip(dims, stored)
        ):
            static = [int(s) for s in stored]
        else:
            static = [d if isinstance(d, int) else 1 for d in dims]
    dynamic = any(not isinstance(d, int) for d in dims)
    signature = [d if isinstance(d, int) else -1 for d in dims] if dynamic or stored is not None else None
    return static, signature, has_rank


def _int32(dims: list[int], name: str) -> np.ndarray:
    if any(not _INT32[0] <= d <= _INT32[1] for d in dims):
        raise ModelSaveError(f"cannot write tensor {name!r}: shape {dims} does not fit in int32")
    return np.asarray(dims, dtype=np.int32)

