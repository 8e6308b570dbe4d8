"""extract's integer LSTM parameters (UNIDIRECTIONAL_SEQUENCE_LSTM, full-integer: int8 activations,
int16 cell state) against values derived here without graphwright:

* every multiplier, shift and zero-point-folded bias recomputed from the flatbuffer as TensorFlow's
  own schema reads it, with LiteRT's Prepare formulas (float32 effective scales, QuantizeMultiplier,
  ``bias − zp·Σ_row w``) written in this file;
* the converter-made LSTMs of ``tflite_sequence/lstm_int8`` (batch- and time-major) recomputed
  step by step with integers only — the extracted parameters and weights, gemmlowp's 16-bit
  sigmoid and tanh written here — and compared with LiteRT's reference kernels bit for bit;
* the parameters of peepholes, layer normalization, projection and clips (no converter emits an
  integer LSTM with them) on ``tflite_sequence/integer_lstm_int8`` (written with the schema's
  object API; the interpreter runs it bit-exact with LiteRT, see test_sequence_ops) and on a
  hand-made operator, against the same formulas.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorflow.lite.python import schema_py_generated as fb

from graphwright.extract import extract
from graphwright.extract.layers import layer_params
from graphwright.ir import Attr, DType, Node, QuantParams, Tensor, Value
from graphwright.runtime.execute import Job, execute
from tests.models import get_model
from tests.runtime.reference._oracle import feeds_for

pytestmark = pytest.mark.slow

GATES = ("input", "forget", "cell", "output")
Layer = dict[str, Any]


# -- LiteRT's Prepare, written from its formulas -----------------------------------------------------

def _quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: ``real = q·2^(shift−31)`` with q in [2^30, 2^31), rounded half away."""
    if real == 0:
        return 0, 0
    fraction, shift = math.frexp(real)
    q = int(math.copysign(math.floor(abs(fraction) * 2**31 + 0.5), fraction))
    if q == 2**31:
        q, shift = q // 2, shift + 1
    if shift < -31:
        return 0, 0
    return q, shift


def _f32(v: float) -> float:
    return float(np.float32(v))


def _expected_from_flatbuffer(path: Path) -> list[Layer]:
    """Per UNIDIRECTIONAL_SEQUENCE_LSTM of the file, its multipliers, shifts, effective biases,
    clips and layer-norm guards as LiteRT's integer Prepare derives them, read with TensorFlow's
    schema module."""
    model = fb.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    graph = model.subgraphs[0]
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    return [_expected_for(model, graph, op) for op in graph.operators
            if codes[op.opcodeIndex] in (fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM, fb.BuiltinOperator.LSTM)]


def _expected_for(model: Any, graph: Any, op: Any) -> Layer:
    def tensor(i: int) -> Any:
        return graph.tensors[op.inputs[i]] if op.inputs[i] >= 0 else None

    def scale(i: int) -> float:
        return _f32(tensor(i).quantization.scale[0])

    def data(i: int, dtype: Any) -> np.ndarray:
        return np.frombuffer(bytes(model.buffers[tensor(i).buffer].data), dtype).reshape(tensor(i).shape)

    options = op.builtinOptions
    zp_in, zp_state = int(tensor(0).quantization.zeroPoint[0]), int(tensor(18).quantization.zeroPoint[0])
    intermediates = [graph.tensors[i].quantization for i in op.intermediates]
    hidden = intermediates[4]
    norm = tensor(21) is not None
    gates = [_f32(q.scale[0]) for q in intermediates[:4]] if norm else [_f32(2.0 ** -12)] * 4
    cell_exponent = round(math.log2(scale(19)))
    expected: Layer = {"hidden_zero_point": int(hidden.zeroPoint[0]), "cell_exponent": cell_exponent,
                       "use_cifg": tensor(1) is None, "use_peephole": tensor(11) is not None, "use_layer_norm": norm,
                       "use_projection": tensor(16) is not None,
                       "time_major": bool(getattr(options, "timeMajor", True))}  # the one-step LSTM: as time-major
    # float32 quotient, clamped to the type's range, truncated by the C cast
    expected["quantized_cell_clip"] = int(min(max(_f32(_f32(options.cellClip) / scale(19)), -32768.0), 32767.0)) \
        if options.cellClip > 0 else 0
    out_scale = _f32(graph.tensors[op.outputs[0]].quantization.scale[0])
    expected["quantized_proj_clip"] = int(min(max(_f32(_f32(options.projClip) / out_scale), -128.0), 127.0)) \
        if options.projClip > 0 else 0
    expected["hidden_multiplier"], expected["hidden_shift"] = _quantize_multiplier(
        _f32(2.0 ** -15 / _f32(hidden.scale[0]) * 2.0 ** -15))
    for g, name in enumerate(GATES):
        if tensor(1 + g) is None:
            continue
        for kind, w, other in (("input", 1 + g, scale(0)), ("recurrent", 5 + g, scale(18))):
            real = _f32(_f32(scale(w) * other) / gates[g])
            expected[f"{kind}_to_{name}_multiplier"], expected[f"{kind}_to_{name}_shift"] = _quantize_multiplier(real)
        bias = np.zeros(tensor(1 + g).shape[0], np.int64) if norm else data(12 + g, np.int32)
        expected[f"input_to_{name}_effective_bias"] = bias - zp_in * data(1 + g, np.int8).astype(np.int64).sum(axis=1)
        expected[f"recurrent_to_{name}_effective_bias"] = -zp_state * data(5 + g, np.int8).astype(np.int64).sum(axis=1)
        peephole = {0: 9, 1: 10, 3: 11}.get(g)
        if peephole is not None and tensor(peephole) is not None:
            expected[f"cell_to_{name}_multiplier"], expected[f"cell_to_{name}_shift"] = _quantize_multiplier(
                _f32(2.0 ** cell_exponent * scale(peephole) / gates[g]))
        if norm:
            expected[f"layer_norm_{name}_multiplier"], expected[f"layer_norm_{name}_shift"] = \
                _quantize_multiplier(scale(20 + g))
            expected[f"{name}_variance_guard"] = max(1, int(_f32(10000 * scale(20 + g))))
    if tensor(16) is not None:
        expected["projection_multiplier"], expected["projection_shift"] = _quantize_multiplier(
            _f32(_f32(scale(16) * _f32(hidden.scale[0])) / scale(18)))
        bias = data(17, np.int32) if tensor(17) is not None else 0
        expected["projection_effective_bias"] = bias - int(hidden.zeroPoint[0]) * data(16, np.int8).astype(
            np.int64).sum(axis=1)
    return expected


# -- gemmlowp's 16-bit fixed point, for every raw int16 value at once --------------------------------

def _wrap16(v: np.ndarray) -> np.ndarray:
    return ((np.asarray(v, np.int64) + 32768) % 65536) - 32768


def _mul16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int16."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudged = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    return np.where((a == -32768) & (b == -32768), 32767, np.trunc(nudged / 32768).astype(np.int64))


def _divide_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """RoundingDivideByPOT."""
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    return (x >> exponent) + ((x & mask) > ((mask >> 1) + (x < 0)))


def _mul_pot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT on int16."""
    if exponent <= 0:
        return _divide_pot(x, -exponent) if exponent else x
    threshold = (1 << (15 - exponent)) - 1
    return np.where(x > threshold, 32767, np.where(x < -threshold, -32768, x << exponent))


def _const16(raw32: int) -> int:
    """A gemmlowp constant given as a 32-bit raw value, on int16 (RescaleConstantInitializer)."""
    return int(_divide_pot(np.int64(raw32), 16))


def _exp_on_negative(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp_on_negative_values: F``integer_bits`` (raw int16) -> F0."""
    fractional = 15 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = _wrap16((a & (quarter - 1)) - quarter)
    x = _wrap16(_mul_pot16(a_mod, integer_bits) + (1 << 12))  # the Taylor series around -1/8
    x2 = _mul16(x, x)
    x3, x4 = _mul16(x2, x), _mul16(x2, x2)
    poly = _mul_pot16(_wrap16(_mul16(_wrap16(_mul_pot16(x4, -2) + x3), _const16(715827883)) + x2), -1)
    c = _const16(1895147668)
    result = np.clip(c + _mul16(c, _wrap16(x + poly)), -32768, 32767)
    remainder = _wrap16(a_mod - a)
    for exponent, raw in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                          (3, 720401), (4, 242)):
        if integer_bits > exponent:
            result = np.where(remainder & (1 << (fractional + exponent)), _mul16(result, _const16(raw)), result)
    if integer_bits > 5:
        result = np.where(a < _const16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, 32767, result)


def _newton_half(a: np.ndarray) -> np.ndarray:
    """The F2 reciprocal of (1 + a)/2 by three Newton-Raphson steps (a in F0)."""
    total = a + 32767
    half = _wrap16(np.trunc((total + np.where(total >= 0, 1, -1)) / 2).astype(np.int64))  # RoundingHalfSum
    x = _wrap16(_const16(1515870810) + _mul16(half, _const16(-1010580540)))
    for _ in range(3):
        x = _wrap16(x + _mul_pot16(_mul16(x, _wrap16((1 << 13) - _mul16(half, x))), 2))
    return x


def _sigmoid_q3_12() -> np.ndarray:
    """gemmlowp's logistic of every F3 int16 raw value (index raw + 32768), F0 out."""
    a = np.arange(-32768, 32768, dtype=np.int64)
    positive = a > 0
    magnitude = np.where(positive, a, _wrap16(-a))
    on_positive = _mul_pot16(_newton_half(_exp_on_negative(_wrap16(-magnitude), 3)), 1)
    return np.where(a == 0, _const16(1 << 30), np.where(positive, on_positive, 32767 - on_positive))


def _tanh(integer_bits: int) -> np.ndarray:
    """gemmlowp's tanh of every F``integer_bits`` int16 raw value (index raw + 32768), F0 out."""
    a = np.arange(-32768, 32768, dtype=np.int64)
    negative = a < 0
    n = np.where(negative, a, _wrap16(-a))
    t = _mul_pot16(_wrap16(_newton_half(_exp_on_negative(n, integer_bits + 1)) - (1 << 13)), 2)
    return np.where(a == 0, 0, np.where(negative, _wrap16(-t), t))


def _mbqm(x: np.ndarray, m: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (the two-rounding reference form) on int32 values."""
    x = np.asarray(x, np.int64) * (1 << max(shift, 0))
    ab = x * m
    nudged = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where((x == -(2**31)) & (m == -(2**31)), 2**31 - 1, np.trunc(nudged / 2**31).astype(np.int64))
    return _divide_pot(high, max(-shift, 0))


# -- the integer LSTM step (LiteRT's LstmStepInteger8x8_16, no peephole/layer norm/projection) -------

def _integer_lstm(p: Layer, weights: dict[str, np.ndarray], x: np.ndarray, batch: int) -> np.ndarray:
    """The layer over the time-major int8 sequence ``x`` from zero states, with extracted parameters."""
    sigmoid, tanh_gate, tanh_cell = _sigmoid_q3_12(), _tanh(3), _tanh(15 + p["cell_exponent"])
    h = np.full((batch, weights["recurrent_to_forget"].shape[1]), p["output_state_zero_point"], np.int64)
    c = np.zeros((batch, weights["input_to_forget"].shape[0]), np.int64)

    def gate(name: str, step: np.ndarray, table: np.ndarray) -> np.ndarray:
        acc = np.zeros_like(c)
        for kind, operand in (("input", step), ("recurrent", h)):
            dot = operand @ weights[f"{kind}_to_{name}"].astype(np.int64).T + p[f"{kind}_to_{name}_effective_bias"]
            acc = np.clip(_mbqm(dot, p[f"{kind}_to_{name}_multiplier"], p[f"{kind}_to_{name}_shift"]) + acc,
                          -32768, 32767)
        return table[acc + 32768]

    outputs = []
    for step in x.astype(np.int64):
        forget, update = gate("forget", step, sigmoid), gate("cell", step, tanh_gate)
        keep = 32767 - forget if p["use_cifg"] else gate("input", step, sigmoid)
        c = _wrap16(_divide_pot(forget * c, 15))
        c = np.clip(c + _wrap16(_divide_pot(keep * update, 30 + p["cell_exponent"])), -32768, 32767)
        if p["quantized_cell_clip"] > 0:
            c = np.clip(c, -p["quantized_cell_clip"], p["quantized_cell_clip"])
        out = gate("output", step, sigmoid)
        h = np.clip(_mbqm(out * tanh_cell[c + 32768], p["hidden_multiplier"], p["hidden_shift"])
                    + p["hidden_zero_point"], -128, 127)
        outputs.append(h)
    return np.stack(outputs).astype(np.int8)


def _extracted_lstms(path: Path, folder: Path) -> tuple[dict[str, Any], list[Layer]]:
    """The manifest and its LSTM layers, each checked against LiteRT's Prepare recomputed here."""
    extract(path, folder)
    doc = json.loads((folder / "manifest.json").read_text())
    layers = [layer for layer in doc["layers"] if layer["op"] in ("UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM")]
    expected = _expected_from_flatbuffer(path)
    assert len(layers) == len(expected) > 0
    for layer, want in zip(layers, expected, strict=True):
        for key, value in want.items():
            got = layer[key]
            got = np.load(folder / got["file"]) if isinstance(got, dict) else got
            np.testing.assert_array_equal(got, value, err_msg=f"{layer['name']}: {key}")
    return doc, layers


def test_peephole_layer_norm_projection_lstms_match_litert_prepare(tmp_path: Path) -> None:
    """The object-API integer LSTMs of tflite_sequence (peepholes, layer norm, projections, clips,
    CIFG, nonzero hidden zero points): every parameter as recomputed from the flatbuffer."""
    _, layers = _extracted_lstms(get_model("tflite_sequence", "integer_lstm_int8").path, tmp_path)
    assert {layer["op"] for layer in layers} == {"UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM"}
    assert {"cell_to_forget_multiplier", "layer_norm_cell_multiplier", "projection_effective_bias"} <= \
        {key for layer in layers for key in layer}
    assert any(layer["use_cifg"] for layer in layers) and any(layer["quantized_proj_clip"] for layer in layers)


def test_converter_lstm_parameters_match_litert_prepare_and_reproduce_its_outputs(tmp_path: Path) -> None:
    info = get_model("tflite_sequence", "lstm_int8")
    doc, layers = _extracted_lstms(info.path, tmp_path)
    files = {c["name"]: c["file"] for c in doc["constants"]}
    assert len(layers) == 2
    ops = [doc["operators"][layer["operator_index"]] for layer in layers]
    names = [name for op in ops for name in (op["inputs"][0], op["outputs"][0])]
    for seed in range(4):
        tensors = execute(info.path, feeds_for(info, seed), Job(backend="litert-ref", outputs=names)).outputs
        for layer, op in zip(layers, ops, strict=True):
            p = {k: np.load(tmp_path / v["file"]) if isinstance(v, dict) else v for k, v in layer.items()}
            weights = {f"{kind}_to_{g}": np.load(tmp_path / files[op["inputs"][base + i]])
                       for i, g in enumerate(GATES) for kind, base in (("input", 1), ("recurrent", 5))}
            x = np.asarray(tensors[op["inputs"][0]])
            time_major = x if p["time_major"] else x.transpose(1, 0, 2)
            got = _integer_lstm(p, weights, time_major, time_major.shape[1])
            want_out = np.asarray(tensors[op["outputs"][0]])
            np.testing.assert_array_equal(got if p["time_major"] else got.transpose(1, 0, 2), want_out,
                                          err_msg=f"seed {seed}: {layer['name']}")


# -- peepholes, layer norm, projection, clips: the formulas on a hand-made operator ------------------

def _q(scale: float, zero_point: int = 0) -> QuantParams:
    return QuantParams(np.asarray([scale], np.float32), np.asarray([zero_point], np.int64), 0)


def test_peephole_layer_norm_projection_and_clip_parameters_follow_litert_prepare() -> None:
    rng = np.random.default_rng(5)
    depth, cells, units = 3, 4, 2
    s_in, s_state, s_cell, s_hidden, s_proj = 0.021, 0.0073, 2.0 ** -11, 0.0049, 0.0031
    gate_scales = [0.00037, 0.00041, 0.00029, 0.00033]
    ln_scales = [0.00012, 0.00019, 0.00023, 0.00017]
    peephole_scales = [0.0011, 0.0013, 0.0017]

    def const(name: str, array: np.ndarray, scale: float) -> Value:
        return Value(name, const=Tensor.from_numpy(array), quant=_q(scale))

    inputs: list[Value | None] = [Value("x", DType.INT8, (1, 2, depth), quant=_q(s_in, 7))]
    inputs += [const(f"w{g}", rng.integers(-127, 128, (cells, depth)).astype(np.int8), 0.01 + g / 300)
               for g in range(4)]
    inputs += [const(f"r{g}", rng.integers(-127, 128, (cells, units)).astype(np.int8), 0.02 + g / 500)
               for g in range(4)]
    inputs += [const(f"p{g}", rng.integers(-300, 300, (cells,)).astype(np.int16), s) for g, s in
               enumerate(peephole_scales)]
    inputs += [const(f"b{g}", rng.integers(-900, 900, (cells,)).astype(np.int32), 1e-5) for g in range(4)]
    projection = rng.integers(-127, 128, (units, cells)).astype(np.int8)
    projection_bias = rng.integers(-500, 500, (units,)).astype(np.int32)
    inputs += [const("proj", projection, s_proj), const("proj_b", projection_bias, 1e-5)]
    inputs += [Value("h", DType.INT8, (1, units), quant=_q(s_state, -9)), Value("c", DType.INT16, (1, cells),
                                                                               quant=_q(s_cell))]
    inputs += [const(f"ln{g}", rng.integers(1000, 30000, (cells,)).astype(np.int16), s) for g, s in
               enumerate(ln_scales)]
    out = Value("y", DType.INT8, (1, 2, units), quant=_q(s_state, -9))
    node = Node("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, dialect="tflite", outputs=[out], attrs={
        "cell_clip": Attr.float(3.3), "proj_clip": Attr.float(0.25), "time_major": Attr.bool(False),
        "fused_activation_function": Attr.int(4)})
    node.meta["tflite.intermediates"] = [Value(f"i{g}", DType.INT16, (), quant=_q(s)) for g, s in enumerate(gate_scales)] \
        + [Value("hidden", DType.INT8, (), quant=_q(s_hidden, 4))]
    p = layer_params(node)
    assert p is not None
    assert p["use_peephole"] and p["use_layer_norm"] and p["use_projection"] and not p["use_cifg"]
    assert p["cell_exponent"] == -11 and p["hidden_zero_point"] == 4
    assert p["quantized_cell_clip"] == int(_f32(_f32(3.3) / _f32(s_cell)))  # truncated, as a C cast
    assert p["quantized_proj_clip"] == int(_f32(_f32(0.25) / _f32(s_state)))
    for g, name in enumerate(GATES):
        gate = _f32(gate_scales[g])
        real = _f32(_f32(_f32(0.01 + g / 300) * _f32(s_in)) / gate)
        assert (p[f"input_to_{name}_multiplier"], p[f"input_to_{name}_shift"]) == _quantize_multiplier(real)
        real = _f32(_f32(_f32(0.02 + g / 500) * _f32(s_state)) / gate)
        assert (p[f"recurrent_to_{name}_multiplier"], p[f"recurrent_to_{name}_shift"]) == _quantize_multiplier(real)
        assert (p[f"layer_norm_{name}_multiplier"], p[f"layer_norm_{name}_shift"]) == \
            _quantize_multiplier(_f32(ln_scales[g]))
        assert p[f"{name}_variance_guard"] == max(1, int(_f32(10000 * _f32(ln_scales[g]))))
        weights = inputs[1 + g].const.numpy().astype(np.int64)  # type: ignore[union-attr]
        # with layer norm the gate bias is added after normalization, not folded
        np.testing.assert_array_equal(p[f"input_to_{name}_effective_bias"], -7 * weights.sum(axis=1))
        recurrent = inputs[5 + g].const.numpy().astype(np.int64)  # type: ignore[union-attr]
        np.testing.assert_array_equal(p[f"recurrent_to_{name}_effective_bias"], 9 * recurrent.sum(axis=1))
    for name, s in zip(("input", "forget", "output"), peephole_scales, strict=True):
        gate = gate_scales[GATES.index(name)]
        real = _f32(2.0 ** -11 * _f32(s) / _f32(gate))
        assert (p[f"cell_to_{name}_multiplier"], p[f"cell_to_{name}_shift"]) == _quantize_multiplier(real)
    assert "cell_to_cell_multiplier" not in p
    real = _f32(_f32(_f32(s_proj) * _f32(s_hidden)) / _f32(s_state))
    assert (p["projection_multiplier"], p["projection_shift"]) == _quantize_multiplier(real)
    np.testing.assert_array_equal(p["projection_effective_bias"],
                                  projection_bias - 4 * projection.astype(np.int64).sum(axis=1))
    assert (p["hidden_multiplier"], p["hidden_shift"]) == \
        _quantize_multiplier(_f32(2.0 ** -15 / _f32(s_hidden) * 2.0 ** -15))


@pytest.mark.parametrize("name", ["hybrid_lstm_float", "lstm_float"])
def test_float_and_hybrid_lstms_have_no_integer_parameters(name: str, tmp_path: Path) -> None:
    manifest = extract(get_model("tflite_sequence", name).path, tmp_path)
    assert not [layer for layer in manifest.layers if "LSTM" in layer.op]
