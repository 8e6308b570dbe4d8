"""``compare`` over a sample set, sharded: 3 local processes and 2 Ray tasks (one local Ray cluster for
the module) give the report one process gives, and its numbers are those of onnxruntime run here
sample by sample (max/mean absolute error, error histogram, tolerance and top-1 counts)."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphwright.batch.compare_shards import compare_sharded
from graphwright.cli import compare_cmd
from graphwright.runtime import input_specs
from graphwright.runtime.feeds import random_feeds
from graphwright.verify import HISTOGRAM_EDGES

SAMPLES = 90


def two_outputs(path: Path, noise: float) -> Path:
    """x[1,16] -> scores = x @ w + b [1,10] and hidden = relu(x @ v) [1,2,4]; ``noise`` perturbs w and v."""
    rng = np.random.default_rng(0)
    w, b, v = (rng.standard_normal(s).astype(np.float32) for s in ((16, 10), (10,), (16, 8)))
    bump = np.random.default_rng(1)
    w = w + np.float32(noise) * bump.standard_normal(w.shape).astype(np.float32)
    v = v + np.float32(noise) * bump.standard_normal(v.shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["scores"]),
         helper.make_node("MatMul", ["x", "v"], ["xv"]), helper.make_node("Relu", ["xv"], ["r"]),
         helper.make_node("Reshape", ["r", "shape"], ["hidden"])],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 2, 4])],
        [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (v, "v"))]
        + [numpy_helper.from_array(np.array([1, 2, 4], np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("compare_shards")
    return two_outputs(folder / "a.onnx", 0.0), two_outputs(folder / "b.onnx", 0.08)


@pytest.fixture(scope="module")
def single(models: tuple[Path, Path]) -> dict:
    return compare_sharded(*models, count=SAMPLES, seed=4, shards=1).to_dict()


def test_three_processes_give_the_single_process_report(models: tuple[Path, Path], single: dict) -> None:
    seen: list[int] = []
    sharded = compare_sharded(*models, count=SAMPLES, seed=4, shards=3, on_progress=lambda d, t, _: seen.append(d))
    assert sharded.to_dict() == single
    assert seen[-1] == SAMPLES and seen == sorted(seen) and len(seen) == 12  # 3 shards x 4 chunks


def test_the_numbers_are_onnxruntime_s(models: tuple[Path, Path], single: dict) -> None:
    runs = [ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]) for m in models]
    specs = input_specs(models[0])
    outs = {"scores": ([], []), "hidden": ([], [])}
    for i in range(SAMPLES):
        feeds = random_feeds(specs, seed=4 + i)  # the documented sample i: seed + i
        for side, session in enumerate(runs):
            for name, value in zip(("scores", "hidden"), session.run(["scores", "hidden"], feeds)):
                outs[name][side].append(value.astype(np.float64))
    assert single["samples"] == SAMPLES and not single["ok"]
    for row in single["outputs"]:
        a, b = (np.stack(x) for x in outs[row["name"]])
        diff = np.abs(a - b)
        assert row["samples"] == SAMPLES and row["elements"] == diff.size
        assert row["max_abs_error"] == diff.max()
        assert row["mean_abs_error"] == pytest.approx(diff.mean(), rel=1e-12)
        assert row["mismatched"] == int(np.count_nonzero(~np.isclose(b, a, rtol=1e-3, atol=1e-4)))
        edges = [0.0, *HISTOGRAM_EDGES, np.inf]
        expected = [int(np.count_nonzero(diff == 0))] + [
            int(np.count_nonzero((diff > 0) & (diff >= lo) & (diff < hi))) for lo, hi in itertools.pairwise(edges)]
        assert row["abs_error_histogram"] == expected and sum(expected) == diff.size
        if row["name"] == "scores":
            agree = np.count_nonzero(a[:, 0].argmax(axis=1) == b[:, 0].argmax(axis=1))
            assert 0 < agree < SAMPLES and row["top1_agreement"] == agree / SAMPLES
        else:
            assert row["top1_agreement"] is None  # [1, 2, 4] is not a score vector


def test_two_ray_tasks_give_the_single_process_report(models: tuple[Path, Path], single: dict,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert compare_sharded(*models, count=SAMPLES, seed=4, shards=2, use_ray=True).to_dict() == single
        parser = argparse.ArgumentParser()
        compare_cmd.add_parser(parser.add_subparsers())
        args = parser.parse_args(["compare", *map(str, models), "--num", str(SAMPLES), "--seed", "4",
                                  "--shards", "2", "--ray", "--json"])
        assert args.run(args) == 1  # B is beyond the tolerance: the exit code says so
        assert json.loads(capsys.readouterr().out) == single  # the running session is used, not stopped
        assert ray.is_initialized()
    finally:
        ray.shutdown()
