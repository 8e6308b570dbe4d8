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
from ...patterns import make_constant
from .._tf_library import called_function, drop_unused_functions, functions
from ..context import TransformContext
from ..registry import TransformResult, transform

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


@transform("fuse_composite_functions", dialects={"tf"})
def fuse_composite_functions(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace calls of _implements-annotated functions by one fused op each."""
    library = functions(model)
    graph = model.graph
    fused = 0
    notes: list[str] = []
    for call in graph:
        fname = called_function(call)
        if fname not in library:
            continue
        declared = interface(library[fname])
        if declared is None:
            continue
        name, attrs = declared
        if name == "embedding_matmul":
            built: tuple[list[Node], list[Value]] | str = _embedding(call)
        elif attrs.get(FUSABLE_FLAG) == Attr.bool(True):
            built = _custom(call, name, attrs)
        else:
            built = f"interface {name!r} has no fused form and is not tagged {FUSABLE_FLAG}=true"
        if isinstance(built, str):
            notes.append(f"{call.name} (calls {fname}): left alone ({built})")
            continue
        new_nodes, results = built
        _replace(call, new_nodes, results)
        fused += 1
    dropped = drop_unused_functions(model) if fused else []
    return TransformResult(fused > 0, {"calls_fused": fused, "functions_removed": len(dropped)}, notes)


def _replace(call: Node, new_nodes: list[Node], results: list[Value]) -> None:
    graph = call.graph
    assert graph is not None
    root = new_nodes[-1]
    for ctrl in call.control_inputs:
        root.add_control_input(ctrl)
    graph.insert_before(call, new_nodes)
    for old, new in zip(call.outputs, results):
        old.replace_all_uses_with(new)
    for user in call.control_users:
        user.remove_control_input(call)
        user.add_control_input(root)
    name = call.name
    graph.remove(call)
    root.name = name  # the fused node keeps the call's name, so fetches by name still work
    for i, value in enumerate(root.outputs):
        value.name = f"{name}:{i}" if i else name
