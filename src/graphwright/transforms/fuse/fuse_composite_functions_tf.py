"""fuse_composite_functions: calls of functions that declare the interface they implement become
one fused node (TFLite's composite-op fusion, applied to a GraphDef's function library).

Before::  y = PartitionedCall(table, ids){f=emb}   library: emb {_implements="embedding_matmul"}
                                                    emb(table, ids) = MatMul(OneHot(ids, V), table)
After::   y = GatherV2(table, ids, axis=0)

    OneHot(ids, V) · table = table[ids]   (row i of the product picks row ids[i]; ids in [0, V))

Before::  y = StatefulPartitionedCall(a){f=g}      library: g {_implements=my_op{tfl_fusable_op=true, k=v}}
After::   y = my_op(a){k=v}                        (a custom op named after the interface)

A function declares its interface in the ``_implements`` (or ``api_implements``)
attribute, either as a name or as a name with attributes (what
``tf.function(experimental_implements=...)`` writes).  Known interfaces map to
their fused op (``embedding_matmul`` -> ``GatherV2``); an interface whose
attributes contain ``tfl_fusable_op=true`` becomes a custom op named after it,
with its other attributes; every other annotated call is left alone and listed
in the notes.  Functions no longer called are removed from the library.
O(N + library size).
"""

from __future__ import annotations

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


def _embedding(call: Node) -> tuple[list[Node], list[Value]] | str:
    """GatherV2(table, ids, axis=0) for an ``embedding_matmul(table, ids)`` call, or why not."""
    if len(call.inputs) != 2 or len(call.attr("Tout", ())) != 1:
        return "embedding_matmul takes (table, ids) and returns one tensor"
    table_type, ids_type = call.attr("Tin", (None, None))
    if ids_type not in INDEX_TYPES or call.attr("Tout")[0] != table_type:
        return "embedding_matmul needs integer ids and returns the table's dtype"
    axis_node, axis = make_constant(call, np.int32(0), f"{call.name}/axis")
    assert axis_node is not None
    attrs = {"Tparams": Attr.dtype(table_type), "Tindices": Attr.dtype(ids_type),
             "Taxis": Attr.dtype(DType.INT32), "batch_dims": Attr.int(0)}
    graph = call.graph
    assert graph is not None
    gather = Node("GatherV2", (call.input(0), call.input(1), axis), dialect="tf",
                  name=graph.unique_node_name(f"{call.name}/gather"), attrs=attrs, device=call.device)
    gather.output.dtype = table_type
    return [axis_node, gather], [gather.output]


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
        if name == "embedding_matmul":
            built: tuple[list[Node], list[Value]] | str = _embedding(call)
        elif attrs.get(FUSABLE_FLAG) == Attr.bool(True):
            built = _custom(call, name, attrs)
        else:
            built = f"interface {name!r} has no fused form and is not tagged {FUSABLE_FLAG}=true"
        if isinstance(built, str):
            return m.skip(f"calls {fname}: left alone ({built})")
        new_nodes, results = built
        root = new_nodes[-1]
        for ctrl in call.control_inputs:
            root.add_control_input(ctrl)
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
