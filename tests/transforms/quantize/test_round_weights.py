"""round_weights: a bounded number of levels and a bounded error, on hand-built and real models."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright.ir import Node, constant_value
from graphwright.transforms import run_pipeline

from .._generic import _apply, _model, _outputs, tf_const, tf_graph


def test_round_weights_levels_and_error_bound() -> None:
    model, n = tf_graph()
    rng = np.random.default_rng(0)
    original = rng.standard_normal(1000).astype(np.float32)
    big = model.graph.append(tf_const("big", original))
    model.graph.append(Node("Identity", [big.output], dialect="tf", name="big_out"))
    old_tensor = constant_value(big.output)
    run_pipeline(model, "round_weights(num_steps=16)", outputs=["out", "big_out"])
    new = constant_value(big.output).numpy()
    assert old_tensor.numpy().tolist() == original.tolist()  # shared tensors are never mutated
    assert len(np.unique(new)) <= 17
    step = (original.max() - original.min()) / 16
    assert np.abs(new - original).max() <= step / 2 + 1e-6
    small = constant_value(n["k1"].output).numpy()  # 20 elements: rounded as well (>= 16)
    assert len(np.unique(small)) <= 17


@pytest.mark.parametrize("kind", ["onnx_cnn", "tflite_float"])
def test_round_weights_bounds_the_change(kind: str) -> None:
    path = _model(kind)
    model = _apply(path, "round_weights(num_steps=256)")
    before, after = _outputs(path), _outputs(model)
    for key in before:
        scale = np.abs(before[key]).max()
        assert 0 < np.abs(after[key] - before[key]).max() <= 0.05 * scale
    size_ratio = len(gw.serialize(model)) / path.stat().st_size
    assert 0.9 < size_ratio < 1.1  # same structure, same size uncompressed
