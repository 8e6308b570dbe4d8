"""replace_matching: the GTT contract on the IR (refusal, re-emission, order, reports)."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.errors import GraphCheckError, TransformError
from graphwright.ir import Graph, Node, Tensor, Value, check, constant_value
from graphwright.patterns import (
    ANY,
    CONST,
    Match,
    P,
    Replacement,
    RuleSet,
    Skip,
    fusable_chain,
    replace_matching,
    weight_not_shared,
    why_not_fusable,
)

from ._graphs import ConvMul, snapshot, tf_const

FOLD = P("Mul", P("Conv2D", ANY, CONST(name="w"), name="conv"), CONST(name="s"), commutative=True)


def fold(m: Match) -> Replacement | Skip:
    """Mul(Conv2D(x, W), s) -> Conv2D(x, W * s), for a 1-D s over the output channels."""
    w, s = m.array("w"), m.array("s")
    if s.ndim != 1 or s.shape[0] != w.shape[-1]:
        return m.skip(f"scale shape {s.shape} is not [{w.shape[-1]}]")
    if why := why_not_fusable(m):
        return m.skip(why)
    conv = m["conv"].node
    scaled = m.constant(w * s, name=f"{conv.name}/scaled_weights")
    return Replacement([m.clone(conv, inputs=[conv.inputs[0], scaled], name=m.node.name)])


def test_fold_conv_mul_rewrites_weights_and_def_use() -> None:
    cm = ConvMul()
    w0 = cm.w.attrs["value"].value.numpy().copy()
    s0 = cm.s.attrs["value"].value.numpy().copy()
    report = replace_matching(cm.graph, FOLD, fold)
    assert report.applied == 1 and report.changed and not report.refused and not report.skipped
    assert report.by_rule == {"fold": 1} and report.removed == 2 and report.added == 2 and report.swept == 2
    check(cm.graph)
    ops = [(n.name, n.op) for n in cm.graph]
    assert ops == [("x", "Placeholder"), ("conv/scaled_weights", "Const"), ("mul", "Conv2D"), ("relu", "Relu")]
    new_conv = cm.relu.inputs[0].producer
    assert new_conv is not None and new_conv.op == "Conv2D" and new_conv.name == "mul"
    assert new_conv.inputs[0] is cm.x.output
    assert cm.x.output.users() == [new_conv]
    weights = constant_value(new_conv.inputs[1])
    assert weights is not None
    np.testing.assert_allclose(weights.numpy(), w0 * s0, rtol=1e-6)
    assert new_conv.attrs["padding"].value == b"SAME"  # attributes carried over by clone
    # Old nodes are gone and detached.
    assert cm.conv.graph is None and cm.mul.graph is None and cm.w.graph is None
    assert cm.x.output.num_uses == 1 and cm.mul.output.num_uses == 0
    # One pass: the new Conv2D is not matched again; a second sweep finds nothing to fold.
    assert replace_matching(cm.graph, FOLD, fold).applied == 0


def test_orphaning_replacement_is_refused_and_graph_unchanged() -> None:
    cm = ConvMul()
    g = cm.graph
    cm.graph.append(Node("Identity", [cm.conv.output], dialect="tf", name="reads_conv"))
    before = snapshot(g)

    def fold_without_check(m: Match) -> Replacement:
        conv = m["conv"].node
        scaled = m.constant(m.array("w") * m.array("s"), name="scaled")
        return Replacement([m.clone(conv, inputs=[conv.inputs[0], scaled], name=m.node.name)])

    report = replace_matching(g, FOLD, fold_without_check)
    assert report.applied == 0 and not report.changed
    assert len(report.refused) == 1
    refusal = report.refused[0]
    assert refusal.node == "mul" and refusal.op == "Mul" and refusal.rule == "fold_without_check"
    assert "'conv' (output of 'conv') is still read by 'reads_conv' outside the match" in refusal.reason
    assert snapshot(g) == before  # nothing moved, no stale uses left by the built nodes
    check(g)


def test_allow_inconsistencies_applies_and_leaves_repair_to_the_caller() -> None:
    cm = ConvMul()
    g = cm.graph
    reader = g.append(Node("Identity", [cm.conv.output], dialect="tf", name="reads_conv"))

    def drop_mul(m: Match) -> Replacement:  # Mul(conv, s) -> conv ... but removes conv too
        return Replacement([], {m.node.output: m["conv"].node.inputs[0]})

    report = replace_matching(g, FOLD, drop_mul, allow_inconsistencies=True)
    assert report.applied == 1 and not report.refused
    assert cm.relu.inputs[0] is cm.x.output
    assert reader.inputs[0] is cm.conv.output and cm.conv.graph is None  # dangling, as asked
    with pytest.raises(GraphCheckError, match="reads_conv"):
        check(g)


def test_unmapped_graph_output_is_refused() -> None:
    cm = ConvMul()
    g = cm.graph
    g.set_outputs([cm.relu.output, cm.mul.output])
    report = replace_matching(g, FOLD, lambda m: Replacement([], {}))
    assert report.applied == 0
    assert "'mul' (output of 'mul') is a graph output and the replacement does not map it" in report.refused[0].reason


def test_new_node_reading_a_removed_value_is_refused() -> None:
    cm = ConvMul()
    before = snapshot(cm.graph)

    def bad(m: Match) -> list[Node]:
        return [Node("Relu", [m["conv"].node.output], dialect="tf", name="bad")]

    report = replace_matching(cm.graph, FOLD, bad)
    assert "new node 'bad' reads 'conv' of removed node 'conv'" in report.refused[0].reason
    assert snapshot(cm.graph) == before


def test_string_form_claims_consts_so_shared_weights_are_refused() -> None:
    # GTT semantics: every node of the match is removed unless re-emitted; the shared weight
    # Const is still read by the second convolution, so replacing without re-emitting it is refused.
    cm = ConvMul()
    g = cm.graph
    conv2 = g.append(Node("Conv2D", [cm.x.output, cm.w.output], dialect="tf", name="conv2"))
    g.set_outputs([cm.relu.output, conv2.output])
    before = snapshot(g)

    def fold_gtt(m: Match) -> Replacement:
        conv, weights, scale = m.inputs[0].node, m.inputs[0].inputs[1], m.inputs[1]
        scaled = m.constant(weights.array() * scale.array(), name="scaled")
        return Replacement([m.clone(conv, inputs=[conv.inputs[0], scaled], name=m.node.name)])

    pattern = '{"Mul", {{"Conv2D", {{"*"}, {"Const"}}}, {"Const"}}}'
    report = replace_matching(g, pattern, fold_gtt)
    assert report.applied == 0 and len(report.refused) == 1
    reason = report.refused[0].reason
    assert "'x' (output of 'x') is still read by 'conv2'" in reason
    assert "'w' (output of 'w') is still read by 'conv2'" in reason
    assert "new node 'mul' reads 'x' of removed node 'x'" in reason
    assert snapshot(g) == before

    # Re-emitting the shared nodes (GTT's "copy the original node back") makes it consistent.
    def fold_reemit(m: Match) -> Replacement:
        rep = fold_gtt(m)
        keep = [m.inputs[0].inputs[0].node, m.inputs[0].inputs[1].node]
        return Replacement(keep + rep.nodes)

    report = replace_matching(g, pattern, fold_reemit)
    assert report.applied == 1 and cm.w.graph is g and cm.x.graph is g and cm.s.graph is None
    check(g)


def test_weight_not_shared_keeps_shared_weights_out_of_the_match() -> None:
    cm = ConvMul()
    g = cm.graph
    conv2 = g.append(Node("Conv2D", [cm.x.output, cm.w.output], dialect="tf", name="conv2"))
    g.set_outputs([cm.relu.output, conv2.output])
    guarded = P("Mul", P("Conv2D", ANY, CONST(name="w", where=weight_not_shared), name="conv"), CONST(name="s"))
    before = snapshot(g)
    report = replace_matching(g, guarded, fold)
    assert report.applied == 0 and report.stats.matches == 0 and not report.refused
    assert snapshot(g) == before
    g.remove(conv2, force=True)  # unshare: now it folds
    g.set_outputs([cm.relu.output])
    assert replace_matching(g, guarded, fold).applied == 1
    check(g)


def test_skip_reasons_and_fallthrough_to_the_next_rule() -> None:
    cm = ConvMul()
    rules = RuleSet()
    calls: list[str] = []

    @rules.rule(P("Mul", ANY, ANY))
    def never(m: Match) -> Skip:
        calls.append("never")
        m.clone(m.node)  # built, then abandoned: must leave no uses behind
        return Skip("not today")

    @rules.rule(P("Mul", ANY, ANY))
    def silent(m: Match) -> None:
        calls.append("silent")

    rules.add(FOLD, fold)
    report = rules.apply(cm.graph)
    assert calls == ["never", "silent"]
    assert [(o.rule, o.reason) for o in report.skipped] == [("never", "not today"), ("silent", "")]
    assert report.applied == 1 and report.by_rule == {"fold": 1}
    check(cm.graph)
    assert cm.x.output.num_uses == 1  # the abandoned clone was detached


def test_check_runs_before_the_rewrite() -> None:
    cm = ConvMul()
    cm.graph.append(Node("Identity", [cm.conv.output], dialect="tf", name="spy"))
    report = replace_matching(cm.graph, FOLD, fold, check=fusable_chain)
    assert report.applied == 0 and report.skipped[0].reason == "check fusable_chain failed"


def test_control_users_move_to_the_replacement() -> None:
    cm = ConvMul()
    g = cm.graph
    noop = g.append(Node("NoOp", (), dialect="tf", name="after_mul"))
    noop.add_control_input(cm.mul)
    report = replace_matching(g, FOLD, fold)
    assert report.applied == 1
    new_conv = cm.relu.inputs[0].producer
    assert noop.control_inputs == (new_conv,)
    check(g)


def test_control_users_with_nowhere_to_go_are_refused() -> None:
    cm = ConvMul()
    g = cm.graph
    noop = g.append(Node("NoOp", (), dialect="tf", name="after_mul"))
    noop.add_control_input(cm.mul)
    g.set_outputs([])
    cm.relu.set_inputs([cm.x.output])
    report = replace_matching(g, FOLD, lambda m: Replacement([], {}))
    assert "'mul' has control users ('after_mul'...)" in report.refused[0].reason


def test_insert_after_a_reemitted_root_keeps_order() -> None:
    # Relu(x) -> Relu(x) followed by an Identity: the new node reads the kept root, so it goes after it.
    cm = ConvMul()
    g = cm.graph

    def tap(m: Match) -> Replacement:
        ident = Node("Identity", [m.node.output], dialect="tf", name="tap")
        return Replacement([m.node, ident], {m.node.output: ident.output})

    report = replace_matching(g, P("Relu"), tap)
    assert report.applied == 1 and report.removed == 0 and report.added == 1
    names = [n.name for n in g]
    assert names.index("tap") == names.index("relu") + 1
    assert g.outputs[0].producer.name == "tap"  # type: ignore[union-attr]
    assert cm.relu.output.users()[0].name == "tap"
    check(g)


def test_onnx_graph_output_name_is_kept_and_initializers_are_managed() -> None:
    g = Graph("onnx")
    x = Value("x")
    w = g.add_initializer(Value("W", const=Tensor.from_numpy(np.full((2, 2), 2.0, np.float32))))
    s = g.add_initializer(Value("S", const=Tensor.from_numpy(np.full((2,), 3.0, np.float32))))
    g.set_inputs([x])
    mm = g.append(Node("MatMul", [x, w], dialect="onnx", name="mm", outputs=[Value("mm_out")]))
    mul = g.append(Node("Mul", [mm.output, s], dialect="onnx", name="mul", outputs=[Value("y")]))
    g.set_outputs([mul.output])

    def fold_mm(m: Match) -> Replacement:
        mm = m["mm"].node
        scaled = m.constant(m.array("w") * m.array("s"), name="W_scaled")
        return Replacement([m.clone(mm, inputs=[mm.inputs[0], scaled])])

    pattern = P("Mul", P("MatMul", ANY, CONST(name="w"), name="mm"), CONST(name="s"))
    report = replace_matching(g, pattern, fold_mm)
    assert report.applied == 1 and report.swept == 2
    assert [v.name for v in g.initializers] == ["W_scaled"]
    assert g.outputs[0].name == "y"  # the graph keeps its output name
    assert g.outputs[0].producer.op == "MatMul"  # type: ignore[union-attr]
    np.testing.assert_array_equal(g.initializers[0].const.numpy(), np.full((2, 2), 6.0))  # type: ignore[union-attr]
    check(g)


def test_list_shorthand_and_explicit_empty_mapping() -> None:
    cm = ConvMul()
    # Identity(x) removal via an explicit mapping and no new nodes.
    ident = cm.graph.append(Node("Identity", [cm.relu.output], dialect="tf", name="id"))
    cm.graph.set_outputs([ident.output])
    report = replace_matching(cm.graph, P("Identity", ANY(name="x")),
                              lambda m: Replacement([], {m.node.output: m["x"].value}))
    assert report.applied == 1 and cm.graph.outputs == (cm.relu.output,)
    # A list of nodes is Replacement(nodes): the last node stands for the root.
    report = replace_matching(cm.graph, P("Relu", ANY(name="x")),
                              lambda m: [Node("Relu6", [m["x"].value], dialect="tf", name="r6")])
    assert report.applied == 1 and cm.graph.outputs[0].producer.op == "Relu6"  # type: ignore[union-attr]
    check(cm.graph)


def test_fn_bugs_become_transform_errors_naming_rule_and_node() -> None:
    cm = ConvMul()
    before = snapshot(cm.graph)

    def broken(m: Match) -> Replacement:
        m.clone(m["conv"].node)
        raise ValueError("oops")

    with pytest.raises(TransformError, match="rule 'broken' failed on Mul node 'mul': ValueError: oops"):
        replace_matching(cm.graph, FOLD, broken)
    assert snapshot(cm.graph) == before

    with pytest.raises(TransformError, match="not part of the match"):
        replace_matching(cm.graph, FOLD, lambda m: Replacement([
            Node("Relu", [cm.x.output], dialect="tf", name="half_built"), cm.relu]))
    assert snapshot(cm.graph) == before  # the half-built node's use of x was undone
    with pytest.raises(TransformError, match="not an output of a matched node"):
        replace_matching(cm.graph, FOLD, lambda m: Replacement([], {cm.relu.output: cm.x.output}))


def test_api_misuse() -> None:
    cm = ConvMul()
    with pytest.raises(TypeError, match="needs a replacement function"):
        replace_matching(cm.graph, FOLD)
    with pytest.raises(TypeError, match="belong to the rules"):
        replace_matching(cm.graph, RuleSet(), fold)


def test_skipped_fold_for_bad_scale_shape() -> None:
    cm = ConvMul()
    cm.s.attrs["value"] = tf_const("s", np.ones((1, 1, 1, 4))).attrs["value"]
    report = replace_matching(cm.graph, FOLD, fold)
    assert report.applied == 0 and report.skipped[0].reason == "scale shape (1, 1, 1, 4) is not [4]"


# -- checks return reasons; bypass keeps ONNX output names ---------------------------------


def test_a_check_returning_a_string_refuses_with_that_reason() -> None:
    cm = ConvMul()
    cm.conv.output.name = "conv"  # keep names stable for the message

    def not_today(m: Match) -> str | None:
        return f"conv {m['conv'].node.name!r} is pinned"

    before = snapshot(cm.graph)
    report = replace_matching(cm.graph, FOLD, fold, check=not_today)
    assert report.applied == 0
    assert [(o.node, o.rule, o.reason) for o in report.skipped] == [("mul", "fold", "conv 'conv' is pinned")]
    assert snapshot(cm.graph) == before


def test_a_check_returning_none_lets_the_rewrite_run() -> None:
    cm = ConvMul()
    report = replace_matching(cm.graph, FOLD, fold, check=lambda m: None)
    assert report.applied == 1 and not report.skipped


def _onnx_chain(source_is_input: bool) -> tuple[Graph, Node, Value]:
    """``x -> Relu -> Identity -> (graph output 'y')`` in the onnx dialect (or Identity(x) directly)."""
    g = Graph("onnx")
    x = Value("x")
    g.set_inputs([x])
    src = x
    if not source_is_input:
        relu = g.append(Node("Relu", [x], dialect="onnx", name="relu", outputs=[Value("r")]))
        src = relu.output
    ident = g.append(Node("Identity", [src], dialect="onnx", name="ident", outputs=[Value("y")]))
    g.set_outputs([ident.output])
    return g, ident, src


def test_bypass_to_gives_the_source_the_graph_output_name() -> None:
    g, _ident, src = _onnx_chain(source_is_input=False)
    report = replace_matching(g, P("Identity", ANY(name="x")), lambda m: Replacement.bypass_to(m.node.output, m["x"].value))
    check(g)
    assert report.applied == 1
    assert [n.op for n in g] == ["Relu"]
    assert list(g.outputs) == [src] and src.name == "y"


def test_bypass_to_is_refused_when_the_source_cannot_take_the_output_name() -> None:
    g, _ident, _src = _onnx_chain(source_is_input=True)
    before = snapshot(g)
    report = replace_matching(g, P("Identity", ANY(name="x")), lambda m: Replacement.bypass_to(m.node.output, m["x"].value))
    assert report.applied == 0 and len(report.refused) == 1
    assert "graph output 'y' would be renamed" in report.refused[0].reason
    assert snapshot(g) == before and g.inputs[0].name == "x"


def test_rule_sets_skip_rules_by_name() -> None:
    cm = ConvMul()
    rules = RuleSet()
    rules.add(FOLD, fold, name="fold")
    assert rules.names() == ["fold"]
    assert rules.apply(cm.graph, skip={"fold"}).applied == 0
    assert rules.apply(cm.graph).applied == 1


def test_control_to_takes_the_control_users_of_a_node_without_mapped_outputs() -> None:
    g = Graph("tf")
    x = g.append(Node("Placeholder", (), dialect="tf", name="x"))
    call = g.append(Node("StatefulPartitionedCall", [x.output], dialect="tf", name="call", outputs=0))
    waiter = g.append(Node("NoOp", (), dialect="tf", name="waiter", control_inputs=[call]))
    g.set_inputs([x.output])

    def fuse(m: Match) -> Replacement:
        op = Node("MyOp", [m.node.inputs[0]], dialect="tf", name="call/fused", outputs=0)
        return Replacement([op], {}, control_to=op)

    refused = replace_matching(g, P("StatefulPartitionedCall"), lambda m: Replacement(
        [Node("MyOp", [m.node.inputs[0]], dialect="tf", name="call/fused", outputs=0)], {}))
    assert refused.applied == 0 and "no mapped output to move them to" in refused.refused[0].reason
    report = replace_matching(g, P("StatefulPartitionedCall"), fuse)
    check(g)
    assert report.applied == 1 and [n.name for n in g] == ["x", "call/fused", "waiter"]
    assert [c.name for c in waiter.control_inputs] == ["call/fused"]


def test_a_mapped_intermediate_with_an_earlier_reader_leaves_the_graph_sorted() -> None:
    """``a = Add(x, y); s = Shape(a); n = Neg(a)`` with ``Neg(Add)`` fused into one node that also gives
    the sum (as SkipLayerNormalization's output 3 does): the fused node goes before the root, after
    ``Shape``, which reads the sum — the sweep must end with ``Shape`` after its new producer."""
    g = Graph("onnx")
    x, y = Value("x"), Value("y")
    g.set_inputs([x, y])
    add = g.append(Node("Add", [x, y], dialect="onnx", name="add", outputs=[Value("a")]))
    shape = g.append(Node("Shape", [add.output], dialect="onnx", name="shape", outputs=[Value("s")]))
    neg = g.append(Node("Neg", [add.output], dialect="onnx", name="neg", outputs=[Value("n")]))
    g.set_outputs([shape.output, neg.output])

    def fuse(m: Match) -> Replacement:
        fused = Node("AddNeg", [m["x"].value, m["y"].value], dialect="onnx", name="fused",
                     outputs=[Value("n2"), Value("a2")])
        return Replacement([fused], {m.node.output: fused.outputs[0], m["add"].node.output: fused.outputs[1]})

    report = replace_matching(g, P("Neg", P("Add", ANY(name="x"), ANY(name="y"), name="add")), fuse)
    assert report.applied == 1
    check(g)  # raises on a reader placed before its producer
    assert [n.name for n in g] == ["fused", "shape"]
    assert shape.inputs[0].producer is not None and shape.inputs[0].producer.name == "fused"
