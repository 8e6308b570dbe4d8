"""eliminate_identity: remove Identity nodes and inference-time Dropout.

Before::  h = Conv(x, W); i = Identity(h); d, mask = Dropout(i, ratio=0.1); y = Relu(d)
After::   h = Conv(x, W); y = Relu(h)

``Identity(x)`` is ``x``.  ``Dropout`` is ``x`` at inference: when it has no
``training_mode`` input (or a constant false one) and its ``mask`` output is
not read.  When the removed node's output is a graph output its name is kept:
the input's producer takes that name, which is only possible when that
producer is a node of the same graph whose output is not already a graph
output (otherwise the node stays, and the report says why).

Two rules of the rewrite engine, named like onnxoptimizer's passes.  Each
matches a single node, so a chain ``Identity(Identity(x))`` goes in one sweep:
the second node is tried after the first one was bypassed.  All graphs, If/Loop
bodies included.  O(N + E).
"""

from __future__ import annotations

from ...ir import Model
from ...patterns import ANY, Match, P, Replacement, RuleSet
from .._onnx import const_array
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["eliminate_identity", "RULES"]


def _training_off(m: Match) -> str | None:
    """Why the Dropout may be training (its ``training_mode`` is not a constant false), or None."""
    node = m.node
    assert node is not None
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        training = const_array(node.inputs[2])
        if training is None or training.size != 1 or bool(training.reshape(())):
            return f"training_mode {node.inputs[2].name!r} is not a constant false"
    return None


def _bypass(m: Match) -> Replacement:
    """The node's first output is its first input.  A Dropout ``mask`` that is read (or a graph
    output) makes the engine refuse this, with that reason."""
    node = m.node
    assert node is not None
    return Replacement.bypass_to(node.outputs[0], m["x"].value)  # type: ignore[arg-type]


def _node(op: str) -> P:
    return P(op, ANY(name="x"), ..., domain="")


RULES = RuleSet(name="eliminate_identity")
RULES.add(_node("Identity"), _bypass, name="eliminate_identity")                        # Identity(x) -> x
RULES.add(_node("Dropout"), _bypass, name="eliminate_nop_dropout", check=_training_off)  # Dropout(x) -> x


@transform("eliminate_identity", dialects={"onnx"})
def eliminate_identity(model: Model, ctx: TransformContext) -> TransformResult:
    """Remove Identity nodes and Dropout nodes that do nothing at inference."""
    report = apply_rules(model, [RULES])
    return result_of(report, stats={"identity_removed": report.by_rule.get("eliminate_identity", 0),
                                    "dropout_removed": report.by_rule.get("eliminate_nop_dropout", 0)})
