"""Collecting statistics by running the float model, checked against the anchors.

* ONNX (torchvision MobileNetV3-small, cached export): min-max ranges identical to
  onnxruntime.quantization's MinMaxCalibrater on the same samples, for the same set of tensors;
  percentile within one bin of each side's histogram of PercentileCalibrater's (both are
  histogram quantiles: ours on a power-of-two grid with linear interpolation in the bin, theirs the
  left edge of the bin on a [-max|x|, max|x|] grid — so the bound is our bin width plus theirs);
  entropy in the same place as EntropyCalibrater for most tensors, see
  :func:`test_entropy_is_near_onnxruntime` for why not all.
* TFLite: LiteRT and graphwright's reference interpreter give the same ranges.
* Shards merged == one pass, for the statistics and every method's ranges.
* Streaming: at most one sample alive at a time.
"""

from __future__ import annotations

import contextlib
import gc
import io
import pickle
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphwright.formats import load
from graphwright.quantize.calibration import (
    CalibrationError,
    Statistics,
    activation_names,
    collect_statistics,
    compute_ranges,
    synthetic_samples,
)
from tests.models import get_model
from tests.models.build_onnx_corpus import corpus_model

SAMPLES = 8


@pytest.fixture(scope="module")
def mobilenet() -> tuple[Path, Any, list[dict[str, np.ndarray]], Statistics]:
    path = corpus_model("tv_mobilenet_v3_small-ts-fixed").path
    model = load(path)
    samples = list(synthetic_samples(model, SAMPLES, seed=0))
    return path, model, samples, collect_statistics(model, samples)


def _ort(cls: Any, path: Path, samples: list[dict[str, np.ndarray]], tmp: Path, **kwargs: Any) -> dict[str, tuple]:
    it = iter(samples)

    class Reader:
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(it, None)

    with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print progress
        calibrator = cls(Path(path), augmented_model_path=str(tmp / f"{cls.__name__}.onnx"), **kwargs)
        calibrator.augment_graph()
        calibrator.create_inference_session()
        calibrator.collect_data(Reader())
        data = calibrator.compute_data()
    return {name: (float(np.ravel(d.range_value[0])[0]), float(np.ravel(d.range_value[1])[0]))
            for name, d in data.items()}


def test_minmax_is_onnxruntime_minmax(mobilenet: Any, tmp_path: Path) -> None:
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    path, model, samples, stats = mobilenet
    theirs = _ort(MinMaxCalibrater, path, samples, tmp_path)
    ours = compute_ranges(stats, "minmax")
    assert set(ours) == set(theirs) == set(activation_names(model))  # the same tensors: 123
    assert len(ours) > 100
    assert ours == theirs  # bit for bit
    assert stats.samples == SAMPLES


def test_minmax_is_onnxruntime_minmax_on_a_transformer(tmp_path: Path) -> None:
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    path = corpus_model("hf_bert-ts-dyn").path  # BERT with dynamic batch and sequence
    model = load(path)
    samples = list(synthetic_samples(model, 4, seed=2, dims={"sequence": 24}))
    theirs = _ort(MinMaxCalibrater, path, samples, tmp_path)
    ours = compute_ranges(collect_statistics(model, samples), "minmax")
    assert len(ours) > 50 and ours == {n: theirs[n] for n in ours}
    assert set(theirs) - set(ours) <= {n for n in theirs if "Constant" in n}  # ORT also reads Constant outputs


@pytest.mark.parametrize("symmetric", [False, True])
def test_percentile_is_onnxruntime_percentile_within_a_bin(mobilenet: Any, tmp_path: Path, symmetric: bool) -> None:
    from onnxruntime.quantization.calibrate import PercentileCalibrater

    path, _, samples, stats = mobilenet
    theirs = _ort(PercentileCalibrater, path, samples, tmp_path, symmetric=symmetric)
    ours = compute_ranges(stats, "percentile", symmetric=symmetric)
    assert set(ours) == set(theirs)
    for name, (lo, hi) in ours.items():
        s = stats[name]
        absmax = max(-s.min, s.max)
        if symmetric:  # theirs: (-T, T) clipped to [min, max]; ours (-T, T)
            their_t = max(abs(theirs[name][0]), abs(theirs[name][1]))
            assert lo == -hi and abs(hi - their_t) <= s.width + absmax / 2048, name
        else:  # their grid: 2048 bins over [-T1, T1], T1 <= max|x| the first batch's
            bound = s.width + absmax / 1024
            assert abs(lo - theirs[name][0]) <= bound and abs(hi - theirs[name][1]) <= bound, name


def test_entropy_is_near_onnxruntime(mobilenet: Any, tmp_path: Path) -> None:
    """Both minimize KL(P || Q) of a histogram and its 128-level quantization, but not the same
    histogram: onnxruntime's EntropyCalibrater slides a window symmetric about zero over the
    *signed* histogram (64 quantized bins per side), truncates Q to integers and smooths both;
    ours is TensorRT's on the |x| histogram (128 bins for one side), without the exact zeros,
    from the median up; its histogram starts at 128 bins over the first batch's range and grows by
    whole bins.  So the thresholds agree closely for most tensors (median difference 2.7% of
    max|x| measured, 8 samples) and differ for some skewed ones (ReLU/HardSwish outputs, up to
    62%; 75th percentile 25%)."""
    from onnxruntime.quantization.calibrate import EntropyCalibrater

    path, _, samples, stats = mobilenet
    theirs = _ort(EntropyCalibrater, path, samples, tmp_path)  # its defaults: 128 bins, growing
    ours = compute_ranges(stats, "entropy")
    assert set(ours) == set(theirs)
    diffs = []
    for name, (lo, hi) in ours.items():
        s = stats[name]
        assert s.min <= lo <= hi <= s.max
        diffs.append(max(abs(lo - theirs[name][0]), abs(hi - theirs[name][1])) / max(-s.min, s.max))
    assert np.median(diffs) < 0.05 and np.quantile(diffs, 0.75) < 0.3


@pytest.mark.wide
def test_entropy_is_near_onnxruntime_at_2048_bins(mobilenet: Any, tmp_path: Path) -> None:
    """As above with EntropyCalibrater(num_bins=2048), our resolution (3.5 minutes: its KL loop is
    Python).  Measured: median difference 3.3% of max|x|, 75th percentile 14%, worst 58%."""
    from onnxruntime.quantization.calibrate import EntropyCalibrater

    path, _, samples, stats = mobilenet
    theirs = _ort(EntropyCalibrater, path, samples, tmp_path, num_bins=2048)
    ours = compute_ranges(stats, "entropy")
    diffs = [max(abs(lo - theirs[n][0]), abs(hi - theirs[n][1])) / max(-stats[n].min, stats[n].max)
             for n, (lo, hi) in ours.items()]
    assert np.median(diffs) < 0.05 and np.quantile(diffs, 0.75) < 0.2


def test_tflite_ranges_on_litert_are_the_reference_interpreters() -> None:
    path = get_model("tflite_real", "landmarks_float").path
    model = load(path)
    samples = list(synthetic_samples(model, 3, seed=1, image_norm="symmetric"))
    litert = collect_statistics(model, samples, engine="litert")
    reference = collect_statistics(model, samples, engine="reference")
    assert set(litert) == set(reference) == set(activation_names(model)) and len(litert) > 30
    for method in ("minmax", "percentile"):
        a, b = compute_ranges(litert, method), compute_ranges(reference, method)
        for name in a:  # float kernels: the same up to summation order
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6 + litert[name].width, err_msg=name)
    differing = sum(int(np.abs(litert[n].hist - reference[n].hist).sum()) for n in litert)
    assert differing <= 1e-4 * sum(s.count for s in litert.values.values())


def test_a_while_loop_model_calibrates_on_litert() -> None:
    """A Keras GRU keyword spotter (its recurrence a WHILE loop): LiteRT leaves the loop's unread
    outputs unallocated, so they are not asked for; the rest equal the reference interpreter's."""
    path = get_model("tflite_zoo", "gru_kws_float").path
    model = load(path)
    loop = next(node for node in model.graph if node.op == "WHILE")
    unread = {v.name for v in loop.outputs if v is not None and not v.uses() and not v.is_graph_output}
    assert unread and not unread & set(activation_names(model))
    samples = list(synthetic_samples(model, 3, seed=2))
    litert = collect_statistics(model, samples, engine="litert")
    reference = collect_statistics(model, samples, engine="reference")
    a, b = compute_ranges(litert, "minmax"), compute_ranges(reference, "minmax")
    assert a.keys() == b.keys() and len(a) > 3
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_shards_merged_are_one_pass(mobilenet: Any) -> None:
    _, model, samples, one_pass = mobilenet
    names = activation_names(model)[::6]  # a spread of values keeps this quick
    whole = collect_statistics(model, samples, values=names)
    for cuts in ((4,), (2, 5)):
        shards = [collect_statistics(model, part, values=names) for part in np.split(np.array(samples), cuts)]
        shards = [pickle.loads(pickle.dumps(s)) for s in shards]  # as a worker would send them
        merged = Statistics.merge_all(shards)
        assert merged == whole and Statistics.merge_all(reversed(shards)) == whole
        for method in ("minmax", "percentile", "entropy", "mse"):
            assert compute_ranges(merged, method) == compute_ranges(whole, method), method
    assert all(one_pass[n] == whole[n] for n in names)


def test_streaming_keeps_one_sample_alive(mobilenet: Any) -> None:
    _, model, _, _ = mobilenet
    alive: set[int] = set()
    most = 0

    def stream() -> Iterator[dict[str, np.ndarray]]:
        nonlocal most
        for i, feed in enumerate(synthetic_samples(model, 8, seed=5)):
            array = feed["input"]
            alive.add(i)
            weakref.finalize(array, alive.discard, i)
            gc.collect()
            most = max(most, len(alive))
            yield feed

    progress: list[tuple[int, Any, str]] = []
    stats = collect_statistics(model, stream(), values=activation_names(model)[:5],
                               on_progress=lambda *a: progress.append(a))
    assert stats.samples == 8 and most <= 2  # the one being run and the one just made
    assert progress[-1] == (8, None, "calibrating on onnxruntime") and len(progress) == 8
    counted = []
    collect_statistics(model, synthetic_samples(model, 3, seed=0), values=["input"],
                       on_progress=lambda d, t, _: counted.append((d, t)))
    assert counted == [(1, 3), (2, 3), (3, 3)]


def test_collection_errors(mobilenet: Any) -> None:
    _, model, samples, _ = mobilenet
    with pytest.raises(CalibrationError, match="calibration cannot run the model: the model has no value named 'nope'"):
        collect_statistics(model, samples, values=["nope"])
    with pytest.raises(CalibrationError, match="engine must be one of"):
        collect_statistics(model, samples, engine="tensorrt")
    with pytest.raises(CalibrationError, match="batch_size 4 needs a dynamic batch axis but input 'input'"):
        collect_statistics(model, samples, batch_size=4)
    with pytest.raises(CalibrationError, match="cannot run onnx models"):
        collect_statistics(model, samples, engine="reference")


def test_minmax_without_histograms_is_onnxruntime_minmax_batched(tmp_path: Path) -> None:
    """``histogram=False`` with ``batch_size=None`` (what ``quantize`` does for minmax): every
    float32 value reduced inside onnxruntime, feeds of equal shapes run 8 at a time (sequences of
    24 and 16 interleaved: only like ones batch) — still bit for bit onnxruntime's MinMaxCalibrater
    on the feeds one by one."""
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    path = corpus_model("hf_bert-ts-dyn").path
    model = load(path)
    long = list(synthetic_samples(model, 10, seed=3, dims={"sequence": 24}))
    short = list(synthetic_samples(model, 3, seed=4, dims={"sequence": 16}))
    samples = long[:9] + short[:1] + long[9:] + short[1:]
    theirs = _ort(MinMaxCalibrater, path, samples, tmp_path)
    runs: list[int] = []
    stats = collect_statistics(model, samples, histogram=False, batch_size=None,
                               on_progress=lambda done, total, label: runs.append(done))
    ours = compute_ranges(stats, "minmax")
    assert runs == [8, 9, 10, 11, 13]  # 8 long, 1 long (a short one follows), 1 short, 1 long, 2 short
    assert stats.samples == 13 and not stats.histogram
    assert len(ours) > 50 and ours == {n: theirs[n] for n in ours}
    assert set(theirs) - set(ours) <= {n for n in theirs if "Constant" in n}


def _nonfinite_model(tmp_path: Path) -> Any:
    """x [N, 8] -> Log(x) (NaN below 0, -inf at 0), x * -3e38 (finite, its sum overflows),
    x / x (NaN at 0), Relu(x); all graph outputs."""
    import onnx
    from onnx import TensorProto, helper

    big = helper.make_tensor("big", TensorProto.FLOAT, [], [-3e38])
    nodes = [helper.make_node("Log", ["x"], ["log"]), helper.make_node("Mul", ["x", "big"], ["huge"]),
             helper.make_node("Div", ["x", "x"], ["ratio"]), helper.make_node("Relu", ["x"], ["relu"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8])
                               for n in ("log", "huge", "ratio", "relu")], [big])
    path = tmp_path / "nonfinite.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load(path)


def test_minmax_without_histograms_leaves_nan_and_infinities_out_as_the_histograms_do(tmp_path: Path) -> None:
    """Reduced in the graph, a value holding NaN or an infinity comes back as its array (a second
    session) and is filtered as the full statistics filter it; a sum that only overflows (finite
    elements of -3e38) stays reduced.  Checked against NumPy on the raw data."""
    from graphwright.runtime.intermediates import Extrema, prepare_intermediates

    model = _nonfinite_model(tmp_path)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.uniform(-1, 1, (1, 8)).astype(np.float32)} for _ in range(5)]
    samples[2]["x"][0, 3] = 0.0
    samples.append({"x": rng.uniform(0.5, 1, (1, 8)).astype(np.float32)})  # Log finite here
    names = ["log", "huge", "ratio", "relu"]
    bare = collect_statistics(model, samples, values=names, histogram=False, batch_size=None)
    full = collect_statistics(model, samples, values=names)
    x = np.concatenate([s["x"] for s in samples]).astype(np.float32)
    with np.errstate(all="ignore"):
        raw = {"log": np.log(x), "huge": x * np.float32(-3e38), "ratio": x / x, "relu": np.maximum(x, 0)}
    for name in names:
        finite = raw[name][np.isfinite(raw[name])]
        expected = (float(finite.min()), float(finite.max()), finite.size, raw[name].size - finite.size)
        got = bare[name]
        assert (got.min, got.max, got.count, got.nonfinite) == expected, name
        assert (full[name].min, full[name].max, full[name].count, full[name].nonfinite) == expected, name
    session = prepare_intermediates(model, names, reduce="extrema")
    try:
        out = session.run({"x": samples[2]["x"]})
        assert isinstance(out["huge"], Extrema) and isinstance(out["relu"], Extrema)
        assert isinstance(out["log"], np.ndarray) and isinstance(out["ratio"], np.ndarray)
        assert np.isneginf(out["log"]).any() and np.isnan(out["ratio"]).any()
        huge = samples[2]["x"] * np.float32(-3e38)
        with np.errstate(over="ignore"):
            assert out["huge"] == (float(huge.min()), float(huge.max()), 8) and np.isinf(huge.sum())
    finally:
        session.close()
