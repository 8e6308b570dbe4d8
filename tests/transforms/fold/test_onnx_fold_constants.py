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
