"""inline_constant_if: an ``If`` whose condition is a constant becomes the branch it always takes.

Before::  c = Constant(true); y = If(c, then_branch={t = Relu(x); -> t}, else_branch={...}); z = Neg(y)
After::   t = Relu(x); z = Neg(t)

``If(cond)`` evaluates ``then_branch`` when the single element of ``cond`` is
true, else ``else_branch``; with ``cond`` constant the choice is made once,
here.  The taken branch's nodes move into the enclosing graph just before the
``If`` (its initializers become initializers of the enclosing graph), its
outputs replace the ``If``'s outputs and the ``If`` goes.  Values the branch
read from enclosing scopes are the same IR objects, so nothing is renamed.
An ``If`` output that is a graph output keeps its name (the branch value takes
it, or an ``Identity`` carries it when the branch output is not a value of its
own).  All graphs, nested bodies included; O(N + E) plus the moved branches.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...ir import Graph, Model, Node, Value
from .._onnx import all_graphs, const_array, drop_node, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["inline_constant_if"]


def _taken_branch(node: Node) -> Graph | None:
    if node.op != "If" or not is_standard(node) or not node.inputs or node.control_inputs or node.control_users:
        return None
    cond = const_array(node.inputs[0])
    if cond is None or cond.size != 1:
        return None
    attr = node.attrs.get("then_branch" if bool(cond.reshape(())) else "else_branch")
    branch = getattr(attr, "value", None)
    if not isinstance(branch, Graph) or branch.inputs or branch.states:
        return None
    if len(branch.outputs) != len(node.outputs):
        return None
    return branch


def _inline(node: Node, branch: Graph) -> None:
    graph = node.graph
    assert graph is not None
    for init in branch.initializers:  # branch constants become constants of the enclosing graph
        moved = Value(init.name, init.dtype, init.shape, const=init.const, quant=init.quant)
        graph.add_initializer(moved)
        init.replace_all_uses_with(moved, graph_outputs=True)
        branch.remove_initializer(init)
    results = branch.outputs
    branch.set_outputs(())
    nodes = list(branch)
    wiring = [(n.inputs, n.control_inputs) for n in nodes]
    branch.remove(nodes, force=True)
    graph.insert_before(node, nodes)
    for moved_node, (inputs, controls) in zip(nodes, wiring):
        moved_node.set_inputs(inputs)
        moved_node.set_control_inputs(controls)
    rebind_outputs(graph, node, results)
    drop_node(node)  # the untaken branch's nodes stop reading enclosing values


def rebind_outputs(graph: Graph, node: Node, results: Sequence[Value]) -> None:
    """Make the readers of ``node``'s outputs read ``results`` (types carried over, output names kept)."""
    for out, result in zip(node.outputs, results):
        if result.dtype is None:
            result.dtype = out.dtype
        if result.shape is None:
            result.shape = out.shape
        if out.is_graph_output:
            result = _named_result(graph, node, out, result)
        out.replace_all_uses_with(result, graph_outputs=True)


def _named_result(graph: Graph, node: Node, out: Value, result: Value) -> Value:
    """``result`` under the name of the graph output ``out`` (renamed, or through an Identity)."""
    name = out.name
    out.name = f"{name}__inlined"
    producer = result.producer
    if producer is not None and producer.graph is graph and not result.is_graph_output and not result.is_graph_input:
        result.name = name
        return result
    carrier = Node("Identity", [result], dialect="onnx", name=graph.unique_node_name(f"{name}__identity"),
                   outputs=[Value(name, out.dtype, out.shape)])
    graph.insert_before(node, carrier)
    return carrier.outputs[0]


@transform("inline_constant_if", dialects={"onnx"})
def inline_constant_if(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace each ``If`` with a constant condition by the nodes of the branch it takes."""
    inlined = 0
    for graph in all_graphs(model):
        for node in list(graph):
            if node.graph is not graph:
                continue
            branch = _taken_branch(node)
            if branch is not None:
                _inline(node, branch)
                inlined += 1
    return TransformResult(bool(inlined), {"if_inlined": inlined})
