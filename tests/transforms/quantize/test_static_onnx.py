"""quantize_static on ONNX against onnxruntime's own QDQ quantizer, on the same calibrated ranges.

Ranges come from onnxruntime's MinMax calibrator on seeded smooth images (or token ids);
``onnxruntime.quantization.quantize_static(QuantFormat.QDQ)`` gets exactly those ranges
through its calibration cache, graphwright's ``quantize_static_onnx`` the same mapping.  The
two models must hold the same initializers (names, types, shapes, bit-identical values:
weight codes, scales, zero points, int32 biases) and the same nodes (op, domain, inputs,
outputs, axis), give the same outputs on onnxruntime, and be fused by onnxruntime's graph
optimizer into the same integer kernels.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphwright as gw  # noqa: E402
from graphwright.errors import TransformError  # noqa: E402
from graphwright.transforms.quantize.options import QuantOptions, ranges_json  # noqa: E402
from graphwright.transforms.quantize.static_onnx import quantize_static_onnx  # noqa: E402

from ._onnx_quant_models import (  # noqa: E402
    all_ort_op_types,
    branch_capture,
    op_zoo,
    ort_quantize,
    ort_ranges,
    smooth_images,
    zoo_feeds,
)


# -- helpers -----------------------------------------------------------------------------------
def _source(name: str, tmp: Path, opset: int = 17) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """A float model and its calibration feeds (the first feed also checks outputs)."""
    if name == "zoo":
        path = tmp / f"zoo{opset}.onnx"
        onnx.save(op_zoo(opset), path)
        return path, zoo_feeds(6)
    from tests.models.build_onnx_corpus import corpus_model, feeds_for

    info = corpus_model(name)
    specs = info.metadata["feeds"]
    if list(specs) == ["input"] and specs["input"]["shape"] == [1, 3, 64, 64]:
        return info.path, [{"input": x} for x in smooth_images((1, 3, 64, 64), 6, seed=0)]
    feeds = [feeds_for(info.metadata, 0, seed) for seed in range(4)]
    for feed in feeds:  # images: smooth, not white noise
        for key, value in feed.items():
            if value.dtype == np.float32 and value.ndim == 4:
                feed[key] = smooth_images(value.shape, 1, seed=len(key))[0]
    return info.path, feeds


def _ours(src: Path, out: Path, ranges: dict, **options: object):
    model = gw.load(src)
    result = quantize_static_onnx(model, ranges, QuantOptions.build(**options))
    gw.save(model, out)
    return onnx.load(str(out)), result


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _nodes(model: onnx.ModelProto) -> Counter:
    """Every node (op, domain, inputs, outputs, axis), those of If/Loop bodies too."""
    def axis(n):
        return tuple(helper.get_attribute_value(a) for a in n.attribute if a.name == "axis")

    def walk(graph):
        for n in graph.node:
            yield n
            for a in n.attribute:
                for body in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    yield from walk(body)
    return Counter((n.op_type, n.domain, tuple(n.input), tuple(n.output), axis(n)) for n in walk(model.graph))


def assert_same_model(theirs: onnx.ModelProto, ours: onnx.ModelProto) -> None:
    a, b = _initializers(theirs), _initializers(ours)
    assert sorted(a) == sorted(b)
    for name, value in a.items():
        assert (b[name].dtype, b[name].shape) == (value.dtype, value.shape), name
        assert np.array_equal(b[name], value), name
    assert _nodes(ours) == _nodes(theirs)
    assert {o.domain or "": o.version for o in ours.opset_import} == \
        {o.domain or "": o.version for o in theirs.opset_import}


def _run(path: Path, feeds: dict[str, np.ndarray], *, save: Path | None = None,
         level: str = "ORT_DISABLE_ALL") -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if save is not None:
        so.optimized_model_filepath = str(save)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(path: Path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


# -- the same model as onnxruntime's ---------------------------------------------------------------
CASES = [
    ("zoo", dict(activation_type="int8")),
    ("zoo", dict(activation_type="uint8", symmetric_activations=True)),
    ("zoo", dict(activation_type="int8", per_channel=False)),
    ("tv_resnet18-ts-fixed", dict(activation_type="int8")),
    ("tv_mobilenet_v3_small-ts-fixed", dict(activation_type="uint8")),
    ("hf_bert-ts-dyn", dict(activation_type="int8")),
]


@pytest.mark.parametrize(("name", "options"), CASES, ids=lambda c: c if isinstance(c, str) else
                         "-".join(f"{k}={v}" for k, v in c.items()))
def test_same_model_as_onnxruntime_quantize_static(name: str, options: dict, tmp_path: Path) -> None:
    src, feeds = _source(name, tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path,
                          activation_type=options["activation_type"],
                          per_channel=options.get("per_channel", True),
                          symmetric=options.get("symmetric_activations", False))
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges, **options)
    onnx.checker.check_model(ours, full_check=True)
    assert_same_model(theirs, ours)

    # the counts describe the model
    q_nodes = sum(1 for n in ours.graph.node if n.op_type == "QuantizeLinear")
    dq_nodes = sum(1 for n in ours.graph.node if n.op_type == "DequantizeLinear")
    assert result.changed and result.stats["qdq_pairs"] == q_nodes > 0
    assert dq_nodes == q_nodes + result.stats["weights_quantized"] + result.stats["biases_quantized"]
    # graph outputs keep their names and float type
    float_outputs = [(o.name, o.type.tensor_type.elem_type) for o in onnx.load(str(src)).graph.output]
    assert [(o.name, o.type.tensor_type.elem_type) for o in ours.graph.output] == float_outputs

    expected = _run(tmp_path / "ort.onnx", feeds[0])
    got = _run(tmp_path / "gw.onnx", feeds[0])
    floats = _run(src, feeds[0])
    for e, g, f in zip(expected, got, floats, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)
        assert np.abs(g - f).max() > 0  # quantized for real


WIDE = [
    "tv_efficientnet_b0-ts-fixed", "tv_efficientnet_b0-dynamo-fixed", "tv_convnext_tiny-ts-fixed",
    "tv_regnet_x_400mf-ts-fixed", "tv_lraspp_mobilenet_v3_large-ts-fixed", "tv_deeplabv3_mobilenet_v3_large-ts-fixed",
    "tv_swin_t-ts-fixed", "tv_swin_t-dynamo-fixed", "tv_vit_b_16-ts-fixed", "tv_r3d_18-ts-fixed",
    "tv_resnet18-dynamo-fixed", "tv_mobilenet_v3_small-dynamo-fixed", "hf_gpt2-ts-dyn", "hf_gpt2-dynamo-dyn",
    "hf_distilbert-ts-dyn", "hf_roberta-ts-dyn", "hf_bert-dynamo-dyn", "hf_vit-ts-dyn", "hf_llama_kv-ts-dyn",
    "hf_whisper_encoder-ts-dyn", "hf_clip-ts-dyn", "hf_wav2vec2-ts-dyn", "hf_segformer-ts-dyn",
    "timm_mobilevit_xxs-ts-dyn", "timm_levit_128s-ts-dyn", "timm_efficientformer_l1-ts-dyn", "gru_loop-ts-dyn",
    "timm_convnext_atto-ts-dyn", "timm_vit_dynamic_img-dynamo-dyn", "hf_deit-ts-dyn", "hf_swin-ts-dyn",
    "hf_whisper_decoder-dynamo-dyn", "tv_r3d_18-dynamo-dyn",
    # detection: NMS inside If branches that read quantized tensors of the main graph
    "tv_ssdlite320_mobilenet_v3_large-ts-dyn", "tv_fasterrcnn_mobilenet_v3_large_fpn-ts-dyn",
    "tv_retinanet_resnet50_fpn-ts-dyn", "tv_fcos_resnet50_fpn-ts-dyn",
]


@pytest.mark.wide
@pytest.mark.parametrize("name", WIDE)
def test_same_model_as_onnxruntime_on_the_corpus(name: str, tmp_path: Path) -> None:
    src, feeds = _source(name, tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path)
    ours, _ = _ours(src, tmp_path / "gw.onnx", ranges)
    assert_same_model(theirs, ours)
    for e, g in zip(_run(tmp_path / "ort.onnx", feeds[0]), _run(tmp_path / "gw.onnx", feeds[0]), strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)


def test_zoo_marks_every_rule(tmp_path: Path) -> None:
    """Which tensors the zoo gets pairs on, by rule (the onnxruntime comparison checks the rest)."""
    src, feeds = _source("zoo", tmp_path)
    ranges, _ = ort_ranges(src, feeds, tmp_path)
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges)
    ops = Counter(n.op_type for n in ours.graph.node)
    assert ops["Relu"] == ops["Clip"] == 0 and result.stats["activations_removed"] == 2
    inits = _initializers(ours)
    assert inits["W1_quantized"].dtype == np.int8 and inits["W1_scale"].shape == (8,)       # Conv: axis 0
    assert inits["Wt_scale"].shape == (4,)                                                   # ConvTranspose: 1
    assert inits["Wg_scale"].shape == (5,) and inits["Wg2_scale"].shape == (5,)              # Gemm transB 1 / 0
    assert inits["Wm_scale"].shape == (8,)                                                    # MatMul: axis 1
    assert inits["B1_quantized"].dtype == np.int32
    np.testing.assert_array_equal(inits["B1_quantized_scale"], inits["x_scale"] * inits["W1_scale"])
    g2 = next(n for n in ours.graph.node if n.name == "gemm")
    assert [helper.get_attribute_value(a) for a in g2.attribute if a.name == "beta"] == [1.0]  # folded in Bg2
    producer = {o: n for n in ours.graph.node for o in n.output}
    # the outputs of sharing ops reuse the scale of the tensor they come from, through chains
    shares = {"mp": "r1", "ap": "cl", "rs": "cl", "sa": "cl", "sb": "cl", "rsh": "wh", "tp": "wh",
              "emb": "table", "emb3": "table", "emb2": "table", "pd": "mu", "sl": "mu"}
    for shared, source in shares.items():
        assert producer[f"{shared}_QuantizeLinear_Output"].input[1] == f"{source}_scale", shared
    assert "r1_scale" in inits and "c1_scale" not in inits  # the Conv writes the Relu's output directly
    assert ops["ReduceMean"] == 1  # no rule: left float (its output is quantized as the Gemm's input)
    assert any("ReduceMean" in note for note in result.notes)
    softmax_scale = inits["probs_scale"]
    assert softmax_scale == np.float32(1.0 / 255.0)  # Softmax output range fixed to [0, 1]


# -- onnxruntime fuses it ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tv_resnet18-ts-fixed", "zoo"])
def test_onnxruntime_fuses_into_integer_kernels(name: str, tmp_path: Path) -> None:
    src, feeds = _source(name, tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path, activation_type="uint8")
    _ours(src, tmp_path / "gw.onnx", ranges, activation_type="uint8")
    _run(tmp_path / "ort.onnx", feeds[0], save=tmp_path / "ort.opt.onnx", level="ORT_ENABLE_EXTENDED")
    _run(tmp_path / "gw.onnx", feeds[0], save=tmp_path / "gw.opt.onnx", level="ORT_ENABLE_EXTENDED")
    ours, theirs = _ops(tmp_path / "gw.opt.onnx"), _ops(tmp_path / "ort.opt.onnx")
    assert ours == theirs
    if name == "tv_resnet18-ts-fixed":
        assert ours["QLinearConv"] == 20 and ours["Conv"] == 0
        assert ours["QLinearAdd"] == 8 and ours["QGemm"] == 1
    else:
        assert ours["QLinearConv"] == 1 and ours["QLinearMatMul"] >= 2 and ours["QLinearSigmoid"] == 1


# -- int16 activations ------------------------------------------------------------------------------
def test_int16_activations_at_opset_21_match_onnxruntime(tmp_path: Path) -> None:
    src, feeds = _source("zoo", tmp_path, opset=21)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path, activation_type="int16")
    ours, _ = _ours(src, tmp_path / "gw.onnx", ranges, activation_type="int16")
    assert_same_model(theirs, ours)
    assert _initializers(ours)["x_zero_point"].dtype == np.int16
    assert all(n.domain == "" for n in ours.graph.node)
    got, expected = _run(tmp_path / "gw.onnx", feeds[0]), _run(tmp_path / "ort.onnx", feeds[0])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)


def test_int16_below_opset_21_writes_onnxruntime_contrib_qdq(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

    src, feeds = _source("zoo", tmp_path, opset=17)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    with pytest.raises(TransformError, match="int16 activations need QuantizeLinear of opset 21"):
        _ours(src, tmp_path / "refused.onnx", ranges, activation_type="int16")
    # onnxruntime's quantizer below opset 21 (quantize_static itself would first convert the model)
    quantizer = QDQQuantizer(load_model_with_shape_infer(src), True, False, QuantType.QInt8, QuantType.QInt16,
                             data.data, [], [], all_ort_op_types(), {})
    quantizer.quantize_model()
    quantizer.model.save_model_to_file(str(tmp_path / "ort.onnx"))
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges, activation_type="int16", target="onnxruntime")
    assert_same_model(onnx.load(str(tmp_path / "ort.onnx")), ours)
    assert {n.domain for n in ours.graph.node if "Quantize" in n.op_type} == {"com.microsoft"}
    assert any("com.microsoft" in note for note in result.notes)
    got, expected = _run(tmp_path / "gw.onnx", feeds[0]), _run(tmp_path / "ort.onnx", feeds[0])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)


# -- exclusions -------------------------------------------------------------------------------------
def test_excluded_nodes_and_ops_stay_float_as_in_onnxruntime(tmp_path: Path) -> None:
    src, feeds = _source("zoo", tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    nodes, ops = ["deconv", "matmul_qk"], ["Sigmoid", "LayerNormalization"]
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path, nodes_to_exclude=nodes,
                          op_types=[op for op in all_ort_op_types() if op not in ops])
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges, exclude_nodes=nodes, exclude_ops=ops)
    assert_same_model(theirs, ours)
    inits = _initializers(ours)
    by_name = {n.name: n for n in ours.graph.node}
    assert inits["Wt"].dtype == np.float32 and by_name["deconv"].input[1:] == ["Wt", "Bt"]  # float weight, bias
    assert inits["ln_gamma"].dtype == np.float32 and by_name["lnorm"].input[1:] == ["ln_gamma", "ln_beta"]
    assert "ct_QuantizeLinear_Output" not in {o for n in ours.graph.node for o in n.output}
    assert by_name["clip"].op_type == "Clip"  # after a float node: kept, not folded
    assert by_name["sigmoid"].op_type == "Sigmoid"
    assert result.stats["nodes_left_float"] >= 4
    assert any("deconv" in note and "matmul_qk" in note for note in result.notes)
    got, expected = _run(tmp_path / "gw.onnx", feeds[0]), _run(tmp_path / "ort.onnx", feeds[0])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)


# -- errors and old opsets ---------------------------------------------------------------------------
def test_a_needed_range_missing_is_an_error_naming_it(tmp_path: Path) -> None:
    src, feeds = _source("zoo", tmp_path)
    ranges, _ = ort_ranges(src, feeds, tmp_path)
    del ranges["g12"]
    with pytest.raises(TransformError, match="no calibrated range for 'g12'"):
        _ours(src, tmp_path / "gw.onnx", ranges)


def _conv_model(opset: int, weight_scale: float = 0.3, bias_scale: float = 0.1) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, weight_scale, (4, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, bias_scale, (4,)).astype(np.float32), "B")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], "conv"), helper.make_node("Relu", ["c"], ["y"], "relu")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def test_opset_below_10_is_refused(tmp_path: Path) -> None:
    onnx.save(_conv_model(9), tmp_path / "conv9.onnx")
    model = gw.load(tmp_path / "conv9.onnx")
    with pytest.raises(TransformError, match="opset 9 has no QuantizeLinear"):
        quantize_static_onnx(model, {"x": (-1.0, 1.0), "c": (-1.0, 1.0), "y": (0.0, 1.0)}, QuantOptions())


def test_opset_12_quantizes_weights_per_tensor(tmp_path: Path) -> None:
    """No DequantizeLinear axis before opset 13: the result is onnxruntime's per-tensor model."""
    src = tmp_path / "conv12.onnx"
    onnx.save(_conv_model(12), src)
    feeds = [{"x": x} for x in smooth_images((1, 3, 8, 8), 4, seed=1)]
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path, per_channel=False)
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges, per_channel=True)
    assert_same_model(theirs, ours)
    assert _initializers(ours)["W_scale"].shape == ()
    assert any("per tensor" in note for note in result.notes)
    np.testing.assert_allclose(_run(tmp_path / "gw.onnx", feeds[0])[0], _run(tmp_path / "ort.onnx", feeds[0])[0],
                               rtol=0, atol=1e-6)


def test_weight_scale_widened_so_the_bias_fits_int32(tmp_path: Path) -> None:
    """Tiny weights under a large bias: onnxruntime raises the weight scale; so do we, identically."""
    src = tmp_path / "conv.onnx"
    onnx.save(_conv_model(17, weight_scale=1e-6, bias_scale=1e3), src)
    feeds = [{"x": x * 1e-3} for x in smooth_images((1, 3, 8, 8), 4, seed=2)]
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path)
    ours, result = _ours(src, tmp_path / "gw.onnx", ranges)
    assert result.stats["weight_scales_widened"] >= 1
    assert_same_model(theirs, ours)
    assert np.abs(_initializers(ours)["B_quantized"]).max() < np.iinfo(np.int32).max


def test_pipeline_transform_reads_a_ranges_file(tmp_path: Path) -> None:
    src, feeds = _source("zoo", tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    (tmp_path / "ranges.json").write_text(ranges_json(ranges, method="minmax"))
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path)
    model = gw.load(src)
    report = gw.transform(model, f"quantize_static(ranges={tmp_path / 'ranges.json'})")
    assert report.changed
    gw.save(model, tmp_path / "gw.onnx")
    assert_same_model(theirs, onnx.load(str(tmp_path / "gw.onnx")))


def test_an_already_quantized_model_is_left_as_it_is(tmp_path: Path) -> None:
    """A QDQ model (onnxruntime's own ResNet-18 output, from the corpus): nothing quantized twice.

    (onnxruntime's quantize_static on it quantizes every tensor again and writes duplicate node
    names, a model onnxruntime then refuses to load.)"""
    src, feeds = _source("resnet18_qdq-ts-fixed", tmp_path)
    ranges, _ = ort_ranges(src, feeds, tmp_path)
    _, result = _ours(src, tmp_path / "gw.onnx", ranges)
    assert result.stats["qdq_pairs"] == result.stats["weights_quantized"] == result.stats["biases_quantized"] == 0
    assert result.stats["already_quantized"] > 0 and not result.changed
    assert _ops(tmp_path / "gw.onnx") == _ops(src)
    np.testing.assert_array_equal(_run(tmp_path / "gw.onnx", feeds[0])[0], _run(src, feeds[0])[0])


def test_constant_node_outputs_need_no_calibrated_range(tmp_path: Path) -> None:
    """BERT's attention scale is a Constant node read by a Mul: its range is its own value, as
    onnxruntime's calibrator finds it, so ranges without it give the same model."""
    src, feeds = _source("hf_bert-ts-dyn", tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    constants = {n.output[0] for n in onnx.load(str(src)).graph.node if n.op_type == "Constant"}
    dropped = {name: pair for name, pair in ranges.items() if name not in constants}
    assert len(dropped) < len(ranges)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path)
    ours, _ = _ours(src, tmp_path / "gw.onnx", dropped)
    assert_same_model(theirs, ours)


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("symmetric", [True, False])
def test_uint8_weights_match_onnxruntime_weight_symmetric(per_channel: bool, symmetric: bool, tmp_path: Path) -> None:
    """``symmetric_weights`` is onnxruntime's ``WeightSymmetric`` (per channel is symmetric anyway)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    src, feeds = _source("zoo", tmp_path)
    ranges, data = ort_ranges(src, feeds, tmp_path)
    save_tensors_data(data, tmp_path / "cache.json")
    quantize_static(str(src), str(tmp_path / "ort.onnx"), None, quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8,
                    calibration_cache_path=str(tmp_path / "cache.json"), extra_options={"WeightSymmetric": symmetric})
    ours, _ = _ours(src, tmp_path / "gw.onnx", ranges, activation_type="uint8", weight_type="uint8",
                    per_channel=per_channel, symmetric_weights=symmetric)
    assert_same_model(onnx.load(str(tmp_path / "ort.onnx")), ours)
    zero = _initializers(ours)["Wm_zero_point"]
    assert zero.dtype == np.uint8 and (np.all(zero == 128) if symmetric or per_channel else np.any(zero != 128))
    # the pipeline transform takes the same options
    (tmp_path / "ranges.json").write_text(ranges_json(ranges, method="minmax"))
    model = gw.load(src)
    gw.transform(model, f"quantize_static(ranges={tmp_path / 'ranges.json'}, activation_type=uint8, "
                        f"weight_type=uint8, per_channel={str(per_channel).lower()}, "
                        f"symmetric_weights={str(symmetric).lower()})")
    gw.save(model, tmp_path / "pipeline.onnx")
    assert_same_model(onnx.load(str(tmp_path / "ort.onnx")), onnx.load(str(tmp_path / "pipeline.onnx")))


def test_4bit_weights_are_refused(tmp_path: Path) -> None:
    onnx.save(_conv_model(17), tmp_path / "conv.onnx")
    with pytest.raises(TransformError, match="use quantize_weights for 4-bit weights"):
        quantize_static_onnx(gw.load(tmp_path / "conv.onnx"), {}, QuantOptions(weight_type="int4"))


def test_if_branches_keep_reading_the_float_tensor(tmp_path: Path) -> None:
    """Only main-graph readers move to the DequantizeLinear output, as in onnxruntime."""
    src = tmp_path / "branch.onnx"
    onnx.save(branch_capture(), src)
    feeds = [{"x": x, "flag": np.array(i % 2 == 0)} for i, x in enumerate(smooth_images((1, 3, 8, 8), 4, seed=3))]
    ranges, data = ort_ranges(src, feeds, tmp_path)
    theirs = ort_quantize(src, tmp_path / "ort.onnx", data, tmp_path)
    ours, _ = _ours(src, tmp_path / "gw.onnx", ranges)
    assert_same_model(theirs, ours)
    branch = next(n for n in ours.graph.node if n.op_type == "If")
    assert [n.input for body in branch.attribute for n in body.g.node] == [["c"], ["c"]]
    assert next(n for n in ours.graph.node if n.op_type == "Mul").input[0] == "c_DequantizeLinear_Output"
    for feed in feeds[:2]:
        np.testing.assert_allclose(_run(tmp_path / "gw.onnx", feed)[0], _run(tmp_path / "ort.onnx", feed)[0],
                                   rtol=0, atol=1e-6)
