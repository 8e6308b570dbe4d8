"""Matching semantics: arity, wildcards, alternatives, captures, constraints, non-overlap."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.errors import TransformError
from graphwright.ir import Graph, Node, Tensor, Value
from graphwright.patterns import (
    ANY,
    CONST,
    OMITTED,
    Matcher,
    MatchStats,
    OneOf,
    P,
    find_matches,
    match_pattern,
    parse_pattern,
)

from ._graphs import ConvMul, tf_const


def test_string_and_python_forms_match_the_same_nodes() -> None:
    cm = ConvMul()
    text = parse_pattern('{"Mul", {{"Conv2D|MatMul", {{"*"}, {"Const"}}}, {"Const"}}}')
    py = P("Mul", P("Conv2D|MatMul", P("*"), P("Const")), P("Const"))
    a, b = match_pattern(text, cm.mul), match_pattern(py, cm.mul)
    assert a is not None and b is not None
    assert a.nodes == b.nodes == (cm.x, cm.w, cm.conv, cm.s, cm.mul)  # producers first, root last
    # The GTT-like tree.
    assert a.node is cm.mul and a.value is cm.mul.output
    assert a.inputs[0].node is cm.conv and a.inputs[1].node is cm.s
    assert a.inputs[0].inputs[0].node is cm.x and a.inputs[0].inputs[1].node is cm.w
    assert a.inputs[0].value is cm.conv.output
    assert match_pattern(text, cm.relu) is None  # wrong root op


def test_captures_by_name() -> None:
    cm = ConvMul()
    m = match_pattern(P("Mul", P("Conv2D", ANY(name="x"), CONST(name="w"), name="conv"), CONST(name="s")), cm.mul)
    assert m is not None
    assert m["conv"].node is cm.conv
    assert m["x"].value is cm.x.output and m["x"].node is cm.x
    np.testing.assert_array_equal(m.array("w"), cm.w.attrs["value"].value.numpy())
    assert m.const("s").shape == (4,)
    assert set(m.names) == {"x", "w", "conv", "s"} and "w" in m and m.get("nope") is None
    # Wildcard and constant producers are the boundary: not part of the match.
    assert m.nodes == (cm.conv, cm.mul)
    with pytest.raises(KeyError, match=r"no capture named 'nope'.*captures: "):
        m["nope"]
    with pytest.raises(TransformError, match="capture 'x' is not a constant"):
        m.array("x")


def test_exact_arity_with_inputs_any_arity_without() -> None:
    g = Graph("tf")
    a = g.append(Node("Placeholder", (), dialect="tf", name="a"))
    concat3 = g.append(Node("ConcatV2", [a.output, a.output, a.output], dialect="tf", name="c3"))
    concat2 = g.append(Node("ConcatV2", [a.output, a.output], dialect="tf", name="c2"))
    two = P("ConcatV2", ANY, ANY)
    assert match_pattern(two, concat2) is not None
    assert match_pattern(two, concat3) is None  # exactly two inputs, not at least two
    assert match_pattern(P("ConcatV2"), concat3) is not None  # no input list: any inputs
    assert match_pattern(P("ConcatV2", ANY, ...), concat3) is not None  # '...': and any further ones
    assert match_pattern(P("ConcatV2", ANY, ANY, ANY, ANY, ...), concat3) is None
    assert match_pattern(parse_pattern('{"ConcatV2", {{"*"}, {"*"}}}'), concat3) is None
    # Control inputs are not data inputs.
    concat2.add_control_input(concat3)
    assert match_pattern(two, concat2) is not None


def test_alternatives_and_wildcard_ops() -> None:
    g = Graph("tf")
    x = g.append(Node("Placeholder", (), dialect="tf", name="x"))
    relu6 = g.append(Node("Relu6", [x.output], dialect="tf", name="r6"))
    elu = g.append(Node("Elu", [x.output], dialect="tf", name="elu"))
    act = P("Relu|Relu6", ANY)
    assert match_pattern(act, relu6) is not None and match_pattern(act, elu) is None
    assert match_pattern(P("*", P("Placeholder")), elu) is not None
    # Sub-tree alternatives: the first that matches wins, and captures follow the branch taken.
    alt = P("Relu6", P("Elu", name="e") | P("Placeholder", name="p"))
    m = match_pattern(alt, relu6)
    assert m is not None and m.get("p") is not None and m.get("e") is None
    assert OneOf(P("Elu"), P("Relu6")).root_ops() == frozenset({"Elu", "Relu6"})


def test_bare_star_leaf_matches_graph_inputs_but_constrained_star_does_not() -> None:
    g = Graph("onnx")
    x = Value("x")
    w = Value("w", const=Tensor.from_numpy(np.ones((2,), np.float32)))
    g.set_inputs([x])
    g.add_initializer(w)
    add = g.append(Node("Add", [x, w], dialect="onnx", name="add"))
    m = match_pattern(parse_pattern('{"Add", {{"*"}, {"*"}}}'), add)
    assert m is not None and m.inputs[0].node is None and m.inputs[0].value is x
    assert m.nodes == (add,)  # nothing to claim upstream
    assert match_pattern(P("Add", P("*", dialect="onnx"), ANY), add) is None  # needs a producer
    assert match_pattern(P("Add", ANY, CONST), add) is not None  # initializer = constant
    assert match_pattern(P("Add", CONST, ANY), add) is None


def test_commutative_tries_both_orders_and_keeps_pattern_order() -> None:
    cm = ConvMul()
    cm.mul.set_inputs([cm.s.output, cm.conv.output])  # scale first
    fixed = P("Mul", P("Conv2D", name="conv"), CONST(name="s"))
    assert match_pattern(fixed, cm.mul) is None
    m = match_pattern(P("Mul", P("Conv2D", name="conv"), CONST(name="s"), commutative=True), cm.mul)
    assert m is not None
    assert m.inputs[0].node is cm.conv and m["s"].node is cm.s


def test_repeated_name_must_bind_the_same_value() -> None:
    g = Graph("tf")
    x = g.append(Node("Placeholder", (), dialect="tf", name="x"))
    y = g.append(Node("Placeholder", (), dialect="tf", name="y"))
    sig = g.append(Node("Sigmoid", [x.output], dialect="tf", name="sig"))
    swish = g.append(Node("Mul", [x.output, sig.output], dialect="tf", name="swish"))
    other = g.append(Node("Mul", [y.output, sig.output], dialect="tf", name="not_swish"))
    pat = P("Mul", ANY(name="x"), P("Sigmoid", ANY(name="x")), commutative=True)
    m = match_pattern(pat, swish)
    assert m is not None and m["x"].value is x.output
    assert match_pattern(pat, other) is None


def test_where_dialect_domain_port_omitted() -> None:
    g = Graph("onnx")
    x = Value("x")
    g.set_inputs([x])
    split = g.append(Node("Split", [x], dialect="onnx", name="split", outputs=2))
    gelu = g.append(Node("Gelu", [split.outputs[1]], dialect="onnx", domain="com.microsoft", name="gelu"))
    clip = g.append(Node("Clip", [gelu.output, None, None], dialect="onnx", name="clip"))
    assert match_pattern(P("Clip", ANY, OMITTED, OMITTED), clip) is not None
    assert match_pattern(P("Clip", ANY, ANY, OMITTED), clip) is None  # ANY needs a present value
    assert match_pattern(P("com.microsoft::Gelu"), gelu) is not None
    assert match_pattern(P("Gelu", domain="com.microsoft"), gelu) is not None
    assert match_pattern(P("ai.onnx::Gelu"), gelu) is None
    assert match_pattern(P("Gelu", dialect="tf"), gelu) is None
    assert match_pattern(P("Gelu", P("Split", port=1)), gelu) is not None
    assert match_pattern(P("Gelu", P("Split", port=0)), gelu) is None
    assert match_pattern(P("Gelu", where=lambda n: n.domain == "com.microsoft"), gelu) is not None
    assert match_pattern(P("Gelu", where=lambda n: False), gelu) is None
    with pytest.raises(TransformError, match=r"where= predicate 'boom'.*Gelu node 'gelu'.*ZeroDivisionError"):
        def boom(n: Node) -> bool:
            return bool(1 // 0)
        match_pattern(P("Gelu", where=boom), gelu)


def test_exclusive_means_used_only_by_the_match() -> None:
    cm = ConvMul()
    pat = P("Mul", P("Conv2D", ANY, CONST, exclusive=True), CONST)
    assert match_pattern(pat, cm.mul) is not None
    g = cm.graph
    spy = g.append(Node("Identity", [cm.conv.output], dialect="tf", name="spy"))
    assert match_pattern(pat, cm.mul) is None  # conv is also read by 'spy'
    g.remove(spy)
    g.set_outputs([cm.relu.output, cm.conv.output])
    assert match_pattern(pat, cm.mul) is None  # a graph output is a use outside the match


def test_backtracking_alternatives_respect_exclusive() -> None:
    # The first alternative matches structurally but fails 'exclusive'; the second must be tried.
    cm = ConvMul()
    cm.graph.append(Node("Identity", [cm.conv.output], dialect="tf", name="spy"))
    pat = P("Mul", P("Conv2D", ANY, ANY, exclusive=True) | P("Conv2D", name="shared"), CONST)
    m = match_pattern(pat, cm.mul)
    assert m is not None and m.get("shared") is not None


def test_find_matches_is_non_overlapping_earlier_root_wins() -> None:
    # Relu(Relu(Relu(x))): the pattern Relu(Relu(*)) could match at r1 and at r2, which overlap at r1.
    g = Graph("tf")
    cur = g.append(Node("Placeholder", (), dialect="tf", name="x")).output
    relus = []
    for i in range(4):
        relus.append(g.append(Node("Relu", [cur], dialect="tf", name=f"r{i}")))
        cur = relus[-1].output
    found = find_matches(g, P("Relu", P("Relu")))
    assert [m.node for m in found] == [relus[1], relus[3]]
    assert [m.nodes for m in found] == [(relus[0], relus[1]), (relus[2], relus[3])]
    assert len(g) == 5  # the graph is not changed


def test_matcher_yields_every_matching_pattern_in_insertion_order() -> None:
    cm = ConvMul()
    matcher: Matcher[str] = Matcher([
        (P("Relu"), "relu"),
        (P("Mul", ANY, ANY), "mul-any"),
        (P("*", P("Conv2D"), ANY), "star"),
        (P("Mul", CONST, ANY), "mul-const-first"),
    ])
    assert [tag for tag, _ in matcher.match(cm.mul)] == ["mul-any", "star"]
    stats = MatchStats()
    assert [tag for tag, _ in matcher.match(cm.relu, stats=stats)] == ["relu"]
    assert stats.candidates == 2  # 'relu' and the '*'-rooted pattern only


def test_value_patterns_cannot_be_roots() -> None:
    with pytest.raises(TypeError, match="root must be an op pattern"):
        Matcher([(ANY, 1)])
    with pytest.raises(TypeError, match="root must be an op pattern"):
        match_pattern(P("Relu") | CONST, Node("Relu", (), dialect="tf"))


def test_const_pattern_knows_every_dialect() -> None:
    g = Graph("onnx")
    c = g.append(Node("Constant", (), dialect="onnx", name="c",
                      attrs={"value": tf_const("t", [1.0]).attrs["value"]}))
    x = Value("x")
    g.set_inputs([x])
    add = g.append(Node("Add", [x, c.output], dialect="onnx", name="add"))
    m = match_pattern(P("Add", ANY, CONST(name="k")), add)
    assert m is not None and m["k"].node is c and m.array("k").tolist() == [1.0]
    assert match_pattern(P("Add", ANY, CONST(where=lambda v: v.producer is None)), add) is None
