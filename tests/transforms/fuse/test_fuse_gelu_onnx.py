"""fuse_gelu on hand-built graphs: erf and tanh forms, every grouping, both targets; refusals."""

from __future__ import annotations

from typing import Any

import pytest

from . import _graphs_onnx as graphs
from ._helpers_onnx import assert_same, fuse, ops

FORMS: dict[str, dict[str, Any]] = {
    "erf_div_grouping0": {},
    "erf_div_grouping1": {"form": 1},
    "erf_div_grouping2_swapped": {"form": 2, "swap": True},
    "erf_mul_inv_sqrt2": {"divide": False},
    "erf_mul_inv_sqrt2_grouping2": {"divide": False, "form": 2},
    "tanh_pow_grouping0": {"tanh": True},
    "tanh_pow_grouping1": {"tanh": True, "form": 1},
    "tanh_pow_grouping2": {"tanh": True, "form": 2},
    "tanh_cube_as_muls": {"tanh": True, "cube": "mul", "form": 2},
}


@pytest.mark.parametrize("kwargs", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
def test_opset20_emits_standard_gelu(kwargs: dict[str, Any], target: str) -> None:
    before = graphs.gelu(20, **kwargs)
    after, result = fuse(before, "fuse_gelu", target=target)
    assert result.changed and result.stats["fused"] == 1
    assert ops(after) == {"Gelu": 1}
    (gelu,) = after.graph.node
    assert gelu.attribute[0].name == "approximate"
    assert gelu.attribute[0].s == (b"tanh" if kwargs.get("tanh") else b"none")
    assert not after.graph.initializer  # every constant of the chain is gone
    assert [(o.domain, o.version) for o in after.opset_import] == [("", 20)]
    assert_same(before, after)


@pytest.mark.parametrize("kwargs", FORMS.values(), ids=FORMS.keys())
def test_opset17_onnxruntime_emits_contrib_gelu(kwargs: dict[str, Any]) -> None:
    before = graphs.gelu(17, **kwargs)
    after, result = fuse(before, "fuse_gelu", target="onnxruntime")
    assert result.changed
    assert ops(after) == {("com.microsoft::FastGelu" if kwargs.get("tanh") else "com.microsoft::Gelu"): 1}
    assert ("com.microsoft", 1) in [(o.domain, o.version) for o in after.opset_import]
    assert_same(before, after)


REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "opset_too_low_standard": ({}, "opset 17 < 20"),
    "wrong_half": ({"opset": 20, "half": 0.6}, "constant half is not 0.5"),
    "shared_erf": ({"opset": 20, "leak": "t"}, "outside the pattern"),
    "shared_tanh_inner": ({"opset": 20, "tanh": True, "leak": "inner"}, "outside the pattern"),
}


@pytest.mark.parametrize("kwargs,reason", REFUSALS.values(), ids=REFUSALS.keys())
def test_refusal_leaves_graph_unchanged_with_reason(kwargs: dict[str, Any], reason: str) -> None:
    kwargs = dict(kwargs)
    before = graphs.gelu(kwargs.pop("opset", 17), **kwargs)
    after, result = fuse(before, "fuse_gelu")
    assert not result.changed and result.stats["fused"] == 0
    assert ops(after) == ops(before)
    assert any(reason in note for note in result.notes), result.notes
    assert_same(before, after)


def test_contrib_refused_for_float64_input() -> None:
    import numpy as np
    from onnx import TensorProto, numpy_helper

    before = graphs.gelu(17)
    for t in before.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for v in list(before.graph.input) + list(before.graph.output):
        v.type.tensor_type.elem_type = TensorProto.DOUBLE
    after, result = fuse(before, "fuse_gelu", target="onnxruntime")
    assert not result.changed and ops(after) == ops(before)
    assert any("float32" in note for note in result.notes), result.notes
