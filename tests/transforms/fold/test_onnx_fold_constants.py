"""onnx_fold_constants: a per-tensor limit and a total budget, both checked before anything is computed.

Before the budget, six ~1 GB ``ConstantOfShape`` results declared in ``value_info`` (each under the
1 GB per-tensor limit) were all computed, 5.4 GiB at peak, before the growth check refused them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphwright as gw
from graphwright.transforms import StepRunner
from graphwright.transforms.fold.onnx_fold_constants import DEFAULT_FOLD_BUDGET, fold_budget_for

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi
from ._bombs import CAP_SECONDS, node_names, onnx_bomb, run_capped


def test_six_declared_gigabyte_results_stay_unfolded_under_2_gib(tmp_path: Path) -> None:
    src, dst = tmp_path / "bomb.onnx", tmp_path / "out.onnx"
    onnx.save(onnx_bomb("value_info"), src)
    result, seconds = run_capped("simplify", src, dst)
    assert result.returncode == 0, result.stderr[-2000:]
    assert seconds < CAP_SECONDS
    (line,) = [line for line in result.stdout.splitlines() if "onnx_fold_constants:" in line]
    assert "left 6 node(s) unfolded, their results over the total budget of 256.0 MB (--fold-budget" in line
    assert "'bomb0' (ConstantOfShape, 953.7 MB)" in line and "and 3 more" in line
    assert {f"bomb{i}" for i in range(6)} <= node_names(dst)


def test_declared_shapes_do_not_hide_a_blow_up(tmp_path: Path) -> None:
    """A ``Range`` declared (falsely) to make 4 elements is sized from its constant inputs."""
    proto = onnx_bomb("range")
    proto.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.INT64, [4]))
    src, dst = tmp_path / "lie.onnx", tmp_path / "out.onnx"
    onnx.save(proto, src)
    result, _ = run_capped("simplify", src, dst, "--skip-shape-inference")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'bomb' (Range, 74.5 GB)" in result.stdout and "--size-limit" in result.stdout
    assert "bomb" in node_names(dst)


def _expands(count: int, n: int) -> onnx.ModelProto:
    """``count`` Expands of a scalar to ``n`` floats, each read by an Add of the input (so each is kept)."""
    nodes, outputs = [], []
    inits = [numpy_helper.from_array(np.array([n], np.int64), "shape")]
    for i in range(count):
        inits.append(numpy_helper.from_array(np.array([i + 1.0], np.float32), f"fill{i}"))
        nodes.append(helper.make_node("Expand", [f"fill{i}", "shape"], [f"e{i}"], name=f"expand{i}"))
        nodes.append(helper.make_node("Add", ["x", f"e{i}"], [f"y{i}"], name=f"add{i}"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [n]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fold(proto: onnx.ModelProto, **kwargs: object) -> tuple[gw.ir.Model, object]:
    model = gw.formats.onnx.load(Path("m.onnx"), proto.SerializeToString())
    step = StepRunner(model).run("onnx_fold_constants", dict(kwargs))
    return model, step


def test_budget_stops_folding_in_graph_order_and_names_the_first_refused() -> None:
    model, step = _fold(_expands(4, 1000), fold_budget=10_000, growth_limit=1 << 20)  # 4000 B each: two fit
    ops = [node.op for node in model.graph]
    assert ops.count("Expand") == 2
    (note,) = step.notes
    assert note == ("left 2 node(s) unfolded, their results over the total budget of 9.8 KB "
                    "(--fold-budget / fold_budget): 'expand2' (Expand, 3.9 KB), 'expand3' (Expand, 3.9 KB)")
    model, step = _fold(_expands(4, 1000), growth_limit=1 << 20)
    assert [node.op for node in model.graph].count("Expand") == 0 and step.notes == []


def test_per_tensor_limit_names_size_limit() -> None:
    model, step = _fold(_expands(1, 1000), size_limit=1000, growth_limit=1 << 20)
    assert [node.op for node in model.graph] == ["Expand", "Add"]
    assert step.notes == ["left 1 node(s) unfolded, their results larger than 1000 B (--size-limit / size_limit): "
                          "'expand0' (Expand, 3.9 KB)"]


def test_default_budget_grows_with_the_model_weights() -> None:
    model = gw.formats.onnx.load(Path("m.onnx"), _expands(1, 10).SerializeToString())
    assert fold_budget_for(model.graph) == DEFAULT_FOLD_BUDGET + 4 + 8


# hand-built graphs, checked on onnxruntime

mk = helper.make_node


def _glue_model(batch: int | str = 2):
    """x[B, 3, 4] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) -> Relu."""
    nodes = [
        mk("Shape", ["x"], ["s"]),
        mk("Gather", ["s", "zero"], ["b"], axis=0),
        mk("Unsqueeze", ["b", "axes0"], ["bu"]),
        mk("Concat", ["bu", "minus1"], ["target"], axis=0),
        mk("Reshape", ["x", "target"], ["r"]),
        mk("Relu", ["r"], ["y"]),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("axes0", np.array([0], np.int64)),
             init("minus1", np.array([-1], np.int64))]
    return model(nodes, [vi("x", F, [batch, 3, 4])], [vi("y", F, None)], inits)


def test_shape_glue_folds_when_dims_are_static() -> None:
    m, p = _glue_model(2)
    apply(m, "infer_shapes")
    result = apply(m, "onnx_fold_constants")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["Reshape", "Relu"]
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const.numpy().tolist() == [2, -1]
    assert result.stats["sessions"] == 0  # integer glue runs in NumPy
    same_outputs(p, m)


def test_shape_glue_stays_when_dims_are_dynamic() -> None:
    m, _ = _glue_model("B")
    apply(m, "infer_shapes")
    apply(m, "onnx_fold_constants")
    assert "Shape" in ops(m)


def test_float_subgraph_folds_in_one_onnxruntime_session() -> None:
    nodes = [
        mk("Sqrt", ["k"], ["k1"]),
        mk("Exp", ["k1"], ["k2"]),
        mk("Transpose", ["w"], ["wt"], perm=[1, 0]),
        mk("MatMul", ["x", "wt"], ["h"]),
        mk("Mul", ["h", "k2"], ["y"]),
    ]
    inits = [init("k", np.array([2.0], np.float32)), init("w", np.arange(12, dtype=np.float32).reshape(4, 3))]
    m, p = model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 4])], inits)
    result = apply(m, "onnx_fold_constants")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["MatMul", "Mul"]
    assert result.stats["sessions"] == 1
    assert len(m.graph.initializers) == 2  # w^T and exp(sqrt(2)); k and w are gone
    same_outputs(p, m)


def test_constant_nodes_become_initializers_but_constant_outputs_stay_nodes() -> None:
    const = helper.make_tensor("c", F, [2], [1.0, 2.0])
    nodes = [mk("Constant", [], ["c"], value=const), mk("Add", ["x", "c"], ["y"]),
             mk("Constant", [], ["z"], value=helper.make_tensor("z", F, [1], [5.0]))]
    m, p = model(nodes, [vi("x", F, [2])], [vi("y", F, [2]), vi("z", F, [1])])
    apply(m, "onnx_fold_constants")
    assert ops(m) == ["Add", "Constant"]
    assert [v.name for v in m.graph.outputs] == ["y", "z"]
    same_outputs(p, m)


def test_non_deterministic_and_quantization_ops_are_never_folded() -> None:
    nodes = [
        mk("RandomNormalLike", ["k"], ["r"], seed=1.0),
        mk("QuantizeLinear", ["k", "scale", "zp"], ["q"]),
        mk("DequantizeLinear", ["q", "scale", "zp"], ["dq"]),
        mk("Add", ["x", "dq"], ["y"]),
        mk("Add", ["x", "r"], ["y2"]),
    ]
    inits = [init("k", np.ones([2], np.float32)), init("scale", np.array(0.5, np.float32)),
             init("zp", np.array(0, np.uint8))]
    m, _ = model(nodes, [vi("x", F, [2])], [vi("y", F, [2]), vi("y2", F, [2])], inits)
    result = apply(m, "onnx_fold_constants")
    assert not result.changed
    assert sorted(ops(m)) == ["Add", "Add", "DequantizeLinear", "QuantizeLinear", "RandomNormalLike"]


def test_blow_ups_stay_unfolded() -> None:
    """ConstantOfShape / Tile / Expand to 64 MB from a few bytes, and Transpose of a shared weight."""
    big = np.array([4096, 4096], np.int64)
    nodes = [
        mk("ConstantOfShape", ["big"], ["zeros"]),
        mk("Add", ["x", "zeros"], ["y1"]),
        mk("Tile", ["small", "reps"], ["tiled"]),
        mk("Add", ["x", "tiled"], ["y2"]),
        mk("Expand", ["small", "big"], ["wide"]),
        mk("Add", ["x", "wide"], ["y3"]),
        mk("Transpose", ["w"], ["wt"], perm=[1, 0]),
        mk("MatMul", ["v", "wt"], ["y4"]),
        mk("MatMul", ["v", "w"], ["y5"]),
    ]
    inits = [init("big", big), init("small", np.ones([1, 1], np.float32)), init("reps", big),
             init("w", np.ones([1024, 1024], np.float32))]
    m, _ = model(nodes, [vi("x", F, [4096, 4096]), vi("v", F, [1, 1024])],
                 [vi(n, F, None) for n in ("y1", "y2", "y3", "y4", "y5")], inits)
    apply(m, "infer_shapes")
    result = apply(m, "onnx_fold_constants")
    assert sorted(ops(m)).count("Transpose") == 1
    assert {"ConstantOfShape", "Tile", "Expand"} <= set(ops(m))
    assert result.stats["refused_large"] >= 4
    assert max(v.const.nbytes for v in m.graph.initializers) <= 4 * 1024 * 1024


def test_size_limit_parameter_refuses_small_tensors_too() -> None:
    nodes = [mk("ConstantOfShape", ["shape"], ["zeros"]), mk("Add", ["x", "zeros"], ["y"])]
    m, p = model(nodes, [vi("x", F, [16, 16])], [vi("y", F, [16, 16])], [init("shape", np.array([16, 16], np.int64))])
    apply(m, "infer_shapes")
    apply(m, "onnx_fold_constants", size_limit=512)
    assert "ConstantOfShape" in ops(m)  # 1 KB > 512 B
    apply(m, "onnx_fold_constants")
    assert ops(m) == ["Add"]
    same_outputs(p, m)


def test_initializer_that_is_a_graph_input_is_not_folded() -> None:
    nodes = [mk("Neg", ["k"], ["nk"]), mk("Add", ["x", "nk"], ["y"])]
    m, _p = model(nodes, [vi("x", F, [2]), vi("k", F, [2])], [vi("y", F, [2])],
                 [init("k", np.ones([2], np.float32))])
    result = apply(m, "onnx_fold_constants")
    assert not result.changed and ops(m) == ["Neg", "Add"]


def test_custom_ops_are_kept_and_inference_goes_past_them() -> None:
    nodes = [mk("MyOp", ["x"], ["c"], domain="custom.domain"), mk("Shape", ["c"], ["s"]),
             mk("Cast", ["s"], ["y"], to=F), mk("Relu", ["c"], ["r"])]
    p_nodes = helper.make_graph(nodes, "g", [vi("x", F, [2, 3])], [vi("y", F, None), vi("r", F, None)],
                                value_info=[vi("c", F, [2, 3])])
    p = helper.make_model(p_nodes, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.domain", 1)],
                          ir_version=8)
    from graphwright.formats import onnx as onnx_format

    m = onnx_format.from_proto(p, None)
    apply(m, "infer_shapes")
    apply(m, "onnx_fold_constants")
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["MyOp", "Constant", "Relu"]  # the folded Cast is a constant graph output
    assert m.graph.outputs[1].shape == (2, 3)  # typed past the custom op
    assert m.graph.outputs[0].producer.attrs["value"].value.numpy().tolist() == [2.0, 3.0]


def test_folding_inside_loop_body_and_if_branches() -> None:
    then_g = helper.make_graph([mk("Sqrt", ["k"], ["t"]), mk("Add", ["x", "t"], ["then_out"])], "then", [],
                               [vi("then_out", F, [2])])
    else_g = helper.make_graph([mk("Neg", ["x"], ["else_out"])], "else", [], [vi("else_out", F, [2])])
    nodes = [mk("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    m, p = model(nodes, [vi("x", F, [2]), vi("cond", TensorProto.BOOL, [])], [vi("y", F, [2])],
                 [init("k", np.array([4.0, 9.0], np.float32))])
    result = apply(m, "onnx_fold_constants")
    assert result.changed
    branch = next(iter(m.graph)).attrs["then_branch"].value
    assert [n.op for n in branch] == ["Add"]
    same_outputs(p, m)
