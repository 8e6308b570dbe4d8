"""ONNX ModelProto -> IR (dialect ``onnx``).

Each graph is read in three passes, so files whose nodes are not
topologically sorted load too (the file order is kept in the IR):

1. declare: graph inputs, initializers, sparse initializers and every node
   with its outputs (a name defined twice is an error);
2. connect: node inputs, graph outputs and value_info resolve their names
   through the scope chain (this graph, then the graphs enclosing it), so a
   subgraph reading an outer value gets the outer ``Value`` object;
3. attributes, recursing into subgraphs (If/Loop/Scan bodies), then a cycle
   check that also counts the outer values a node's subgraphs capture.

O(N + E) overall; subgraph recursion depth is bounded by protobuf's own
nesting limit.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from ...errors import ModelLoadError
from ...ir import Attr, AttrKind, DType, Graph, Model, Node, Shape, Tensor, Value
from .attrs import read_attr
from .dtypes import dtype_from_onnx
from .external import ExternalDataResolver
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
from .tensors import read_sparse_tensor, read_tensor
from .text import check_message, check_strings, not_text
from .wire import copy_fields, has_unknown_fields

__all__ = ["load", "from_proto", "from_proto_with_regions", "parse_model"]

# Field numbers (onnx.proto3 / onnx.proto).
_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_G_NODE, _G_NAME, _G_INIT, _G_DOC, _G_IN, _G_OUT, _G_VI, _G_QA, _G_SPARSE = 1, 2, 5, 10, 11, 12, 13, 14, 15
_GRAPH_MODELED = (_G_NODE, _G_NAME, _G_INIT, _G_DOC, _G_IN, _G_OUT, _G_VI, _G_QA, _G_SPARSE)
_N_INPUT, _N_OUTPUT, _N_NAME, _N_OP, _N_ATTR, _N_DOC, _N_DOMAIN = 1, 2, 3, 4, 5, 6, 7
_NODE_MODELED = frozenset((_N_INPUT, _N_OUTPUT, _N_NAME, _N_OP, _N_ATTR, _N_DOC, _N_DOMAIN))
_NODE_STRINGS = (_N_NAME, _N_OP, _N_DOC, _N_DOMAIN)
# Exceptions a malformed (but parseable) proto can raise from deep inside the reader.
_MALFORMED = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError, UnicodeError)


def parse_model(data: bytes, where: str) -> onnx.ModelProto:
    """Parse bytes into a ModelProto, refusing anything that is not an ONNX model."""
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError, OverflowError):
        raise ModelLoadError(
            f"{where}: not a readable ONNX model (the protobuf is truncated or corrupt)"
        ) from None
    if not proto.HasField("ir_version") or not proto.HasField("graph"):
        missing = "ir_version" if not proto.HasField("ir_version") else "graph"
        raise ModelLoadError(f"{where}: parses as protobuf but is not an ONNX model (no {missing})")
    return proto


def load(path: Path, data: bytes) -> Model:
    """Read an ``.onnx`` file's bytes; external data is resolved against ``path``'s directory."""
    proto = parse_model(data, str(path))
    try:
        model = from_proto(proto, path.parent)
    except ModelLoadError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    model.source_path = path
    return model


def from_proto(proto: onnx.ModelProto, base_dir: Path | None = None) -> Model:
    """Build the IR of ``proto`` (which it keeps referencing: do not mutate it afterwards).

    ``base_dir`` is the directory external data locations are relative to;
    without it a model with external tensors is refused.  Raises
    :class:`ModelLoadError` for anything malformed or unsafe.
    """
    return from_proto_with_regions(proto, base_dir, [], None)


def from_proto_with_regions(
    proto: onnx.ModelProto,
    base_dir: Path | None,
    regions: list[Any],
    mapped: Callable[[onnx.TensorProto, Any], Tensor] | None,
) -> Model:
    """:func:`from_proto`, where top-level initializer ``i`` is ``mapped(proto, regions[i])`` when that is set.

    Used by ``mapped.py``: ``regions`` are the byte ranges of weights left in the file.
    """
    if not proto.HasField("graph"):
        raise ModelLoadError("the ModelProto has no graph; it is not an ONNX model")
    try:
        with _gc_paused():
            reader = _Reader(ExternalDataResolver(base_dir), regions, mapped)
            graph = reader.graph(proto.graph, None, None)
            meta = _model_meta(proto)
    except ModelLoadError:
        raise
    except _MALFORMED as e:
        raise ModelLoadError(f"malformed ONNX model ({type(e).__name__}: {e})") from None
    return Model(graph, "onnx", meta=meta)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building the IR.

    Reading allocates a few objects per node and value, none of them garbage;
    with the collector on, its repeated passes over the growing heap cost more
    than the read itself on large graphs.  The previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _model_meta(proto: onnx.ModelProto) -> dict[str, Any]:
    # producer, domain, doc_string, opset domains, metadata, training_info
    check_message(proto, "model field", skip=(_MODEL_GRAPH, _MODEL_FUNCTIONS))
    for function in proto.functions:
        check_message(function, "model-local function field")
    shell = onnx.ModelProto()
    copy_fields(proto, shell, skip=(_MODEL_GRAPH, _MODEL_FUNCTIONS))
    meta: dict[str, Any] = {f"onnx.{field}": getattr(proto, field) for field in MODEL_MIRRORS}
    meta[OPSET_IMPORT] = {op.domain: op.version for op in proto.opset_import}
    meta[METADATA_PROPS] = {p.key: p.value for p in proto.metadata_props}
    meta[FUNCTIONS] = list(proto.functions)
    meta[MODEL_SHELL] = shell
    return meta


class _Scope:
    """Names visible in one graph, chained to the enclosing graph's scope."""

    __slots__ = ("names", "parent", "holder", "captures")

    def __init__(self, parent: _Scope | None, holder: Node | None) -> None:
        self.names: dict[str, Value] = {}
        self.parent = parent
        self.holder = holder  # the node (in the parent graph) whose attribute holds this graph
        self.captures: dict[Node, list[Value]] = {}  # node -> outer values its subgraphs read

    def lookup(self, name: str, *, capture: bool = True) -> Value | None:
        value = self.names.get(name)
        if value is not None:
            return value
        child, scope = self, self.parent
        while scope is not None:
            value = scope.names.get(name)
            if value is not None:
                if capture and child.holder is not None:
                    scope.captures.setdefault(child.holder, []).append(value)
                return value
            child, scope = scope, scope.parent
        return None


class _Reader:
    __slots__ = ("resolver", "_types", "_regions", "_mapped")

    def __init__(
        self,
        resolver: ExternalDataResolver,
        regions: list[Any] | None = None,
        mapped: Callable[[onnx.TensorProto, Any], Tensor] | None = None,
    ) -> None:
        self.resolver = resolver
        self._regions = regions or []
        self._mapped = mapped
        self._types: dict[bytes, tuple[DType | None, Shape]] = {}  # serialized TypeProto -> parsed

    def _describe(self, value: Value, vi: onnx.ValueInfoProto, records: dict[Value, ValueInfoRecord]) -> None:
        """Record ``vi`` for ``value`` and give the value its dtype/shape if it has none yet."""
        if value not in records:
            records[value] = ValueInfoRecord(vi)
        if value.dtype is None and value.shape is None and vi.HasField("type"):
            key = vi.type.SerializeToString()
            parsed = self._types.get(key)
            if parsed is None:
                check_message(vi.type, f"value {value.name!r} type field")  # dim_param, denotation
                parsed = self._types[key] = _tensor_type(vi.type)
            value.dtype, value.shape = parsed
        doc = vi.doc_string
        if doc:
            if doc.__class__ is not str:
                raise not_text(f"doc_string of value {value.name!r}", doc)
            if not value.doc_string:
                value.doc_string = doc

    def graph(self, gp: onnx.GraphProto, parent: _Scope | None, holder: Node | None) -> Graph:
        scope = _Scope(parent, holder)
        names = scope.names
        if gp.name.__class__ is not str or gp.doc_string.__class__ is not str:
            bad = gp.name if gp.name.__class__ is not str else gp.doc_string
            raise not_text("graph name or doc_string", bad)
        g = Graph("onnx", gp.name, parent=holder)
        g.doc_string = gp.doc_string
        shell = onnx.GraphProto()
        where = f"graph {gp.name!r}: " if parent is not None else ""
        check_message(gp, f"{where}graph field", skip=_GRAPH_MODELED)  # metadata_props...
        if copy_fields(gp, shell, skip=_GRAPH_MODELED, keep_empty=(_G_NAME, _G_DOC)):
            g.meta[GRAPH_SHELL] = shell

        # 1. declare ---------------------------------------------------------
        in_recs: dict[Value, ValueInfoRecord] = {}
        inputs = []
        for vi in gp.input:
            if vi.name.__class__ is not str:
                raise not_text(f"{where}graph input name", vi.name)
            if vi.name in names:
                raise ModelLoadError(f"{where}graph input {vi.name!r} is declared twice")
            value = Value(vi.name)
            self._describe(value, vi, in_recs)
            names[vi.name] = value
            inputs.append(value)
        g.set_inputs(inputs)
        regions = self._regions if parent is None else []
        for i, tp in enumerate(gp.initializer):
            region = regions[i] if i < len(regions) else None
            if region is None or self._mapped is None:
                tensor = read_tensor(tp, self.resolver)
            else:
                tensor = self._mapped(tp, region)
            self._initializer(g, names, tp.name, tensor, where)
        for sp in gp.sparse_initializer:
            self._initializer(g, names, sp.values.name, read_sparse_tensor(sp), where)
        pending, ordered = self._nodes(g, gp, scope, where)
        lookup = scope.lookup

        # 2. connect graph outputs and value_info -------------------------------
        vi_recs: dict[Value, ValueInfoRecord] = {}
        for vi in gp.value_info:
            if vi.name.__class__ is not str:
                raise not_text(f"{where}value_info name", vi.name)
            value = lookup(vi.name, capture=False) or Value(vi.name)  # unknown names are kept as-is
            self._describe(value, vi, vi_recs)
        out_recs: dict[Value, ValueInfoRecord] = {}
        outputs = []
        for vi in gp.output:
            if vi.name.__class__ is not str:
                raise not_text(f"{where}graph output name", vi.name)
            output = lookup(vi.name)
            if output is None:
                raise ModelLoadError(
                    f"{where}graph output {vi.name!r} is not produced by any node, input or initializer"
                )
            self._describe(output, vi, out_recs)
            outputs.append(output)
        g.set_outputs(outputs)

        # 3. attributes and subgraphs ------------------------------------------
        for node, attr_protos in pending:
            self._attributes(node, attr_protos, scope, where)
        if scope.captures and ordered:
            position = {node: i for i, node in enumerate(g)}
            for reader, captured in scope.captures.items():
                if any(position.get(v.producer, -1) >= position[reader] for v in captured):  # type: ignore[arg-type]
                    ordered = False
        if not ordered:
            _check_acyclic(g, scope.captures, where)

        for key, recs in ((INPUTS, in_recs), (OUTPUTS, out_recs), (VALUE_INFO, vi_recs)):
            for value, rec in recs.items():
                rec.snapshot(value)
            g.meta[key] = recs
        if len(gp.quantization_annotation):
            for qa in gp.quantization_annotation:
                check_message(qa, f"{where}quantization_annotation field")
            g.meta[QUANT_ANNOTATION] = [
                (qa, _annotation_values(qa, scope)) for qa in gp.quantization_annotation
            ]
        return g

    @staticmethod
    def _initializer(g: Graph, names: dict[str, Value], name: str, tensor: Any, where: str) -> None:
        value = names.get(name)
        if value is None:
            value = Value(name, const=tensor)
            names[name] = value
        elif value.is_graph_input and value.const is None and not value.is_initializer:
            value.const = tensor  # IR < 4 style: an input with a default value
            if value.dtype is None and value.shape is None:
                value.dtype, value.shape = tensor.dtype, tensor.shape
        else:
            raise ModelLoadError(f"{where}initializer {name!r} is defined twice")
        g.add_initializer(value)

    @staticmethod
    def _nodes(g: Graph, gp: onnx.GraphProto, scope: _Scope, where: str) -> tuple[list[tuple[Node, Any]], bool]:
        """Create every node, connecting inputs already defined; the rest resolve after the last node.

        Returns the nodes that have attributes (with their protos) and whether
        the file order is topological (then no cycle is possible).
        """
        names = scope.names
        with_attrs: list[tuple[Node, Any]] = []
        later: list[tuple[Node, list[int], list[str]]] = []  # inputs not defined yet, or outer values
        for np_ in gp.node:
            fields = {fd.number: val for fd, val in np_.ListFields()}
            name = fields.get(_N_NAME, "")
            op = fields.get(_N_OP, "")
            in_names = fields.get(_N_INPUT, ())
            out_names = fields.get(_N_OUTPUT, ())
            try:  # text must be UTF-8 (see text.py): C-level concatenations, no Python loop
                name + op + "".join(in_names) + "".join(out_names)
                if _N_DOMAIN in fields or _N_DOC in fields:
                    "" + fields.get(_N_DOMAIN, "") + fields.get(_N_DOC, "")
            except TypeError:
                _refuse_node_text(fields, where, len(g))
            inputs: list[Value | None] = []
            missing: list[int] = []
            for k, iname in enumerate(in_names):
                value = names.get(iname) if iname else None
                if value is None and iname:
                    missing.append(k)
                inputs.append(value)
            outputs = []
            for oname in out_names:
                if not oname:
                    outputs.append(Value(""))  # an omitted optional output
                    continue
                if oname in names:
                    raise ModelLoadError(
                        f"{where}value {oname!r} is produced by node {name!r} ({op}) but is already defined "
                        f"by {_definer(names[oname])}; every value must have one producer"
                    )
                value = names[oname] = Value(oname)
                outputs.append(value)
            node = Node(op, inputs, dialect="onnx", name=name, domain=fields.get(_N_DOMAIN, ""), outputs=outputs)
            node.doc_string = fields.get(_N_DOC, "")
            if missing:
                later.append((node, missing, list(in_names)))
            empty = "" in (fields.get(_N_NAME), fields.get(_N_OP), fields.get(_N_DOC), fields.get(_N_DOMAIN))
            if empty or not fields.keys() <= _NODE_MODELED or has_unknown_fields(np_):
                check_message(np_, f"{where}node {name!r} ({op}) field", skip=_NODE_MODELED)  # overload...
                shell = onnx.NodeProto()  # fields the IR does not model, and present-but-empty strings
                copy_fields(np_, shell, skip=_NODE_MODELED, keep_empty=_NODE_STRINGS)
                if shell.ListFields() or has_unknown_fields(shell):
                    node.meta[NODE_SHELL] = shell
            if _N_ATTR in fields:
                with_attrs.append((node, fields[_N_ATTR]))
            g.append(node)

        ordered = True
        lookup = scope.lookup
        for node, missing, in_names in later:
            for k in missing:
                value = lookup(in_names[k])
                if value is None:
                    raise ModelLoadError(
                        f"{where}node {node.name!r} ({node.op}) input {k} reads {in_names[k]!r}, which no "
                        "node, graph input or initializer defines; the model is incomplete"
                    )
                if ordered and value.producer is not None and value.producer.graph is g:
                    ordered = False  # read before the node producing it: the file is not sorted
                node.replace_input(k, value)
        return with_attrs, ordered

    def _attributes(self, node: Node, protos: Any, scope: _Scope, where: str) -> None:
        untyped: list[str] = []
        attrs: dict[str, Attr] = {}

        def tensor(tp: onnx.TensorProto) -> Any:
            return read_tensor(tp, self.resolver)

        def graph(gp: onnx.GraphProto) -> Graph:
            return self.graph(gp, scope, node)

        for ap in protos:
            key, attr, is_untyped = read_attr(ap, tensor, graph)
            if key.__class__ is not str:
                raise not_text(f"{where}node {node.name!r} ({node.op}) attribute name", key)
            if attr.kind is AttrKind.OPAQUE:
                check_message(ap, f"{where}node {node.name!r} ({node.op}) attribute {key!r} field")
            if key in attrs:
                raise ModelLoadError(f"{where}node {node.name!r} ({node.op}) has attribute {key!r} twice")
            attrs[key] = attr
            if is_untyped:
                untyped.append(key)
        node.attrs = attrs
        if untyped:
            node.meta[UNTYPED_ATTRS] = tuple(untyped)


def _tensor_type(tp: onnx.TypeProto) -> tuple[DType | None, Shape]:
    if tp.WhichOneof("value") != "tensor_type":
        return None, None  # sequence/map/optional/sparse types live on in the kept proto
    tt = tp.tensor_type
    dtype = dtype_from_onnx(tt.elem_type) if tt.HasField("elem_type") else None
    if not tt.HasField("shape"):
        return dtype, None
    dims: list[int | str | None] = []
    for dim in tt.shape.dim:
        which = dim.WhichOneof("value")
        dims.append(dim.dim_value if which == "dim_value" else dim.dim_param if which == "dim_param" else None)
    return dtype, tuple(dims)


def _refuse_node_text(fields: dict[int, Any], where: str, index: int) -> None:
    """Raise the error naming the first text field of a node that is not UTF-8."""
    name = fields.get(_N_NAME, "")
    label = f"{where}node {name!r}" if name.__class__ is str and name else f"{where}node {index}"
    for number, what in ((_N_NAME, "name"), (_N_OP, "op_type"), (_N_DOMAIN, "domain"), (_N_DOC, "doc_string")):
        value = fields.get(number, "")
        if value.__class__ is not str:
            raise not_text(f"{where}node {index} name" if number == _N_NAME else f"{label} {what}", value)
    check_strings(fields.get(_N_INPUT, ()), f"{label} input name")
    check_strings(fields.get(_N_OUTPUT, ()), f"{label} output name")


def _definer(value: Value) -> str:
    if value.producer is not None:
        return f"node {value.producer.name!r} ({value.producer.op})"
    return "a graph input" if value.is_graph_input else "an initializer"


def _annotation_values(qa: onnx.TensorAnnotation, scope: _Scope) -> dict[str, Value]:
    found: dict[str, Value] = {}
    for name in [qa.tensor_name, *(kv.value for kv in qa.quant_parameter_tensor_names)]:
        value = scope.lookup(name, capture=False)
        if value is not None:
            found[name] = value
    return found


def _check_acyclic(g: Graph, captures: dict[Node, list[Value]], where: str) -> None:
    """Kahn's algorithm over the graph's nodes, counting subgraph captures as edges.  O(N + E)."""
    pending: dict[Node, int] = {}
    extra: dict[Node, list[Node]] = {}
    for node in g:
        count = 0
        for value in node.inputs:
            if value is not None and value.producer is not None and value.producer.graph is g:
                count += 1
        for value in captures.get(node, ()):
            producer = value.producer
            if producer is not None and producer.graph is g:
                count += 1
                extra.setdefault(producer, []).append(node)
        pending[node] = count
    ready = [node for node, count in pending.items() if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for value in node.outputs:
            for user, _ in value.uses():
                if user.graph is g:
                    pending[user] -= 1
                    if pending[user] == 0:
                        ready.append(user)
        for user in extra.get(node, ()):
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    if done != len(pending):
        stuck = [n.name or n.op for n, count in pending.items() if count > 0][:5]
        raise ModelLoadError(f"{where}the graph has a cycle through nodes {stuck}; it cannot be executed")
