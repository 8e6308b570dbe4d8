"""Generic transforms on real frozen Keras graphs: TensorFlow runs the result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

from ._generic import _case, _feeds, _ours

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")


ACCEPTANCE = ("strip_unused_nodes sort_by_execution_order remove_nodes(op=Identity) "
              "merge_duplicate_nodes round_weights(num_steps=256)")


@pytest.mark.parametrize("transforms", [
    "strip_unused_nodes",
    "sort_by_execution_order",
    "remove_nodes(op=Identity)",
    "merge_duplicate_nodes",
    "remove_control_dependencies",
    "obfuscate_names",
    "remove_device",
    'set_device(device="/device:CPU:0")',
    "rename_attribute(old_attribute_name=data_format, new_attribute_name=data_format)",
    "strip_unused_nodes remove_nodes(op=Identity) merge_duplicate_nodes sort_by_execution_order",
])
def test_lossless_transforms_keep_outputs_and_match_original_tool(transforms: str) -> None:
    path, inputs, outputs = _case("example")
    ours = _ours(path, transforms, list(inputs), outputs)
    theirs = oracle.original_tool(path.read_bytes(), list(inputs), outputs, transforms)
    feeds = _feeds(inputs)
    expected = oracle.run_graphdef(path.read_bytes(), feeds, outputs)
    got = oracle.run_graphdef(ours, feeds, outputs)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert oracle.op_histogram(ours) == oracle.op_histogram(theirs)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["resnet50", "mobilenet_v2"])
def test_acceptance_pipeline_on_keras_graphs(kind: str) -> None:
    path, inputs, outputs = _case(kind)
    ours_bytes = _ours(path, ACCEPTANCE, list(inputs), outputs)
    theirs_bytes = oracle.original_tool(path.read_bytes(), list(inputs), outputs, ACCEPTANCE)
    assert sum(oracle.op_histogram(ours_bytes).values()) == sum(oracle.op_histogram(theirs_bytes).values())
    assert oracle.op_histogram(ours_bytes) == oracle.op_histogram(theirs_bytes)
    feeds = _feeds(inputs)
    original = oracle.run_graphdef(path.read_bytes(), feeds, outputs)
    ours = oracle.run_graphdef(ours_bytes, feeds, outputs)
    theirs = oracle.run_graphdef(theirs_bytes, feeds, outputs)
    for o, a, b in zip(original, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # same rounding as the original tool
        assert np.abs(a - o).max() <= 0.05 * np.abs(o).max()  # round_weights' own loss stays small
    exact = ACCEPTANCE.replace(" round_weights(num_steps=256)", "")
    lossless = oracle.run_graphdef(_ours(path, exact, list(inputs), outputs), feeds, outputs)
    for o, a in zip(original, lossless):
        np.testing.assert_allclose(a, o, rtol=1e-5, atol=1e-6)
