"""simplify ends with the operator fusions: standard ops by default, onnxruntime's contrib ops on request."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

import graphwright as gw
from graphwright.ir import DType, Graph, Model, Tensor, Value, check


@pytest.mark.slow
@pytest.mark.parametrize(("target", "expected_op"), [("standard", "LayerNormalization"),
                                                     ("onnxruntime", "Attention")])
def test_bert_fuses_for_the_chosen_target(target: str, expected_op: str) -> None:
    from tests.models import torch_onnx

    path = torch_onnx("bert").path
    model, report = gw.simplify(path, target=target, check_n=2)
    ops = Counter(n.op for n in model.graph)
    assert ops[expected_op] > 0
    assert report.check_ok
    onnx.checker.check_model(gw.formats.onnx.to_proto(model))
    if target == "standard":
        assert all(n.domain in ("", "ai.onnx") for n in model.graph)


def test_fusions_can_be_skipped_by_name() -> None:
    from tests.models import torch_onnx

    path = torch_onnx("bert").path
    model, _ = gw.simplify(path, target="onnxruntime", skip_optimizations=["fuse_ort_contrib"])
    ops = {n.op for n in model.graph}
    assert not ops & {"FusedMatMul", "BiasGelu"}
    assert "Gelu" in ops  # fuse_gelu still ran (com.microsoft::Gelu below opset 20)


def test_an_empty_graph_is_still_an_owner() -> None:
    g = Graph("onnx")
    c = g.add_initializer(Value("c", const=Tensor.from_numpy(np.ones(2, np.float32))))
    g.set_outputs([c])
    assert c.owner is g and c.dtype is DType.FLOAT32
    check(g)
    Model(g, "onnx")
