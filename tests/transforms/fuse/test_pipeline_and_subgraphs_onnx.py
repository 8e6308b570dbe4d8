"""The fusions through the GTT pipeline grammar, inside If bodies, and the exported name tuple."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from graphwright.formats import onnx as onnx_format
from graphwright.simplify.passes import ONNX_FUSIONS
from graphwright.transforms import get
from graphwright.transforms.runner import run_pipeline

from . import _graphs_onnx as graphs
from ._helpers_onnx import F, assert_same, fuse, ops, run, vi


def test_every_name_in_onnx_fusions_is_registered_with_a_target_parameter() -> None:
    for name in ONNX_FUSIONS:
        spec = get(name)
        assert spec.param_names() == ["target"] and spec.dialects == frozenset({"onnx"})


def test_pipeline_string_with_target() -> None:
    before = graphs.gelu(17, tanh=True)
    model = onnx_format.from_proto(onnx.load_from_string(before.SerializeToString()), None)
    report = run_pipeline(model, "fuse_layer_norm(target=onnxruntime) fuse_gelu(target=onnxruntime)")
    assert report.changed
    after = onnx_format.to_proto(model)
    onnx.checker.check_model(after)
    assert ops(after) == {"com.microsoft::FastGelu": 1}
    assert_same(before, after)


def test_gelu_inside_if_branches_fuses() -> None:
    body = graphs.gelu(20).graph
    then_g = helper.make_graph(list(body.node), "then", [], [vi("y", [2, 5])], list(body.initializer))
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"], name="id")], "else", [],
                               [vi("y2", [2, 5])])
    cond = helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g, name="if")
    graph = helper.make_graph([cond], "g", [vi("c", [], onnx.TensorProto.BOOL), vi("x", [2, 5], F)], [vi("out", [2, 5])])
    before = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    onnx.checker.check_model(before)
    after, result = fuse(before, "fuse_gelu")
    assert result.stats["fused"] == 1
    then_after = next(a.g for a in after.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then_after.node] == ["Gelu"]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_allclose(run(after, feeds)[0], run(before, feeds)[0], rtol=1e-5, atol=1e-6)
