"""quantize.sensitivity: keep_float parsing and rank_layers, with a quantizer written here.

The quantizer of these tests rounds a layer's weights to a grid of the test's choosing, so each
layer's cost is known in advance; the scores rank_layers returns are checked against onnxruntime
running the same rounded models, built here with onnx directly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import graphwright as gw
from graphwright.ir import DType, Model, Tensor
from graphwright.quantize.report import weighted_layers
from graphwright.quantize.sensitivity import parse_keep_float, rank_layers
from tests.quantize.test_driver import mlp, samples

#: Step each layer's weights are rounded to: fc1 fine, fc2 coarse.
STEPS = {"fc1": 1 / 256, "fc2": 1 / 4}
WEIGHT_OF = {"fc1": "W1", "fc2": "W2"}


@pytest.mark.parametrize(("spec", "count"), [(None, None), (0, 0), (3, 3), ("2", 2), ("auto:4", 4), ("auto:0", 0)])
def test_parse_keep_float(spec: object, count: int | None) -> None:
    assert parse_keep_float(spec) == count  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["auto:", "auto:-1", "-2", "worst:3", "auto:1.5"])
def test_parse_keep_float_refuses(spec: str) -> None:
    with pytest.raises(ValueError, match="keep_float must be N or auto:N"):
        parse_keep_float(spec)


def _round_layers(model: Model, excluded: frozenset[str]) -> None:
    """The test's quantizer: round each non-excluded layer's weight to its STEPS grid."""
    by_name = {v.name: v for v in model.graph.initializers}
    for node, step in STEPS.items():
        if node in excluded:
            continue
        value = by_name[WEIGHT_OF[node]]
        value.const = Tensor.from_numpy(np.round(value.const.numpy() / step) * step, DType.FLOAT32)


def _rounded_with_onnx(src: Path, layer: str) -> bytes:
    model = onnx.load(src)
    for init in model.graph.initializer:
        if init.name == WEIGHT_OF[layer]:
            w = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((np.round(w / STEPS[layer]) * STEPS[layer]).astype(np.float32),
                                                  init.name))
    return model.SerializeToString()


def _ort(data: bytes, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, f)[0] for f in feeds]).astype(np.float64)


def test_rank_layers_scores_each_layer_alone_as_onnxruntime_measures_it(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    model = gw.load(src)
    before = gw.serialize(model)
    feeds = samples(6)
    seen: list[tuple[int, int, str]] = []
    ranked = rank_layers(model, _round_layers, weighted_layers(model), feeds,
                         on_layer=lambda done, total, what: seen.append((done, total, what)))
    assert gw.serialize(model) == before  # every candidate is a copy
    reference = _ort(src.read_bytes(), feeds)
    expected = {}
    for layer in STEPS:
        got = _ort(_rounded_with_onnx(src, layer), feeds)
        expected[layer] = 10 * math.log10(np.sum(reference ** 2) / np.sum((reference - got) ** 2))
    assert [s.node for s in ranked] == sorted(expected, key=expected.get) == ["fc2", "fc1"]
    for item in ranked:
        assert item.sqnr_db == pytest.approx(expected[item.node], abs=1e-4)
        assert item.op == "MatMul" and not item.kept_float
    assert seen == [(0, 2, "fc1"), (1, 2, "fc2"), (2, 2, "done")]


def test_a_layer_the_quantizer_leaves_exact_scores_infinite(tmp_path: Path) -> None:
    model = gw.load(mlp(tmp_path / "mlp.onnx"))

    def only_fc2(candidate: Model, excluded: frozenset[str]) -> None:
        _round_layers(candidate, excluded | {"fc1"})

    ranked = rank_layers(model, only_fc2, weighted_layers(model), samples(3))
    assert [s.node for s in ranked] == ["fc2", "fc1"] and math.isinf(ranked[1].sqnr_db)
    assert ranked[1].to_json()["sqnr_db"] is None
