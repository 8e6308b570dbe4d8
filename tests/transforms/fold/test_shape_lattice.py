"""The partial-shape lattice: symbolic dim algebra, and what it derives on small graphs (checked by hand
and, where a derived size is claimed, against the sizes onnxruntime gives at several input shapes)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphwright.ir import topological_order
from graphwright.transforms.fold._shape_lattice import Expr, Lattice, Opaque, add, div, exact_quotient, mul

from .._onnx_build import F, apply, feeds_for, init, model, run, vi

mk = helper.make_node
B, S, W = (Expr.atom(n) for n in ("B", "S", "W"))


def test_polynomials_are_canonical() -> None:
    assert mul(B, 1) == B and add(B, 0) == B and div(B, 1) == B
    assert mul(B, S) == mul(S, B)
    assert add(add(W, W), -1) == add(mul(W, 2), -1)
    assert div(mul(W, 4), 4) == W  # exact
    assert div(add(W, W), 2) == W
    assert add(B, mul(B, -1)) == 0  # a symbol less itself is the int 0
    assert mul(2, 3) == 6 and div(7, 2) == 3 and div(-7, 2) == -3  # ONNX Div truncates
    assert exact_quotient(mul(mul(B, S), 32), mul(S, B)) == 32
    assert exact_quotient(mul(B, 32), S) is None


def test_inexact_division_is_an_opaque_size_equal_only_to_itself() -> None:
    q1, q2 = div(W, 4), div(W, 4)
    assert isinstance(q1, Expr) and q1 == q2  # the same quotient of the same size
    assert div(W, 4) != div(W, 2) and div(W, 4) != W
    neg = div(add(W, -5), 2)  # W - 5 may be negative: a quotient of unknown sign
    assert isinstance(neg, Expr) and not neg.nonnegative and div(add(W, -5), 2) == neg
    assert div(W, 4).nonnegative
    assert Opaque(("dim", 1)) != Opaque(("dim", 2)) and B != S


def _lattice(nodes, inputs, inits=()):
    m, p = model(nodes, inputs, [vi(nodes[-1].output[0], F, None)], list(inits))
    apply(m, "infer_shapes")
    lattice = Lattice()
    for node in topological_order(m.graph):
        lattice.visit(node)
    values = {v.name: v for n in m.graph for v in n.outputs}
    return lattice, values, m, p


def test_shape_vectors_carry_symbols_through_arithmetic() -> None:
    nodes = [mk("Shape", ["x"], ["s"]), mk("Gather", ["s", "i0"], ["b"], axis=0),
             mk("Gather", ["s", "i1"], ["t"], axis=0), mk("Mul", ["b", "t"], ["bt"]),
             mk("Div", ["bt", "one"], ["bt1"]), mk("Shape", ["x"], ["tail"], start=-1),
             mk("Size", ["x"], ["n"]), mk("Div", ["n", "bt"], ["c"]), mk("Relu", ["x"], ["y"])]
    inits = [init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)), init("one", np.array(1, np.int64))]
    lattice, v, _, _ = _lattice(nodes, [vi("x", F, ["B", "S", 24])], inits)
    assert lattice.elems(v["s"]) == [B, S, 24]
    assert lattice.elems(v["bt"]) == [mul(B, S)] and lattice.elems(v["bt1"]) == lattice.elems(v["bt"])
    assert lattice.elems(v["tail"]) == [24]
    assert lattice.elems(v["c"]) == [24]  # Size / (B*S) of [B, S, 24]
    assert v["b"] in lattice.scalar and v["tail"] not in lattice.scalar


def test_reshape_with_minus_one_and_zero_derives_output_dims() -> None:
    """[B, S, 64] -> Reshape [0, -1, 16] -> [B, 4*S, 16]; -> Transpose -> Reshape [-1, 64] -> [B*S, 64];
    the claimed sizes are those onnxruntime's outputs have at three input shapes."""
    nodes = [mk("Reshape", ["x", "t1"], ["r1"]), mk("Transpose", ["r1"], ["tr"], perm=[1, 0, 2]),
             mk("Reshape", ["tr", "t2"], ["r2"]), mk("Relu", ["r2"], ["y"])]
    inits = [init("t1", np.array([0, -1, 16], np.int64)), init("t2", np.array([-1, 64], np.int64))]
    lattice, v, _, p = _lattice(nodes, [vi("x", F, ["B", "S", 64])], inits)
    assert lattice.shape(v["r1"]) == [B, mul(S, 4), 16]
    assert lattice.shape(v["tr"]) == [mul(S, 4), B, 16]
    assert lattice.shape(v["r2"]) == [mul(B, S), 64]
    for b, s in ((1, 1), (2, 3), (5, 2)):
        (y,) = run(p.SerializeToString(), feeds_for(p, dims={"B": b, "S": s}))
        assert y.shape == (b * s, 64)


def test_constant_of_shape_expand_and_recurrent_outputs() -> None:
    nodes = [mk("Shape", ["x"], ["s"]), mk("Gather", ["s", "i1"], ["b"], axis=0), mk("Unsqueeze", ["b", "ax"], ["bu"]),
             mk("Concat", ["two", "bu", "h"], ["zs"], axis=0), mk("ConstantOfShape", ["zs"], ["z"]),
             mk("Expand", ["one", "zs"], ["e"]),
             mk("LSTM", ["x", "w", "r"], ["yseq", "yh", "yc"], hidden_size=6, direction="bidirectional"),
             mk("Relu", ["yseq"], ["y"])]
    inits = [init("i1", np.array(1, np.int64)), init("ax", np.array([0], np.int64)), init("two", np.array([2], np.int64)),
             init("h", np.array([6], np.int64)), init("one", np.ones([1], np.float32)),
             init("w", np.zeros([2, 24, 4], np.float32)), init("r", np.zeros([2, 24, 6], np.float32))]
    lattice, v, _, _ = _lattice(nodes, [vi("x", F, ["T", "B", 4])], inits)
    t = Expr.atom("T")
    assert lattice.elems(v["zs"]) == [2, B, 6]
    assert lattice.shape(v["z"]) == [2, B, 6] and lattice.shape(v["e"]) == [2, B, 6]
    assert lattice.shape(v["yseq"]) == [t, 2, B, 6] and lattice.shape(v["yh"]) == [2, B, 6]


def test_equal_is_decided_only_when_it_is_for_every_size() -> None:
    nodes = [mk("Shape", ["x"], ["s"]), mk("Equal", ["s", "m1"], ["neg"]), mk("Equal", ["s", "ones"], ["is1"]),
             mk("Relu", ["x"], ["y"])]
    inits = [init("m1", np.array([-1, -1], np.int64)), init("ones", np.array([1, 1], np.int64))]
    lattice, v, _, _ = _lattice(nodes, [vi("x", F, ["B", 1])], inits)
    assert lattice.elems(v["neg"]) == [False, False]  # a size is never negative
    assert lattice.elems(v["is1"]) is None  # B may be 1 or not


def test_conv_and_pool_dims_are_expressions_of_the_input() -> None:
    """Conv k3/s2/p1 and Conv k1/s2/p0 of x[1, 3, H, W] both give (H - 1) // 2 + 1 (one expression, where ONNX
    names two unknowns); MaxPool k2/s2 of a same-padded conv gives (W - 2) // 2 + 1; onnxruntime agrees at
    every size tried (the Add of the two convs runs, and the sizes are the formula's)."""
    rng = np.random.default_rng(0)
    nodes = [mk("Conv", ["x", "w3"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             mk("Conv", ["x", "w1"], ["b"], kernel_shape=[1, 1], strides=[2, 2]),
             mk("Add", ["a", "b"], ["ab"]),
             mk("Conv", ["x", "w3"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), mk("Relu", ["ab"], ["y"])]
    inits = [init("w3", rng.standard_normal([4, 3, 3, 3]).astype(np.float32)),
             init("w1", rng.standard_normal([4, 3, 1, 1]).astype(np.float32))]
    lattice, v, _, p = _lattice(nodes, [vi("x", F, [1, 3, "H", "W"])], inits)
    h, w = Expr.atom("H"), Expr.atom("W")
    half = [add(div(add(d, -1), 2), 1) for d in (h, w)]
    assert lattice.shape(v["a"]) == [1, 4, *half] == lattice.shape(v["b"]) == lattice.shape(v["ab"])
    assert lattice.shape(v["c"]) == [1, 4, h, w]
    assert lattice.shape(v["p"]) == [1, 4, *(add(div(add(d, -2), 2), 1) for d in (h, w))]
    for hh, ww in ((5, 8), (2, 3), (9, 1)):
        (y,) = run(p.SerializeToString(), feeds_for(p, dims={"H": hh, "W": ww}))
        assert y.shape == (1, 4, (hh - 1) // 2 + 1, (ww - 1) // 2 + 1)
