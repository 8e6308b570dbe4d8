"""quantize_dynamic on ONNX against onnxruntime.quantization.quantize_dynamic on the same models.

Every quantized initializer (codes, scales, zero points) must equal onnxruntime's byte for byte,
the two quantized models must give the same outputs on onnxruntime, stay close to the float
model, and onnxruntime's optimizer must fuse ours into DynamicQuantizeMatMul / MatMulIntegerToFloat.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import TransformError
from graphwright.transforms.quantize.dynamic_onnx import quantize_dynamic_onnx
from graphwright.transforms.quantize.options import QuantOptions

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: E402

logging.getLogger().setLevel(logging.ERROR)  # quantize_dynamic's "consider pre-processing" warning
_RNG_SEED = 0
_QUANT_SUFFIXES = ("_quantized", "_scale", "_zero_point", "_Transposed")


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], std: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name)


def _save(graph: onnx.GraphProto, path: Path, opset: int = 17) -> Path:
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def mlp(path: Path) -> Path:
    """Embedding Gather -> MatMul+Add -> Relu -> Gemm(transB, bias) + Gemm(no bias); one weight read twice."""
    rng = np.random.default_rng(_RNG_SEED)
    nodes = [
        oh.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
        oh.make_node("ReduceMean", ["e"], ["x"], axes=[1], keepdims=0, name="pool"),
        oh.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
        oh.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
        oh.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        oh.make_node("Gemm", ["r1", "w2", "b2"], ["g2"], name="gemm2", transB=1),
        oh.make_node("Gemm", ["r1", "w3"], ["g3"], name="gemm3"),
        oh.make_node("MatMul", ["r1", "w3"], ["g4"], name="mm_shared"),
        oh.make_node("Add", ["g2", "g3"], ["s"], name="sum"),
        oh.make_node("Add", ["s", "g4"], ["y"], name="sum2"),
    ]
    inits = [_init(rng, "emb", (50, 16)), _init(rng, "w1", (16, 32)), _init(rng, "b1", (32,), 0.1),
             _init(rng, "w2", (8, 32)), _init(rng, "b2", (8,), 0.1), _init(rng, "w3", (32, 8))]
    graph = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return _save(graph, path)


def cnn(path: Path) -> Path:
    """Conv(bias) -> Relu -> Conv(no bias) -> Flatten -> Gemm."""
    rng = np.random.default_rng(_RNG_SEED + 1)
    nodes = [
        oh.make_node("Conv", ["x", "c1", "cb1"], ["h1"], name="conv1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", "c2"], ["h2"], name="conv2", strides=[2, 2]),
        oh.make_node("Flatten", ["h2"], ["f"], name="flat"),
        oh.make_node("Gemm", ["f", "fc", "fcb"], ["y"], name="fc", transB=1),
    ]
    inits = [_init(rng, "c1", (8, 3, 3, 3)), _init(rng, "cb1", (8,), 0.1), _init(rng, "c2", (4, 8, 3, 3)),
             _init(rng, "fc", (10, 4 * 3 * 3), 0.2), _init(rng, "fcb", (10,), 0.1)]
    graph = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    return _save(graph, path)


def lstm(path: Path) -> Path:
    """A bidirectional LSTM (bias, initial state omitted) and a MatMul on its last hidden state."""
    rng = np.random.default_rng(_RNG_SEED + 2)
    hidden, size = 12, 6
    nodes = [oh.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h"], name="lstm", hidden_size=hidden,
                          direction="bidirectional"),
             oh.make_node("Reshape", ["Y_h", "flat_shape"], ["h"], name="flat"),
             oh.make_node("MatMul", ["h", "head"], ["y"], name="head_mm")]
    inits = [_init(rng, "W", (2, 4 * hidden, size)), _init(rng, "R", (2, 4 * hidden, hidden)),
             _init(rng, "B", (2, 8 * hidden), 0.1), _init(rng, "head", (2 * hidden, 3)),
             numpy_helper.from_array(np.array([2, 2 * hidden], np.int64), "flat_shape")]
    graph = oh.make_graph(nodes, "lstm", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, size])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                           oh.make_tensor_value_info("Y", TensorProto.FLOAT, [5, 2, 2, hidden])], inits)
    return _save(graph, path)


def fused_bert(path: Path) -> Path:
    """The BERT export after onnxruntime's transformer optimizer: com.microsoft Attention, EmbedLayerNormalization."""
    from onnxruntime.transformers.optimizer import optimize_model

    from tests.models.build_onnx_corpus import corpus_model

    optimized = optimize_model(str(corpus_model("hf_bert-ts-dyn").path), model_type="bert", num_heads=4,
                               hidden_size=64, opt_level=0)
    optimized.save_model_to_file(str(path))
    return path


def _source(name: str, tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    if name == "mlp":
        return mlp(tmp_path / "mlp.onnx"), {"ids": rng.integers(0, 50, (2, 5), dtype=np.int64)}
    if name == "lstm":
        return lstm(tmp_path / "lstm.onnx"), {"x": rng.normal(0, 1, (5, 2, 6)).astype(np.float32)}
    if name == "cnn":
        return cnn(tmp_path / "cnn.onnx"), {"x": rng.normal(0, 1, (2, 3, 8, 8)).astype(np.float32)}
    if name == "bert-ort-fused":
        path = fused_bert(tmp_path / "fused.onnx")
    else:
        from tests.models.build_onnx_corpus import corpus_model

        path = corpus_model(name).path
    ids = rng.integers(0, 1000, (2, 16), dtype=np.int64)
    return path, {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def _ours(src: Path, out: Path, **options: object) -> object:
    model = gw.load(src)
    result = quantize_dynamic_onnx(model, QuantOptions.build(**options))
    gw.save(model, out)
    return result


def _initializers(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _ops(path: Path) -> Counter[str]:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def _run(path: Path, feeds: dict[str, np.ndarray], level: str = "ORT_ENABLE_ALL", save: Path | None = None
         ) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if save is not None:
        so.optimized_model_filepath = str(save)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm", "hf_bert-ts-dyn", "hf_gpt2-ts-dyn", "bert-ort-fused"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_same_parameters_and_outputs_as_quantize_dynamic(name: str, per_channel: bool, tmp_path: Path) -> None:
    src, feeds = _source(name, tmp_path)
    quantize_dynamic(str(src), str(tmp_path / "ort.onnx"), per_channel=per_channel, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})  # contrib ops have no inferred types
    result = _ours(src, tmp_path / "gw.onnx", per_channel=per_channel)
    onnx.checker.check_model(str(tmp_path / "gw.onnx"))

    theirs, ours = _initializers(tmp_path / "ort.onnx"), _initializers(tmp_path / "gw.onnx")
    quantized = [n for n in theirs if n.endswith(_QUANT_SUFFIXES)]
    assert len(quantized) >= 6
    assert sorted(quantized) == sorted(n for n in ours if n.endswith(_QUANT_SUFFIXES))
    for n in quantized:
        assert ours[n].dtype == theirs[n].dtype and ours[n].shape == theirs[n].shape, n
        np.testing.assert_array_equal(ours[n], theirs[n], err_msg=n)
    assert set(ours) == set(theirs)  # the float weights that were quantized are gone from both

    quantized_ops = ("MatMulInteger", "ConvInteger", "DequantizeLinear", "DynamicQuantizeLSTM", "QAttention",
                     "QEmbedLayerNormalization")
    for op in ("DynamicQuantizeLinear", *quantized_ops):
        assert _ops(tmp_path / "gw.onnx")[op] == _ops(tmp_path / "ort.onnx")[op], op
    assert result.stats["nodes_quantized"] == sum(_ops(tmp_path / "gw.onnx")[op] for op in quantized_ops) > 0

    float_out = _run(src, feeds)
    ort_out = _run(tmp_path / "ort.onnx", feeds)
    our_out = _run(tmp_path / "gw.onnx", feeds)
    for f, a, b in zip(float_out, ort_out, our_out):
        span = float(np.abs(f).max())
        assert np.abs(a - b).max() <= 1e-5 * span  # same integers, same rescale: float rounding only
        assert np.abs(b - f).max() <= 0.1 * span  # eight-bit error stays bounded


@pytest.mark.parametrize("name", ["mlp", "hf_bert-ts-dyn"])
def test_onnxruntime_fuses_the_dynamic_matmuls(name: str, tmp_path: Path) -> None:
    src, feeds = _source(name, tmp_path)
    _ours(src, tmp_path / "gw.onnx")
    quantize_dynamic(str(src), str(tmp_path / "ort.onnx"), weight_type=QuantType.QInt8)
    _run(tmp_path / "gw.onnx", feeds, "ORT_ENABLE_EXTENDED", save=tmp_path / "gw_opt.onnx")
    _run(tmp_path / "ort.onnx", feeds, "ORT_ENABLE_EXTENDED", save=tmp_path / "ort_opt.onnx")
    ours, theirs = _ops(tmp_path / "gw_opt.onnx"), _ops(tmp_path / "ort_opt.onnx")
    fused = ours["DynamicQuantizeMatMul"] + ours["MatMulIntegerToFloat"]
    assert fused > 0 and ours["MatMulInteger"] < _ops(tmp_path / "gw.onnx")["MatMulInteger"]
    for op in ("DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulInteger", "DynamicQuantizeLinear"):
        assert ours[op] == theirs[op], (op, ours, theirs)


def test_uint8_asymmetric_weights_match_quantize_dynamic(tmp_path: Path) -> None:
    src, feeds = _source("mlp", tmp_path)
    quantize_dynamic(str(src), str(tmp_path / "ort.onnx"), weight_type=QuantType.QUInt8, per_channel=True)
    _ours(src, tmp_path / "gw.onnx", weight_type="uint8", symmetric_weights=False, per_channel=True)
    theirs, ours = _initializers(tmp_path / "ort.onnx"), _initializers(tmp_path / "gw.onnx")
    assert set(ours) == set(theirs)
    for n in theirs:
        np.testing.assert_array_equal(ours[n], theirs[n], err_msg=n)
        assert ours[n].dtype == theirs[n].dtype
    assert (ours["w1_zero_point"] != 128).any()  # asymmetric: the zero points follow each column's range
    np.testing.assert_allclose(_run(tmp_path / "gw.onnx", feeds)[0], _run(tmp_path / "ort.onnx", feeds)[0],
                               rtol=0, atol=1e-6)


def test_exclusions_leave_nodes_float(tmp_path: Path) -> None:
    src, _ = _source("mlp", tmp_path)
    quantize_dynamic(str(src), str(tmp_path / "ort.onnx"), weight_type=QuantType.QInt8, nodes_to_exclude=["mm1"],
                     op_types_to_quantize=["MatMul", "Conv"])
    result = _ours(src, tmp_path / "gw.onnx", exclude_nodes=["mm1"], exclude_ops=["Gather"], per_channel=False)
    ops = _ops(tmp_path / "gw.onnx")
    assert ops["MatMul"] == 1 and ops["Gather"] == 1 and ops["DequantizeLinear"] == 0
    assert ops["MatMulInteger"] == _ops(tmp_path / "ort.onnx")["MatMulInteger"] == 3
    assert result.stats["MatMul_quantized"] == 3 and "Gather_quantized" not in result.stats
    theirs, ours = _initializers(tmp_path / "ort.onnx"), _initializers(tmp_path / "gw.onnx")
    assert set(ours) == set(theirs)
    for n in theirs:
        np.testing.assert_array_equal(ours[n], theirs[n], err_msg=n)


def test_non_constant_weights_are_reported(tmp_path: Path) -> None:
    src, _ = _source("hf_bert-ts-dyn", tmp_path)
    model = gw.load(src)
    result = quantize_dynamic_onnx(model, QuantOptions())
    # attention's Q·K^T and P·V read two activations: left float, each with a note
    assert any("MatMul left float (B is not a float32 initializer)" in n for n in result.notes)
    assert result.stats["nodes_left_float"] == len(result.notes) > 0


def test_pipeline_transform_and_errors(tmp_path: Path) -> None:
    src, _ = _source("mlp", tmp_path)
    model = gw.load(src)
    report = gw.transform(model, "quantize_dynamic(per_channel=false)")
    assert report.changed and report.steps[0].stats["MatMul_quantized"] == 4
    with pytest.raises(TransformError, match="int8 or uint8"):
        quantize_dynamic_onnx(gw.load(src), QuantOptions(weight_type="int4"))
    rng = np.random.default_rng(0)
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "old",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [_init(rng, "w", (16, 8))])
    old = _save(graph, tmp_path / "old.onnx", opset=10)
    with pytest.raises(TransformError, match="opset >= 11"):
        quantize_dynamic_onnx(gw.load(old), QuantOptions())


_WIDE = ["hf_bert-dynamo-dyn", "hf_gpt2-dynamo-dyn", "hf_distilbert-ts-dyn", "hf_roberta-ts-dyn", "hf_t5-ts-dyn",
         "hf_whisper_encoder-ts-dyn", "hf_wav2vec2-ts-dyn", "hf_vit-ts-dyn", "hf_llama_kv-ts-dyn",
         "tv_resnet18-ts-fixed", "tv_mobilenet_v3_small-ts-fixed", "tv_vit_b_16-ts-fixed"]


@pytest.mark.wide
@pytest.mark.parametrize("name", _WIDE)
@pytest.mark.parametrize("per_channel", [False, True])
def test_wide_same_parameters_as_quantize_dynamic(name: str, per_channel: bool, tmp_path: Path) -> None:
    from tests.models.build_onnx_corpus import corpus_model

    src = corpus_model(name).path
    quantize_dynamic(str(src), str(tmp_path / "ort.onnx"), per_channel=per_channel, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
    _ours(src, tmp_path / "gw.onnx", per_channel=per_channel)
    theirs, ours = _initializers(tmp_path / "ort.onnx"), _initializers(tmp_path / "gw.onnx")
    quantized = [n for n in theirs if n.endswith(_QUANT_SUFFIXES)]
    assert quantized and set(quantized) == {n for n in ours if n.endswith(_QUANT_SUFFIXES)}
    for n in quantized:
        assert ours[n].dtype == theirs[n].dtype and ours[n].shape == theirs[n].shape, n
        np.testing.assert_array_equal(ours[n], theirs[n], err_msg=n)
    for op in ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"):
        assert _ops(tmp_path / "gw.onnx")[op] == _ops(tmp_path / "ort.onnx")[op], op
