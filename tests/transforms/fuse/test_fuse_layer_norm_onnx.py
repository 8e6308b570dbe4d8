"""fuse_layer_norm on hand-built graphs: every variant fuses and computes the same; refusals leave the graph alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import numpy_helper

from graphwright.errors import TransformError

from . import _graphs_onnx as graphs
from ._helpers_onnx import assert_same, fuse, ops

VARIANTS: dict[str, dict[str, Any]] = {
    "opset17_axes_attribute": {},
    "opset18_axes_input": {"opset": 18},
    "square_as_mul": {"square": "mul"},
    "mul_reciprocal": {"divide": False},
    "no_gamma": {"gamma": None},
    "no_beta": {"beta": None},
    "no_gamma_no_beta": {"gamma": None, "beta": None},
    "two_trailing_axes": {"axes": (1, 2), "gamma": (3, 8), "beta": (3, 8)},
    "positive_axis": {"axes": (2,)},
    "gamma_with_leading_ones": {"gamma": (1, 1, 8)},
    "scalar_gamma_broadcast": {"gamma": ()},
    "constant_nodes": {"constant_nodes": True, "opset": 18},
}


@pytest.mark.parametrize("kwargs", VARIANTS.values(), ids=VARIANTS.keys())
def test_variant_fuses_to_one_layer_normalization(kwargs: dict[str, Any]) -> None:
    before = graphs.layer_norm(**kwargs)
    after, result = fuse(before, "fuse_layer_norm")
    assert result.changed and result.stats["fused"] == 1
    fused_ops = ops(after)
    fused_ops.pop("Constant", None)  # γ/β as Constant nodes stay: the LayerNormalization reads them
    assert fused_ops == {"LayerNormalization": 1, "Identity": 1}
    assert ops(after)["Constant"] <= 2
    ln = next(n for n in after.graph.node if n.op_type == "LayerNormalization")
    attrs = {a.name: a for a in ln.attribute}
    assert attrs["axis"].i == -len(kwargs.get("axes", (-1,)))
    assert attrs["epsilon"].f == pytest.approx(1e-5)
    assert len(ln.input) == (2 if kwargs.get("beta", (8,)) is None else 3)
    # nothing the chain read is left behind (axes inputs, ε, 2)
    used = {i for n in after.graph.node for i in n.input}
    assert all(t.name in used for t in after.graph.initializer)
    assert_same(before, after)


def test_epsilon_and_parameters_are_carried_exactly() -> None:
    before = graphs.layer_norm(eps=1e-3)
    after, _ = fuse(before, "fuse_layer_norm")
    ln = next(n for n in after.graph.node if n.op_type == "LayerNormalization")
    assert ln.attribute[[a.name for a in ln.attribute].index("epsilon")].f == pytest.approx(1e-3)
    inits = {t.name: numpy_helper.to_array(t) for t in after.graph.initializer}
    orig = {t.name: numpy_helper.to_array(t) for t in before.graph.initializer}
    np.testing.assert_array_equal(inits[ln.input[1]], orig["g"])
    np.testing.assert_array_equal(inits[ln.input[2]], orig["b"])
    assert_same(before, after)


REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "opset_too_low": ({"opset": 16}, "opset 16 < 17"),
    "leading_axis": ({"axes": (0,), "gamma": None, "beta": None}, "not over the trailing axes"),
    "middle_axis": ({"axes": (1,), "gamma": None, "beta": None}, "not over the trailing axes"),
    "axes_differ": ({"axes": (-1,), "var_axes": (1, 2)}, "but variance over"),
    "shared_centred_value": ({"leak": "d"}, "outside the pattern"),
    "shared_std": ({"leak": "std"}, "outside the pattern"),
}


@pytest.mark.parametrize("kwargs,reason", REFUSALS.values(), ids=REFUSALS.keys())
def test_refusal_leaves_graph_unchanged_with_reason(kwargs: dict[str, Any], reason: str) -> None:
    before = graphs.layer_norm(**kwargs)
    after, result = fuse(before, "fuse_layer_norm")
    assert not result.changed and result.stats["fused"] == 0
    assert ops(after) == ops(before)
    assert any(reason in note for note in result.notes), result.notes
    assert_same(before, after)


def test_gamma_along_batch_keeps_the_affine_tail() -> None:
    before = graphs.layer_norm(gamma=(2, 1, 8))  # γ varies along the batch axis: only the bare form fuses
    after, result = fuse(before, "fuse_layer_norm")
    assert any("varies along axes that are not normalized" in note for note in result.notes)
    assert result.stats == {"layer_norm_bare": 1, "fused": 1}
    assert ops(after) == {"LayerNormalization": 1, "Mul": 1, "Add": 1, "Identity": 1}
    assert_same(before, after)


def test_exposed_normalized_value_fuses_only_the_bare_form() -> None:
    before = graphs.layer_norm(leak="n")  # (x-μ)/σ is also a graph output: γ and β can't be folded in
    after, result = fuse(before, "fuse_layer_norm")
    assert any("outside the pattern" in note for note in result.notes), result.notes
    assert result.stats == {"layer_norm_bare": 1, "fused": 1}
    assert ops(after) == {"LayerNormalization": 1, "Mul": 1, "Add": 1, "Identity": 2}
    assert_same(before, after)


def test_bad_target_is_an_error() -> None:
    with pytest.raises(TransformError, match="target must be one of standard, onnxruntime"):
        fuse(graphs.layer_norm(), "fuse_layer_norm", target="tensorrt")


def test_idempotent() -> None:
    once, _ = fuse(graphs.layer_norm(), "fuse_layer_norm")
    twice, result = fuse(once, "fuse_layer_norm")
    assert not result.changed and ops(twice) == ops(once)


@pytest.mark.parametrize("opset", [14, 16])
def test_onnxruntime_target_below_opset17_uses_onnxruntimes_own_layer_normalization(opset: int) -> None:
    """onnxruntime registers LayerNormalization in the default domain for opsets 1-16 (its own kernel)."""
    import onnx

    from graphwright.formats import onnx as onnx_format
    from graphwright.ir import check
    from graphwright.transforms import TransformContext, get

    before = graphs.layer_norm(opset=opset)
    model = onnx_format.from_proto(onnx.load_from_string(before.SerializeToString()), None)
    result = get("fuse_layer_norm").fn(model, TransformContext(), target="onnxruntime")
    check(model.graph)
    after = onnx_format.to_proto(model)
    assert result.stats["fused"] == 1
    assert ops(after) == {"LayerNormalization": 1, "Identity": 1}
    assert [(o.domain, o.version) for o in after.opset_import] == [("", opset)]  # the model is not converted
    with pytest.raises(onnx.checker.ValidationError, match="LayerNormalization"):
        onnx.checker.check_model(after)  # standard ONNX has no such op below 17: onnxruntime only
    assert_same(before, after)
