"""inline_constant_if: If with a constant condition -> the taken branch, outputs checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphwright.transforms.inline.inline_constant_if_onnx  # noqa: F401 - registers the pass

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def _branches() -> tuple:
    """then: Relu(x) * w_then (branch initializer); else: Neg(x) + outer constant b."""
    then_branch = helper.make_graph([mk("Relu", ["x"], ["r"]), mk("Mul", ["r", "w_then"], ["t_out"])], "then", [],
                                    [vi("t_out", F, [3])],
                                    [init("w_then", np.array([1.5, -2.0, 0.5], np.float32))])
    else_branch = helper.make_graph([mk("Neg", ["x"], ["n"]), mk("Add", ["n", "b"], ["e_out"])], "else", [],
                                    [vi("e_out", F, [3])])
    return then_branch, else_branch


@pytest.mark.parametrize("cond", [True, False])
def test_constant_if_becomes_its_branch(cond: bool) -> None:
    then_branch, else_branch = _branches()
    nodes = [mk("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch), mk("Sigmoid", ["y"], ["z"])]
    m, p = model(nodes, [vi("x", F, [3])], [vi("z", F, [3]), vi("y", F, [3])],
                 [init("c", np.array(cond)), init("b", np.array([0.25, 0.5, 1.0], np.float32))])
    result = apply(m, "inline_constant_if")
    assert result.changed and result.stats["if_inlined"] == 1
    assert "If" not in ops(m)
    assert ops(m) == (["Relu", "Mul", "Sigmoid"] if cond else ["Neg", "Add", "Sigmoid"])
    assert [v.name for v in m.graph.outputs] == ["z", "y"]  # the If output kept its name
    b = next(v for v in m.graph.initializers if v.name == "b")
    assert b.num_uses == (0 if cond else 1)  # the dropped else branch no longer reads b
    same_outputs(p, m)


def test_if_with_a_runtime_condition_stays() -> None:
    then_branch, else_branch = _branches()
    nodes = [mk("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    m, p = model(nodes, [vi("x", F, [3]), vi("c", TensorProto.BOOL, [])], [vi("y", F, [3])],
                 [init("b", np.array([0.25, 0.5, 1.0], np.float32))])
    assert not apply(m, "inline_constant_if").changed
    assert ops(m) == ["If"]
    same_outputs(p, m)


def test_branch_returning_its_initializer_keeps_the_output_name() -> None:
    """then returns its own initializer k: k moves out and an Identity carries the graph output's name."""
    then_branch = helper.make_graph([], "then", [], [vi("k", F, [3])], [init("k", np.array([1, 2, 3], np.float32))])
    else_branch = helper.make_graph([mk("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [3])])
    nodes = [mk("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch), mk("Add", ["y", "x"], ["z"])]
    m, p = model(nodes, [vi("x", F, [3])], [vi("z", F, [3]), vi("y", F, [3])], [init("c", np.array([True]))])
    assert apply(m, "inline_constant_if").changed
    assert ops(m) == ["Identity", "Add"]
    assert [v.name for v in m.graph.outputs] == ["z", "y"]
    same_outputs(p, m)


def test_simplify_inlines_constant_if() -> None:
    from graphwright.simplify import simplify

    then_branch, else_branch = _branches()
    nodes = [mk("Not", ["f"], ["c"]), mk("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
             mk("Sigmoid", ["y"], ["z"])]
    m, p = model(nodes, [vi("x", F, [3])], [vi("z", F, [3])],
                 [init("f", np.array(False)), init("b", np.array([0.25, 0.5, 1.0], np.float32))])
    simplify(m)
    assert "If" not in ops(m) and "Not" not in ops(m)
    same_outputs(p, m)
