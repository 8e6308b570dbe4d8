"""graphwright.quantize.quantize: modes, samples and their held-out split, keep_float, refusals.

Every number of the report is checked against onnxruntime run here on the saved models, and the
sensitivity ranking against onnxruntime.quantization's own quantize_dynamic of one layer at a time.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tensorboard.compat.proto import graph_pb2

import graphwright as gw
from graphwright.errors import TransformError
from graphwright.quantize.driver import HOLDOUT_STRIDE

EVAL = 16


def mlp(path: Path, *, outlier: bool = False, seed: int = 0) -> Path:
    """x[1,64] -> fc1 (MatMul 64x128) -> Relu -> fc2 (MatMul 128x10) -> y[1,10] (a classifier's scores).

    ``outlier``: fc2's weights hold one value 500x the others, read only by an always-zero unit
    (fc1's column 0 is zero), so it costs the output nothing in float but makes fc2's per-tensor
    int8 step coarser than most of its weights: fc2 is by far the most sensitive layer.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(64, 128)).astype(np.float32) / 8
    w2 = rng.normal(size=(128, 10)).astype(np.float32) / 10
    if outlier:
        w1[:, 0] = 0.0
        w2[0, 0] = 50.0
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "W2"], ["y"], name="fc2")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def samples(count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(1, 64)).astype(np.float32)} for _ in range(count)]


def held_out(feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The samples the report is measured on, as the driver documents it: every fifth."""
    return feeds[HOLDOUT_STRIDE - 1::HOLDOUT_STRIDE][:EVAL]


def ort_outputs(path: Path | bytes, feeds: list[dict[str, np.ndarray]], names: list[str] | None = None) -> list[list[np.ndarray]]:
    data = path if isinstance(path, bytes) else path.read_bytes()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return [session.run(names, feed) for feed in feeds]


def with_output(path: Path, name: str) -> bytes:
    """The model with the intermediate ``name`` as an extra output (onnx itself, not graphwright)."""
    model = onnx.load(path)
    model.graph.output.append(helper.make_empty_tensor_value_info(name))
    return model.SerializeToString()


def ort_tensor(path: Path, name: str, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The tensor ``name`` (an output or an intermediate) on every feed, from onnxruntime."""
    outputs = [o.name for o in onnx.load(path).graph.output]
    data = path.read_bytes() if name in outputs else with_output(path, name)
    return [o[0] for o in ort_outputs(data, feeds, [name])]


def layer_tensor(path: Path, node: str, tensor: str) -> str:
    """The tensor a quantized model computes for a layer: the same name, else its node's output."""
    graph = onnx.load(path).graph
    if any(tensor in n.output for n in graph.node):
        return tensor
    return next(n.output[0] for n in graph.node if n.name == node)


def sqnr(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    a64, b64 = np.concatenate([x.ravel() for x in a]).astype(np.float64), np.concatenate([x.ravel() for x in b])
    return 10 * math.log10(np.sum(a64 ** 2) / np.sum((a64 - b64) ** 2))


def test_weights_report_matches_onnxruntime(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    before = src.read_bytes()
    feeds = samples(120)
    model, report = gw.quantize(src, mode="weights", samples=feeds, minimum_size=16)
    out = tmp_path / "q.onnx"
    gw.save(model, out)
    assert src.read_bytes() == before
    assert report.stats["initializers_quantized"] == 2 and report.eval_split == "held-out"
    assert report.eval_samples == EVAL and report.warnings == []
    evaluated = held_out(feeds)
    a = [o[0] for o in ort_outputs(src, evaluated)]
    b = [o[0] for o in ort_outputs(out, evaluated)]
    (row,) = report.outputs
    assert row.name == "y" and row.shape == [1, 10]
    assert row.sqnr_db == pytest.approx(sqnr(a, b), abs=1e-6)
    diff = np.abs(np.stack(a).astype(np.float64) - np.stack(b))
    assert row.max_abs == pytest.approx(diff.max(), rel=1e-9)
    assert row.mean_abs == pytest.approx(diff.mean(), rel=1e-9)
    assert row.rel_error == pytest.approx(diff.max() / np.abs(np.stack(a)).max(), rel=1e-9)
    agree = np.mean([x.argmax() == y.argmax() for x, y in zip(a, b)])
    assert row.top1_agreement == pytest.approx(agree)
    # per layer: fc1's output h, read from both models by onnxruntime
    ha = [o[1] for o in ort_outputs(with_output(src, "h"), evaluated)]
    hb = [o[1] for o in ort_outputs(with_output(out, "h"), evaluated)]
    layers = {x.node: x for x in report.layers}
    assert set(layers) == {"fc1", "fc2"} and layers["fc1"].tensor == "h"
    assert layers["fc1"].sqnr_db == pytest.approx(sqnr(ha, hb), abs=1e-6)
    assert 20 < layers["fc1"].sqnr_db < 60  # int8 weights: about 40 dB, not exact, not garbage
    assert report.size_after == len(out.read_bytes()) and report.size_before == len(before)
    assert report.size_after < report.size_before / 2
    assert report.latency_before_ms > 0 and report.latency_after_ms > 0 and report.runtime == "onnxruntime"


def _anchor_sensitivity(src: Path, tmp_path: Path, feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Output SQNR with every layer but one quantized by onnxruntime.quantization.quantize_dynamic."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    reference = [o[0] for o in ort_outputs(src, feeds)]
    scores = {}
    for layer in ("", "fc1", "fc2"):
        path = tmp_path / f"anchor_{layer}.onnx"
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8, per_channel=False,
                         nodes_to_exclude=[layer] if layer else [])
        scores[layer] = sqnr(reference, [o[0] for o in ort_outputs(path, feeds)])
    return scores


def test_keep_float_keeps_the_layer_onnxruntime_finds_most_sensitive(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx", outlier=True)
    feeds = samples(100)
    model, report = gw.quantize(src, mode="dynamic", samples=feeds, per_channel=False, keep_float="auto:1")
    # the sensitivity runs on the first calibration samples: the first 8 not held out
    sensitivity_feeds = [f for i, f in enumerate(feeds[:9]) if (i + 1) % HOLDOUT_STRIDE]
    anchor = _anchor_sensitivity(src, tmp_path, sensitivity_feeds)
    ranked = [s.node for s in report.sensitivity]
    assert ranked == ["fc2", "fc1"] and anchor["fc2"] > anchor["fc1"]
    for item in report.sensitivity:
        assert item.sqnr_db == pytest.approx(anchor[item.node], abs=0.05), (item, anchor)
        assert item.gain_db == pytest.approx(anchor[item.node] - anchor[""], abs=0.05), (item, anchor)
    assert report.kept_float == ["fc2"] and [s.kept_float for s in report.sensitivity] == [True, False]
    ops = {node.name: node.op for node in model.graph}
    assert ops["fc2"] == "MatMul" and "fc1" not in ops and "MatMulInteger" in ops.values()
    assert report.warnings == []
    # keeping fc2 float is what makes the result good: compare with quantizing both
    _, everything = gw.quantize(src, mode="dynamic", samples=feeds, per_channel=False)
    assert report.outputs[0].sqnr_db > everything.outputs[0].sqnr_db + 10


def test_exclusion_not_honoured_is_a_warning_not_a_silent_lie(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    model, report = gw.quantize(src, mode="weights", samples=samples(30), minimum_size=16, exclude_nodes=["fc1"])
    weights_float = {v.name for v in model.graph.initializers if v.const is not None and v.const.dtype is gw.DType.FLOAT32
                     and v.const.size >= 16}
    if "W1" in weights_float:  # the transform left fc1 float: nothing to warn about
        assert report.warnings == []
    else:
        assert any("fc1" in w and "quantized anyway" in w for w in report.warnings), report.warnings


def test_no_data_is_synthetic_with_a_loud_warning(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    with pytest.warns(UserWarning, match="NO EVALUATION DATA"):  # dynamic calibrates nothing: the report's data
        _, report = gw.quantize(src, mode="dynamic", seed=3)
    assert report.data_source == "synthetic (seed 3)"
    assert any("NO EVALUATION DATA" in w for w in report.warnings)
    assert report.eval_samples == EVAL and report.outputs[0].sqnr_db > 20
    with pytest.warns(UserWarning, match="NO CALIBRATION DATA"):  # static: the ranges are random data's too
        _, report = gw.quantize(src, mode="static", seed=3)
    assert any("NO CALIBRATION DATA" in w for w in report.warnings)


def test_too_few_samples_report_on_calibration_samples_and_say_so(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    _, report = gw.quantize(src, mode="dynamic", samples=samples(3))
    assert report.eval_split == "calibration" and report.eval_samples == 3
    assert any("too few samples" in w for w in report.warnings)


def test_a_model_object_is_not_changed(tmp_path: Path) -> None:
    model = gw.load(mlp(tmp_path / "mlp.onnx"))
    before = gw.serialize(model)
    quantized, _ = gw.quantize(model, mode="dynamic", samples=samples(30), report=False)
    assert gw.serialize(model) == before and gw.serialize(quantized) != before


def test_graphdef_names_the_eight_bit_transforms(tmp_path: Path) -> None:
    gd = graph_pb2.GraphDef()
    gd.node.add(name="input", op="Placeholder").attr["dtype"].type = 1
    gd.node.add(name="Identity", op="Identity", input=["input"]).attr["T"].type = 1
    path = tmp_path / "model.pb"
    path.write_bytes(gd.SerializeToString())
    with pytest.raises(TransformError) as info:
        gw.quantize(path, mode="static")
    message = str(info.value)
    assert "\n" not in message
    for name in ("quantize_weights", "quantize_nodes", "freeze_requantization_ranges", "calibrate"):
        assert name in message


@pytest.mark.parametrize(("mode", "kwargs", "needle"), [
    ("16x8", {}, "use one of static, dynamic, weights"),
    ("weights", {"bits": 3}, "bits=3"),
    ("dynamic", {"bits": 4}, "bits=4"),
    ("static", {"method": "median"}, "method must be one of minmax"),
    ("dynamic", {"keep_float": "auto:x"}, "keep_float must be N or auto:N"),
])
def test_bad_options_are_one_line(tmp_path: Path, mode: str, kwargs: dict[str, object], needle: str) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    with warnings.catch_warnings(), pytest.raises(TransformError, match=needle):
        warnings.simplefilter("ignore")
        gw.quantize(src, mode=mode, **kwargs)


ONNX_MODES = [("static", {"method": "entropy"}), ("static", {"method": "percentile", "per_channel": False}),
              ("weights", {"bits": 4, "block_size": 16, "minimum_size": 16}),
              ("weights", {"bits": 4, "block_size": 16, "minimum_size": 16, "target": "onnxruntime"})]


@pytest.mark.parametrize(("mode", "kwargs"), ONNX_MODES, ids=lambda x: str(x))
def test_onnx_modes_report_what_onnxruntime_runs(tmp_path: Path, mode: str, kwargs: dict[str, object]) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    feeds = samples(60)
    model, report = gw.quantize(src, mode=mode, samples=feeds, calibration_samples=40, **kwargs)
    out = tmp_path / "q.onnx"
    gw.save(model, out)
    evaluated = held_out(feeds)[:report.eval_samples]
    assert report.eval_samples == 12 and report.stats
    a = [o[0] for o in ort_outputs(src, evaluated)]
    b = [o[0] for o in ort_outputs(out, evaluated)]
    assert report.outputs[0].sqnr_db == pytest.approx(sqnr(a, b), abs=1e-6)
    assert 10 < report.outputs[0].sqnr_db < 60
    assert [x.node for x in report.layers] == ["fc1", "fc2"]
    for layer in report.layers:  # per layer: both models' tensors read from onnxruntime
        expected = sqnr(ort_tensor(src, layer.tensor, evaluated),
                        ort_tensor(out, layer_tensor(out, layer.node, layer.tensor), evaluated))
        assert layer.sqnr_db == pytest.approx(expected, abs=1e-6), layer
    if mode == "static":
        assert report.calibration_samples == 40 and report.method == kwargs["method"] and report.ranges
        assert report.calibration_seconds > 0
    else:  # 4-bit weights given data: GPTQ (the default then) calibrates on them, no ranges
        assert report.calibration_samples == 40 and report.method is None and not report.ranges
    ops = {node.op_type for node in onnx.load(out).graph.node}
    assert ("MatMulNBits" in ops) == (kwargs.get("target") == "onnxruntime")


TFLITE_MODES = [("int8", {"io_type": "int8"}), ("16x8", {}), ("dynamic", {}), ("weights", {}),
                ("weights", {"weight_type": "float16"})]


@pytest.mark.parametrize(("mode", "kwargs"), TFLITE_MODES, ids=lambda x: str(x))
def test_tflite_modes_report_what_litert_runs(tmp_path: Path, mode: str, kwargs: dict[str, object]) -> None:
    from tests.models import get_model
    from tests.quantize.test_report import _litert_run

    info = get_model("tflite_real", "landmarks_float")
    float_model = gw.load(info.path)
    spec = float_model.graph.inputs[0]
    rng = np.random.default_rng(5)
    feeds = [{spec.name: rng.uniform(0, 1, size=tuple(spec.shape)).astype(np.float32)} for _ in range(30)]
    model, report = gw.quantize(info.path, mode=mode, samples=feeds, calibration_samples=20, eval_samples=4, **kwargs)
    out = tmp_path / "q.tflite"
    gw.save(model, out)
    evaluated = held_out(feeds)[:4]
    assert report.eval_samples == 4 and report.runtime == "litert"
    runs_a = [_litert_run(str(info.path), f[spec.name], []) for f in evaluated]
    runs_b = [_litert_run(str(out), f[spec.name], []) for f in evaluated]
    assert [o.name for o in report.outputs] == [v.name for v in float_model.graph.outputs]
    for row in report.outputs:
        expected = sqnr([r[row.name] for r in runs_a], [r[row.name] for r in runs_b])
        assert row.sqnr_db == pytest.approx(expected, abs=1e-6), row
        assert row.sqnr_db > 20
    io = {v.dtype for v in (*model.graph.inputs, *model.graph.outputs)}
    assert io == ({gw.DType.INT8} if kwargs.get("io_type") == "int8" else {gw.DType.FLOAT32})
    if kwargs.get("weight_type") == "float16":  # what LiteRT reads: float16 weights behind DEQUANTIZE
        from ai_edge_litert.interpreter import Interpreter

        types = {d["dtype"] for d in Interpreter(model_path=str(out)).get_tensor_details()}
        assert np.float16 in types and report.size_after < 0.7 * report.size_before


def test_progress_names_each_phase_with_its_total(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    seen: list[tuple[int, int, str]] = []
    gw.quantize(src, mode="static", samples=samples(30), calibration_samples=10, eval_samples=2, keep_float="auto:0",
                on_progress=lambda done, total, what: seen.append((done, total, what)))
    calibrating = [(d, t) for d, t, w in seen if w.startswith("calibrating")]
    assert calibrating == [(i, 10) for i in range(1, 11)]
    assert [(d, t, w) for d, t, w in seen if w.startswith("sensitivity")] == [
        (0, 3, "sensitivity: everything quantized"), (1, 3, "sensitivity: fc1"), (2, 3, "sensitivity: fc2"),
        (3, 3, "sensitivity: done")]
    assert [(d, t) for d, t, w in seen if w.startswith("evaluating")][-1] == (2, 2)


def test_tflite_exclude_op_leaves_those_layers_float_on_litert(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    from tests.models import get_model

    info = get_model("tflite_real", "landmarks_float")
    model, report = gw.quantize(info.path, mode="int8", samples=_images(info.path, 12), calibration_samples=8,
                                eval_samples=2, exclude_ops=["DEPTHWISE_CONV_2D"])
    out = tmp_path / "q.tflite"
    gw.save(model, out)
    assert report.excluded_ops == ["DEPTHWISE_CONV_2D"] and report.warnings == []
    interp = Interpreter(model_path=str(out))
    tensors = interp.get_tensor_details()
    filters: dict[str, set[object]] = {}
    for op in interp._get_ops_details():
        if op["op_name"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            filters.setdefault(op["op_name"], set()).add(tensors[op["inputs"][1]]["dtype"])
    assert filters == {"DEPTHWISE_CONV_2D": {np.float32}, "CONV_2D": {np.int8}, "FULLY_CONNECTED": {np.int8}}


def _images(path: Path, count: int) -> list[dict[str, np.ndarray]]:
    spec = gw.load(path).graph.inputs[0]
    rng = np.random.default_rng(9)
    return [{spec.name: rng.uniform(0, 1, size=tuple(spec.shape)).astype(np.float32)} for _ in range(count)]


def test_two_inputs_fed_by_name_whatever_the_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["d"], name="sub"), helper.make_node("MatMul", ["d", "W"], ["y"], name="mm")],
        "two", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 16]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "W")])
    src = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    # b is small next to a: fed the wrong way round, the SQNR would be far off
    feeds = [{"b": rng.normal(size=(1, 16)).astype(np.float32) / 100, "a": rng.normal(size=(1, 16)).astype(np.float32)}
             for _ in range(40)]
    model, report = gw.quantize(src, mode="static", samples=feeds)
    out = tmp_path / "q.onnx"
    gw.save(model, out)
    evaluated = held_out(feeds)[:report.eval_samples]
    expected = sqnr([o[0] for o in ort_outputs(src, evaluated)], [o[0] for o in ort_outputs(out, evaluated)])
    assert report.outputs[0].sqnr_db == pytest.approx(expected, abs=1e-6)


def test_exclusions_naming_nothing_are_warned_about(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    _, report = gw.quantize(src, mode="dynamic", samples=samples(10), report=False,
                            exclude_nodes=["fc3", "fc1"], exclude_ops=["Conv", "Relu"])
    assert report.warnings == ["1 node(s) to exclude are not in the model: fc3",
                               "op(s) to exclude that no node has: Conv"]


def test_given_samples_all_calibrate_unless_capped(tmp_path: Path) -> None:
    """With data, every sample not held out calibrates (not a silent default cap); a cap is honoured."""
    src = mlp(tmp_path / "mlp.onnx")
    feeds = samples(60)
    _, report = gw.quantize(src, mode="static", samples=feeds, eval_samples=12)
    assert report.calibration_samples == 48 and report.eval_samples == 12
    _, capped = gw.quantize(src, mode="static", samples=feeds, eval_samples=12, calibration_samples=20)
    assert capped.calibration_samples == 20
    # the ranges are those of exactly the 48 calibration samples: onnxruntime's MinMax on them agrees
    calibrated = [f for i, f in enumerate(feeds) if (i + 1) % HOLDOUT_STRIDE]
    out = ort_tensor(src, "y", calibrated)
    assert report.ranges["y"] == pytest.approx((min(float(a.min()) for a in out), max(float(a.max()) for a in out)))


def test_static_minmax_is_onnxruntime_quantize_static_minmax(tmp_path: Path) -> None:
    """quantize(mode=static, method=minmax) — calibration reduced inside onnxruntime, the split
    samples regrouped 8 at a time — writes the very model onnxruntime's quantize_static writes
    with its MinMax calibrator on the same feeds (BERT, dynamic batch and sequence, feeds of 4
    samples): every initializer (scales, zero points, weight and bias codes) bit for bit."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from graphwright.quantize import quantize
    from graphwright.quantize.calibration import synthetic_samples
    from tests.models.build_onnx_corpus import corpus_model

    src = corpus_model("hf_bert-ts-dyn").path
    feeds = list(synthetic_samples(gw.load(src), 20, seed=7, batch_size=4, dims={"sequence": 20}))
    assert len(feeds) == 5
    it = iter(feeds)

    class Reader:
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(it, None)

    quantize_static(str(src), str(tmp_path / "ort.onnx"), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    model, report = quantize(src, mode="static", samples=feeds, method="minmax", activation_type="int8",
                             report=False)
    gw.save(model, tmp_path / "gw.onnx")
    assert report.calibration_samples == 20
    theirs = {t.name: numpy_helper.to_array(t) for t in onnx.load(tmp_path / "ort.onnx").graph.initializer}
    ours = {t.name: numpy_helper.to_array(t) for t in onnx.load(tmp_path / "gw.onnx").graph.initializer}
    assert sorted(ours) == sorted(theirs) and sum(n.endswith("_scale") for n in ours) > 50
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype and np.array_equal(ours[name], value), name


def test_int16_entropy_and_percentile_use_the_min_max_ranges_int8_percentile_clips() -> None:
    """At 65536 levels clipping buys nothing (percentile's clipping cost 0.9-4.8 dB against the
    converter's 16x8 on ResNet50/EfficientNet-B0): int16 entropy/percentile are min/max, int8 is not."""
    from tests.models import get_model

    info = get_model("tflite_real", "landmarks_float")
    spec = gw.load(info.path).graph.inputs[0]
    rng = np.random.default_rng(5)
    feeds = [{spec.name: rng.uniform(0, 1, size=tuple(spec.shape)).astype(np.float32)} for _ in range(12)]
    ranges = {}
    for mode, method in [("16x8", "minmax"), ("16x8", "entropy"), ("16x8", "percentile"), ("int8", "minmax"),
                         ("int8", "percentile")]:
        _, report = gw.quantize(info.path, mode=mode, method=method, samples=feeds, report=False)
        ranges[mode, method] = report.ranges
        said = any("uses the min/max ranges" in n for n in report.notes)
        assert said == (mode == "16x8" and method != "minmax"), report.notes
    assert ranges["16x8", "entropy"] == ranges["16x8", "minmax"] == ranges["16x8", "percentile"]
    assert ranges["int8", "minmax"] == ranges["16x8", "minmax"]
    clipped = [n for n, r in ranges["int8", "percentile"].items() if r != ranges["int8", "minmax"][n]]
    assert len(clipped) > len(ranges["int8", "minmax"]) // 2
