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

Keras recurrent layers (tf-keras writes ``standard_lstm`` / ``gpu_lstm_with_fallback``
functions with ``api_implements="lstm_<uuid>"``; GRUs ``gru_<uuid>``): see :func:`_lstm`.

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

from collections import Counter
from typing import Any

import numpy as np

from ...formats.graphdef import attr_from_proto
from ...ir import Attr, AttrKind, DType, Model, Node, Value
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
    graph = call.graph
    assert graph is not None
    made: list[Node] = []

    def const(array: Any, name: str, dtype: DType) -> Value:
        node, value = make_constant(call, array, f"{call.name}/{name}", dtype)
        assert node is not None
        made.append(node)
        return value

    def op(kind: str, inputs: list[Value], name: str, dtype: DType | None, **attrs: Attr) -> Value:
        node = Node(kind, inputs, dialect="tf", name=graph.unique_node_name(f"{call.name}/{name}"),
                    attrs=attrs, device=call.device)
        node.output.dtype = dtype
        made.append(node)
        return node.output

    gather_attrs = {"Tparams": Attr.dtype(table_type), "Tindices": Attr.dtype(ids_type),
                    "Taxis": Attr.dtype(DType.INT32), "batch_dims": Attr.int(0)}
    t_ids = Attr.dtype(ids_type)
    axis = const(np.int32(0), "axis", DType.INT32)
    if how == "gather":
        for i, (kind, bound) in enumerate(clips):
            ids = op(kind, [ids, const(bound, f"clip_{i}", ids_type)], f"clip_{i}/{kind}", ids_type, T=t_ids)
        rows = op("GatherV2", [table, ids, axis], "gather", table_type, **gather_attrs)
        return made, [rows]
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
    return made, [out]


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


def _rules(library: dict[str, Any], renames: list[tuple[Node, str]]) -> list[RuleSet]:
    def fuse(m: Match) -> Replacement | Skip:  # call(f=implements X) -> X's fused op
        call = m.node
        fname = called_function(call)
        if fname not in library:
            return m.skip(f"calls {fname!r}, which is not in the function library")
        declared = interface(library[fname])
        if declared is None:
            return m.skip(f"{fname!r} declares no interface ({' or '.join(IMPLEMENTS_ATTRS)})")
        name, attrs = declared
        if name in EMBEDDING_INTERFACES:
            built: tuple[list[Node], list[Value]] | str = _embedding(call, _Body(library, fname), name)
        elif attrs.get(FUSABLE_FLAG) == Attr.bool(True):
            built = _custom(call, name, attrs)
        else:
            built = f"interface {name!r} has no fused form and is not tagged {FUSABLE_FLAG}=true"
        if isinstance(built, str):
            return m.skip(f"calls {fname}: left alone ({built})")
        new_nodes, results = built
        root = new_nodes[-1]
        for node in new_nodes:  # everything the call computed waited for its control inputs
            if node.op != "Const":
                for ctrl in call.control_inputs:
                    node.add_control_input(ctrl)
        renames.append((root, call.name))  # the fused node keeps the call's name (fetches by name)
        return Replacement(new_nodes, dict(zip(call.outputs, results)), control_to=root)

    rules = RuleSet(name="fuse_composite_functions")
    rules.add(P("|".join(sorted(CALL_OPS)), dialect="tf"), fuse, name="calls_fused")
    return [rules]


@transform("fuse_composite_functions", dialects={"tf"})
def fuse_composite_functions(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace calls of _implements-annotated functions by one fused op each."""
    renames: list[tuple[Node, str]] = []
    report = apply_rules(model, _rules(functions(model), renames), subgraphs=False)
    for root, name in renames:
        if root.graph is not None:  # applied (a refused replacement never entered the graph)
            root.name = name
            for i, value in enumerate(root.outputs):
                value.name = f"{name}:{i}" if i else name
    fused = report.applied
    dropped = drop_unused_functions(model) if fused else []
    return result_of(report, stats={"calls_fused": fused, "functions_removed": len(dropped)})
