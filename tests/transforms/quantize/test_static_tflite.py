"""quantize_static_tflite against the TFLite converter's own full-integer quantization.

The anchor is the converter itself: the cached Keras models of tests/models/build_tflite_real.py,
converted to float and, from the same weights and the same representative data, to int8
(``TFLITE_BUILTINS_INT8``) and 16x8.  graphwright quantizes the float ``.tflite`` with the
converter's calibrated ranges and the result must equal the converter's file: the same operators
in the same order with the same versions and options, and every tensor with the same name, type,
shape, scales, zero points, axis, recorded min/max and constant bytes (weights, biases).

The calibrated ranges: the 16x8 quantizer records each activation's calibrated range (widened to
hold 0) in the file, and the converter calibrates the int8 and the 16x8 conversion on the same
float model with the same data, so the 16x8 file's min/max are the ranges of both conversions —
feeding them to graphwright reproduces the int8 file exactly as well (its nudged scales, and the
tensors whose calibrated range the converter overrides through same-scale operators).  Where no
16x8 sibling exists (the token transformer), the ranges are taken back from the int8 file's own
scales and zero points (``min = s * (-128 - zp)``, ``max = s * (127 - zp)``); the converter
computes scales in float32 from the calibrated floats, so a range recovered from a written scale
can land one float32 step away: there scales are allowed one ulp and everything else is exact.

Then graphwright's model runs on LiteRT's default and reference (``BUILTIN_REF``) kernels and on
TFLite Micro with the converter's model beside it (identical outputs), and graphwright's own
reference interpreter is bit-exact with ``BUILTIN_REF`` on every tensor (``assert_matches_reference``).
(TFLite Micro has no int16 REDUCE_MAX: it refuses the converter's 16x8 landmarks model and ours
with the same message, which is asserted instead.)
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import TransformError, VerificationError
from graphwright.ir import DType, Model, Value
from graphwright.runtime import run, tflm
from graphwright.transforms.quantize.options import QuantOptions, ranges_json
from graphwright.transforms.quantize.static_tflite import quantize_static_tflite
from graphwright.transforms.runner import run_pipeline
from tests.models import ModelInfo, get_model
from tests.runtime.reference._oracle import assert_matches_reference, feeds_for

#: Names the 16x8 quantizer gives the tensors it adds (their float originals carry the ranges).
ADDED_SUFFIXES = ("_int16", "_requantized", "_float")


def _ranges_recorded(model: Model) -> dict[str, tuple[float, float]]:
    """The calibrated ranges the converter's 16x8 quantizer wrote into its file."""
    ranges = {}
    for value in _tensors(model).values():
        q = value.quant
        if value.const is None and q is not None and q.min is not None and q.min.size == 1 \
                and not value.name.endswith(ADDED_SUFFIXES):
            ranges[value.name] = (float(q.min[0]), float(q.max[0]))
    return ranges


def _ranges_from_scales(model: Model) -> dict[str, tuple[float, float]]:
    """Ranges recovered from an int8 file's scales and zero points (a QUANTIZE's output also gives
    its float input's range)."""
    ranges = {}
    for node in model.graph:
        for value in (*node.inputs, *node.outputs):
            if value is None or value.const is not None or value.dtype is not DType.INT8 or value.quant is None:
                continue
            scale, zero = float(value.quant.scale[0]), int(value.quant.zero_point[0])
            extent = (scale * (-128 - zero), scale * (127 - zero))
            ranges.setdefault(value.name, extent)
            if node.op == "QUANTIZE" and value is node.output and node.inputs[0].dtype is DType.FLOAT32:
                ranges.setdefault(node.inputs[0].name, extent)  # the float operator's result it quantizes
            if node.op == "DEQUANTIZE" and value is node.inputs[0] and node.output.is_graph_output:
                ranges.setdefault(node.output.name, extent)  # a float graph output: the result it dequantizes
    return ranges


def _tensors(model: Model) -> dict[str, Value]:
    found: dict[str, Value] = {}
    for value in model.graph.inputs:
        found.setdefault(value.name, value)
    for node in model.graph:
        for value in (*node.inputs, *node.outputs):
            if value is not None:
                found.setdefault(value.name, value)
    return found


def _quantize(base: str, mode: str, ranges: dict[str, tuple[float, float]], tmp_path: Path,
              family: str = "tflite_real", **options: object) -> tuple[Path, gw.transforms.registry.TransformResult]:
    model = gw.load(get_model(family, f"{base}_float").path)
    act = "int8" if mode == "int8" else "int16"
    result = quantize_static_tflite(model, ranges, QuantOptions.build(activation_type=act, **options))
    path = tmp_path / f"{base}_{mode}_graphwright.tflite"
    gw.save(model, path)
    return path, result


def _assert_same_file(mine_path: Path, theirs_path: Path, *, scale_ulps: int = 0) -> int:
    """The converter's model, operator for operator (op, version, options) and, for each
    operator, input for input and output for output (name, type, shape, quantization, bytes);
    returns how many tensors were compared.  Constants the converter calls ``arith.constant<n>``
    are numbered in its exporter's own emission order, so their names are not compared."""
    mine, theirs = gw.load(mine_path), gw.load(theirs_path)
    ops_mine = [(n.op, n.meta["tflite.version"], n.output.name) for n in mine.graph]
    ops_theirs = [(n.op, n.meta["tflite.version"], n.output.name) for n in theirs.graph]
    assert ops_mine == ops_theirs
    compared = 0
    for a, b in zip(mine.graph, theirs.graph):
        assert {k: v.value for k, v in a.attrs.items()} == {k: v.value for k, v in b.attrs.items()}, a.name
        assert len(a.inputs) == len(b.inputs) and len(a.outputs) == len(b.outputs), a.name
        for x, y in zip((*a.inputs, *a.outputs), (*b.inputs, *b.outputs)):
            assert (x is None) == (y is None), a.name
            if y is not None:
                _assert_same_tensor(x, y, scale_ulps)
                compared += 1
    for x, y in zip((*mine.graph.inputs, *mine.graph.outputs), (*theirs.graph.inputs, *theirs.graph.outputs), strict=True):
        _assert_same_tensor(x, y, scale_ulps)
    return compared


def _assert_same_tensor(a: Value, b: Value, scale_ulps: int) -> None:
    """Equal, except that with ``scale_ulps`` a scale may sit that many float32 steps away (a
    bias scale, s_in * s_w, twice that) and a code quantized with a moved scale one step."""
    name = b.name
    if not (b.const is not None and name.startswith("arith.constant")):
        assert a.name == name
    assert (a.dtype, a.shape) == (b.dtype, b.shape), name
    qa, qb = a.quant, b.quant
    moved = False
    if qb is None or not qb.scale.size:
        assert qa is None or not qa.scale.size, name
    else:
        assert qa is not None, name
        assert qa.axis == qb.axis and qa.scale.shape == qb.scale.shape, name
        steps = np.abs(qa.scale.view(np.int32).astype(np.int64) - qb.scale.view(np.int32).astype(np.int64))
        bias = b.const is not None and b.dtype in (DType.INT32, DType.INT64)  # s_in * s_w: both ulps add up
        assert steps.max() <= scale_ulps * (2 if bias else 1), f"{name}: scales {qa.scale[:4]} vs {qb.scale[:4]}"
        moved = bool(steps.max() > 0)
        np.testing.assert_array_equal(qa.zero_point, qb.zero_point, err_msg=name)
        for field in ("min", "max"):
            x, y = getattr(qa, field), getattr(qb, field)
            assert (x is None) == (y is None), f"{name}: {field}"
            if y is not None:
                np.testing.assert_array_equal(x, y, err_msg=f"{name}: {field}")
    if b.const is not None:
        x, y = a.const.numpy(), b.const.numpy()
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if moved:
            assert np.abs(x.astype(np.int64) - y.astype(np.int64)).max(initial=0) <= 1, name
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


def _float_operators(model: Model) -> int:
    """Operators the converter left computing in float (QUANTIZE/DEQUANTIZE aside)."""
    return sum(1 for n in model.graph if n.op not in ("QUANTIZE", "DEQUANTIZE") and n.op != "SHAPE"
               and any(v is not None and v.dtype is DType.FLOAT32 for v in (*n.inputs, *n.outputs)))


def _assert_runs_like_converter(mine: Path, theirs: ModelInfo) -> None:
    """Same outputs as the converter's model on LiteRT (default and reference kernels) and TFLM,
    and the reference interpreter bit-exact with LiteRT's reference kernels on every tensor."""
    info = dataclasses.replace(theirs, path=mine, name=f"{theirs.name}_graphwright")
    backends = ["litert", "litert-ref"] + (["tflm"] if tflm.available() else [])
    for seed in range(3):
        feeds = feeds_for(info, seed)
        for backend in backends:
            try:
                want = run(theirs.path, feeds, backend=backend)
            except VerificationError as e:  # TFLM lacks a 16x8 kernel (REDUCE_MAX): ours is refused alike
                message = str(e).split(": ", 1)[1].replace(str(theirs.path), "")
                with pytest.raises(VerificationError) as refused:
                    run(mine, feeds, backend=backend)
                assert str(refused.value).split(": ", 1)[1].replace(str(mine), "") == message
                continue
            got = run(mine, feeds, backend=backend)
            assert set(got) == set(want)
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{backend} seed {seed}: {name}")
    assert assert_matches_reference(info, seeds=range(3)) > 0


def _case(base: str, mode: str, tmp_path: Path, family: str = "tflite_real") -> None:
    theirs = get_model(family, f"{base}_{mode}")
    converter = gw.load(theirs.path)
    sibling = gw.load(get_model(family, f"{base}_int16x8").path)
    io_type = "int8" if mode == "int8" else "int16"
    if converter.graph.outputs[0].dtype is DType.FLOAT32:  # float outputs (token ids in, or float_io)
        io_type = "float32"
    path, result = _quantize(base, mode, _ranges_recorded(sibling), tmp_path, family, io_type=io_type)
    assert result.stats["nodes_quantized"] > 0
    assert _assert_same_file(path, theirs.path) > 10
    _assert_runs_like_converter(path, theirs)


# -- the default run: the BlazeFace-style landmarks model in both modes -----------------------------

def test_int8_landmarks_equals_the_converter(tmp_path: Path) -> None:
    """Conv/depthwise (axis 0 / axis 3 weights), PReLU (a per-tensor weight of zeros: scale
    1e-6/254), ADD, MAX_POOL_2D and PAD (input scale forward), RESHAPE + CONCATENATION (output
    scale back to both convolutions), REDUCE_MAX, MEAN, FULLY_CONNECTED, LOGISTIC (1/256, -128)."""
    _case("landmarks", "int8", tmp_path)


def test_int16x8_landmarks_equals_the_converter(tmp_path: Path) -> None:
    """16x8: int16 activations (zero point 0), int64 biases (quantized_bias_type INT64), PReLU
    (no 16x8 kernel) float between a DEQUANTIZE and one QUANTIZE per reader, the reshaped
    regressor requantized before CONCATENATION, LOGISTIC at (1/32768, 0), min/max recorded."""
    _case("landmarks", "int16x8", tmp_path)


def test_float_io_quantizes_inputs_and_dequantizes_outputs(tmp_path: Path) -> None:
    """io_type float32: a QUANTIZE (version 1) reads the float input, a DEQUANTIZE writes each
    float output under its name; fed values on the int8 grid, the outputs are the converter's
    int8 model's outputs dequantized, bit for bit (LiteRT reference kernels)."""
    theirs = get_model("tflite_real", "landmarks_int8")
    sibling = gw.load(get_model("tflite_real", "landmarks_int16x8").path)
    path, _ = _quantize("landmarks", "int8", _ranges_recorded(sibling), tmp_path, io_type="float32")
    mine, converter = gw.load(path), gw.load(theirs.path)
    first = next(iter(mine.graph))
    assert (first.op, first.meta["tflite.version"], first.inputs[0].dtype) == ("QUANTIZE", 1, DType.FLOAT32)
    for value in mine.graph.outputs:
        assert value.dtype is DType.FLOAT32 and value.producer.op == "DEQUANTIZE"
    assert [v.name for v in mine.graph.outputs] == [v.name for v in converter.graph.outputs]
    (inp,) = converter.graph.inputs
    scale, zero = float(inp.quant.scale[0]), int(inp.quant.zero_point[0])
    codes = np.random.default_rng(3).integers(-128, 128, inp.shape).astype(np.int8)
    floats = (np.float32(scale) * (codes.astype(np.float32) - np.float32(zero))).astype(np.float32)
    got = run(path, {inp.name: floats}, backend="litert-ref")
    want = run(theirs.path, {inp.name: codes}, backend="litert-ref")
    for value in converter.graph.outputs:
        q = value.quant
        expected = np.float32(q.scale[0]) * (want[value.name].astype(np.float32) - np.float32(q.zero_point[0]))
        np.testing.assert_array_equal(got[value.name], expected.astype(np.float32), err_msg=value.name)


def test_excluded_operators_stay_float_between_dequantize_and_quantize(tmp_path: Path) -> None:
    """exclude_ops keeps MEAN in float: a DEQUANTIZE before it, a QUANTIZE after it, a note; the
    model still runs on LiteRT and the reference interpreter matches its reference kernels."""
    sibling = gw.load(get_model("tflite_real", "landmarks_int16x8").path)
    path, result = _quantize("landmarks", "int8", _ranges_recorded(sibling), tmp_path,
                             io_type="int8", exclude_ops=["MEAN"])
    assert result.stats["nodes_float"] == 1
    assert any("(MEAN) stays float: excluded" in note for note in result.notes)
    mine = gw.load(path)
    (mean,) = [n for n in mine.graph if n.op == "MEAN"]
    assert mean.inputs[0].producer.op == "DEQUANTIZE" and mean.output.dtype is DType.FLOAT32
    assert [u.op for u in mean.output.users()] == ["QUANTIZE"]
    info = dataclasses.replace(get_model("tflite_real", "landmarks_int8"), path=path, name="landmarks_excluded")
    assert assert_matches_reference(info, seeds=range(2)) > 0


def test_pipeline_transform_reads_a_ranges_file(tmp_path: Path) -> None:
    """``quantize_static(ranges=FILE, activation_type=int16, io_type=int16)`` in a pipeline: the
    ranges file written by ranges_json gives the converter's 16x8 file, as the direct call does."""
    theirs = get_model("tflite_real", "landmarks_int16x8")
    ranges = tmp_path / "ranges.json"
    ranges.write_text(ranges_json(_ranges_recorded(gw.load(theirs.path)), method="minmax"))
    model = gw.load(get_model("tflite_real", "landmarks_float").path)
    report = run_pipeline(model, f'quantize_static(ranges="{ranges}", activation_type=int16, io_type=int16)')
    assert report.steps[0].stats["nodes_float"] == 7  # the PReLUs
    gw.save(model, tmp_path / "piped.tflite")
    assert _assert_same_file(tmp_path / "piped.tflite", theirs.path) > 10


def test_refusals_name_what_is_wrong() -> None:
    def float_model() -> Model:
        return gw.load(get_model("tflite_real", "landmarks_float").path)

    sibling = gw.load(get_model("tflite_real", "landmarks_int16x8").path)
    ranges = _ranges_recorded(sibling)
    missing = next(iter(n.output.name for n in float_model().graph if n.op == "ADD"))
    with pytest.raises(TransformError, match=r"no calibrated range for tensor .*b1_add"):
        quantize_static_tflite(float_model(), {k: v for k, v in ranges.items() if k != missing}, QuantOptions())
    with pytest.raises(TransformError, match="already quantized"):
        quantize_static_tflite(gw.load(get_model("tflite_real", "landmarks_int8").path), ranges, QuantOptions())
    with pytest.raises(TransformError, match=r"DEQUANTIZE .*quantize its float32 original"):
        quantize_static_tflite(gw.load(get_model("tflite_real", "landmarks_float16").path), ranges, QuantOptions())
    with pytest.raises(TransformError, match="int8 or int16"):
        quantize_static_tflite(float_model(), ranges, QuantOptions(activation_type="uint8"))
    with pytest.raises(TransformError, match="io_type must be float32 or int16"):
        quantize_static_tflite(float_model(), ranges, QuantOptions(activation_type="int16", io_type="int8"))


# -- wide: the other architectures --------------------------------------------------------------------

@pytest.mark.wide
@pytest.mark.parametrize(("base", "mode"), [
    ("resnet50", "int8"), ("resnet50", "int16x8"), ("unet", "int8"), ("unet", "int16x8"),
    ("densenet121", "int8"), ("densenet121", "int16x8"), ("nasnet_mobile", "int8"), ("nasnet_mobile", "int16x8"),
    ("mobilenet_v3_large", "int16x8"),
])
def test_wide_equals_the_converter(base: str, mode: str, tmp_path: Path) -> None:
    """ResNet50 (SOFTMAX fixed output, the converter's per-channel rounding on large filters),
    the U-Net (TRANSPOSE_CONV, RESIZE_BILINEAR, skip CONCATENATIONs: backward scale propagation
    in int8, requantized inputs in 16x8), DenseNet121 (batch norms as MUL/ADD with constant
    operands, one zero bias shared by many convolutions: copied per reader in int8) and
    NASNetMobile (AVERAGE_POOL_2D, separable convolutions, deep CONCATENATION trees) and
    MobileNetV3Large in 16x8 (HARD_SWISH float; SHAPE reads the int16 tensor; STRIDED_SLICE and
    PACK on int32 shapes still get the 16x8 quantizer's versions)."""
    _case(base, mode, tmp_path)


ZOO = ["ds_cnn", "conv1d_audio", "deeplab", "selfie", "pose", "hand", "autoencoder", "wavenet", "multiplier"]


@pytest.mark.wide
@pytest.mark.parametrize(("base", "mode"), [(b, m) for b in (*ZOO, "shufflenet") for m in ("int8", "int16x8")])
def test_wide_zoo_equals_the_converter(base: str, mode: str, tmp_path: Path) -> None:
    """The deployment zoo (tests/models/build_tflite_zoo.py): keyword spotting, 1-D audio convs,
    DeepLab (SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND, ARG_MAX: int8 kernel in int8, float after a
    DEQUANTIZE in 16x8), selfie, pose and hand models, an autoencoder, WaveNet (TANH, LOGISTIC,
    MUL gates), a multiplier net, ShuffleNet's SPLIT (in int8 its results named after the
    operator's fused location, ``split;split1`` and ``split;split11``)."""
    _case(base, mode, tmp_path, "tflite_zoo")


@pytest.mark.wide
@pytest.mark.parametrize(("family", "base"), [
    ("tflite_real", "transformer"), ("tflite_real", "segmenter256"), ("tflite_real", "unet256"),
    ("tflite_real", "mobilenet_v2_224"), ("tflite_real", "efficientnet_b0_224"), ("tflite_math", "unary"),
    ("tflite_math", "extra"), ("tflite_math", "prelu"), ("tflite_math", "relu01"),
    ("tflite_ops", "acts"), ("tflite_ops", "misc"),
    *(("tflite_zoo", b) for b in ("mobilenet_v1", "vit", "batch4", "two_inputs", "image_ops", "super_res",
                                  "face_embed", "xception", "inception_v3", "convnext_tiny", "efficientnet_v2_b0",
                                  "ssd")),
])
def test_wide_int8_equals_the_converter_to_a_scale_ulp(family: str, base: str, tmp_path: Path) -> None:
    _int8_equals_the_converter_to_a_scale_ulp(family, base, tmp_path)


def test_int8_bert_tiny_equals_the_converter_to_a_scale_ulp(tmp_path: Path) -> None:
    """BERT-tiny (token ids in, float logits out): the attention mask's SELECT_V2 (version 1, its
    two selected values at one scale, one of them the -2.4e38 fill constant) and the LayerNorm
    epsilon 1e-12 quantized as the converter does (widened to [-5e-7, 5e-7]: scale 1e-6/255,
    zero point 0); otherwise as the wide test below."""
    _int8_equals_the_converter_to_a_scale_ulp("tflite_zoo", "bert_tiny", tmp_path)


def _int8_equals_the_converter_to_a_scale_ulp(family: str, base: str, tmp_path: Path) -> None:
    """Models converted to int8 only, so the ranges are recovered from the int8 file's own scales:
    scales may sit one float32 step away (a bias scale, s_in * s_w, two) and a code quantized
    with such a scale (a bias, a constant operand) one step; operators, versions, options,
    types, zero points and weight codes exact, and the operators left float exactly the
    converter's.  The token
    transformer (GATHER of a constant table quantized per tensor, BATCH_MATMUL, GELU, SOFTMAX,
    RSQRT, SQUARED_DIFFERENCE; NEG stays float between tfl.dequantize and tfl.quantize; a float
    output through DEQUANTIZE), the MediaPipe-style segmenter (HARD_SWISH version 1, squeeze-excite
    MEAN + MUL), a 256x256 U-Net, MobileNetV2 and EfficientNetB0 at 224 (a SHAPE reads an int8
    tensor as it is), and the unary-operator corpus (ABS, LOG, SQRT, RSQRT, EXP, GELU, LEAKY_RELU
    version 1, LOG_SOFTMAX at (16/256, 127), L2_NORMALIZATION at (1/128, 0); twelve float
    operators — SIN, COS, NEG, ADD_N, ATAN2... — behind DEQUANTIZEs, their graph outputs
    quantized under the output's name); the per-operator corpora (binary, activation and misc
    operators: LOGISTIC/TANH outputs requantized to a CONCATENATION's scale right after the
    kernel, RELU_0_TO_1, DEPTH_TO_SPACE, MAXIMUM/MINIMUM sharing one scale, DIV, a 1e-6 epsilon
    constant widened to [-5e-7, 1e-6]) and deployment models (MobileNetV1, ViT, Xception,
    InceptionV3, ConvNeXt-T, EfficientNetV2-B0, an embedding table whose GATHER takes a
    CONCATENATION's scale).  The reference interpreter is bit-exact with BUILTIN_REF on ours,
    and its outputs are within two quantization steps of the converter's."""
    theirs = get_model(family, f"{base}_int8")
    converter = gw.load(theirs.path)
    io_type = "float32" if converter.graph.outputs[0].dtype is DType.FLOAT32 else "int8"
    path, result = _quantize(base, "int8", _ranges_from_scales(converter), tmp_path, family, io_type=io_type)
    assert result.stats["nodes_float"] == _float_operators(converter)
    assert _assert_same_file(path, theirs.path, scale_ulps=1) > 0
    info = dataclasses.replace(theirs, path=path, name=f"{base}_int8_graphwright")
    feeds = feeds_for(info, 2)
    try:
        want = run(theirs.path, feeds, backend="litert-ref")
    except VerificationError as e:  # LiteRT's reference resolver lacks int8 ELU: ours is refused alike
        with pytest.raises(VerificationError, match=re.escape(str(e).split(".tflite: ", 1)[1])):
            run(path, feeds, backend="litert-ref")
        return
    assert assert_matches_reference(info, seeds=range(2)) > 0
    got = run(path, feeds, backend="litert-ref")
    for value in converter.graph.outputs:
        step = float(value.quant.scale[0]) if value.quant is not None and value.quant.scale.size else 1 / 256
        if value.dtype is DType.INT8:
            step = 1.0
        np.testing.assert_allclose(got[value.name].astype(np.float64), want[value.name].astype(np.float64),
                                   atol=2 * step, err_msg=value.name)


# -- comparisons and SELECT_V2 (tests/models/build_tflite_binary.py) -------------------------------

COMPARISONS = ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL")


def test_int8_comparisons_and_select_v2_as_the_converter(tmp_path: Path) -> None:
    """The converter's binary_int8 file (its graph differs from the float one's, so no whole-file
    equality): each comparison it writes is ours too with the same version, int8 inputs, a bool
    output and the same codes, scale and zero point for a constant operand (0.1, -0.5, and 0.0
    widened to [-5e-7, 5e-7]: scale 1e-6/255, zero point 0); NOT_EQUAL stays float in both; SELECT_V2 (version 1) shares
    one scale between its two selected inputs and its output; the result runs on LiteRT."""
    theirs = gw.load(get_model("tflite_binary", "binary_int8").path)
    info = get_model("tflite_binary", "binary_float")
    rng = np.random.default_rng(0)
    samples = [{k: rng.uniform(-1, 1, s).astype(np.float32) if np.dtype(info.input_dtypes.get(k, info.input_dtype)).kind == "f"
                else feeds_for(info, 2)[k] for k, s in info.inputs.items()} for _ in range(8)]
    mine, _ = gw.quantize(info.path, mode="int8", samples=samples, calibration_samples=8, report=False)
    ours = {n.output.name: n for n in mine.graph}
    checked = 0
    for node in theirs.graph:  # the comparisons keep their names (the graphs' outputs do not)
        if node.op not in COMPARISONS:
            continue
        other = ours[node.output.name]
        assert (other.op, other.meta["tflite.version"]) == (node.op, node.meta["tflite.version"]), node.name
        assert [v.dtype for v in other.inputs] == [v.dtype for v in node.inputs], node.name
        assert other.output.dtype is node.output.dtype, node.name
        for a, b in zip(other.inputs, node.inputs):
            if b.const is not None and b.dtype is DType.INT8:
                np.testing.assert_array_equal(a.const.numpy(), b.const.numpy(), err_msg=node.name)
                assert (float(a.quant.scale[0]), int(a.quant.zero_point[0])) == \
                    (float(b.quant.scale[0]), int(b.quant.zero_point[0])), node.name
        checked += 1
    assert checked == 7
    selects = [n for n in mine.graph if n.op == "SELECT_V2" and n.output.dtype is DType.INT8]
    assert {n.meta["tflite.version"] for n in selects} == {n.meta["tflite.version"] for n in theirs.graph
                                                          if n.op == "SELECT_V2"} == {1}
    for node in selects:
        assert len({(float(v.quant.scale[0]), int(v.quant.zero_point[0])) for v in (*node.inputs[1:], node.output)}) == 1
    path = tmp_path / "binary_int8_graphwright.tflite"
    gw.save(mine, path)
    got = run(path, feeds_for(info, 3), backend="litert")
    assert set(got) == set(run(info.path, feeds_for(info, 3), backend="litert"))


def test_int8_reductions_as_the_converter() -> None:
    """The converter's reduce_int8 (its graph differs from the float one's: no whole-file
    equality) with the ranges its scales give: every reduction, pooling, ARG_MAX/ARG_MIN and
    TOPK_V2 (values at its input's scale, int32 indices) reading an int8 tensor there is ours
    too, by name, with the same version, types, zero points and scales (one float32 step: the
    ranges come back from the written scales)."""
    theirs = gw.load(get_model("tflite_reduce", "reduce_int8").path)
    info = get_model("tflite_reduce", "reduce_float")
    _, calibrated = gw.quantize(info.path, mode="int8", samples=[feeds_for(info, s) for s in range(2, 10)],
                                calibration_samples=8, report=False)
    mine = gw.load(info.path)
    quantize_static_tflite(mine, {**calibrated.ranges, **_ranges_from_scales(theirs)},
                           QuantOptions.build(activation_type="int8", io_type="int8"))
    ours = {n.output.name: n for n in mine.graph}
    checked = set()
    for node in theirs.graph:
        if node.op in ("QUANTIZE", "DEQUANTIZE", "RESHAPE") or node.inputs[0].dtype is not DType.INT8:
            continue
        other = ours[node.output.name]
        assert (other.op, other.meta["tflite.version"]) == (node.op, node.meta["tflite.version"]), node.name
        for a, b in zip((*other.inputs, *other.outputs), (*node.inputs, *node.outputs), strict=True):
            assert a.dtype is b.dtype, node.name
            if b.quant is not None and b.quant.scale.size:
                np.testing.assert_array_equal(a.quant.zero_point, b.quant.zero_point, err_msg=node.name)
                steps = np.abs(a.quant.scale.view(np.int32).astype(np.int64) - b.quant.scale.view(np.int32))
                assert steps.max() <= 1, node.name
        checked.add(node.op)
    assert checked >= {"REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "MEAN", "AVERAGE_POOL_2D", "MAX_POOL_2D",
                       "ARG_MAX", "ARG_MIN", "TOPK_V2"}
