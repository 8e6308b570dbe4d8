"""transforms/rules.py: rule sets registered and run as transforms, reports turned into results once."""

from __future__ import annotations

import pytest

from graphwright.errors import TransformError
from graphwright.ir import Graph, Model, Node, Value, check
from graphwright.patterns import ANY, P, Replacement, RuleSet
from graphwright.transforms import TransformContext, get, run_pipeline
from graphwright.transforms.rules import apply_rules, result_of, rule_transform


def _neg_chain(length: int) -> Model:
    """``x -> Neg -> Neg -> ... -> y`` (ONNX dialect); ``Neg(Neg(v))`` is ``v``."""
    g = Graph("onnx")
    x = Value("x")
    g.set_inputs([x])
    v = x
    for i in range(length):
        v = g.append(Node("Neg", [v], dialect="onnx", name=f"neg{i}", outputs=[Value(f"v{i}")])).output
    g.set_outputs([v])
    return Model(g, format="onnx")


def _double_neg(m):  # Neg(Neg(x)) -> x
    inner = m["inner"].node
    if inner.name == "neg4":
        return m.skip(f"{inner.name!r} is kept on purpose")
    return Replacement.bypass_to(m.node.output, m["x"].value)


def _rules(model: Model) -> list[RuleSet]:
    rules = RuleSet(name="double_neg")
    rules.add(P("Neg", P("Neg", ANY(name="x"), name="inner")), _double_neg, name="double_neg")
    return [rules]


def test_sweeps_reach_a_fixed_point_and_reasons_come_from_the_last_sweep() -> None:
    model = _neg_chain(8)
    report = apply_rules(model, _rules(model), sweeps=1)
    # one sweep, roots in graph order: (0,1) and (2,3) go, (4,5) is refused, then (5,6) goes
    assert report.applied == 3
    assert [n.name for n in model.graph] == ["neg4", "neg7"]
    assert report.skipped[0].node == "neg5"
    model = _neg_chain(8)
    report = apply_rules(model, _rules(model), sweeps=8)
    check(model.graph)
    assert [n.name for n in model.graph] == ["neg4", "neg7"]
    assert model.graph.outputs[0].name == "v7"  # the output keeps its name through the bypasses
    result = result_of(report)
    assert result.changed and result.stats == {"double_neg": report.applied}
    assert result.notes == ["neg7 (Neg): 'neg4' is kept on purpose"]  # only the last sweep's word
    assert result.refusals == [("double_neg", "neg7", "Neg", "'neg4' is kept on purpose")]


def test_rule_transform_registers_a_pipeline_step_with_skip_by_rule_name() -> None:
    fn = rule_transform("test_double_neg", _rules, dialects={"onnx"}, sweeps=8,
                        summary="Remove Neg(Neg(x)).", rule_names=["double_neg"])
    spec = get("test_double_neg")
    assert spec.fn is fn and spec.summary == "Remove Neg(Neg(x))." and spec.param_names() == ["skip"]
    assert fn.rule_names == frozenset({"double_neg"})
    model = _neg_chain(4)
    report = run_pipeline(model, "test_double_neg(skip=double_neg)")
    assert len(model.graph) == 4 and not report.steps[0].changed
    report = run_pipeline(model, "test_double_neg")
    # the first pair goes; the second would make the graph input 'x' the output 'v3': refused
    assert [n.name for n in model.graph] == ["neg2", "neg3"] and report.steps[0].stats == {"double_neg": 1}
    (refusal,) = report.steps[0].refusals
    assert refusal[:3] == ("double_neg", "neg3", "Neg") and "graph output 'v3' would be renamed" in refusal[3]
    with pytest.raises(TransformError, match="unknown rule 'nope'; rules: double_neg"):
        fn(_neg_chain(2), TransformContext(), skip=["nope"])
