"""Elimination passes and shape-chain merging on hand-built graphs, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ._build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def test_identity_and_inference_dropout_go_and_output_names_stay() -> None:
    nodes = [mk("Relu", ["x"], ["h"]), mk("Identity", ["h"], ["i"]), mk("Dropout", ["i"], ["d"]),
             mk("Identity", ["d"], ["y"])]
    m, p = model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    result = apply(m, "eliminate_identity")
    assert ops(m) == ["Relu"]
    assert result.stats == {"identity_removed": 2, "dropout_removed": 1}
    assert [v.name for v in m.graph.outputs] == ["y"] and m.graph.outputs[0].producer.op == "Relu"
    same_outputs(p, m)


def test_identity_between_graph_input_and_output_stays() -> None:
    m, _ = model([mk("Identity", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])])
    assert not apply(m, "eliminate_identity").changed and ops(m) == ["Identity"]


def test_dropout_whose_mask_is_read_stays() -> None:
    nodes = [mk("Dropout", ["x"], ["d", "mask"])]
    m, _ = model(nodes, [vi("x", F, [2])], [vi("d", F, [2]), vi("mask", TensorProto.BOOL, [2])])
    assert not apply(m, "eliminate_identity").changed


NOPS = [
    ("Mul", ["x", "one"], {}, {"one": np.ones([3], np.float32)}),                  # x*1
    ("Mul", ["one", "x"], {}, {"one": np.ones([1, 3], np.float32)}),               # 1*x
    ("Add", ["x", "zero"], {}, {"zero": np.zeros([], np.float32)}),                # x+0
    ("Sub", ["x", "zero"], {}, {"zero": np.zeros([1], np.float32)}),               # x-0
    ("Div", ["x", "one"], {}, {"one": np.ones([], np.float32)}),                   # x/1
    ("Pow", ["x", "one"], {}, {"one": np.ones([], np.float32)}),                   # x**1
    ("Reshape", ["x", "shape"], {}, {"shape": np.array([0, -1], np.int64)}),       # same shape
    ("Cast", ["x"], {"to": TensorProto.FLOAT}, {}),
    ("Transpose", ["x"], {"perm": [0, 1]}, {}),
    ("Slice", ["x", "s", "e"], {}, {"s": np.array([0], np.int64), "e": np.array([2**63 - 1], np.int64)}),
    ("Pad", ["x", "pads"], {}, {"pads": np.zeros([4], np.int64)}),
    ("Expand", ["x", "shape"], {}, {"shape": np.array([1, 3], np.int64)}),
    ("Concat", ["x"], {"axis": 0}, {}),
    ("Flatten", ["x"], {"axis": 1}, {}),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "consts"), NOPS, ids=[f"{n[0]}-{i}" for i, n in enumerate(NOPS)])
def test_nop_is_removed(op: str, inputs: list[str], attrs: dict, consts: dict) -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk(op, inputs, ["n"], **attrs), mk("Neg", ["n"], ["y"])]
    m, p = model(nodes, [vi("a", F, [2, 3])], [vi("y", F, [2, 3])], [init(k, v) for k, v in consts.items()])
    apply(m, "infer_shapes")
    result = apply(m, "eliminate_nop")
    assert result.changed and ops(m) == ["Relu", "Neg"]
    same_outputs(p, m)


KEPT = [
    ("Mul", ["x", "one"], {"one": np.ones([2, 2, 3], np.float32)}),   # broadcasting adds a dim
    ("Add", ["x", "zero"], {"zero": np.zeros([4, 1, 1], np.float32)}),  # broadcasting grows the shape
    ("Mul", ["x", "two"], {"two": np.full([3], 2.0, np.float32)}),     # not a unit
    ("Sub", ["zero", "x"], {"zero": np.zeros([3], np.float32)}),       # 0-x is -x
    ("Reshape", ["x", "shape"], {"shape": np.array([3, 2], np.int64)}),
    ("Slice", ["x", "s", "e"], {"s": np.array([0], np.int64), "e": np.array([1], np.int64)}),
]


@pytest.mark.parametrize(("op", "inputs", "consts"), KEPT, ids=[f"{k[0]}-{i}" for i, k in enumerate(KEPT)])
def test_look_alike_that_is_not_a_nop_stays(op: str, inputs: list[str], consts: dict) -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk(op, inputs, ["y"])]
    m, p = model(nodes, [vi("a", F, [2, 3])], [vi("y", F, None)], [init(k, v) for k, v in consts.items()])
    apply(m, "infer_shapes")
    assert not apply(m, "eliminate_nop").changed
    same_outputs(p, m)


def test_skip_turns_a_rule_off_and_unknown_rules_are_errors() -> None:
    nodes = [mk("Relu", ["a"], ["x"]), mk("Cast", ["x"], ["y"], to=TensorProto.FLOAT)]
    m, _ = model(nodes, [vi("a", F, [2])], [vi("y", F, [2])])
    apply(m, "infer_shapes")
    assert not apply(m, "eliminate_nop", skip=["eliminate_nop_cast"]).changed
    from graphwright.errors import TransformError

    with pytest.raises(TransformError, match="unknown rule 'nope'"):
        apply(m, "eliminate_nop", skip=["nope"])


def test_dead_code_and_unused_initializers_go_graph_inputs_stay() -> None:
    nodes = [mk("Relu", ["x"], ["h"]), mk("Sigmoid", ["h"], ["dead"]), mk("Neg", ["dead"], ["dead2"]),
             mk("Tanh", ["h"], ["y"])]
    m, p = model(nodes, [vi("x", F, [2]), vi("unused", F, [2])], [vi("y", F, [2])],
                 [init("w", np.ones([2], np.float32))])
    result = apply(m, "eliminate_dead_code")
    assert ops(m) == ["Relu", "Tanh"] and result.stats == {"nodes_removed": 2, "initializers_removed": 1}
    assert [v.name for v in m.graph.inputs] == ["x", "unused"]
    same_outputs(p, m)


def test_consecutive_transposes_compose_and_vanish_when_identity() -> None:
    nodes = [mk("Transpose", ["x"], ["t1"], perm=[1, 2, 0]), mk("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             mk("Transpose", ["t2"], ["y"], perm=[1, 0, 2]), mk("Transpose", ["x"], ["u1"], perm=[2, 0, 1]),
             mk("Transpose", ["u1"], ["u2"], perm=[1, 2, 0]), mk("Relu", ["u2"], ["z"])]
    m, p = model(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, None), vi("z", F, None)])
    apply(m, "infer_shapes")
    apply(m, "fuse_consecutive_transposes")
    apply(m, "eliminate_dead_code")
    # y = x itself, but a graph input cannot be renamed to the output's name: one identity Transpose stays
    assert ops(m) == ["Transpose", "Relu"]
    assert list(next(iter(m.graph)).attrs["perm"].value) == [0, 1, 2]
    same_outputs(p, m)


def test_reshape_chains_become_one_reshape() -> None:
    nodes = [mk("Unsqueeze", ["x", "ax"], ["a"]), mk("Flatten", ["a"], ["b"], axis=2),
             mk("Reshape", ["b", "shape"], ["c"]), mk("Squeeze", ["c", "ax"], ["y"])]
    m, p = model(nodes, [vi("x", F, ["N", 6])], [vi("y", F, None)],
                 [init("ax", np.array([1], np.int64)), init("shape", np.array([0, 1, 2, 3], np.int64))])
    apply(m, "infer_shapes")
    apply(m, "fuse_consecutive_reshapes")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["Reshape"]
    same_outputs(p, m, dims={"N": 3})
    same_outputs(p, m, dims={"N": 5}, seed=1)


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
    for seed, dims in enumerate(({"B": 1, "S": 7}, {"B": 3, "S": 2})):
        same_outputs(p, m, dims=dims, seed=seed)


def test_passes_recurse_into_loop_bodies() -> None:
    """Loop body: acc' = acc + Identity(x) * Sqrt(k) with k constant -> acc + x * c."""
    body = helper.make_graph(
        [mk("Identity", ["x"], ["xi"]), mk("Sqrt", ["k"], ["sk"]), mk("Mul", ["xi", "sk"], ["t"]),
         mk("Add", ["acc", "t"], ["acc_out"]), mk("Identity", ["cond"], ["cond_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", F, [3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [3])],
    )
    nodes = [mk("Loop", ["n", "", "acc0"], ["y"], body=body)]
    m, p = model(nodes, [vi("x", F, [3]), vi("acc0", F, [3])], [vi("y", F, [3])],
                 [init("n", np.array(4, np.int64)), init("k", np.array([4.0], np.float32))])
    from graphwright.simplify import simplify

    simplify(m)
    inner = next(iter(m.graph)).attrs["body"].value
    assert sorted(n.op for n in inner) == ["Add", "Identity", "Mul"]  # cond passthrough keeps its output name
    same_outputs(p, m)
