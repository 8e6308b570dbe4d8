"""eliminate_identity: remove Identity nodes and inference-time Dropout.

Before::  h = Conv(x, W); i = Identity(h); d, mask = Dropout(i, ratio=0.1); y = Relu(d)
After::   h = Conv(x, W); y = Relu(h)

``Identity(x)`` is ``x``.  ``Dropout`` is ``x`` at inference: when it has no
``training_mode`` input (or a constant false one) and its ``mask`` output is
not read.  When the removed node's output is a graph output its name is kept:
the input's producer takes that name, which is only possible when that
producer is a node of the same graph whose output is not already a graph
output (otherwise the node stays).  All graphs, If/Loop bodies included.
O(N + E).
"""

from __future__ import annotations

from ...ir import Model, Node
from .._onnx import all_graphs, bypass, const_array, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["eliminate_identity"]


def _dropout_is_noop(node: Node) -> bool:
    if len(node.outputs) > 1 and (node.outputs[1].num_uses or node.outputs[1].is_graph_output):
        return False
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        training = const_array(node.inputs[2])
        return training is not None and training.size == 1 and not bool(training.reshape(()))
    return True


@transform("eliminate_identity", dialects={"onnx"})
def eliminate_identity(model: Model, ctx: TransformContext) -> TransformResult:
    """Remove Identity nodes and Dropout nodes that do nothing at inference."""
    removed = {"Identity": 0, "Dropout": 0}
    for graph in all_graphs(model):
        for node in list(graph):
            if node.graph is None or not is_standard(node) or node.op not in removed or not node.inputs:
                continue
            source = node.inputs[0]
            if source is None or (node.op == "Dropout" and not _dropout_is_noop(node)):
                continue
            if bypass(node, source):
                removed[node.op] += 1
    return TransformResult(any(removed.values()), {"identity_removed": removed["Identity"],
                                                   "dropout_removed": removed["Dropout"]})
