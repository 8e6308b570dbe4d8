"""sort_by_execution_order repairs a shuffled ONNX graph (checked on onnxruntime)."""

from __future__ import annotations

import random

import onnx

import graphwright as gw

from .._generic import _model, _outputs, _same


def test_sort_repairs_a_shuffled_onnx_graph() -> None:
    model = gw.load(_model("onnx_cnn"))
    nodes = list(model.graph)
    random.Random(0).shuffle(nodes)
    model.graph.sort(nodes)
    gw.transform(model, "sort_by_execution_order")
    onnx.checker.check_model(gw.formats.onnx.to_proto(model))
    _same(_outputs(_model("onnx_cnn")), _outputs(model))
