"""The step runner: the structural check after every step, ignore_errors, a transform refused
for a format it does not apply to."""

from __future__ import annotations

import pytest

import graphwright as gw
from graphwright.errors import TransformError
from graphwright.ir import Model, Value
from graphwright.transforms import TransformResult, registry, run_pipeline, transform

from ._generic import _apply, _model, tf_graph


def test_ignore_errors_skips_only_that_step() -> None:
    model, _ = tf_graph()
    report = run_pipeline(model, "rename_node(old_node_name=nope, new_node_name=x, ignore_errors=true) "
                                 "remove_nodes(op=Identity)", outputs=["out"])
    assert report.steps[0].skipped_error and "no node named 'nope'" in report.steps[0].skipped_error
    assert report.steps[1].changed
    with pytest.raises(TransformError, match="no node named 'nope'"):
        run_pipeline(model, "rename_node(old_node_name=nope, new_node_name=x)", outputs=["out"])


def test_structural_check_catches_a_transform_that_breaks_the_graph() -> None:
    @transform("test_breaks_graph", dialects={"tf"})
    def breaks(model: Model, ctx) -> TransformResult:
        """Point a node at a value nothing defines."""
        next(iter(model.graph)).set_inputs([Value("ghost")])
        return TransformResult(True)

    try:
        model, _ = tf_graph()
        with pytest.raises(TransformError, match=r"test_breaks_graph left the graph inconsistent.*ghost"):
            run_pipeline(model, "test_breaks_graph", outputs=["out"])
    finally:
        registry._REGISTRY.pop("test_breaks_graph", None)


def test_tflite_rejects_what_it_does_not_have() -> None:
    with pytest.raises(gw.TransformError, match="does not apply to TFLite"):
        _apply(_model("tflite_int8"), "rename_attribute(old_attribute_name=a, new_attribute_name=b)")
