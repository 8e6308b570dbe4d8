"""Weight-only TFLite quantization: float16 against TFLiteConverter's float16 mode, int8 against
the converter's own int8 weights.

float16 (``quantize_weights_float16_tflite``): the converter's file made with
``target_spec.supported_types=[tf.float16]`` is the anchor — same operators and versions, every
float32 constant float16 with identical bytes behind one DEQUANTIZE (version 3) placed first,
and bit-identical LiteRT outputs (landmarks, unet, and a converter-made op model).

int8 (``quantize_weights_tflite``): the converter has no int8 weight-only switch; its
dynamic-range file holds the int8 weights it makes, and ours must hold exactly those (codes,
scales, zero points, axes, by tensor name) behind DEQUANTIZE (version 5 per channel, 2 per
tensor) while every operator keeps its float version and options.  LiteRT must run it like the
float model with those dequantized weights baked in, and TFLite Micro like LiteRT — per tensor:
TFLM's DEQUANTIZE applies only the first scale of a per-channel tensor (shown below), which the
transform says in its notes.  TFLM has no float16 DEQUANTIZE, so float16 is LiteRT-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import TransformError
from graphwright.ir import DType, Graph, Model, QuantParams, Tensor
from graphwright.transforms.quantize.options import QuantOptions
from graphwright.transforms.quantize.weights_tflite import quantize_weights_float16_tflite, quantize_weights_tflite
from tests.models import get_model
from tests.transforms.quantize.test_dynamic_tflite import (  # noqa: F401  (converted: the shared fixture)
    assert_same_model,
    converted,
    feeds_of,
    litert,
    roundtrip,
    signature,
)


def _float16(path: Path) -> tuple[Model, bytes, gw.TransformResult]:
    model = gw.load(path)
    result = quantize_weights_float16_tflite(model)
    reread, data = roundtrip(model)
    return reread, data, result


def _int8(path: Path, **options: Any) -> tuple[Model, bytes, gw.TransformResult]:
    model = gw.load(path)
    result = quantize_weights_tflite(model, QuantOptions.build(**options))
    reread, data = roundtrip(model)
    return reread, data, result


def _int8_weights(model: Model) -> dict[str, tuple[Any, ...]]:
    """Every int8 constant by name: codes, scales, zero points, axis."""
    found = {}
    for graph in model.graphs:
        for value in graph.initializers:
            if value.dtype is DType.INT8:
                q = value.quant
                found[value.name] = (value.const.numpy().tobytes(), q.scale.tobytes(), q.zero_point.tolist(),
                                     q.axis if q.per_channel else 0)
    return found


# -- float16 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["landmarks", "unet"])
def test_float16_equals_the_converters(name: str) -> None:
    theirs_path = get_model("tflite_real", f"{name}_float16").path
    ours, data, result = _float16(get_model("tflite_real", f"{name}_float").path)
    theirs = gw.load(theirs_path)
    assert_same_model(ours, theirs)
    dequantize = [n for n in ours.graph if n.op == "DEQUANTIZE"]
    assert len(dequantize) == result.stats["constants_converted"] == sum(n.op == "DEQUANTIZE" for n in theirs.graph)
    assert list(ours.graph)[:len(dequantize)] == dequantize  # first, as the converter places them
    assert {n.meta["tflite.version"] for n in dequantize} == {3}
    assert not [v for v in ours.graph.initializers if v.dtype is DType.FLOAT32]
    for seed in range(2):
        feeds = feeds_of(data, seed)
        for a, b in zip(litert(data, feeds), litert(theirs_path.read_bytes(), feeds)):
            np.testing.assert_array_equal(a, b)


def test_float16_op_model_and_while_body(converted: Path) -> None:  # noqa: F811
    for name in ("ops", "lstm"):
        ours, data, _ = _float16(converted / f"{name}_float.tflite")
        assert_same_model(ours, gw.load(converted / f"{name}_float16.tflite"))
        feeds = feeds_of(data, 3)
        for a, b in zip(litert(data, feeds), litert((converted / f"{name}_float16.tflite").read_bytes(), feeds)):
            np.testing.assert_array_equal(a, b)


def test_float16_clamps_to_the_float16_range() -> None:
    model = gw.load(get_model("tflite_real", "unet_float").path)
    weight = next(n for n in model.graph if n.op == "CONV_2D").inputs[1]
    big = weight.const.numpy().copy()
    big.flat[:3] = (1e6, -1e6, 70000.0)
    weight.const = Tensor.from_numpy(big)
    quantize_weights_float16_tflite(model)
    stored = next(n for n in model.graph if n.op == "CONV_2D").inputs[1].producer.inputs[0].const.numpy()
    assert stored.flat[:3].tolist() == [65504.0, -65504.0, 65504.0]


# -- int8 weight-only ----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "per_channel"), [("landmarks", True), ("transformer", True),
                                               ("ops", True), ("ops", False)])
def test_int8_weights_are_the_converters(converted: Path, name: str, per_channel: bool) -> None:  # noqa: F811
    if name == "ops":
        floats, anchor = converted / "ops_float.tflite", converted / f"ops_{'dynamic' if per_channel else 'pertensor'}.tflite"
    else:
        floats, anchor = get_model("tflite_real", f"{name}_float").path, get_model("tflite_real", f"{name}_dynamic").path
    ours, data, result = _int8(floats, per_channel=per_channel)
    expected = _int8_weights(gw.load(anchor))
    assert sorted(_int8_weights(ours).values()) == sorted(expected.values())
    if name != "ops":  # the converter keeps the float weight's name on the int8 tensor here
        assert _int8_weights(ours) == expected
    assert result.stats["weights_quantized"] == len(expected)
    # every operator as in the float model, its weight now DEQUANTIZE(int8)
    mine, plain = signature(ours), signature(gw.load(floats))
    version = 5 if per_channel else 2
    changed = 0
    for row, other in zip(mine[0], plain[0], strict=True):
        assert row[:3] == other[:3] and row[4] == other[4]
        for operand, before in zip(row[3], other[3]):
            if operand != before:
                assert operand[:2] == ("dequantized", version) and operand[2][1] == "int8", row[0]
                changed += 1
    assert changed == result.stats["nodes_quantized"] > 0
    assert any("TFLite Micro" in note for note in result.notes) == per_channel
    assert litert(data, feeds_of(data, 0))  # LiteRT loads and runs it


@pytest.mark.parametrize("name", ["landmarks", "transformer"])
def test_litert_runs_int8_weights_as_the_float_model_with_them_baked_in(name: str) -> None:
    """The float model with the converter's int8 weights dequantized into it (codes * scale in
    float32) is what LiteRT must compute on ours."""
    floats = get_model("tflite_real", f"{name}_float").path
    _, data, _ = _int8(floats)
    baked = gw.load(floats)
    anchor = _int8_weights(gw.load(get_model("tflite_real", f"{name}_dynamic").path))
    for graph in baked.graphs:
        for value in graph.initializers:
            if value.name not in anchor:
                continue
            codes, scales, _, axis = anchor[value.name]
            w = np.frombuffer(codes, np.int8).reshape(value.shape).astype(np.float32)
            s = np.frombuffer(scales, np.float32)
            shape = [1] * w.ndim
            if s.size > 1:
                shape[axis] = -1
            value.const = Tensor.from_numpy((w * s.reshape(shape)).astype(np.float32))
    _, baked_data = roundtrip(baked)
    for seed in range(2):
        feeds = feeds_of(data, seed)
        for a, b in zip(litert(data, feeds), litert(baked_data, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


@pytest.mark.parametrize("name", ["landmarks", "unet"])
def test_tflite_micro_runs_per_tensor_int8_weights_like_litert(name: str) -> None:
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    floats = get_model("tflite_real", f"{name}_float").path
    _, data, _ = _int8(floats, per_channel=False)
    feeds = feeds_of(data, 2)
    want = litert(data, feeds)
    for a, b in zip(_tflm(runtime, data, feeds, len(want)), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(b).max()))


def test_tflite_micro_dequantizes_per_channel_weights_with_their_first_scale() -> None:
    """Why the note and per_channel=False for TFLM: TFLM's DEQUANTIZE of a per-channel tensor
    computes what LiteRT computes with every channel given the first channel's scale."""
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    ours, data, _ = _int8(get_model("tflite_real", "landmarks_float").path)
    first = ours
    for value in first.graph.initializers:
        q = value.quant
        if q is not None and q.per_channel:
            value.quant = QuantParams(np.full(q.scale.size, q.scale[0]), q.zero_point, q.axis)
    _, first_data = roundtrip(first)
    feeds = feeds_of(data, 2)
    want = litert(first_data, feeds)
    got = _tflm(runtime, data, feeds, len(want))
    for a, b, right in zip(got, want, litert(data, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(b).max()))
        assert float(np.abs(a - right).max()) > 1e-3 * float(np.abs(right).max())


def _tflm(runtime: Any, data: bytes, feeds: Sequence[np.ndarray], count: int) -> list[np.ndarray]:
    interp = runtime.Interpreter.from_bytes(data)
    for i, x in enumerate(feeds):
        interp.set_input(x, i)
    interp.invoke()
    return [interp.get_output(i) for i in range(count)]


def test_the_pipeline_transform_dispatches_tflite_here() -> None:
    model = gw.load(get_model("tflite_real", "landmarks_float").path)
    assert gw.transform(model, "quantize_weights").changed
    assert sum(n.op == "DEQUANTIZE" for n in model.graph) == 5


def test_int4_is_refused_in_one_line() -> None:
    model = gw.load(get_model("tflite_real", "landmarks_float").path)
    with pytest.raises(TransformError, match="int8") as error:
        quantize_weights_tflite(model, QuantOptions(weight_type="int4"))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("apply", [lambda m: quantize_weights_tflite(m, QuantOptions()), quantize_weights_float16_tflite])
def test_other_formats_are_refused_in_one_line(apply: Any) -> None:
    with pytest.raises(TransformError, match="TFLite models, not onnx") as error:
        apply(Model(Graph("onnx"), "onnx"))
    assert "\n" not in str(error.value)
