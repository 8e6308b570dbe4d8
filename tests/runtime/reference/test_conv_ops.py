"""Convolution and matrix-product operators against LiteRT's reference kernels, on the
converter-made ``tflite_conv`` corpus: TRANSPOSE_CONV, BATCH_MATMUL, CONV_3D,
CONV_3D_TRANSPOSE in every type LiteRT's reference kernels run them, and the 16x8 and
hybrid (int8 weights, float activations) modes of CONV_2D, DEPTHWISE_CONV_2D and
FULLY_CONNECTED — every operator output identical (integers) or within 1e-5 (floats)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import VerificationError
from graphwright.ir import Attr, DType, Model, Node, QuantParams, Tensor
from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference.fixedpoint import multiply_by_quantized_multiplier_int64
from tests.models import ModelInfo, get_model
from tests.models.build_tflite_conv import NAMES

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow


def _model(name: str) -> ModelInfo:
    return get_model("tflite_conv", name)


def _nodes(info: ModelInfo, op: str) -> list[Node]:
    return [n for n in gw.load(info.path).graph if n.op == op]


def _convs(nodes: Callable[[str], list[Node]], mode: str) -> None:
    tconvs = nodes("TRANSPOSE_CONV")
    assert {n.attr("padding") for n in tconvs} == {0, 1}  # SAME and VALID
    assert any(len(n.inputs) == 4 and n.inputs[3] is not None for n in tconvs)  # with a bias
    assert any(len(n.inputs) == 3 or n.inputs[3] is None for n in tconvs)  # and without
    assert all(n.attr("stride_h") == 2 for n in tconvs)
    assert nodes("DEPTHWISE_CONV_2D")
    _grouped(nodes)
    assert {bool(n.attr("keep_num_dims")) for n in nodes("FULLY_CONNECTED")} == {True, False}
    if mode == "int16x8":
        for op in ("TRANSPOSE_CONV", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            for n in nodes(op):
                assert n.inputs[2 if op == "TRANSPOSE_CONV" else 0].dtype.value == "int16", op
                assert n.inputs[1].dtype.value == "int8", op
        assert any(n.inputs[2].dtype.value == "int64" for n in nodes("CONV_2D"))
    _matmul(nodes, mode)


def _grouped(nodes: Callable[[str], list[Node]]) -> None:
    """Plain and grouped CONV_2D (filter depth a fraction of the input's)."""
    assert {n.inputs[1].shape[3] == n.inputs[0].shape[3] for n in nodes("CONV_2D")} == {True, False}


def _matmul(nodes: Callable[[str], list[Node]], mode: str) -> None:
    ops = nodes("BATCH_MATMUL")
    assert any(n.attr("adj_x") for n in ops) and any(n.attr("adj_y") for n in ops)
    ranks = {len(v.shape) for n in ops for v in n.inputs}
    assert {2, 3, 4, 5} <= ranks
    assert any(n.inputs[1].const is not None for n in ops)  # constant right-hand side
    assert any(n.inputs[0].const is None and n.inputs[1].const is None for n in ops)
    assert any(tuple(n.inputs[0].shape[:-2]) != tuple(n.inputs[1].shape[:-2]) for n in ops)  # broadcast
    if mode != "float":
        assert all(v.dtype.value == {"int8": "int8", "int16x8": "int16"}[mode] for n in ops for v in n.inputs)


def _conv3d(nodes: Callable[[str], list[Node]], mode: str) -> None:
    assert {n.attr("padding") for n in nodes("CONV_3D")} == {0, 1}
    assert {n.attr("padding") for n in nodes("CONV_3D_TRANSPOSE")} == {0, 1}


def _hybrid(nodes: Callable[[str], list[Node]], mode: str) -> None:
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "BATCH_MATMUL", "FULLY_CONNECTED"):
        ops = nodes(op)
        data = 2 if op == "TRANSPOSE_CONV" else 0
        assert ops and all(n.inputs[data].dtype.value == "float32" and n.inputs[1].dtype.value == "int8"
                           and n.outputs[0].dtype.value == "float32" for n in ops), op
    assert all(n.attr("asymmetric_quantize_inputs") for n in nodes("FULLY_CONNECTED") + nodes("BATCH_MATMUL"))
    assert {bool(n.attr("keep_num_dims")) for n in nodes("FULLY_CONNECTED")} == {True, False}
    _grouped(nodes)


def _tconv(nodes: Callable[[str], list[Node]], mode: str) -> None:
    tconvs = nodes("TRANSPOSE_CONV")
    assert len(tconvs) == 2 and {n.attr("padding") for n in tconvs} == {0, 1}


_INTENDED = {"tconv": _tconv, "convs": _convs, "conv3d": _conv3d, "hybrid": _hybrid}


@pytest.mark.parametrize("name", NAMES)
def test_model_has_the_operators_it_is_meant_to_test(name: str) -> None:
    info = _model(name)
    kind, mode = name.rsplit("_", 1)
    _INTENDED[kind](lambda op: _nodes(info, op), mode)


@pytest.mark.parametrize("name", NAMES)
def test_every_operator_output_matches_litert_reference(name: str) -> None:
    assert assert_matches_reference(_model(name)) > 0


@pytest.mark.parametrize("name", ["convs_int8", "convs_int16x8"])
def test_numpy_path_matches_litert_reference(name: str) -> None:
    """Without the compiled loops: the same integers (fewer seeds)."""
    assert assert_matches_reference(_model(name), seeds=range(3), jit=False) > 0


def _uint8_transpose_convs(info: ModelInfo, out: Path) -> ModelInfo:
    """The legacy uint8 form of a TRANSPOSE_CONV-only int8 model (today's converter no longer
    makes one): activations ``q + 128`` with ``zp + 128``; weights requantized per tensor,
    ``S = max|W| / 127``, ``q = round(W / S) + 128``; biases rescaled to ``s_in·S``."""
    model = gw.load(info.path)
    for node in model.graph:
        w = node.inputs[1]
        per_channel = w.quant.scale.astype(np.float64)
        real = w.const.numpy().astype(np.float64) * per_channel.reshape(-1, 1, 1, 1)
        scale = float(np.float32(np.abs(real).max() / 127.0))
        w.const = Tensor.from_numpy(np.clip(np.round(real / scale) + 128, 0, 255).astype(np.uint8))
        w.dtype, w.quant = DType.UINT8, QuantParams([scale], [128])
        bias = node.inputs[3] if len(node.inputs) > 3 else None
        if bias is not None:
            rescaled = bias.const.numpy().astype(np.float64) * per_channel / scale
            bias.const = Tensor.from_numpy(np.round(rescaled).astype(np.int32))
            bias.quant = QuantParams([np.float32(float(node.inputs[2].quant.scale[0]) * scale)], [0])
        for value in (node.inputs[2], node.outputs[0]):
            if value.dtype is DType.INT8:
                value.dtype = DType.UINT8
                value.quant = QuantParams(value.quant.scale, value.quant.zero_point + 128)
    gw.save(model, out)
    return replace(info, name="tconv_uint8", path=out, input_dtype="uint8",
                   input_dtypes=dict.fromkeys(info.input_dtypes, "uint8"))


def test_uint8_transpose_conv_matches_litert_reference(tmp_path: Path) -> None:
    """Legacy uint8 (per-tensor weights with zero point 128): LiteRT's uint8 reference kernel."""
    info = _uint8_transpose_convs(_model("tconv_int8"), tmp_path / "tconv_uint8.tflite")
    assert {(n.op, n.inputs[1].dtype) for n in gw.load(info.path).graph} == {("TRANSPOSE_CONV", DType.UINT8)}
    assert assert_matches_reference(info) > 0


def _fused_relu(model: Model) -> None:
    """TRANSPOSE_CONV's fused activation (options version 4; the converter leaves a RELU after it)."""
    for node in model.graph:
        if node.op == "TRANSPOSE_CONV":
            node.attrs["fused_activation_function"] = Attr.int(1)


def _int32_bias(model: Model) -> None:
    """16x8 with int32 biases (quantized_bias_type INT32): int32 accumulators (LiteRT's
    DEPTHWISE_CONV_2D refuses them, so it keeps its int64 bias)."""
    for node in model.graph:
        if node.op in ("CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED"):
            node.attrs["quantized_bias_type"] = Attr.int(2)
            at = 3 if node.op == "TRANSPOSE_CONV" else 2
            bias = node.inputs[at] if len(node.inputs) > at else None
            if bias is not None and bias.const is not None and bias.dtype is DType.INT64:
                bias.const, bias.dtype = Tensor.from_numpy(bias.const.numpy().astype(np.int32)), DType.INT32


def _asymmetric_off(model: Model) -> None:
    """Hybrid FULLY_CONNECTED and BATCH_MATMUL quantizing their rows symmetrically (older files)."""
    for node in model.graph:
        if node.op in ("FULLY_CONNECTED", "BATCH_MATMUL"):
            node.attrs["asymmetric_quantize_inputs"] = Attr.bool(False)


def _per_tensor_hybrid_conv(model: Model) -> None:
    """Hybrid CONV_2D with per-tensor weights: LiteRT's other hybrid kernel (symmetric input);
    not the grouped one (LiteRT runs groups per channel only)."""
    for node in model.graph:
        if node.op == "CONV_2D" and node.inputs[1].shape[3] == node.inputs[0].shape[3]:
            w = node.inputs[1]
            real = w.const.numpy().astype(np.float64) * w.quant.scale.reshape(-1, 1, 1, 1)
            scale = float(np.float32(np.abs(real).max() / 127.0))
            w.const = Tensor.from_numpy(np.clip(np.round(real / scale), -127, 127).astype(np.int8))
            w.quant = QuantParams([scale], [0])


def _dilated_conv_3d(model: Model) -> None:
    """CONV_3D with dilations (Keras dilates through SPACE_TO_BATCH_ND): on the SAME one, whose
    output size does not depend on them."""
    node = next(n for n in model.graph if n.op == "CONV_3D" and n.attr("padding") == 0)
    _set(node, dilation_d_factor=2, dilation_h_factor=2, dilation_w_factor=3)


@pytest.mark.parametrize(("name", "mutate"), [
    ("convs_float", _fused_relu), ("convs_int8", _fused_relu), ("convs_int16x8", _fused_relu),
    ("convs_int16x8", _int32_bias), ("hybrid_float", _asymmetric_off), ("hybrid_float", _per_tensor_hybrid_conv),
    ("conv3d_float", _dilated_conv_3d),
], ids=lambda v: v if isinstance(v, str) else v.__name__.strip("_"))
def test_variants_the_converter_does_not_emit_match_litert_reference(name: str, mutate: Callable[[Model], None],
                                                                      tmp_path: Path) -> None:
    """Copies of corpus models changed through the IR, still run by LiteRT as the oracle."""
    info = _model(name)
    model = gw.load(info.path)
    mutate(model)
    gw.save(model, tmp_path / "variant.tflite")
    assert assert_matches_reference(replace(info, path=tmp_path / "variant.tflite")) > 0


def test_16x8_depthwise_with_an_int32_bias_is_refused_as_litert_refuses_it() -> None:
    info = _model("convs_int16x8")
    model = gw.load(info.path)
    bias = _first(model, "DEPTHWISE_CONV_2D").inputs[2]
    bias.const, bias.dtype = Tensor.from_numpy(bias.const.numpy().astype(np.int32)), DType.INT32
    with pytest.raises(VerificationError, match=r"DEPTHWISE_CONV_2D .*needs an int64 bias, not int32"):
        Interpreter(model).run(feeds_for(info, 2))


def test_int64_requantization_reduces_the_multiplier_to_15_bits() -> None:
    """TFLite's int64 MultiplyByQuantizedMultiplier: ``round(m / 2^16)``, saturating at 0x7FFF."""
    x = np.array([1 << 34, -(1 << 34) - 9, 12345, -12345, 8, -8, 0], np.int64)
    m, shift = (1 << 30) + (1 << 15), -3  # reduced: 2^14 + 1
    expected = (x * ((1 << 14) + 1) + (1 << 17)) >> 18
    np.testing.assert_array_equal(multiply_by_quantized_multiplier_int64(x, m, shift), expected)
    np.testing.assert_array_equal(multiply_by_quantized_multiplier_int64(x, 0x7FFFFFFF, -20),
                                  (x * 0x7FFF + (1 << 34)) >> 35)


def _first(model: Model, op: str) -> Node:
    return next(n for n in model.graph if n.op == op)


def _set(node: Node, **attrs: int) -> None:
    for key, value in attrs.items():
        node.attrs[key] = Attr.int(value)


@pytest.mark.parametrize(("name", "mutate", "message"), [
    ("convs_int8", lambda m: _set(_first(m, "TRANSPOSE_CONV"), stride_w=0),
     r"TRANSPOSE_CONV .*: attribute stride_w is 0; it must be >= 1"),
    ("convs_int8", lambda m: _first(m, "TRANSPOSE_CONV").replace_input(2, _first(m, "CONV_2D").outputs[0]),
     r"TRANSPOSE_CONV .*: output shape \[2, 10, 12, 4\], weights \[4, 3, 3, 3\] and input \[2, 10, 7, 6\] "
     r"do not fit together"),
    ("convs_float", lambda m: _set(_first(m, "BATCH_MATMUL"), adj_y=0),
     r"BATCH_MATMUL .*: operands \[2, 1, 3, 4\] and \[3, 5, 4\] .* do not share an inner dimension"),
    ("conv3d_float", lambda m: _set(_first(m, "CONV_3D_TRANSPOSE"), stride_h=1),
     r"CONV_3D_TRANSPOSE .*: output shape \[2, 6, 4, 10, 3\] does not give back the input"),
    ("conv3d_float", lambda m: _set(_first(m, "CONV_3D"), padding=7),
     r"CONV_3D .*: padding 7 is neither SAME \(0\) nor VALID \(1\)"),
])
def test_unrunnable_operators_are_refused_in_one_line(name: str, mutate: Callable[[Model], None],
                                                      message: str) -> None:
    model = gw.load(_model(name).path)
    mutate(model)
    with pytest.raises(VerificationError) as caught:
        Interpreter(model)
    text = str(caught.value)
    assert "\n" not in text
    assert re.search(message, text), text
