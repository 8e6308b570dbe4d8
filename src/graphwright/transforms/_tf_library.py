"""The GraphDef function library, read for transforms: find functions, instantiate their bodies
as IR nodes, and drop the functions nothing calls any more.

A ``FunctionDef`` body names its tensors differently from a GraphDef:
``arg`` is a function input, ``node:out_arg:i`` is element ``i`` of the
output argument ``out_arg`` of ``node`` (so the flat output index needs the
op definition: the outputs before ``out_arg`` may be lists whose length comes
from an attribute), ``^node`` a control input; ``ret`` maps each output
argument to such a name.  :func:`instantiate` resolves all of them to IR values.
O(body nodes + edges) per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import TransformError
from ..formats.graphdef import attr_from_proto
from ..formats.graphdef.meta import MODEL_LIBRARY
from ..formats.graphdef.op_registry import op_def, output_types
from ..ir import AttrKind, FuncRef, Graph, Model, Node, Value

__all__ = ["CALL_OPS", "called_function", "drop_unused_functions", "functions", "instantiate"]

#: Ops that call a function of the library through their ``f`` attribute.
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


def functions(model: Model) -> dict[str, Any]:
    """Library functions by name (FunctionDef protos); empty when the graph has no library."""
    library = model.meta.get(MODEL_LIBRARY)
    if library is None:
        return {}
    return {f.signature.name: f for f in library.function}


def called_function(node: Node) -> str | None:
    """The name of the function a call node calls, or None."""
    if node.op not in CALL_OPS:
        return None
    ref = node.attr("f")
    return ref.name if isinstance(ref, FuncRef) else None


def _output_offsets(node: Node) -> dict[str, int]:
    """Flat index of the first element of each output argument of ``node``'s op."""
    definition = op_def(node.op)
    if definition is None:
        raise TransformError(f"op {node.op!r} is not in the TensorFlow op table")
    offsets: dict[str, int] = {}
    position = 0
    for arg in definition.output_arg:
        offsets[arg.name] = position
        if arg.number_attr:
            count = node.attr(arg.number_attr)
        elif arg.type_list_attr:
            listed = node.attr(arg.type_list_attr)
            count = len(listed) if isinstance(listed, tuple) else None
        else:
            count = 1
        if not isinstance(count, int):
            raise TransformError(f"cannot size output {arg.name!r} of {node.op!r}: attribute missing")
        position += count
    offsets[""] = position  # total
    return offsets


def instantiate(fdef: Any, graph: Graph, prefix: str, args: Sequence[Value | None],
                controls: Sequence[Node] = ()) -> tuple[list[Node], list[Value]]:
    """The body of ``fdef`` as new ``tf`` nodes named ``prefix/<node>`` (not yet in ``graph``)
    reading ``args``, and the values of its outputs in signature order.

    Raises TransformError for bodies that cannot be inlined (attribute
    placeholders, ops not in the op table, references to missing nodes).
    """
    signature = fdef.signature
    if len(args) != len(signature.input_arg):
        raise TransformError(f"function {signature.name!r} takes {len(signature.input_arg)} inputs, "
                             f"the call passes {len(args)}")
    if any(v is None for v in args):
        raise TransformError(f"function {signature.name!r}: the call omits an input")
    arg_values = {a.name: v for a, v in zip(signature.input_arg, args) if v is not None}
    made: dict[str, Node] = {}
    offsets: dict[str, dict[str, int]] = {}
    for nd in fdef.node_def:
        attrs = {}
        for key, av in nd.attr.items():
            attr = attr_from_proto(av)[0]
            if attr.kind is AttrKind.OPAQUE and av.WhichOneof("value") == "placeholder":
                raise TransformError(f"function {signature.name!r}: node {nd.name!r} has a placeholder "
                                     f"attribute {key!r} (polymorphic functions are not inlined)")
            attrs[key] = attr
        node = Node(nd.op, (), dialect="tf", name=graph.unique_node_name(f"{prefix}/{nd.name}"),
                    attrs=attrs, outputs=0, device=nd.device)
        offsets[nd.name] = _output_offsets(node)
        types = output_types(node) or []
        for i in range(offsets[nd.name][""]):
            value = node.add_output()
            value.dtype = types[i] if i < len(types) else None
        made[nd.name] = node

    def resolve(text: str) -> Value:
        if text in arg_values:
            return arg_values[text]
        parts = text.split(":")
        if len(parts) != 3 or parts[0] not in made or parts[1] not in offsets[parts[0]]:
            raise TransformError(f"function {signature.name!r}: cannot resolve input {text!r}")
        return made[parts[0]].outputs[offsets[parts[0]][parts[1]] + int(parts[2])]

    try:
        for nd in fdef.node_def:
            node = made[nd.name]
            node.set_inputs([resolve(t) for t in nd.input if not t.startswith("^")])
            for t in nd.input:
                if t.startswith("^"):
                    if t[1:] not in made:
                        raise TransformError(f"function {signature.name!r}: unknown control input {t!r}")
                    node.add_control_input(made[t[1:]])
            for ctrl in controls:
                node.add_control_input(ctrl)
        results = [resolve(fdef.ret[a.name]) for a in signature.output_arg]
    except TransformError:
        for node in made.values():  # undo the uses registered on values outside the body
            node.set_inputs(())
            node.set_control_inputs(())
        raise
    return list(made.values()), results


def drop_unused_functions(model: Model) -> list[str]:
    """Remove library functions no node (and no kept function) references; returns their names."""
    library = model.meta.get(MODEL_LIBRARY)
    if library is None:
        return []
    by_name = functions(model)
    pending = [name for node in model.graph for name in (*_refs(node.attrs.values()), node.op)]
    kept: dict[str, None] = {}
    while pending:
        name = pending.pop()
        if name in kept or name not in by_name:
            continue
        kept[name] = None
        for nd in by_name[name].node_def:
            pending.extend(_refs(attr_from_proto(av)[0] for av in nd.attr.values()))
            pending.append(nd.op)  # a node may call a function by using its name as op
    dropped = [name for name in by_name if name not in kept]
    if not dropped:
        return []
    new = type(library)()
    new.CopyFrom(library)
    del new.function[:]
    new.function.extend(f for f in library.function if f.signature.name in kept)
    del new.gradient[:]
    new.gradient.extend(g for g in library.gradient if g.function_name in kept)
    model.meta[MODEL_LIBRARY] = new if (new.function or new.gradient or new.ListFields()) else None
    if model.meta[MODEL_LIBRARY] is None:
        del model.meta[MODEL_LIBRARY]
    return dropped


def _refs(attrs: Any) -> list[str]:
    names: list[str] = []
    for attr in attrs:
        if attr.kind is AttrKind.FUNC:
            names.append(attr.value.name)
        elif attr.kind is AttrKind.FUNCS:
            names.extend(ref.name for ref in attr.value)
    return names
