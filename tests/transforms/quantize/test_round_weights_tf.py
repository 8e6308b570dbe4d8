"""round_weights on a frozen GraphDef: TensorFlow runs the result, the original tool is the yardstick."""

from __future__ import annotations

import numpy as np
import pytest

from .._generic import _case, _feeds, _ours

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")


def test_round_weights_matches_original_tool_values() -> None:
    path, inputs, outputs = _case("example")
    t = "round_weights(num_steps=16)"
    ours = oracle.run_graphdef(_ours(path, t, list(inputs), outputs), _feeds(inputs), outputs)
    theirs = oracle.run_graphdef(oracle.original_tool(path.read_bytes(), list(inputs), outputs, t),
                                 _feeds(inputs), outputs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
