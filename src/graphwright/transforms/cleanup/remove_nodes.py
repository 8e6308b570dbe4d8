"""remove_nodes: splice out pass-through ops such as Identity or CheckNumerics.

Before::  x -> Identity -> Identity -> Conv2D        After::  x -> Conv2D

A node of a listed op with between 1 and ``max_inputs`` inputs (control inputs
count, as in the Graph Transform Tool) is removed and its readers read its
first input instead; nodes depending on it through a control edge depend on
that input's producer.  Nodes producing graph inputs or outputs stay, and so
does any node whose other outputs are read.  Chains go in one pass.  O(N + E).

One rule of the rewrite engine (:mod:`graphwright.transforms.rules`); a node left in place
says why in the step's refusals.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import TransformError
from ...ir import Model
from ...patterns import ANY, Match, P, Replacement, RuleSet, Skip, not_graph_io
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of


def _splice(max_inputs: int) -> Callable[[Match], Replacement | Skip]:
    def splice(m: Match) -> Replacement | Skip:  # op(x, ...) -> x
        node = m.node
        n_inputs = sum(v is not None for v in node.inputs) + len(node.control_inputs)
        if not 1 <= n_inputs <= max_inputs:
            return m.skip(f"has {n_inputs} inputs (control inputs included), over max_inputs={max_inputs}")
        if not not_graph_io(node):
            return m.skip("produces a graph input or output")
        return Replacement.bypass_to(node.output, m["x"].value)

    return splice


@transform("remove_nodes")
def remove_nodes(model: Model, ctx: TransformContext, *, op: list[str], max_inputs: int = 1) -> TransformResult:
    """Remove single-input ops of the given types, rewiring readers to their input."""
    if max_inputs < 1:
        raise TransformError(f"remove_nodes: max_inputs must be at least 1, got {max_inputs}")
    rules = RuleSet(name="remove_nodes")
    rules.add(P("|".join(sorted(set(op))), ANY(name="x"), ...), _splice(max_inputs), name="remove_nodes")
    report = apply_rules(model, [rules], graphs=model.graphs)
    return result_of(report, stats={"nodes_removed": report.applied})
