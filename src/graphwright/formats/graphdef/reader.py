"""GraphDef (binary ``.pb`` or text ``.pbtxt``) -> IR.

Conventions:

* Every NodeDef becomes a ``tf``-dialect Node, in file order.  Nodes get one
  output, except ops known to have none (:data:`NO_OUTPUT_OPS`, e.g. ``NoOp``),
  which get zero; further outputs are created on demand, up to the highest port
  any input string references.  Output ``N`` is named ``"node"`` (N = 0) or ``"node:N"``.
* Inputs are resolved after all nodes exist (a GraphDef need not be sorted).
  ``"^x"`` becomes a control edge.
* A GraphDef declares no inputs or outputs: ``graph.inputs``/``graph.outputs``
  stay empty (callers set them from ``--inputs``/``--outputs``).  As a hint,
  ``Const`` and ``Placeholder`` outputs get their dtype and shape.
* Cycles are refused, except the back edges of TF while loops
  (``NextIteration`` -> ``Merge``), which are legal.
* Whatever the IR does not model is kept under the keys of :mod:`.meta`.

Cost: O(N + E) time, iterative; tensors stay undecoded until used.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import message, text_format, unknown_fields
from tensorboard.compat.proto import graph_pb2, node_def_pb2

from ...errors import ModelLoadError
from ...ir import AttrKind, Graph, Model, Node, Value
from .attrs import AttrCache, attrs_from_map
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
from .names import check_node_name, parse_input_name
from .op_registry import annotate_outputs, op_def, output_types

__all__ = ["LOOP_BACK_OPS", "NO_OUTPUT_OPS", "load", "looks_like_text", "model_from_proto", "parse_bytes"]

#: Ops with no data outputs: their nodes start with zero outputs.
NO_OUTPUT_OPS = frozenset({
    "NoOp", "ControlTrigger", "Assert", "PrintV2", "Save", "SaveV2", "SaveSlices",
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "DestroyResourceOp",
    "_Send", "_HostSend",
})
#: Ops whose out-edges may close a cycle (TF while loops); ignored by the cycle check.
LOOP_BACK_OPS = frozenset({"NextIteration", "RefNextIteration"})

_TEXT_CONTROL_OK = frozenset(b"\t\n\r\f\v")


def looks_like_text(data: bytes) -> bool:
    """Whether ``data`` is a text-format GraphDef: UTF-8 text, no control bytes, starting with a field or comment."""
    head = data[:65536]
    try:
        decoded = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    if any(ord(c) < 32 and ord(c) not in _TEXT_CONTROL_OK for c in decoded) or "\x7f" in decoded:
        return False
    start = decoded.lstrip()[:1]
    return start.isalpha() or start == "#"


def parse_bytes(data: bytes, where: str = "GraphDef") -> tuple[graph_pb2.GraphDef, bool]:
    """Parse binary or text GraphDef bytes; returns ``(proto, is_text)``.  Raises ModelLoadError."""
    if not data:
        raise ModelLoadError(f"{where}: file is empty")
    gd = graph_pb2.GraphDef()
    if looks_like_text(data):
        try:
            text_format.Parse(data.decode("utf-8"), gd)
        except text_format.ParseError as e:
            first = str(e).splitlines()[0] if str(e) else "syntax error"
            first = first.replace('"tensorboard.GraphDef"', "TensorFlow GraphDef").replace("tensorboard.", "tensorflow.")
            raise ModelLoadError(f"{where}: not a valid text GraphDef: {first}") from None
        except (UnicodeDecodeError, RecursionError) as e:
            reason = "nesting too deep" if isinstance(e, RecursionError) else "not UTF-8 text"
            raise ModelLoadError(f"{where}: not a valid text GraphDef: {reason}") from None
        try:  # the binary form must be readable too (protobuf's nesting limit), as TF requires
            graph_pb2.GraphDef.FromString(gd.SerializeToString())
        except message.DecodeError:
            raise ModelLoadError(f"{where}: text GraphDef nests messages deeper than protobuf allows") from None
        return gd, True
    try:
        gd.ParseFromString(data)
    except message.DecodeError as e:
        detail = str(e).replace("'tensorboard.GraphDef'", "GraphDef")  # tensorboard's protos are ours, not the user's
        raise ModelLoadError(
            f"{where}: not a valid binary TensorFlow GraphDef (truncated or corrupt protobuf: {detail})"
        ) from None
    return gd, False


def load(path: Path, data: bytes) -> Model:
    """Read a binary or text GraphDef into a Model (format ``graphdef``).  Raises ModelLoadError only."""
    where = str(path)
    gd, is_text = parse_bytes(data, where)
    try:
        with gc_paused():
            model = model_from_proto(gd, where)
    except ModelLoadError:
        raise
    except Exception as e:  # a hostile file must never surface as a raw traceback
        detail = str(e).splitlines()[0] if str(e) else ""
        raise ModelLoadError(f"{where}: cannot read GraphDef ({type(e).__name__}: {detail})") from e
    model.meta[MODEL_TEXT] = is_text
    return model


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that all stay alive.

    An import allocates millions of long-lived objects; each would-be collection
    rescans them all, roughly doubling the import time of a large graph.
    Reference counting still frees everything as usual; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Builder:
    """State of one import: nodes by index, resolved edges for the cycle check."""

    __slots__ = ("cache", "graph", "indeg", "index", "nodes", "preds", "succ", "where")

    def __init__(self, where: str) -> None:
        self.where = where
        self.graph = Graph("tf")
        self.nodes: list[Node] = []
        self.index: dict[str, int] = {}
        self.succ: list[list[int]] = []
        self.indeg: list[int] = []
        self.preds: list[list[int]] = []
        self.cache = AttrCache()

    def fail(self, nd: node_def_pb2.NodeDef, reason: str) -> ModelLoadError:
        return ModelLoadError(f"{self.where}: node {nd.name!r} ({nd.op or 'no op'}): {reason}")

    def add_node(self, nd: node_def_pb2.NodeDef) -> None:
        name, op = nd.name, nd.op
        try:
            check_node_name(name)
        except ValueError as e:
            raise self.fail(nd, str(e)) from None
        if not op:
            raise self.fail(nd, "the node has no op")
        if name in self.index:
            raise self.fail(nd, "duplicate node name (node names must be unique)")
        try:
            attrs, refs = attrs_from_map(nd.attr, self.cache)
        except GraphDefFormatError as e:
            raise self.fail(nd, str(e)) from None
        node = Node(op, dialect="tf", name=name, attrs=attrs, device=nd.device,
                    outputs=0 if op in NO_OUTPUT_OPS else 1)
        if refs:
            node.meta[NODE_REF_DTYPES] = refs
        if (nd.HasField("experimental_debug_info") or nd.HasField("experimental_type")
                or len(unknown_fields.UnknownFieldSet(nd))):
            extra = node_def_pb2.NodeDef()
            extra.CopyFrom(nd)
            for field in ("name", "op", "input", "device", "attr"):
                extra.ClearField(field)
            node.meta[NODE_EXTRA] = extra
        _type_hints(node)
        self.index[name] = len(self.nodes)
        self.nodes.append(node)
        self.succ.append([])
        self.indeg.append(0)
        self.preds.append([])
        self.graph.append(node)

    def connect(self, i: int, nd: node_def_pb2.NodeDef) -> None:
        original = tuple(nd.input)
        if not original:
            return
        node = self.nodes[i]
        nodes, index, succ, preds = self.nodes, self.index, self.succ, self.preds[i]
        values: list[Value | None] = []
        controls: dict[Node, None] = {}
        canonical: list[str] = []
        control_text: list[str] = []
        for text in original:
            if ":" in text or text[:1] in ("^", ""):
                try:
                    name, port, is_control = parse_input_name(text)
                except ValueError as e:
                    raise self.fail(nd, str(e)) from None
            else:  # the common case, "producer"
                name, port, is_control = text, 0, False
            j = index.get(name)
            if j is None:
                raise self.fail(nd, f"input {text!r} names node {name!r}, which does not exist")
            producer = nodes[j]
            if is_control:
                if producer not in controls:
                    controls[producer] = None
                    control_text.append("^" + name)
            else:
                outputs = producer.outputs
                if len(outputs) <= port:
                    while len(producer.outputs) <= port:
                        producer.add_output()
                    outputs = producer.outputs
                values.append(outputs[port])
                canonical.append(f"{name}:{port}" if port else name)
            if producer.op not in LOOP_BACK_OPS:
                succ[j].append(i)
                preds.append(j)
        self.indeg[i] = len(preds)
        node.set_inputs(values)
        for ctrl in controls:
            node.add_control_input(ctrl)
        if control_text:
            canonical.extend(control_text)
        if len(canonical) != len(original) or tuple(canonical) != original:
            node.meta[NODE_INPUT_TEXT] = (tuple(canonical), original)

    def check_acyclic(self) -> None:
        """Kahn's algorithm over the resolved edges; names a node on a cycle.  O(N + E)."""
        indeg = list(self.indeg)
        ready = [i for i, d in enumerate(indeg) if d == 0]
        done = 0
        while ready:
            i = ready.pop()
            done += 1
            for j in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if done == len(self.nodes):
            return
        # Every node left has a predecessor left: walking back must revisit one on a cycle.
        i = next(k for k, d in enumerate(indeg) if d > 0)
        seen: set[int] = set()
        while i not in seen:
            seen.add(i)
            i = next(j for j in self.preds[i] if indeg[j] > 0)
        node = self.nodes[i]
        raise ModelLoadError(
            f"{self.where}: node {node.name!r} ({node.op}) is on a cycle; a GraphDef must be acyclic "
            "(only while-loop NextIteration edges may loop back)"
        )


def _type_hints(node: Node) -> None:
    """Give Const / Placeholder outputs their dtype and shape (a hint for tools; not written back)."""
    if not node.outputs:
        return
    out = node.outputs[0]
    if node.op == "Const":
        attr = node.attrs.get("value")
        if attr is not None and attr.kind is AttrKind.TENSOR:
            out.dtype, out.shape = attr.value.dtype, attr.value.shape
    elif node.op in ("Placeholder", "PlaceholderWithDefault"):
        dtype, shape = node.attrs.get("dtype"), node.attrs.get("shape")
        if dtype is not None and dtype.kind is AttrKind.DTYPE:
            out.dtype = dtype.value
        if shape is not None and shape.kind is AttrKind.SHAPE:
            out.shape = shape.value


def _check_ports(nodes: list[Node], where: str) -> None:
    """Refuse an input reading an output an op does not have (``x:7`` of a one-output op),
    as TensorFlow does, for ops whose arity the op table gives.  O(N): a node reading a
    port above 0 made its producer grow that many outputs, so only those producers (and
    zero-output ops read at port 0) need their op definition's arity."""
    for node in nodes:
        count = len(node.outputs)
        if count == 0:
            continue
        if count == 1:
            definition = op_def(node.op)
            if definition is None or definition.output_arg or not node.outputs[0].num_uses:
                continue
            arity = 0  # an op without outputs (a NoOp, an assignment) read as data
        else:
            types = output_types(node)
            if types is None or len(types) >= count:
                continue
            arity = len(types)
        port = next(k for k in range(arity, count) if node.outputs[k].num_uses)
        reader = node.outputs[port].uses()[0][0]
        text = f"{node.name}:{port}" if port else node.name
        raise ModelLoadError(
            f"{where}: node {reader.name!r} ({reader.op}): input {text!r} reads output {port} of node "
            f"{node.name!r}, but {node.op} has {arity} output{'' if arity == 1 else 's'}; "
            "TensorFlow refuses this graph (fix the input name)"
        )


def model_from_proto(gd: graph_pb2.GraphDef, where: str = "GraphDef") -> Model:
    """Build the IR Model of a parsed GraphDef (kept alive as the tensors' and attrs' ``source``)."""
    if not gd.node and not gd.library.function:
        raise ModelLoadError(f"{where}: the GraphDef contains no nodes")
    builder = _Builder(where)
    protos = gd.node
    for nd in protos:
        builder.add_node(nd)
    for i, nd in enumerate(protos):
        builder.connect(i, nd)
    builder.check_acyclic()
    annotate_outputs(builder.nodes)
    _check_ports(builder.nodes, where)
    meta: dict[str, object] = {}
    if gd.HasField("versions"):
        meta[MODEL_VERSIONS] = gd.versions
    if gd.HasField("library"):
        meta[MODEL_LIBRARY] = gd.library
    if gd.version or gd.HasField("debug_info") or len(unknown_fields.UnknownFieldSet(gd)):
        extra = graph_pb2.GraphDef()
        if len(unknown_fields.UnknownFieldSet(gd)):
            extra.CopyFrom(gd)  # rare: copy everything, then drop what is modelled elsewhere
            for field in ("node", "versions", "library"):
                extra.ClearField(field)
        else:
            extra.version = gd.version
            if gd.HasField("debug_info"):
                extra.debug_info.CopyFrom(gd.debug_info)
        meta[MODEL_EXTRA] = extra
    return Model(builder.graph, "graphdef", meta=meta)
