"""Def-use, edits, ordering and checks of the IR core."""

from __future__ import annotations

import ast
import pathlib
import sys
import time

import numpy as np
import pytest

from graphwright.errors import GraphCheckError
from graphwright.ir import Attr, DType, Graph, Node, Tensor, Value, check, constant_value, topological_order


def chain(n: int) -> tuple[Graph, Value, list[Node]]:
    g = Graph("onnx")
    x = Value("x", DType.FLOAT32, (1,))
    g.set_inputs([x])
    nodes, cur = [], x
    for i in range(n):
        node = g.append(Node("Relu", [cur], dialect="onnx", name=f"r{i}"))
        nodes.append(node)
        cur = node.output
    g.set_outputs([cur])
    return g, x, nodes


def test_def_use_is_maintained_by_mutators() -> None:
    _g, x, (a, b, c) = chain(3)
    assert x.uses() == ((a, 0),)
    assert a.output.users() == [b]
    c.replace_input(0, a.output)
    assert a.output.users() == [b, c]
    assert b.output.num_uses == 0
    b.output.replace_all_uses_with(x)
    assert b.output.num_uses == 0
    a.output.replace_all_uses_with(x)
    assert set(x.users()) == {a, b, c}
    assert a.output.num_uses == 0


def test_remove_refuses_before_touching_anything() -> None:
    g, x, (a, b, c) = chain(3)
    with pytest.raises(GraphCheckError, match="still read by 'r1'"):
        g.remove([a, c])
    assert len(g) == 3 and x.uses() == ((a, 0),)  # nothing was changed
    with pytest.raises(GraphCheckError, match="graph output"):
        g.remove(c)
    g.set_outputs([b.output])
    g.remove(c)
    assert len(g) == 2 and b.output.num_uses == 0


def test_control_edges_are_edges() -> None:
    g, _x, (a, b, c) = chain(3)
    c.add_control_input(a)
    assert a.control_users == (c,)
    with pytest.raises(GraphCheckError, match="control edge"):
        g.remove([a, b])
    c.remove_control_input(a)
    assert a.control_users == ()


def test_iterating_while_removing_and_inserting() -> None:
    g, _x, _nodes = chain(6)
    seen = []
    for node in g:
        seen.append(node.name)
        if node.name == "r1":
            extra = Node("Neg", [node.output], dialect="onnx", name="neg")
            g.insert_after(node, extra)
        if node.name == "r2":
            node.output.replace_all_uses_with(node.input(0))
            g.remove(node)
    assert seen == ["r0", "r1", "neg", "r2", "r3", "r4", "r5"]
    assert [n.name for n in g] == ["r0", "r1", "neg", "r3", "r4", "r5"]


def test_topological_order_is_stable_and_detects_cycles() -> None:
    g, _x, (a, b, c) = chain(3)
    g.sort([c, a, b])
    assert [n.name for n in topological_order(g)] == ["r0", "r1", "r2"]
    a.replace_input(0, c.output)
    with pytest.raises(GraphCheckError, match="cycle"):
        check(g)


def test_check_finds_dangling_inputs() -> None:
    g, _x, (_a, b, _c) = chain(3)
    b.replace_input(0, Value("ghost"))
    with pytest.raises(GraphCheckError, match="ghost"):
        check(g)


def test_constant_value_across_dialects_and_lazy_tensors() -> None:
    loads = []
    t = Tensor(DType.FLOAT32, (2,), loader=lambda: loads.append(1) or np.array([1.0, 2.0], np.float32))
    assert not t.is_loaded and loads == []
    node = Node("Const", [], dialect="tf", name="w", attrs={"value": Attr.tensor(t)})
    assert constant_value(node.output) is t
    assert t.numpy().tolist() == [1.0, 2.0] and loads == [1]
    t.numpy()
    assert loads == [1]
    assert not t.numpy().flags.writeable
    init = Value("b", const=Tensor.from_numpy(np.zeros(3, np.float32)))
    assert constant_value(init).shape == (3,) and init.dtype is DType.FLOAT32


def test_large_chain_is_linear_and_iterative() -> None:
    n = 200_000
    start = time.perf_counter()
    g, _x, nodes = chain(n)
    order = topological_order(g)
    check(g)
    assert len(order) == n and order[0] is nodes[0] and order[-1] is nodes[-1]
    assert sys.getrecursionlimit() < n  # it really did not recurse
    assert time.perf_counter() - start < 60  # sanity bound only; speed lives in benchmarks/


def test_ir_imports_no_format_library() -> None:
    forbidden = {"onnx", "onnxruntime", "google", "tensorboard", "tensorflow", "flatbuffers", "ai_edge_litert"}
    ir_dir = pathlib.Path(__file__).resolve().parents[2] / "src" / "graphwright" / "ir"
    for path in ir_dir.glob("*.py"):
        for stmt in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(stmt, ast.Import):
                names = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                names = [stmt.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


def test_tf_while_loop_back_edges_are_not_cycles() -> None:
    g = Graph("tf")
    enter = g.append(Node("Enter", [], dialect="tf", name="enter"))
    merge = g.append(Node("Merge", [enter.output, None], dialect="tf", name="merge"))
    body = g.append(Node("Add", [merge.output], dialect="tf", name="body"))
    back = g.append(Node("NextIteration", [body.output], dialect="tf", name="next"))
    merge.replace_input(1, back.output)
    g.sort([back, body, merge, enter])
    assert [n.name for n in topological_order(g)] == ["enter", "merge", "body", "next"]
    check(g)
