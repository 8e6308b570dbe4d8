"""Quantization calibration statistics collected in shards — 3 local processes, 2 Ray tasks on a local
cluster — equal (every counter of every histogram) the statistics of one pass, and so do the ranges of
every method; on ONNX (onnxruntime) and TFLite (LiteRT), from synthetic samples, feeds in memory and a
folder of .npy files.  The graph output's range is checked against onnxruntime run here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from graphwright.batch.calibration_shards import SyntheticSamples, collect_statistics_sharded
from graphwright.errors import GraphwrightError
from graphwright.quantize.calibration import (
    METHODS,
    collect_statistics,
    compute_ranges,
    load_samples,
    synthetic_samples,
)
from tests.models import get_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ONNX = EXAMPLES / "small_cnn.onnx"
COUNT = 18


@pytest.fixture(scope="module")
def single() -> object:
    return collect_statistics(ONNX, synthetic_samples(ONNX, COUNT, 3))


def _same_ranges(a: object, b: object) -> None:
    for method in METHODS:
        assert compute_ranges(a, method) == compute_ranges(b, method), method


def test_three_processes_give_the_one_pass_statistics(single: object) -> None:
    seen: list[int] = []
    sharded = collect_statistics_sharded(ONNX, SyntheticSamples(COUNT, 3), shards=3,
                                         on_progress=lambda done, total, _: seen.append(done))
    assert sharded == single and sharded.samples == COUNT and len(sharded) > 10
    assert seen[-1] == COUNT and seen == sorted(seen)
    _same_ranges(sharded, single)
    # the output's range over the samples, from onnxruntime run here on the same samples
    session = ort.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    logits = np.concatenate([session.run(["logits"], feed)[0].ravel() for feed in synthetic_samples(ONNX, COUNT, 3)])
    assert (single["logits"].min, single["logits"].max) == (float(logits.min()), float(logits.max()))


def test_feeds_in_memory_and_a_folder_of_npy_files(tmp_path: Path) -> None:
    feeds = list(synthetic_samples(ONNX, 7, 11))
    for i, feed in enumerate(feeds):
        np.save(tmp_path / f"s{i:02d}.npy", feed["input"])
    one = collect_statistics(ONNX, feeds)
    assert collect_statistics_sharded(ONNX, feeds, shards=2) == one
    assert collect_statistics(ONNX, load_samples(ONNX, tmp_path)) == one
    assert collect_statistics_sharded(ONNX, tmp_path, shards=2) == one


def test_tflite_on_litert() -> None:
    model = get_model("tflite_zoo", "ds_cnn_float").path
    one = collect_statistics(model, synthetic_samples(model, 10, 5))
    sharded = collect_statistics_sharded(model, SyntheticSamples(10, 5), shards=2)
    assert sharded == one and one.samples == 10
    _same_ranges(sharded, one)


def test_two_ray_tasks_give_the_one_pass_statistics(single: object) -> None:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    sharded = collect_statistics_sharded(ONNX, SyntheticSamples(COUNT, 3), shards=2, use_ray=True)  # local cluster
    assert sharded == single
    _same_ranges(sharded, single)


def test_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(GraphwrightError, match="shards must be at least 1"):
        collect_statistics_sharded(ONNX, SyntheticSamples(4), shards=0)
    with pytest.raises(GraphwrightError, match="no samples"):
        collect_statistics_sharded(ONNX, [], shards=2)
