"""fold_symbolic_shapes: run-time shape glue made constant on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .._onnx_build import I64, F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def _attention_glue():
    """h[B, S, 64] -> Reshape(h, [B, S, -1, 16]) with B and S read at run time (exporter style)."""
    nodes = [
        mk("Shape", ["x"], ["s"]),
        mk("Gather", ["s", "i0"], ["b"], axis=0), mk("Gather", ["s", "i1"], ["q"], axis=0),
        mk("Unsqueeze", ["b", "ax"], ["bu"]), mk("Unsqueeze", ["q", "ax"], ["qu"]),
        mk("Concat", ["bu", "qu", "m1", "c16"], ["t"], axis=0),
        mk("Add", ["x", "bias"], ["h"]),
        mk("Reshape", ["h", "t"], ["r"]),
        mk("Equal", ["t", "m1s"], ["eq"]), mk("Where", ["eq", "ones", "t"], ["w"]),
        mk("Expand", ["r", "w"], ["y"]),
    ]
    inits = [init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
             init("ax", np.array([0], np.int64)), init("m1", np.array([-1], np.int64)),
             init("c16", np.array([16], np.int64)), init("bias", np.ones([64], np.float32)),
             init("m1s", np.full([4], -1, np.int64)), init("ones", np.ones([4], np.int64))]
    return model(nodes, [vi("x", F, ["B", "S", 64])], [vi("y", F, None)], inits)


def test_symbolic_shape_glue_becomes_constant_targets() -> None:
    m, p = _attention_glue()
    apply(m, "infer_shapes")
    result = apply(m, "fold_symbolic_shapes")
    apply(m, "eliminate_dead_code")
    assert result.stats["targets_folded"] == 2
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [0, 0, -1, 16]
    assert "Shape" not in ops(m)
    # Expand(r[B, S, 4, 16], [1, 1, 1, 16]) gives r's own shape: gone (its output, the graph's, keeps its name)
    assert result.stats["noops_removed"] == 1 and "Expand" not in ops(m) and reshape.output.name == "y"
    for seed, dims in enumerate(({"B": 1, "S": 7}, {"B": 3, "S": 2})):
        same_outputs(p, m, dims=dims, seed=seed)


# ----- helpers for the cases below -------------------------------------------------------------------------------
def _i(name: str, *values: int, scalar: bool = False):
    return init(name, np.array(values[0] if scalar else list(values), np.int64))


def _fold_twice(m):
    """Rounds of shape inference, the pass and dead-code elimination (as simplify's fixed point runs them):
    they settle within three rounds (a glue node whose other reader died goes in the next), and then a
    further round changes nothing.  Returns the first round's result."""
    results = []
    for _ in range(3):
        apply(m, "infer_shapes")
        results.append(apply(m, "fold_symbolic_shapes"))
        apply(m, "eliminate_dead_code")
        if not results[-1].changed:
            break
    apply(m, "infer_shapes")
    again = apply(m, "fold_symbolic_shapes")
    assert not again.changed, again.stats
    return results[0]


def _check_sizes(p, m, sizes) -> None:
    for seed, dims in enumerate(sizes):
        same_outputs(p, m, dims=dims, seed=seed)


def _gathers(src: str, *indices: int) -> list:
    nodes = [mk("Shape", [src], ["s"])]
    for i in indices:
        nodes += [mk("Gather", ["s", f"i{i}"], [f"g{i}"], axis=0), mk("Unsqueeze", [f"g{i}", "ax"], [f"u{i}"])]
    return nodes


def _gather_inits(*indices: int) -> list:
    return [_i(f"i{i}", i, scalar=True) for i in indices] + [_i("ax", 0)]


def test_static_dims_of_a_partly_dynamic_shape_fold_to_constants() -> None:
    """x[1, T, 8] (batch 1, T dynamic): zeros of [2, batch, 16] (an LSTM state) get a constant shape,
    and Reshape(x, [batch, T*8]) a constant target [1, -1]."""
    nodes = _gathers("x", 0, 1, 2) + [
        mk("Concat", ["two", "u0", "c16"], ["zs"], axis=0), mk("ConstantOfShape", ["zs"], ["z"]),
        mk("ReduceSum", ["z"], ["zsum"], keepdims=0),
        mk("Mul", ["g1", "g2"], ["t8"]), mk("Unsqueeze", ["t8", "ax"], ["t8u"]),
        mk("Concat", ["u0", "t8u"], ["flat"], axis=0), mk("Reshape", ["x", "flat"], ["r"]),
        mk("Add", ["r", "zsum"], ["y"]),
    ]
    inits = _gather_inits(0, 1, 2) + [_i("two", 2), _i("c16", 16)]
    m, p = model(nodes, [vi("x", F, [1, "T", 8])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["constants"] >= 1 and result.stats["targets_folded"] == 1
    cos = next(n for n in m.graph if n.op == "ConstantOfShape")
    assert cos.inputs[0].const.numpy().tolist() == [2, 1, 16]
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [1, -1]
    assert not {"Shape", "Gather", "Concat", "Mul"} & set(ops(m))
    _check_sizes(p, m, [{"T": 3}, {"T": 11}])


def test_arithmetic_on_symbolic_dims() -> None:
    """[B*S, C] and [B, S, 4, C/4] targets from Mul and Div of gathered dims: [-1, 64] and [0, 0, 4, 16]."""
    nodes = _gathers("x", 0, 1, 2) + [
        mk("Mul", ["g0", "g1"], ["bs"]), mk("Unsqueeze", ["bs", "ax"], ["bsu"]),
        mk("Concat", ["bsu", "u2"], ["t1"], axis=0), mk("Reshape", ["x", "t1"], ["flat"]),
        mk("Div", ["g2", "four_s"], ["q"]), mk("Mul", ["q", "one_s"], ["q1"]), mk("Unsqueeze", ["q1", "ax"], ["qu"]),
        mk("Concat", ["u0", "u1", "four", "qu"], ["t2"], axis=0), mk("Reshape", ["x", "t2"], ["heads"]),
        mk("ReduceSum", ["heads", "red"], ["hs"], keepdims=0), mk("ReduceSum", ["flat"], ["fs"], keepdims=0),
        mk("Add", ["hs", "fs"], ["y"]),
    ]
    inits = _gather_inits(0, 1, 2) + [_i("four_s", 4, scalar=True), _i("one_s", 1, scalar=True), _i("four", 4),
                                      _i("red", 0, 1, 2, 3)]
    m, p = model(nodes, [vi("x", F, ["B", "S", 64])], [vi("y", F, None)], inits)
    _fold_twice(m)
    targets = [n.inputs[1].const.numpy().tolist() for n in m.graph if n.op == "Reshape"]
    assert sorted(targets) == [[-1, 64], [0, 0, 4, 16]]
    assert "Shape" not in ops(m)
    _check_sizes(p, m, [{"B": 1, "S": 5}, {"B": 3, "S": 2}])


def test_concat_of_a_shapes_own_pieces_becomes_one_shape_slice() -> None:
    """Reshape(h[B*S, 32], Concat(B, S, -1)) where h does not carry B and S: the target keeps reading
    the input's shape, as one Shape(x, end=2) instead of Shape, two Gathers and two Unsqueezes."""
    nodes = _gathers("x", 0, 1) + [
        mk("Concat", ["u0", "u1", "m1"], ["t"], axis=0),
        mk("Reshape", ["x", "flat"], ["h"]), mk("Relu", ["h"], ["hr"]), mk("Reshape", ["hr", "t"], ["y"]),
    ]
    inits = _gather_inits(0, 1) + [_i("m1", -1), _i("flat", -1, 32)]
    m, p = model(nodes, [vi("x", F, ["B", "S", 32])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["concats_regrouped"] == 1
    assert sorted(ops(m)) == ["Concat", "Relu", "Reshape", "Reshape", "Shape"]
    shape = next(n for n in m.graph if n.op == "Shape")
    assert shape.attr("end") == 2 and shape.attr("start", 0) == 0
    _check_sizes(p, m, [{"B": 2, "S": 3}, {"B": 5, "S": 1}])


def test_unsqueezed_dims_in_order_are_the_shape_itself() -> None:
    """Expand(ones[1], Concat(dims 1 and 2 of x)) -> Expand(ones, Shape(x, start=1))."""
    nodes = _gathers("x", 1, 2) + [mk("Concat", ["u1", "u2"], ["t"], axis=0), mk("Expand", ["one", "t"], ["e"]),
                                   mk("Add", ["e", "x"], ["y"])]
    inits = _gather_inits(1, 2) + [init("one", np.ones([1], np.float32))]
    m, p = model(nodes, [vi("x", F, [2, "H", "W"])], [vi("y", F, None)], inits)
    assert _fold_twice(m).stats["shape_slices"] >= 1
    (shape,) = [n for n in m.graph if n.op == "Shape"]
    assert shape.attr("start") == 1 and shape.attr("end") is None
    assert "Gather" not in ops(m) and "Concat" not in ops(m)
    _check_sizes(p, m, [{"H": 2, "W": 3}, {"H": 4, "W": 1}, {"H": 1, "W": 6}])


def test_equal_symbolic_values_are_one_value() -> None:
    """S*1 and S/1 are S: their readers read the Gather."""
    nodes = _gathers("x", 1) + [
        mk("Mul", ["g1", "one_s"], ["a"]), mk("Div", ["g1", "one_s"], ["b"]), mk("Add", ["a", "b"], ["ab"]),
        mk("Sub", ["ab", "g1"], ["c"]), mk("Cast", ["c"], ["cf"], to=F), mk("Mul", ["x", "cf"], ["y"]),
    ]
    inits = _gather_inits(1) + [_i("one_s", 1, scalar=True)]
    m, p = model(nodes, [vi("x", F, [2, "S"])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["vectors_merged"] >= 1
    assert ops(m).count("Mul") == 1 and "Div" not in ops(m) and "Sub" not in ops(m)
    _check_sizes(p, m, [{"S": 3}, {"S": 7}])


def test_a_dynamic_dim_is_never_made_constant() -> None:
    """Two dims unknown to each other (B and S) cannot both be -1: the glue stays, outputs unchanged."""
    nodes = _gathers("x", 0, 1) + [mk("Concat", ["u1", "u0"], ["t"], axis=0), mk("Reshape", ["x", "t"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["B", "S"])], [vi("y", F, None)], _gather_inits(0, 1))
    _fold_twice(m)
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const is None
    _check_sizes(p, m, [{"B": 2, "S": 3}, {"B": 4, "S": 1}])


def test_zero_initial_state_of_a_recurrent_layer_is_dropped() -> None:
    """GRU over x[T, B, 4] with initial_h = zeros([1, B, 6]) of a dynamic shape: the default state."""
    rng = np.random.default_rng(0)
    nodes = _gathers("x", 1) + [
        mk("Concat", ["one", "u1", "six"], ["hs"], axis=0), mk("ConstantOfShape", ["hs"], ["h0"]),
        mk("GRU", ["x", "w", "r", "b", "", "h0"], ["yseq", "y"], hidden_size=6),
    ]
    inits = _gather_inits(1) + [_i("one", 1), _i("six", 6),
                                init("w", rng.standard_normal([1, 18, 4]).astype(np.float32)),
                                init("r", rng.standard_normal([1, 18, 6]).astype(np.float32)),
                                init("b", rng.standard_normal([1, 36]).astype(np.float32))]
    m, p = model(nodes, [vi("x", F, ["T", "B", 4])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["rnn_states_dropped"] == 1
    gru = next(n for n in m.graph if n.op == "GRU")
    assert len(gru.inputs) == 4 and ops(m) == ["GRU"]
    _check_sizes(p, m, [{"T": 3, "B": 2}, {"T": 5, "B": 1}])


def test_a_nonzero_initial_state_stays() -> None:
    nodes = [mk("ConstantOfShape", ["hs"], ["h0"], value=helper.make_tensor("v", F, [1], [0.5])),
             mk("RNN", ["x", "w", "r", "", "", "h0"], ["yseq", "y"], hidden_size=3)]
    inits = [_i("hs", 1, 1, 3), init("w", np.ones([1, 3, 2], np.float32)), init("r", np.ones([1, 3, 3], np.float32))]
    m, p = model(nodes, [vi("x", F, ["T", 1, 2])], [vi("y", F, None)], inits)
    apply(m, "infer_shapes")
    assert apply(m, "fold_symbolic_shapes").stats["rnn_states_dropped"] == 0
    _check_sizes(p, m, [{"T": 2}, {"T": 4}])


def test_transpose_of_unit_dims_is_a_reshape() -> None:
    """[S, 1, B, 8] -> perm (0, 2, 1, 3) -> [S, B, 1, 8] moves only the 1: Reshape(x, [0, -1, 1, 8])."""
    nodes = [mk("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), mk("Relu", ["t"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["S", 1, "B", 8])], [vi("y", F, None)])
    result = _fold_twice(m)
    assert result.stats["transposes_to_reshape"] == 1
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [0, -1, 1, 8]
    _check_sizes(p, m, [{"S": 2, "B": 3}, {"S": 5, "B": 1}])
    # a Transpose that reorders two dims larger than 1 stays
    m2, _ = model([mk("Transpose", ["x"], ["y"], perm=[2, 1, 0, 3])], [vi("x", F, ["S", 1, "B", 8])], [vi("y", F, None)])
    apply(m2, "infer_shapes")
    assert not apply(m2, "fold_symbolic_shapes").changed


def test_size_range_and_where_on_shapes() -> None:
    """Size(x[2, S, 3]) / 6 is S; Range(0, S, 1) has shape [S]; Where(Equal(S, -1), 1, S) is S."""
    nodes = [
        mk("Size", ["x"], ["n"]), mk("Div", ["n", "six"], ["s"]),
        mk("Range", ["zero", "s", "one"], ["rng"]), mk("Shape", ["rng"], ["rs"]),
        mk("Equal", ["rs", "m1"], ["eq"]), mk("Where", ["eq", "onev", "rs"], ["w"]),
        mk("Concat", ["two", "w", "three"], ["t"], axis=0), mk("Reshape", ["x2", "t"], ["r"]),
        mk("Add", ["r", "x"], ["y"]),
    ]
    inits = [_i("six", 6, scalar=True), _i("zero", 0, scalar=True), _i("one", 1, scalar=True), _i("m1", -1),
             _i("onev", 1), _i("two", 2), _i("three", 3)]
    m, p = model(nodes, [vi("x", F, [2, "S", 3]), vi("x2", F, [6, "S"])], [vi("y", F, None)], inits)
    _fold_twice(m)
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [2, 0, 3]  # x2[6, S]: S is copied
    assert not {"Size", "Range", "Where", "Shape"} & set(ops(m))
    _check_sizes(p, m, [{"S": 1}, {"S": 4}])


def test_glue_inside_if_and_loop_bodies() -> None:
    """The same glue inside an If branch and a Loop body (reading the outer x) folds there too."""
    glue = [mk("Shape", ["x"], ["s_in"]), mk("Gather", ["s_in", "i0"], ["g_in"], axis=0),
            mk("Unsqueeze", ["g_in", "ax"], ["u_in"]), mk("Concat", ["u_in", "m1"], ["t_in"], axis=0)]
    then_g = helper.make_graph(glue + [mk("Reshape", ["x", "t_in"], ["then_out"])], "then", [],
                               [vi("then_out", F, [None, None])])
    else_g = helper.make_graph([mk("Neg", ["xflat"], ["else_out"])], "else", [], [vi("else_out", F, [None, None])])
    body = helper.make_graph(
        [mk("Identity", ["cond_in"], ["cond_out"])] + [helper.make_node(n.op_type, [i.replace("_in", "_b") if
                                                                          i.endswith("_in") else i for i in n.input],
                                                       [o.replace("_in", "_b") for o in n.output],
                                                       **{a.name: helper.get_attribute_value(a) for a in n.attribute})
                                      for n in glue]
        + [mk("Reshape", ["x", "t_b"], ["xr"]), mk("Add", ["acc_in", "xr"], ["acc_out"])],
        "body", [vi("iter", I64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F, [None, None])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [None, None])])
    nodes = [mk("Reshape", ["x", "flat"], ["xflat"]),
             mk("If", ["c"], ["yi"], then_branch=then_g, else_branch=else_g),
             mk("Loop", ["trips", "", "xflat"], ["yl"], body=body),
             mk("Add", ["yi", "yl"], ["y"])]
    inits = [_i("i0", 0, scalar=True), _i("ax", 0), _i("m1", -1), _i("flat", 0, -1), _i("trips", 3, scalar=True)]
    m, p = model(nodes, [vi("x", F, ["B", "S", 4]), vi("c", TensorProto.BOOL, [])], [vi("y", F, [None, None])],
                 inits)
    result = _fold_twice(m)
    assert result.stats["targets_folded"] == 2
    for node in m.graph:
        if node.op in ("If", "Loop"):
            for attr in node.attrs.values():
                for g in attr.value if isinstance(attr.value, list) else [attr.value]:
                    for inner in getattr(g, "__iter__", lambda: iter(()))():
                        assert inner.op != "Shape"
                        if inner.op == "Reshape":
                            assert inner.inputs[1].const.numpy().tolist() == [0, -1]
    for seed in range(4):  # both branches
        same_outputs(p, m, dims={"B": 2 + seed, "S": 3 - seed % 2}, seed=seed)


# ----- random shape glue: whatever the pass folds, every vector is what onnxruntime computes -----------------------
def _random_glue(rng: np.random.Generator):
    """A random chain of shape arithmetic over x[B, S, 6] (B, S dynamic); some vectors are outputs."""
    nodes, inits = [mk("Shape", ["x"], ["v0"]), mk("Shape", ["x"], ["v1"], start=1), mk("Size", ["x"], ["s0"])], []
    pool = [("v0", 3), ("v1", 2), ("s0", 0)]  # (name, length; 0 = scalar)
    count = 0

    def const(values, scalar=False) -> str:
        name = f"k{len(inits)}"
        inits.append(_i(name, *values, scalar=scalar))
        return name

    for _ in range(int(rng.integers(4, 12))):
        name, n = pool[int(rng.integers(len(pool)))]
        count += 1
        out = f"t{count}"
        kind = int(rng.integers(9))
        if kind == 0 and n:  # Gather: one index (scalar) or two
            if rng.random() < 0.5:
                nodes.append(mk("Gather", [name, const([int(rng.integers(-n, n))], scalar=True)], [out], axis=0))
                pool.append((out, 0))
            else:
                idx = [int(i) for i in rng.integers(-n, n, 2)]
                nodes.append(mk("Gather", [name, const(idx)], [out], axis=0))
                pool.append((out, 2))
        elif kind == 1 and not n:
            nodes.append(mk("Unsqueeze", [name, const([0])], [out]))
            pool.append((out, 1))
        elif kind == 2 and n:
            other, m = pool[int(rng.integers(len(pool)))]
            if m and n + m <= 6:
                nodes.append(mk("Concat", [name, other], [out], axis=0))
                pool.append((out, n + m))
        elif kind == 3 and n:
            start, end = sorted(int(i) for i in rng.integers(-n, n + 1, 2))
            if len(range(n)[slice(start, end)]):  # (length 0 would read as a scalar here)
                nodes.append(mk("Slice", [name, const([start]), const([end])], [out]))
                pool.append((out, len(range(n)[slice(start, end)])))
        elif kind == 4:
            op = ["Add", "Sub", "Mul", "Div", "Max", "Min"][int(rng.integers(6))]
            value = int(rng.integers(1, 5)) if op in ("Div", "Mul") else int(rng.integers(-3, 4))
            nodes.append(mk(op, [name, const([value], scalar=not n)], [out]))
            pool.append((out, n))
        elif kind == 5:
            same = [p for p in pool if p[1] == n]
            other = same[int(rng.integers(len(same)))][0]
            op = ["Add", "Sub", "Mul"][int(rng.integers(3))]
            nodes.append(mk(op, [name, other], [out]))
            pool.append((out, n))
        elif kind == 6:
            value = int(rng.integers(-1, 3))
            nodes += [mk("Equal", [name, const([value], scalar=not n)], [f"{out}_eq"]),
                      mk("Where", [f"{out}_eq", const([1], scalar=not n), name], [out])]
            pool.append((out, n))
        elif kind == 7:
            nodes += [mk("Cast", [name], [f"{out}_32"], to=TensorProto.INT32), mk("Cast", [f"{out}_32"], [out], to=I64)]
            pool.append((out, n))
        elif kind == 8 and not n:
            nodes += [mk("Range", [const([0], scalar=True), name, const([1], scalar=True)], [f"{out}_r"]),
                      mk("Shape", [f"{out}_r"], [out])]
            pool.append((out, 1))
    outputs = [p for p in pool[3:] if rng.random() < 0.6] or pool[-1:]
    for name, _ in outputs:
        nodes.append(mk("Identity", [name], [f"out_{name}"]))
    nodes.append(mk("Relu", ["x"], ["y"]))
    outs = [vi(f"out_{name}", I64, [n] if n else []) for name, n in outputs] + [vi("y", F, None)]
    return model(nodes, [vi("x", F, ["B", "S", 6])], outs, inits)


def test_random_shape_glue_folds_to_what_onnxruntime_computes() -> None:
    """Seeded random shape glue (Shape/Size/Gather/Slice/Concat/Unsqueeze, arithmetic with constants and
    between vectors, Equal+Where, Cast round trips, Range of a dim): after the pass (twice) every output
    vector equals onnxruntime's on the original at four (B, S) sizes, among them 1s (broadcasting edge)."""
    folded = 0
    for seed in range(60):
        m, p = _random_glue(np.random.default_rng(seed))
        result = _fold_twice(m)
        folded += sum(result.stats.values())
        _check_sizes(p, m, [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 4, "S": 3}, {"B": 3, "S": 1}])
    assert folded > 60  # the pass did fold most of them


def test_an_expand_that_broadcasts_stays() -> None:
    """Expand(x[B, 1, 8], Shape(z[B, S, 8])) makes [B, S, 8]: not x's shape, so it stays (target folded to
    [1, S...] is impossible: S is not x's), outputs equal at S = 1 too."""
    nodes = [mk("Shape", ["z"], ["s"]), mk("Expand", ["x", "s"], ["e"]), mk("Add", ["e", "z"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["B", 1, 8]), vi("z", F, ["B", "S", 8])], [vi("y", F, None)])
    _fold_twice(m)
    assert "Expand" in ops(m)
    _check_sizes(p, m, [{"B": 2, "S": 3}, {"B": 1, "S": 1}])


def test_a_concat_read_only_by_a_concat_is_flattened() -> None:
    """Resize sizes Concat([1, 2], Concat(h, w)) with h = 2H, w = 3W computed (w read elsewhere) ->
    one Concat([1, 2], h, w); outputs equal at two image sizes."""
    nodes = [mk("Shape", ["x"], ["s"], start=2), mk("Add", ["s", "s"], ["hw2"]), mk("Mul", ["s", "three"], ["hw3"]),
             mk("Slice", ["hw2", "z0", "z1"], ["h"]), mk("Slice", ["hw3", "z1", "z2"], ["w"]),
             mk("Concat", ["h", "w"], ["inner"], axis=0), mk("Shape", ["x"], ["nc"], end=2),
             mk("Concat", ["nc", "inner"], ["sizes"], axis=0),
             mk("Resize", ["x", "", "", "sizes"], ["r"], mode="nearest"),
             mk("Cast", ["w"], ["wf"], to=F), mk("Mul", ["r", "wf"], ["y"])]
    inits = [_i("z0", 0), _i("z1", 1), _i("z2", 2), _i("three", 3)]
    m, p = model(nodes, [vi("x", F, [1, 2, "H", "W"])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["concats_flattened"] == 1 and ops(m).count("Concat") == 1
    _check_sizes(p, m, [{"H": 2, "W": 3}, {"H": 5, "W": 1}])


def test_a_slice_to_a_tensors_own_length_is_gone() -> None:
    """x[:, :S] with S = x.shape[1] (a Slice to the dim's own length) is x; x[:, 1:S] and a reversing
    Slice (step -1, same shape) stay."""
    nodes = _gathers("x", 1) + [
        mk("Slice", ["x", "zero", "u1", "one"], ["a"]), mk("Slice", ["x", "one", "u1", "one"], ["b"]),
        mk("Slice", ["x", "m1", "lo", "one", "m1"], ["c"]),
        mk("ReduceSum", ["b", "one"], ["bs"], keepdims=1), mk("Add", ["a", "bs"], ["ab"]), mk("Mul", ["ab", "c"], ["y"])]
    inits = _gather_inits(1) + [_i("zero", 0), _i("one", 1), _i("m1", -1), _i("lo", -(2**62))]
    m, p = model(nodes, [vi("x", F, [2, "S", 3])], [vi("y", F, None)], inits)
    result = _fold_twice(m)
    assert result.stats["noops_removed"] == 1 and ops(m).count("Slice") == 2
    _check_sizes(p, m, [{"S": 2}, {"S": 5}])


def test_glue_inside_a_scan_body() -> None:
    """Scan over x[T, B, 2, 3]: the body reshapes its slice [B, 2, 3] by Concat(Gather(Shape(xt), 0), [-1])
    -> [0, -1] and adds it to the running sum; outputs equal at two (T, B) sizes."""
    body = helper.make_graph(
        [mk("Shape", ["xt"], ["s"]), mk("Gather", ["s", "i0"], ["b"], axis=0), mk("Unsqueeze", ["b", "ax"], ["bu"]),
         mk("Concat", ["bu", "m1"], ["t"], axis=0), mk("Reshape", ["xt", "t"], ["flat"]),
         mk("Add", ["acc", "flat"], ["acc_out"]), mk("Identity", ["flat"], ["scan_out"])],
        "body", [vi("acc", F, ["B", 6]), vi("xt", F, ["B", 2, 3])],
        [vi("acc_out", F, ["B", 6]), vi("scan_out", F, ["B", 6])],
        [_i("i0", 0, scalar=True), _i("ax", 0), _i("m1", -1)])
    nodes = [mk("Shape", ["x"], ["xs"]), mk("Gather", ["xs", "one"], ["bsz"], axis=0),
             mk("Unsqueeze", ["bsz", "ax0"], ["bszu"]), mk("Concat", ["bszu", "six"], ["zs"], axis=0),
             mk("ConstantOfShape", ["zs"], ["zeros"]),
             mk("Scan", ["zeros", "x"], ["total", "steps"], body=body, num_scan_inputs=1)]
    inits = [_i("one", 1, scalar=True), _i("ax0", 0), _i("six", 6)]
    m, p = model(nodes, [vi("x", F, ["T", "B", 2, 3])], [vi("total", F, ["B", 6]), vi("steps", F, ["T", "B", 6])],
                 inits)
    result = _fold_twice(m)
    assert result.stats["targets_folded"] == 1
    scan = next(n for n in m.graph if n.op == "Scan")
    inner = list(scan.attrs["body"].value)
    assert "Shape" not in [n.op for n in inner]
    assert next(n for n in inner if n.op == "Reshape").inputs[1].const.numpy().tolist() == [0, -1]
    _check_sizes(p, m, [{"T": 2, "B": 3}, {"T": 4, "B": 1}])
