"""eliminate_dead_code: remove nodes and initializers nothing reads.

Before::  a = Relu(x); b = Sigmoid(a) (read by nobody); y = Tanh(a)   (graph output y)
          initializer W read by nobody
After::   a = Relu(x); y = Tanh(a)

A node goes when none of its outputs is read (by a node of any graph, If/Loop
bodies included) or is a graph output.  Nodes are visited in reverse
topological order, so a whole dead chain goes in one pass; removing a node
that holds subgraphs releases the outer values those read.  Initializers that
nothing reads go too, unless they are graph inputs (part of the model's
signature) or graph outputs.  Graph inputs are never removed.  O(N + E).
"""

from __future__ import annotations

from ...ir import Model, topological_order
from .._onnx import all_graphs, drop_node
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["eliminate_dead_code"]


@transform("eliminate_dead_code", dialects={"onnx"})
def eliminate_dead_code(model: Model, ctx: TransformContext) -> TransformResult:
    """Remove nodes whose outputs nothing reads, and unused initializers (all graphs)."""
    nodes = initializers = 0
    for graph in all_graphs(model):
        if graph is not model.graph and (graph.parent is None or graph.parent.graph is None):
            continue  # its holder was removed while cleaning an outer graph
        for node in reversed(topological_order(graph)):
            if not any(v.num_uses or v.is_graph_output for v in node.outputs):
                drop_node(node)
                nodes += 1
        for value in graph.initializers:
            if not value.num_uses and not value.is_graph_output and not value.is_graph_input:
                graph.remove_initializer(value)
                initializers += 1
    return TransformResult(bool(nodes or initializers), {"nodes_removed": nodes, "initializers_removed": initializers})
