"""ONNX's own shape inference on a light copy of the model (the only ``onnx`` import of these passes).

The model is written by the ONNX writer with every large weight replaced by
its header (name, type, dims) marked as external data: shape inference needs
types and dims of weights, never their values, so the proto it works on stays
small whatever the model's size.  Integer tensors up to
:data:`INLINE_INT_BYTES` and every tensor up to :data:`INLINE_BYTES` keep
their data, so that data propagation can read shape constants.

Existing ``value_info`` is not handed to ONNX (it may be stale after a
rewrite, or conflict with an overwritten input shape); only the outputs of
non-standard-domain nodes keep their declared types, so inference goes on
past custom ops.  Results are mapped back to IR values through the export
names.  O(N + E) plus ONNX's inference.

**Bounded memory.**  ONNX's data propagation gives a 1-D value of known
length N, read by ``Add``/``Mul``/``Concat``/``Gather``/..., N placeholder dims
(``getInputData`` in ONNX's ``shape_inference/implementation.h``), tens of
bytes each, inside C++: a 100-byte ``Tile(x, repeats=[1e10])`` feeding an
``Add`` asks for hundreds of GB, and nothing outside can stop it midway.  Two
defences, both free on ordinary models:

* ``cut``: inputs (of nodes the caller found would make a huge tensor from
  constants, e.g. a ``Tile``'s repeats) are replaced in the copy by graph
  inputs of the same type and shape, so ONNX never learns their values: the
  node's output gets a shape of unknown dims and the rest of the model is
  inferred as usual;
* ``memory_limit``: with data propagation, the call runs in a forked child
  whose address space (``RLIMIT_AS``) is capped at what is mapped now plus
  ``memory_limit`` bytes; an allocation past it fails there (``std::bad_alloc``)
  or kills the child, and :class:`InferenceOverBudget` is raised (the caller
  retries without data propagation, which is bounded by the model's size).
  The cap never touches the caller's process: lowering it there would make
  the allocations of every other thread (onnxruntime's, TensorFlow's) fail
  too.  A fork costs tens of milliseconds in a process holding a large model,
  so it is made only when data propagation *could* make a long vector of
  concrete length (:func:`_could_explode`: a size-making node reading a
  computed size, in a model holding a large number to compute it from);
  ordinary exports infer in-process.  Where there is no fork or no ``/proc``
  (not Linux), only ``cut`` protects.
"""

from __future__ import annotations

import math
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import onnx
import onnx.inliner

from ...errors import ModelLoadError, ModelSaveError, TransformError
from ...ir import AttrKind, DType, Graph, Model, Node, Shape, Tensor, Value, all_graphs, subgraphs
from .dtypes import dtype_from_onnx, onnx_code, storage_nbytes
from .meta import NODE_SHELL, UNTYPED_ATTRS
from .reader import from_proto
from .saving import to_proto
from .tensors import ProtoEntry, TensorEntry, header_proto
from .writer import Builder

try:
    import resource
except ImportError:  # not POSIX: no address-space limit, only the cuts protect
    resource = None  # type: ignore[assignment]

#: A capped child process is possible (POSIX with /proc to measure the mapped size).
_CAN_FORK = hasattr(os, "fork") and resource is not None and os.path.exists("/proc/self/statm")

__all__ = ["infer_types", "inline_one_call", "INLINE_BYTES", "INLINE_INT_BYTES", "InferenceFailed",
           "InferenceOverBudget", "address_space_limit"]

#: Tensors at most this large keep their data in the inference copy.
INLINE_BYTES = 1024
#: Integer tensors (shape constants, indices) at most this large keep their data too.
INLINE_INT_BYTES = 1 << 16
_MARK = "__graphwright_shape_inference_header__"


class InferenceFailed(Exception):
    """ONNX shape inference refused the model; the message says why."""


class InferenceOverBudget(InferenceFailed):
    """ONNX shape inference needed more memory than ``memory_limit`` allowed (nothing was kept)."""


def _mapped_bytes() -> int | None:
    """Bytes of address space the process maps now (Linux ``/proc/self/statm``), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * resource.getpagesize()


@contextmanager
def address_space_limit(extra: int | None) -> Iterator[None]:
    """``with address_space_limit(extra):`` at most ``extra`` more bytes of address space can be mapped.

    For a process of its own only (a forked child, see :func:`_infer_in_child`): the limit is the
    whole process's, so other threads of a program (onnxruntime's, TensorFlow's) would fail their
    allocations too.  Lowers the soft ``RLIMIT_AS`` (never above a limit already set) and restores
    it on exit; does nothing where it cannot (not Linux, or ``extra`` is None).
    """
    mapped = _mapped_bytes() if extra is not None and resource is not None else None
    if mapped is None or extra is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped + extra
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


#: Seconds a capped inference may take before it counts as over budget.
CHILD_TIMEOUT = 120.0
_CHILD_OVER, _CHILD_FAILED = 3, 4


def _infer(proto: onnx.ModelProto, data_prop: bool) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=data_prop)


def _infer_in_child(proto: onnx.ModelProto, memory_limit: int) -> onnx.ModelProto:
    """ONNX shape inference with data propagation in a forked child whose address space is capped
    at ``memory_limit`` more bytes: a bomb dies there (:class:`InferenceOverBudget`), never in the
    caller, whose other threads are untouched.  Costs one fork (a few milliseconds) and sending
    the weight-less result back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read_end)
            with address_space_limit(memory_limit):
                data = _infer(proto, True).SerializeToString()
        except MemoryError:
            code, data = _CHILD_OVER, b""
        except BaseException as e:
            code, data = _CHILD_FAILED, (str(e).strip().splitlines() or [type(e).__name__])[0].encode()[:300]
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
        finally:
            os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return onnx.ModelProto.FromString(b"".join(chunks))
    if code == _CHILD_FAILED:
        raise InferenceFailed(b"".join(chunks).decode("utf-8", "replace") or "ONNX shape inference failed")
    raise InferenceOverBudget(f"ONNX shape inference needed more than {memory_limit} bytes")


#: Where a model keeps its :class:`_NodeCache` between inference runs (no writer reads this key).
_CACHE_KEY = "graphwright.inference_nodes"


class _NodeCache:
    """The serialized NodeProtos of the last inference copy, by node.

    simplify infers shapes a dozen times on one model while most of its nodes stay as they
    were; building a NodeProto in Python is ~45 µs (a ``Constant``'s tensor included), parsing
    the bytes kept from the last run a few.  An entry is used only when everything the proto is
    made of is the same: export names of the node and its inputs and outputs, op, domain,
    doc string, and the very same attribute objects and node shell (held by the entry, so
    their ids cannot be reused; ``Attr`` values and ``Tensor`` are never changed in place).
    Nodes holding subgraphs are always rebuilt.  Only the nodes of the latest run are kept.
    """

    __slots__ = ("entries", "large")

    def __init__(self) -> None:
        self.entries: dict[Node, tuple[tuple[object, ...], tuple[object, ...], bytes]] = {}
        #: integer tensor -> whether it holds a large number (see :func:`_could_explode`)
        self.large: dict[Tensor, bool] = {}


class _HeaderBuilder(Builder):
    """The ONNX writer, emitting large tensors as data-less headers (and reusing cached nodes)."""

    __slots__ = ("cache", "fresh")

    def __init__(self, model: Model, cache: _NodeCache | None = None) -> None:
        super().__init__(model)
        self.cache = cache
        self.fresh: dict[Node, tuple[tuple[object, ...], tuple[object, ...], bytes]] = {}

    def _node(self, node: Node, np_: onnx.NodeProto) -> None:
        if self.cache is None or subgraphs(node):
            super()._node(node, np_)
            return
        names = self.names
        values = names.values
        attrs = tuple(node.attrs.items())
        held = (*(a for _, a in attrs), *(a.value for _, a in attrs), node.meta.get(NODE_SHELL),
                node.meta.get(UNTYPED_ATTRS))
        key = (names.nodes.get(node), node.op, node.domain, node.doc_string,
               tuple("" if v is None else values.get(v) for v in node.inputs),
               tuple(values.get(v) for v in node.outputs),
               tuple(k for k, _ in attrs), tuple(id(h) for h in held))
        entry = self.cache.entries.get(node)
        if entry is not None and entry[0] == key:
            np_.MergeFromString(entry[2])
        else:
            super()._node(node, np_)
            entry = (key, held, np_.SerializeToString())
        self.fresh[node] = entry

    def tensor(self, tensor: Tensor, name: str, *, initializer: bool) -> TensorEntry:
        size = storage_nbytes(tensor.dtype, math.prod(tensor.shape))
        keep = size is None or size <= INLINE_BYTES or (tensor.dtype.is_integer and size <= INLINE_INT_BYTES)
        if keep:
            source = tensor.source
            if (not initializer and size is not None and isinstance(source, onnx.TensorProto)
                    and source.name == name and source.data_location != onnx.TensorProto.EXTERNAL):
                if not source.HasField("raw_data") or len(source.raw_data) == size:
                    return ProtoEntry(source)  # a Constant's small tensor as it was read: emitted as is
            return super().tensor(tensor, name, initializer=initializer)
        proto = header_proto(tensor, name)  # not header_protos: listing the source's fields copies its data
        proto.data_location = onnx.TensorProto.EXTERNAL
        proto.external_data.add(key="location", value=_MARK)
        return ProtoEntry(proto)


def _prepare(g: Graph, gp: onnx.GraphProto, names: dict[Value, str]) -> None:
    """Drop value_info (except custom-op outputs) and output shapes, recursively."""
    del gp.value_info[:]
    for vi in gp.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    for node, np_ in zip(g, gp.node):
        if node.domain not in ("", "ai.onnx"):
            for value in node.outputs:
                if value.dtype is not None and value.dtype is not DType.UNDEFINED and value in names:
                    gp.value_info.append(_value_info(names[value], value))
        _each_subgraph(node, np_, lambda sub, sp: _prepare(sub, sp, names))


def _value_info(name: str, value: Value) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto(name=name)
    tt = vi.type.tensor_type
    tt.elem_type = onnx_code(value.dtype, name)  # type: ignore[arg-type]
    if value.shape is not None:
        tt.shape.SetInParent()
        for d in value.shape:
            dim = tt.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
    return vi


def _each_subgraph(node: Node, np_: onnx.NodeProto, fn: Callable[[Graph, onnx.GraphProto], None]) -> None:
    if not subgraphs(node):
        return
    by_name = {ap.name: ap for ap in np_.attribute}
    for key, attr in node.attrs.items():
        ap = by_name.get(key)
        if ap is None:
            continue
        if attr.kind is AttrKind.GRAPH:
            fn(attr.value, ap.g)
        elif attr.kind is AttrKind.GRAPHS:
            for sub, sp in zip(attr.value, ap.graphs):
                fn(sub, sp)


def _parse(tp: onnx.TypeProto) -> tuple[DType | None, Shape] | None:
    if tp.WhichOneof("value") != "tensor_type":
        return None
    tt = tp.tensor_type
    dtype = dtype_from_onnx(tt.elem_type) if tt.elem_type else None
    if dtype is DType.UNDEFINED:
        dtype = None
    if not tt.HasField("shape"):
        return dtype, None
    dims: list[int | str | None] = []
    for dim in tt.shape.dim:
        which = dim.WhichOneof("value")
        dims.append(int(dim.dim_value) if which == "dim_value" else dim.dim_param if which == "dim_param" else None)
    return dtype, tuple(dims)


_UNPARSED = object()


def _collect(g: Graph, gp: onnx.GraphProto, names: dict[Value, str], out: dict[Value, tuple[DType | None, Shape]]) -> None:
    local: dict[str, Value] = {}
    for node in g:
        for value in node.outputs:
            name = names.get(value)
            if name:
                local[name] = value
    parsed_by_bytes: dict[bytes, tuple[DType | None, Shape] | None] = {}  # many values share one type
    for vi in (*gp.value_info, *gp.output):
        value = local.get(vi.name)
        if value is not None and vi.HasField("type"):
            tp = vi.type
            data = tp.SerializeToString()
            parsed = parsed_by_bytes.get(data, _UNPARSED)
            if parsed is _UNPARSED:
                parsed = parsed_by_bytes[data] = _parse(tp)
            if parsed is not None:
                out[value] = parsed  # type: ignore[assignment]
    for node, np_ in zip(g, gp.node):
        _each_subgraph(node, np_, lambda sub, sp: _collect(sub, sp, names, out))


def _cut(model: Model, gp: onnx.GraphProto, names: dict[Value, str], cut: Iterable[tuple[Node, int]]) -> None:
    """Feed each (node, input index) of ``cut`` from a fresh main-graph input of the same type and shape."""
    wanted: dict[Node, list[int]] = {}
    for node, index in cut:
        wanted.setdefault(node, []).append(index)
    if not wanted:
        return
    protos: dict[Node, onnx.NodeProto] = {}

    def walk(g: Graph, sp: onnx.GraphProto) -> None:
        for node, np_ in zip(g, sp.node):
            if node in wanted:
                protos[node] = np_
            _each_subgraph(node, np_, walk)

    walk(model.graph, gp)
    for node, indices in wanted.items():
        np_ = protos.get(node)
        if np_ is None:
            continue
        for index in indices:
            value = node.inputs[index] if index < len(node.inputs) else None
            if value is None or index >= len(np_.input) or value.dtype is None or value.dtype is DType.UNDEFINED:
                continue
            name = f"{_MARK}_cut{len(gp.input)}"
            np_.input[index] = name  # an outer-scope name inside a subgraph: allowed
            gp.input.append(_value_info(name, value))


#: Sizes at or above this in a constant or a declared dim make data propagation worth isolating.
LARGE_SIZE = 1 << 16
_SIZE_OPS = {"ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "Range": (0, 1, 2)}
_SENTINELS = (2**31 - 1, -(2**31), -(2**31 - 1), 2**63 - 1, -(2**63), -(2**63 - 1))


def _could_explode(model: Model, cut: set[tuple[Node, int]], memo: dict[Tensor, bool] | None = None) -> bool:
    """Whether ONNX's data propagation could make a long 1-D value of *concrete* length, the only
    thing that makes it allocate without bound: a node that makes a tensor from a size it is given
    (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``) reading a computed size, in a model that
    holds a large number to compute it from (an integer constant element, or a declared dim, of at
    least :data:`LARGE_SIZE`; the int32/int64 extremes ``Slice`` uses for "to the end", and
    ``-(2**63 - 1)``, PyTorch's "to the start" of a reversed slice, excepted); or a declared 1-D
    integer value that long already.
    Ordinary exports (sizes from ``Shape`` of symbolic or modest dims) run in-process.  O(N).
    ``memo`` (tensor -> whether it holds a large number; tensors never change) saves reading the
    same constants again on the next run."""
    memo = {} if memo is None else memo
    computed = False
    large = False
    for graph in all_graphs(model):
        for value in list(graph.inputs) + list(graph.initializers):
            if _long_int_vector(value):
                return True
            large = large or _large_value(value, memo)
        for node in graph:
            op = node.op
            if not computed and op in _SIZE_OPS:
                for i in _SIZE_OPS[op]:
                    if i < len(node.inputs) and (node, i) not in cut:
                        size = node.inputs[i]
                        if size is not None and size.producer is not None and size.producer.op != "Constant":
                            computed = True
            for value in node.outputs:
                shape = value.shape
                if shape:  # inline _large_dims / _long_int_vector: this loop sees every value at every run
                    for d in shape:
                        if d.__class__ is int and d >= LARGE_SIZE:
                            if _long_int_vector(value):
                                return True
                            large = True
            if op == "Constant" and not large:
                large = _large_value(node.output, memo)
            if computed and large:
                return True
    return computed and large


def _long_int_vector(value: Value) -> bool:
    """A declared 1-D integer value of at least :data:`LARGE_SIZE` elements: data propagation
    spends per element on it directly."""
    shape = value.shape
    return (shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] >= LARGE_SIZE
            and value.dtype in (DType.INT32, DType.INT64, None))


def _large_dims(value: Value) -> bool:
    return value.shape is not None and any(isinstance(d, int) and d >= LARGE_SIZE for d in value.shape)


def _large_value(value: Value, memo: dict[Tensor, bool]) -> bool:
    if _large_dims(value):
        return True
    tensor = value.const if value.const is not None else None
    if tensor is None and value.producer is not None and value.producer.op == "Constant":
        attr = value.producer.attr("value")
        tensor = attr if isinstance(attr, Tensor) else None
    if tensor is None or tensor.dtype not in (DType.INT32, DType.INT64):
        return False
    found = memo.get(tensor)  # small tensors only: the memo must not keep a replaced weight alive
    if found is None:
        if math.prod(tensor.shape) > INLINE_INT_BYTES // 4:
            return False
        values = tensor.numpy().reshape(-1).tolist()
        found = memo[tensor] = any(abs(v) >= LARGE_SIZE and v not in _SENTINELS for v in values)
    return found


def infer_types(model: Model, *, data_prop: bool = True, cut: Iterable[tuple[Node, int]] = (),
                memory_limit: int | None = None) -> dict[Value, tuple[DType | None, Shape]]:
    """Types ONNX infers for the outputs of every node (all graphs), keyed by IR value.

    ``cut`` hides the values of those node inputs from ONNX and ``memory_limit``
    bounds the memory of the call (see the module docstring).  Raises
    :class:`InferenceOverBudget` when ONNX needed more, :class:`InferenceFailed`
    when it refuses the model as a whole.
    """
    cache = model.meta.get(_CACHE_KEY)
    if not isinstance(cache, _NodeCache):
        cache = model.meta[_CACHE_KEY] = _NodeCache()
    builder = _HeaderBuilder(model, cache)
    proto = builder.proto()
    cache.entries = builder.fresh
    names = builder.names.values
    _prepare(model.graph, proto.graph, names)
    _cut(model, proto.graph, names, cut)
    try:
        if data_prop and memory_limit is not None and _CAN_FORK and _could_explode(model, set(cut), cache.large):
            inferred = _infer_in_child(proto, memory_limit)
        else:  # without data propagation the work is bounded by the model's size
            inferred = _infer(proto, data_prop)
    except MemoryError:
        raise InferenceOverBudget(f"ONNX shape inference needed more than {memory_limit} bytes") from None
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InferenceFailed(first[:300]) from None
    out: dict[Value, tuple[DType | None, Shape]] = {}
    _collect(model.graph, inferred.graph, names, out)
    return out


def inline_one_call(model: Model) -> Model:
    """``model`` (one call of a model-local function) with the call inlined by ONNX's inliner.

    Raises :class:`~graphwright.errors.TransformError` when ONNX cannot inline it.
    """
    try:
        inlined = onnx.inliner.inline_local_functions(to_proto(model))
        return from_proto(inlined, None)
    except (ModelSaveError, ModelLoadError, RuntimeError, ValueError, onnx.checker.ValidationError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TransformError(f"ONNX cannot inline it: {first[:300]}") from None
