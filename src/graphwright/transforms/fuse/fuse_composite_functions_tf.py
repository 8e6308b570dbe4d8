"""fuse_composite_functions: calls of functions that declare the interface they implement become
one fused node (TFLite's composite-op fusion, applied to a GraphDef's function library).

Embedding lookups (``embedding_matmul``, TFLite's name, and ``embedding_lookup``, the seed's)::

    Before::  y = PartitionedCall(table, ids){f=emb}   emb {_implements="embedding_matmul"}
    After::   y = GatherV2(table, ids', axis=0)        (guarded or clipped as emb's body is)

The interface says *what* is looked up, the body says what happens to an id outside
``[0, rows)``, and the fused graph keeps that:

* the body multiplies by a one-hot of the ids (``MatMul(OneHot(ids, V), table)``, or
  ``Equal(ids, Range(V))`` cast): such an id selects no row, the result is a zero row.  After::

      ok = (ids >= 0) & (ids < V);  y = SelectV2(ok[..., None], GatherV2(table, SelectV2(ok, ids, 0)), 0)

* the body gathers (``GatherV2``, also inside a ``For``/``While`` loop, as the seed's
  ``EmbFprop`` does): TensorFlow's CPU gather fails on such an id, and so does the plain
  ``GatherV2`` emitted;
* the body clips the gathered ids by constants (``ClipByValue``, ``Minimum``, ``Maximum``):
  the same clips are emitted before the ``GatherV2``;
* anything else is left alone with the reason.

The ids are the integer argument, the table the other (both argument orders are read).

Keras recurrent layers: tf-keras writes ``standard_lstm`` / ``gpu_lstm_with_fallback``
functions declaring ``api_implements="lstm_<uuid>"`` (and ``time_major``, ``go_backwards``)::

    Before::  (last, seq, h, c, rt) = PartitionedCall(x, h0, c0, kernel, recurrent_kernel, bias){f=standard_lstm}
    After::   hs, cs = BlockLSTMV2(T, Transpose(x)[, reversed], c0, h0, concat(kernel, recurrent_kernel), 0, 0, 0, bias)
              last = h = hs[-1];  c = cs[-1];  seq = Transpose(hs)                      (see :func:`_lstm`)

TF's CPU runtime registers BlockLSTM, BlockLSTMV2, LSTMBlockCell and GRUBlockCell (checked in
TF 2.21 with oneDNN on and off); CudnnRNN* have no CPU kernel.  A masked LSTM (a seventh
input) and a body that is not the tanh/sigmoid cell are left alone; ``gru_<uuid>`` calls
are always left alone with the reason (see :func:`_gru`).  Such functions only survive
freezing when the library is kept (``convert_variables_to_constants_v2`` inlines them and
the interface is lost; the lowered while loop is not recognised here).

Custom ops::

    Before::  y = StatefulPartitionedCall(a){f=g}      library: g {_implements=my_op{tfl_fusable_op=true, k=v}}
    After::   y = my_op(a){k=v}                        (a custom op named after the interface)

A function declares its interface in the ``_implements`` (or ``api_implements``)
attribute, either as a name or as a name with attributes (what
``tf.function(experimental_implements=...)`` writes).  Known interfaces map to
their fused ops; an interface whose attributes contain ``tfl_fusable_op=true``
becomes a custom op named after it, with its other attributes; every other
annotated call is left alone and listed in the notes with the reason.  Functions
no longer called are removed from the library.  The fused nodes wait for the
call's control inputs, and the node standing for the call's first output keeps
the call's name.  O(N + library size).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...formats.graphdef import attr_from_proto
from ...ir import Attr, AttrKind, DType, Model, Node, Tensor, Value, constant_value
from ...patterns import Match, P, Replacement, RuleSet, Skip, make_constant
from .._tf_library import CALL_OPS, called_function, drop_unused_functions, functions
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

#: Function attributes that name the implemented interface, in the order they are looked up.
IMPLEMENTS_ATTRS = ("_implements", "api_implements")
FUSABLE_FLAG = "tfl_fusable_op"
INDEX_TYPES = frozenset({DType.INT32, DType.INT64})
#: Interfaces that look rows of a table up by id (TFLite's ``embedding_matmul``, the seed's ``embedding_lookup``).
EMBEDDING_INTERFACES = ("embedding_matmul", "embedding_lookup")


def interface(fdef: Any) -> tuple[str, dict[str, Attr]] | None:
    """``(interface name, its attributes)`` declared by a FunctionDef, or None."""
    for key in IMPLEMENTS_ATTRS:
        if key in fdef.attr:
            attr = attr_from_proto(fdef.attr[key])[0]
            if attr.kind is AttrKind.STRING:
                return attr.text, {}
            if attr.kind is AttrKind.FUNC:
                return attr.value.name, dict(attr.value.attrs)
    return None


#: Ops through which a function body selects table rows by id.
_GATHERS = frozenset({"GatherV2", "Gather", "ResourceGather"})
#: Ops that clip ids before a gather (a body using them clips where a bare gather errors).
_CLIPS = frozenset({"ClipByValue", "Minimum", "Maximum"})


class _Body:
    """A library function's body, read for the facts a fusion needs (O(body size))."""

    def __init__(self, library: dict[str, Any], fname: str) -> None:
        self.fdef = library[fname]
        self.nodes = {nd.name: nd for nd in self.fdef.node_def}
        self.args = [a.name for a in self.fdef.signature.input_arg]
        self.ops: Counter[str] = Counter()
        pending, seen = [fname], set()
        while pending:  # every function the body reaches (For/While bodies, nested calls)
            name = pending.pop()
            if name in seen or name not in library:
                continue
            seen.add(name)
            for nd in library[name].node_def:
                self.ops[nd.op] += 1
                pending.append(nd.op)
                for av in nd.attr.values():
                    if av.WhichOneof("value") == "func":
                        pending.append(av.func.name)

    def source(self, ref: str) -> str:
        """The node name or argument a body input (``node:out:i`` / ``arg``) refers to."""
        return ref.lstrip("^").split(":")[0]

    def const(self, ref: str) -> np.ndarray | None:
        """The value of a body Const (through Identity), or None."""
        nd = self.nodes.get(self.source(ref))
        while nd is not None and nd.op == "Identity":
            nd = self.nodes.get(self.source(nd.input[0]))
        if nd is None or nd.op != "Const":
            return None
        attr = attr_from_proto(nd.attr["value"])[0]
        return attr.value.numpy() if attr.kind is AttrKind.TENSOR else None

    def ret(self, index: int) -> str:
        return self.fdef.ret[self.fdef.signature.output_arg[index].name]


class _Builder:
    """Makes the nodes replacing one call: named under the call, on its device, in order."""

    def __init__(self, call: Node) -> None:
        self.call = call
        graph = call.graph
        assert graph is not None
        self.graph = graph
        self.made: list[Node] = []

    def const(self, array: Any, name: str, dtype: DType) -> Value:
        node, value = make_constant(self.call, array, f"{self.call.name}/{name}", dtype)
        assert node is not None
        self.made.append(node)
        return value

    def node(self, kind: str, inputs: list[Value], name: str, dtypes: list[DType | None], **attrs: Attr) -> Node:
        node = Node(kind, inputs, dialect="tf", name=self.graph.unique_node_name(f"{self.call.name}/{name}"),
                    attrs=attrs, outputs=len(dtypes), device=self.call.device)
        for value, dtype in zip(node.outputs, dtypes):
            value.dtype = dtype
        self.made.append(node)
        return node

    def op(self, kind: str, inputs: list[Value], name: str, dtype: DType | None, **attrs: Attr) -> Value:
        return self.node(kind, inputs, name, [dtype], **attrs).output


def _lookup_semantics(body: _Body, ids_arg: str) -> tuple[str, list[tuple[str, np.ndarray]]] | str:
    """How the body treats ids outside ``[0, rows)``: ``("zero_rows", [])`` (a one-hot
    product: such ids select nothing), ``("gather", clips)`` (a gather, after the listed
    ``(op, constant)`` clips of the ids: unclipped out-of-range ids fail as GatherV2's do on
    CPU), or why it cannot be told."""
    gathers = sum(body.ops[op] for op in _GATHERS)
    one_hot = body.ops["OneHot"] or (body.ops["Equal"] and body.ops["Range"])
    products = body.ops["MatMul"] + body.ops["BatchMatMulV2"] + body.ops["BatchMatMul"]
    if one_hot and products and not gathers:
        for nd in body.nodes.values():
            if nd.op == "OneHot":
                on, off = (body.const(nd.input[i]) if len(nd.input) > i else None for i in (2, 3))
                if on is None or off is None or on.size != 1 or off.size != 1 or on.item() != 1 or off.item() != 0:
                    return "the body's OneHot is not a 1/0 one-hot (on/off values not the constants 1 and 0)"
        return "zero_rows", []
    if gathers and not one_hot:
        clips = body.ops["ClipByValue"] + body.ops["Minimum"] + body.ops["Maximum"]
        if not clips:
            return "gather", []
        for nd in body.nodes.values():  # a direct gather whose ids pass through constant clips
            if nd.op not in _GATHERS or len(nd.input) < 2:
                continue
            chain: list[tuple[str, np.ndarray]] = []
            ref = body.source(nd.input[1])
            while ref in body.nodes:
                step = body.nodes[ref]
                if step.op == "Identity":
                    ref = body.source(step.input[0])
                    continue
                if step.op == "ClipByValue":
                    lo, hi = body.const(step.input[1]), body.const(step.input[2])
                    if lo is None or hi is None:
                        break
                    chain.append(("Maximum", lo))
                    chain.append(("Minimum", hi))
                elif step.op in ("Minimum", "Maximum"):
                    bound = body.const(step.input[1])
                    if bound is None:
                        break
                    chain.append((step.op, bound))
                else:
                    break
                ref = body.source(step.input[0])
            if ref == ids_arg and len(chain) == 2 * body.ops["ClipByValue"] + body.ops["Minimum"] + body.ops["Maximum"]:
                return "gather", chain[::-1]
        return "the body clips ids in a way not read here (clips not all constant bounds on the gathered ids)"
    return ("the body neither gathers rows nor multiplies by a one-hot of the ids, so what it does "
            "with ids outside the table is not known")


def _embedding(call: Node, body: _Body, interface_name: str) -> tuple[list[Node], list[Value]] | str:
    """The table rows the ids select, as the body selects them (see the module docstring)."""
    if len(call.inputs) != 2 or len(call.attr("Tout", ())) != 1:
        return f"{interface_name} takes (table, ids) and returns one tensor"
    types = tuple(call.attr("Tin", (None, None)))
    if types[1] in INDEX_TYPES and types[0] not in INDEX_TYPES:
        table_at = 0
    elif types[0] in INDEX_TYPES and types[1] not in INDEX_TYPES:
        table_at = 1
    else:
        return f"{interface_name} needs one integer ids input and one table"
    table, ids = call.input(table_at), call.input(1 - table_at)
    table_type, ids_type = types[table_at], types[1 - table_at]
    if call.attr("Tout")[0] != table_type:
        return f"{interface_name} returns the table's dtype"
    semantics = _lookup_semantics(body, body.args[1 - table_at])
    if isinstance(semantics, str):
        return semantics
    how, clips = semantics
    b = _Builder(call)
    const, op = b.const, b.op
    gather_attrs = {"Tparams": Attr.dtype(table_type), "Tindices": Attr.dtype(ids_type),
                    "Taxis": Attr.dtype(DType.INT32), "batch_dims": Attr.int(0)}
    t_ids = Attr.dtype(ids_type)
    axis = const(np.int32(0), "axis", DType.INT32)
    if how == "gather":
        for i, (kind, bound) in enumerate(clips):
            ids = op(kind, [ids, const(bound, f"clip_{i}", ids_type)], f"clip_{i}/{kind}", ids_type, T=t_ids)
        rows = op("GatherV2", [table, ids, axis], "gather", table_type, **gather_attrs)
        return b.made, [rows]
    shape = table.shape
    vocab = shape[0] if shape is not None and len(shape) == 2 and isinstance(shape[0], int) else None
    if vocab is None:
        return "the table's row count is not static, so ids outside it cannot be guarded"
    low = op("GreaterEqual", [ids, const(0, "zero_id", ids_type)], "in_range/low", DType.BOOL, T=t_ids)
    high = op("Less", [ids, const(vocab, "rows", ids_type)], "in_range/high", DType.BOOL, T=t_ids)
    valid = op("LogicalAnd", [low, high], "in_range", DType.BOOL)
    safe = op("SelectV2", [valid, ids, const(0, "first_row", ids_type)], "safe_ids", ids_type, T=t_ids)
    rows = op("GatherV2", [table, safe, axis], "gather", table_type, **gather_attrs)
    mask = op("ExpandDims", [valid, const(np.int32(-1), "last_axis", DType.INT32)], "row_mask", DType.BOOL,
              T=Attr.dtype(DType.BOOL), Tdim=Attr.dtype(DType.INT32))
    zero = const(np.zeros((), table_type.numpy), "zero_row", table_type)
    out = op("SelectV2", [mask, rows, zero], "guarded", table_type, T=Attr.dtype(table_type))
    return b.made, [out]


#: ``api_implements`` of tf-keras' recurrent layer functions: ``lstm_<uuid>`` / ``gru_<uuid>``.
KERAS_RNN = re.compile(r"(lstm|gru)_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Inputs of tf-keras' ``standard_lstm`` without a mask: (inputs, init_h, init_c, kernel, recurrent_kernel, bias).
LSTM_ARITY = 6
#: The cell ops a standard Keras LSTM step has (sigmoid gates, tanh candidate and output).
_LSTM_CELL = {"MatMul": 2, "Sigmoid": 3, "Tanh": 2}
_OTHER_ACTIVATIONS = frozenset({"Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign", "LeakyRelu"})
#: BlockLSTMV2's outputs: i, cs, f, o, ci, co, h.
_BLOCK_CS, _BLOCK_H = 1, 6


def _flag(fdef: Any, key: str) -> bool | None:
    return bool(fdef.attr[key].b) if key in fdef.attr else None


def _source(value: Value | None) -> Value | None:
    """``value`` seen through Identity nodes (frozen Keras weights are read through them)."""
    while value is not None and value.producer is not None and value.producer.op == "Identity":
        value = value.producer.inputs[0]
    return value


def _through_identity(value: Value | None) -> Tensor | None:
    """The constant behind ``value``, looking through Identity nodes."""
    source = _source(value)
    return constant_value(source) if source is not None else None


def _slice_attrs(dtype: DType) -> dict[str, Attr]:
    """StridedSlice taking one element of the first axis (``t[i]``)."""
    masks = {k: Attr.int(0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask")}
    return {"T": Attr.dtype(dtype), "Index": Attr.dtype(DType.INT32), **masks, "shrink_axis_mask": Attr.int(1)}


def _lstm(call: Node, body: _Body) -> tuple[list[Node], list[Value | None]] | str:
    """A tf-keras LSTM function call as one ``BlockLSTMV2`` (TF's fused LSTM; CPU kernels in
    every build).  BlockLSTMV2 computes, per step, ``[i, f, c~, o] = [x, h] · W + b`` (gates in
    Keras' i, f, c, o order, no forget bias), ``c = σ(f)·c + σ(i)·tanh(c~)``, ``h = σ(o)·tanh(c)``,
    which is Keras' LSTM cell with ``W = concat(kernel, recurrent_kernel)`` (no peepholes, no
    clip).  Batch-major inputs are transposed to time-major, ``go_backwards`` reverses time first;
    the outputs are (last h, every h, last h, last c, the function's runtime constant)."""
    if len(call.inputs) != LSTM_ARITY:
        return (f"the LSTM call has {len(call.inputs)} inputs, not {LSTM_ARITY} (a masked LSTM: "
                "BlockLSTMV2 has no per-step mask)")
    types = tuple(call.attr("Tin", ()))
    if set(types) != {DType.FLOAT32} or len(call.outputs) != 5:
        return "the LSTM is not float32 throughout with five outputs (BlockLSTMV2 here is float32)"
    missing = [f"{op} x{n}" for op, n in _LSTM_CELL.items() if body.ops[op] < n]
    others = sorted(op for op in _OTHER_ACTIVATIONS if body.ops[op])
    if missing or others:
        return ("the function body is not Keras' tanh/sigmoid LSTM cell "
                f"({'missing ' + ', '.join(missing) if missing else 'has ' + ', '.join(others)})")
    time_major, backwards = _flag(body.fdef, "time_major"), _flag(body.fdef, "go_backwards")
    if time_major is None or backwards is None:
        return "the function does not say time_major and go_backwards"
    x, h0, c0, kernel, recurrent, bias = call.inputs
    assert x is not None and h0 is not None and c0 is not None
    shape = x.shape
    steps = shape[0 if time_major else 1] if shape is not None and len(shape) == 3 else None
    weights = [_through_identity(v) for v in (kernel, recurrent)]
    source = _source(recurrent)
    rec = weights[1].shape if weights[1] is not None else (source.shape if source is not None else None)
    units = rec[0] if rec is not None and len(rec) == 2 else None
    if not isinstance(units, int):
        return "the recurrent kernel's shape is not static"
    runtime = body.const(body.ret(4)) if call.outputs[4].num_uses or call.outputs[4].is_graph_output else None
    if runtime is None and (call.outputs[4].num_uses or call.outputs[4].is_graph_output):
        return "the function's 'runtime' output is read and is not a constant"
    b = _Builder(call)
    f32, i32 = DType.FLOAT32, DType.INT32
    t_f32 = Attr.dtype(f32)
    perm = b.const(np.array([1, 0, 2], np.int32), "time_major_perm", i32)
    xt = x if time_major else b.op("Transpose", [x, perm], "to_time_major", f32, T=t_f32, Tperm=Attr.dtype(i32))
    if backwards:
        xt = b.op("ReverseV2", [xt, b.const(np.array([0], np.int32), "time_axis", i32)], "go_backwards", f32,
                  T=t_f32, Tidx=Attr.dtype(i32))
    if weights[0] is not None and weights[1] is not None:
        w = b.const(np.concatenate([weights[0].numpy(), weights[1].numpy()], axis=0), "w", f32)
    else:
        assert kernel is not None and recurrent is not None
        w = b.op("ConcatV2", [kernel, recurrent, b.const(np.int32(0), "w_axis", i32)], "w", f32, T=t_f32,
                 N=Attr.int(2), Tidx=Attr.dtype(i32))
    no_peephole = b.const(np.zeros(units, np.float32), "no_peephole", f32)
    assert bias is not None
    if isinstance(steps, int):
        seq_len = b.const(np.int64(steps), "seq_len_max", DType.INT64)
    else:  # as many steps as the input has: Shape(x)[0]
        dims = b.op("Shape", [xt], "steps/shape", i32, T=t_f32, out_type=Attr.dtype(i32))
        count = b.op("StridedSlice", [dims, *(b.const(np.array([v], np.int32), f"steps/{n}", i32)
                                              for n, v in (("begin", 0), ("end", 1), ("stride", 1)))],
                     "steps/count", i32, **_slice_attrs(i32))
        seq_len = b.op("Cast", [count], "seq_len_max", DType.INT64, SrcT=Attr.dtype(i32),
                       DstT=Attr.dtype(DType.INT64), Truncate=Attr.bool(False))
    block = b.node("BlockLSTMV2", [seq_len, xt, c0, h0, w,
                                   no_peephole, no_peephole, no_peephole, bias],
                   "block_lstm", [f32] * 7, T=t_f32, cell_clip=Attr.float(0.0), use_peephole=Attr.bool(False))

    def read(i: int) -> bool:
        return bool(call.outputs[i].num_uses or call.outputs[i].is_graph_output)

    results: list[Value | None] = [None] * 5
    last = [] if not (read(0) or read(2) or read(3)) else [
        b.const(np.array([v], np.int32), f"last_step/{n}", i32) for n, v in (("begin", -1), ("end", 0), ("stride", 1))]
    if read(1):
        hs = block.outputs[_BLOCK_H]
        results[1] = hs if time_major else b.op("Transpose", [hs, perm], "outputs", f32, T=t_f32,
                                                Tperm=Attr.dtype(i32))
    if read(3):
        results[3] = b.op("StridedSlice", [block.outputs[_BLOCK_CS], *last], "last_c", f32, **_slice_attrs(f32))
    if read(2) or read(0):
        last_h = b.op("StridedSlice", [block.outputs[_BLOCK_H], *last], "last_h", f32, **_slice_attrs(f32))
        results[0] = results[2] = last_h
    if read(4):
        results[4] = b.const(runtime, "runtime", f32)
    return b.made, results


def _gru(call: Node, body: _Body) -> str:
    """Why a tf-keras GRU function call is not fused (always: see the message)."""
    return ("a tf-keras GRU function is the cuDNN-compatible GRU (reset_after=True: the reset gate "
            "multiplies h·U after the matmul), and TF's only fused CPU GRU kernel, GRUBlockCell, applies "
            "it before ((r·h)·U), so no fused op computes it; CudnnRNN has no CPU kernel")


def _custom(call: Node, name: str, attrs: dict[str, Attr]) -> tuple[list[Node], list[Value]]:
    kept = {k: v for k, v in attrs.items() if k != FUSABLE_FLAG}
    types = call.attr("Tout", ())
    graph = call.graph
    assert graph is not None
    node = Node(name, call.inputs, dialect="tf", name=graph.unique_node_name(f"{call.name}/fused"), attrs=kept,
                outputs=len(types), device=call.device)
    for value, dtype in zip(node.outputs, types):
        value.dtype = dtype
    return [node], list(node.outputs)


def _drop_dead_chain(value: Value | None) -> int:
    """Remove ``value``'s producer chain when it is Identity nodes ending at a Const and nothing
    reads it any more: the frozen weights a fused call stopped reading.  Returns how many went."""
    chain: list[Node] = []
    while value is not None and value.producer is not None and value.producer.op == "Identity":
        chain.append(value.producer)
        value = value.producer.inputs[0] if value.producer.inputs else None
    if value is None or value.producer is None or value.producer.op != "Const":
        return 0
    chain.append(value.producer)
    removed = 0
    for node in chain:
        graph = node.graph
        if (graph is None or node.control_users or node.control_inputs
                or any(out.num_uses or out.is_graph_output for out in node.outputs)):
            break
        graph.remove(node)
        removed += 1
    return removed


def _rules(library: dict[str, Any], renames: list[tuple[Node, str]],
           former: list[Value | None]) -> list[RuleSet]:
    def fuse(m: Match) -> Replacement | Skip:  # call(f=implements X) -> X's fused op
        call = m.node
        fname = called_function(call)
        if fname not in library:
            return m.skip(f"calls {fname!r}, which is not in the function library")
        declared = interface(library[fname])
        if declared is None:
            return m.skip(f"{fname!r} declares no interface ({' or '.join(IMPLEMENTS_ATTRS)})")
        name, attrs = declared
        rnn = KERAS_RNN.fullmatch(name)
        if name in EMBEDDING_INTERFACES:
            built: tuple[list[Node], Sequence[Value | None]] | str = _embedding(call, _Body(library, fname), name)
        elif rnn is not None and rnn.group(1) == "lstm":
            built = _lstm(call, _Body(library, fname))
        elif rnn is not None:
            built = _gru(call, _Body(library, fname))
        elif attrs.get(FUSABLE_FLAG) == Attr.bool(True):
            built = _custom(call, name, attrs)
        else:
            built = f"interface {name!r} has no fused form and is not tagged {FUSABLE_FLAG}=true"
        if isinstance(built, str):
            return m.skip(f"calls {fname}: left alone ({built})")
        new_nodes, results = built
        first = results[0].producer if results and results[0] is not None else None
        root = first if first is not None else new_nodes[-1]
        for node in new_nodes:  # everything the call computed waited for its control inputs
            if node.op != "Const":
                for ctrl in call.control_inputs:
                    node.add_control_input(ctrl)
        if first is not None:
            renames.append((first, call.name))  # the first output keeps the call's name (fetches by name)
        mapped = {old: new for old, new in zip(call.outputs, results) if new is not None}
        former.extend(call.inputs)  # weights the call read may be left unread (checked once applied)
        return Replacement(new_nodes, mapped, control_to=root)

    rules = RuleSet(name="fuse_composite_functions")
    rules.add(P("|".join(sorted(CALL_OPS)), dialect="tf"), fuse, name="calls_fused")
    return [rules]


@transform("fuse_composite_functions", dialects={"tf"})
def fuse_composite_functions(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace calls of _implements-annotated functions by one fused op each."""
    renames: list[tuple[Node, str]] = []
    former: list[Value | None] = []
    report = apply_rules(model, _rules(functions(model), renames, former), subgraphs=False)
    for root, name in renames:
        if root.graph is not None:  # applied (a refused replacement never entered the graph)
            root.name = name
            for i, value in enumerate(root.outputs):
                value.name = f"{name}:{i}" if i else name
    fused = report.applied
    dropped = drop_unused_functions(model) if fused else []
    for value in dict.fromkeys(former):
        _drop_dead_chain(value)
    return result_of(report, stats={"calls_fused": fused, "functions_removed": len(dropped)})
