"""inline_local_functions: calls of model-local functions -> the function bodies' nodes.

Before::  functions: {my.LinearRelu(x, W) = Relu(MatMul(x, W))};  y = my.LinearRelu(x, W)
After::   functions: {};                                         y = Relu(MatMul(x, W))

A node whose (domain, op) names a ``FunctionProto`` of the model is a call;
the call is replaced by the function's nodes with its formal inputs, outputs
and attribute references bound to the call's values and attributes
(recursively, for functions that call functions).  The binding is ONNX's own
inliner (``onnx.inliner``), run on a one-node model per call, so its naming and
attribute rules are the reference ones.  Functions no longer called by any
node or remaining function are dropped.  Simplify keeps functions unless asked
(``inline_functions=True``): kept calls are opaque to folding, inlined ones are
simplified like any other nodes.  O(N + E) plus the inlined bodies.
"""

from __future__ import annotations

from typing import Any

from ...errors import TransformError
from ...ir import Graph, Model, Node, Value, subgraphs
from .._onnx import all_graphs
from ..context import TransformContext
from ..registry import TransformResult, transform
from .inline_constant_if_onnx import rebind_outputs

__all__ = ["inline_local_functions", "FUNCTIONS_KEY"]

#: Where the ONNX reader keeps the model's FunctionProtos (``formats/onnx/meta.py``).
FUNCTIONS_KEY = "onnx.functions"


def _calls(functions: list[Any]) -> set[tuple[str, str]]:
    return {(f.domain, f.name) for f in functions}


def _inline_call(model: Model, node: Node) -> None:
    # lazy: ONNX's inliner imports onnx, which loading the transform registry must not pay for
    from ...formats.onnx.inference import inline_one_call

    graph = node.graph
    assert graph is not None
    formals = [Value(f"in{i}", v.dtype, v.shape) if v is not None else None for i, v in enumerate(node.inputs)]
    results = [Value(f"out{i}", v.dtype, v.shape) for i, v in enumerate(node.outputs)]
    call = Node(node.op, formals, dialect="onnx", name=node.name or "call", domain=node.domain, attrs=node.attrs,
                outputs=results)
    tiny = Graph("onnx", "call")
    tiny.set_inputs([v for v in formals if v is not None])
    tiny.append(call)
    tiny.set_outputs(results)
    body = inline_one_call(Model(tiny, "onnx", meta=model.meta))
    bound = {formal.name: actual for formal, actual in zip(formals, node.inputs) if formal is not None}
    binding: dict[Value, Value] = {v: bound[v.name] for v in body.graph.inputs}
    outputs = body.graph.outputs
    body.graph.set_outputs(())
    nodes = list(body.graph)
    wiring = [[binding.get(v, v) if v is not None else None for v in n.inputs] for n in nodes]
    body.graph.remove(nodes, force=True)
    graph.insert_before(node, nodes)
    for moved, inputs in zip(nodes, wiring):
        moved.set_inputs(inputs)
    rebind_outputs(graph, node, [binding.get(result, result) for result in outputs])
    graph.remove(node)


def _still_called(model: Model, functions: list[Any]) -> list[Any]:
    """The functions some graph node or (transitively) some kept function still calls."""
    by_key = {(f.domain, f.name): f for f in functions}
    pending = [(n.domain, n.op) for g in all_graphs(model) for n in g if (n.domain, n.op) in by_key]
    kept: dict[tuple[str, str], None] = {}
    while pending:
        key = pending.pop()
        if key in kept:
            continue
        kept[key] = None
        pending.extend((n.domain, n.op_type) for n in by_key[key].node if (n.domain, n.op_type) in by_key)
    return [f for f in functions if (f.domain, f.name) in kept]


@transform("inline_local_functions", dialects={"onnx"})
def inline_local_functions(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace every call of a model-local function by the function's body."""
    functions = list(model.meta.get(FUNCTIONS_KEY) or [])
    if not functions:
        return TransformResult(False, {"calls_inlined": 0, "functions_dropped": 0})
    keys = _calls(functions)
    inlined = 0
    for graph in all_graphs(model):
        for node in list(graph):
            if node.graph is not graph or (node.domain, node.op) not in keys:
                continue
            if subgraphs(node) or node.control_inputs or node.control_users:
                ctx.warn(f"call {node.name!r} of {node.domain}.{node.op} has graph attributes or control edges; kept")
                continue
            try:
                _inline_call(model, node)
            except TransformError as e:
                ctx.warn(f"call {node.name!r} of {node.domain}.{node.op} kept: {e}")
                continue
            inlined += 1
    kept = _still_called(model, functions)
    model.meta[FUNCTIONS_KEY] = kept
    return TransformResult(bool(inlined) or len(kept) != len(functions),
                           {"calls_inlined": inlined, "functions_dropped": len(functions) - len(kept)})
