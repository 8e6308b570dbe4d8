"""IR -> GraphDef (binary or text).

* Nodes are written in IR order.  Names are made unique first (a repeat
  becomes ``name_1``...; ``:`` and a leading ``^`` are replaced; an empty name
  becomes the op), without renaming the IR nodes.
* Inputs are ``"producer"`` / ``"producer:N"``, then control inputs ``"^producer"``.
* Attributes and tensors read from a GraphDef are written from their source
  protos; new ones are encoded (numeric tensors into ``tensor_content``).
* A value with no producer node that is a graph input becomes a ``Placeholder``
  node, an initializer a ``Const`` node (GraphDef has no other way to hold them).
* Binary output is produced node by node (``save`` streams it to disk), so
  peak memory stays near the model's own size.  Deterministic serialization:
  a file that was itself written deterministically comes back byte-identical.
* Text is written when the destination ends with ``.pbtxt``/``.pbtx``, binary
  when it ends with ``.pb``, and otherwise in the form the model was read from.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import message, text_format
from tensorboard.compat.proto import function_pb2, graph_pb2, node_def_pb2, versions_pb2

from ...errors import ModelSaveError
from ...ir import Attr, Model, Node, Value
from ..files import atomic_write_chunks
from .attrs import attr_to_proto
from .dtypes import GraphDefFormatError
from .meta import (
    MODEL_EXTRA,
    MODEL_LIBRARY,
    MODEL_TEXT,
    MODEL_VERSIONS,
    NODE_EXTRA,
    NODE_INPUT_TEXT,
    NODE_REF_DTYPES,
)
from .names import format_input_name, sanitize_node_name, unique_names

__all__ = ["BINARY_SUFFIXES", "TEXT_SUFFIXES", "iter_chunks", "save", "serialize", "to_proto"]

TEXT_SUFFIXES = (".pbtxt", ".pbtx")
BINARY_SUFFIXES = (".pb",)
_NODE_TAG = b"\x0a"  # GraphDef.node: field 1, length-delimited
#: Protobuf messages (and TensorFlow's GraphDef reader) stop at 2 GiB.
MAX_PROTO_BYTES = (1 << 31) - 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Names:
    """Unique TF names for the graph's nodes and for producer-less values materialized as nodes."""

    __slots__ = ("nodes", "pseudo", "values")

    def __init__(self, model: Model) -> None:
        graph = model.graph
        self.pseudo: list[tuple[Value, str]] = [
            (v, "Placeholder") for v in graph.inputs if v.producer is None
        ] + [(v, "Const") for v in graph.initializers if v.producer is None and not v.is_graph_input]
        nodes = list(graph)
        # Real nodes claim their names first; materialized ones take what is left.
        raw = [sanitize_node_name(n.name, n.op) for n in nodes]
        raw += [sanitize_node_name(_strip_port(v.name), op) for v, op in self.pseudo]
        final = unique_names(raw)
        k = len(nodes)
        self.nodes: dict[Node, str] = {n: final[i] for i, n in enumerate(nodes)}
        self.values: dict[Value, str] = {v: final[k + i] for i, (v, _) in enumerate(self.pseudo)}


def _strip_port(name: str) -> str:
    return name.removesuffix(":0")


def _fail(node: Node | None, name: str, reason: str) -> ModelSaveError:
    what = f"node {name!r} ({node.op})" if node is not None else f"value {name!r}"
    return ModelSaveError(f"cannot write GraphDef: {what}: {reason}")


def _input_strings(node: Node, names: _Names, name: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, value in enumerate(node.inputs):
        if value is None:
            raise _fail(node, name, f"input {i} is omitted; TF ops have no optional inputs")
        producer = value.producer
        if producer is None:
            pseudo = names.values.get(value)
            if pseudo is None:
                raise _fail(node, name, f"input {i} reads {value.name!r}, which no node, graph input "
                            "or initializer defines")
            out.append(pseudo)
            continue
        pname = names.nodes.get(producer)
        if pname is None:
            raise _fail(node, name, f"input {i} reads {value.name!r}, whose producer "
                        f"{producer.name!r} is not in the graph")
        out.append(format_input_name(pname, value.index))
    for ctrl in node.control_inputs:
        cname = names.nodes.get(ctrl)
        if cname is None:
            raise _fail(node, name, f"control input {ctrl.name!r} is not in the graph")
        out.append(format_input_name(cname, control=True))
    texts = tuple(out)
    stored = node.meta.get(NODE_INPUT_TEXT)
    if stored is not None and stored[0] == texts:
        return tuple(stored[1])
    return texts


def _node_bytes(node: Node, names: _Names) -> bytes:
    name = names.nodes[node]
    if node.dialect != "tf":
        raise _fail(node, name, f"is a {node.dialect!r}-dialect node; a GraphDef holds only 'tf' nodes")
    nd = node_def_pb2.NodeDef(name=name, op=node.op, device=node.device)
    nd.input.extend(_input_strings(node, names, name))
    refs = node.meta.get(NODE_REF_DTYPES) or {}
    for key, attr in node.attrs.items():
        try:
            nd.attr[key].CopyFrom(attr_to_proto(attr, refs.get(key)))
        except GraphDefFormatError as e:
            raise _fail(node, name, f"attribute {key!r}: {e}") from None
    body: bytes = nd.SerializeToString(deterministic=True)
    extra = node.meta.get(NODE_EXTRA)
    if extra is not None:
        if not isinstance(extra, node_def_pb2.NodeDef):
            raise _fail(node, name, f"node.meta[{NODE_EXTRA!r}] is not a NodeDef")
        body += extra.SerializeToString(deterministic=True)  # fields 6+ follow 1-5: same as one message
    return body


def _pseudo_bytes(value: Value, op: str, name: str) -> bytes:
    nd = node_def_pb2.NodeDef(name=name, op=op)
    try:
        if op == "Const":
            assert value.const is not None  # initializers always have data
            nd.attr["dtype"].CopyFrom(attr_to_proto(Attr.dtype(value.const.dtype)))
            nd.attr["value"].CopyFrom(attr_to_proto(Attr.tensor(value.const)))
        else:
            if value.dtype is None:
                raise GraphDefFormatError("graph input has no dtype; a Placeholder needs one")
            nd.attr["dtype"].CopyFrom(attr_to_proto(Attr.dtype(value.dtype)))
            if value.shape is not None:
                nd.attr["shape"].CopyFrom(attr_to_proto(Attr.shape(value.shape)))
    except GraphDefFormatError as e:
        raise _fail(None, name, str(e)) from None
    body: bytes = nd.SerializeToString(deterministic=True)
    return body


def _as(proto: Any, cls: Any, key: str) -> Any:
    """``proto`` as a message of ``cls`` (accepts an equivalent message class, e.g. TensorFlow's own)."""
    if isinstance(proto, cls):
        return proto
    serialize = getattr(proto, "SerializeToString", None)
    if serialize is None:
        raise ModelSaveError(f"cannot write GraphDef: model.meta[{key!r}] is not a {cls.__name__} proto")
    return cls.FromString(serialize())


def _tail_bytes(model: Model) -> bytes:
    """The GraphDef fields after ``node``: library, version, versions, debug_info, unknown fields."""
    tail = graph_pb2.GraphDef()
    extra = model.meta.get(MODEL_EXTRA)
    if extra is not None:
        tail.CopyFrom(_as(extra, graph_pb2.GraphDef, MODEL_EXTRA))
        for field in ("node", "library", "versions"):  # those come from their own keys
            tail.ClearField(field)
    library = model.meta.get(MODEL_LIBRARY)
    if library is not None:
        tail.library.CopyFrom(_as(library, function_pb2.FunctionDefLibrary, MODEL_LIBRARY))
    versions = model.meta.get(MODEL_VERSIONS)
    if versions is not None:
        tail.versions.CopyFrom(_as(versions, versions_pb2.VersionDef, MODEL_VERSIONS))
    body: bytes = tail.SerializeToString(deterministic=True)
    return body


def iter_chunks(model: Model) -> Iterator[bytes]:
    """The binary GraphDef of ``model`` as consecutive byte chunks (one per node, then the tail).

    O(N + E) plus the attribute bytes.  Raises ModelSaveError for graphs a GraphDef cannot hold.
    """
    if model.graph.dialect != "tf":
        raise ModelSaveError(f"cannot write a {model.graph.dialect!r}-dialect graph as a GraphDef")
    if model.subgraphs:
        raise ModelSaveError(
            "a GraphDef holds a single graph (functions live in model.meta['graphdef.library']); "
            f"this model has {len(model.subgraphs)} extra subgraphs"
        )
    names = _Names(model)
    bodies = (_pseudo_bytes(v, op, names.values[v]) for v, op in names.pseudo)
    node_bodies = (_node_bytes(node, names) for node in model.graph)
    total = 0
    for body in itertools.chain(bodies, node_bodies):
        total += len(body)
        if total > MAX_PROTO_BYTES:
            raise ModelSaveError(
                f"cannot write GraphDef: it would exceed {MAX_PROTO_BYTES} bytes, the protobuf limit "
                "TensorFlow reads (store large weights elsewhere)"
            )
        yield _NODE_TAG + _varint(len(body)) + body
    yield _tail_bytes(model)


def to_proto(model: Model) -> graph_pb2.GraphDef:
    """The model as a GraphDef proto (a new message; the model is not changed)."""
    try:
        return graph_pb2.GraphDef.FromString(b"".join(iter_chunks(model)))
    except message.DecodeError as e:  # e.g. FuncRefs nested deeper than protobuf's limit
        raise ModelSaveError(f"cannot write GraphDef: the result is not a readable protobuf ({e})") from None


def _wants_text(model: Model, path: Path | None, text: bool | None) -> bool:
    if text is not None:
        return text
    if path is not None:
        suffix = path.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            return True
        if suffix in BINARY_SUFFIXES:
            return False
    return bool(model.meta.get(MODEL_TEXT, False))


def serialize(model: Model, *, text: bool | None = None) -> bytes:
    """The file content: binary GraphDef, or text when ``text`` (default: as the model was read)."""
    if _wants_text(model, None, text):
        text_form: str = text_format.MessageToString(to_proto(model))
        return text_form.encode("utf-8")
    return b"".join(iter_chunks(model))


def save(model: Model, path: Path, *, text: bool | None = None) -> None:
    """Write ``model`` atomically; text or binary by ``text``, else by suffix, else as read (see module doc)."""
    path = Path(path)
    as_text = _wants_text(model, path, text)
    chunks = iter([serialize(model, text=True)]) if as_text else iter_chunks(model)
    atomic_write_chunks(path, chunks)
