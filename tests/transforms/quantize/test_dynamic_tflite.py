"""quantize_dynamic_tflite against TFLiteConverter's own dynamic-range quantization.

The anchor is the converter itself: the same Keras model converted to float and with
``optimizations=[tf.lite.Optimize.DEFAULT]`` (no representative data).  graphwright quantizes the
float ``.tflite`` and the result must equal the converter's file operator for operator —
operator, operator-code version, options (``asymmetric_quantize_inputs``), tensor types and
shapes, int8 weight bytes, scales, zero points and axes — and LiteRT must give the same outputs
on both.  Real models: the cached ``landmarks`` and ``transformer`` conversions
(tests/models/build_tflite_real.py); per operator: a small TensorFlow function converted here in
a child process (cached in pytest's cache) with a big depthwise filter (axis 3), TRANSPOSE_CONV,
BATCH_MATMUL with a constant, a GATHER table read twice, a GATHER table another operator reads
too, an all-zero output channel and half-way weights (rounding ties), in per-channel and per-tensor mode, and a Keras LSTM (its
weights live in a WHILE body subgraph) and Keras 2 LSTMs (one UNIDIRECTIONAL_SEQUENCE_LSTM).  (LiteRT's per-tensor hybrid DEPTHWISE_CONV_2D kernel
returns garbage on the converter's own per-tensor file, so per-tensor outputs are not compared.)

TFLite Micro has no hybrid kernels: it refuses the converter's dynamic-range model and ours
alike (asserted below), so there is no TFLM run of a dynamic-range model.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import TransformError
from graphwright.formats.tflite import read_model
from graphwright.ir import Model, Value
from graphwright.transforms.quantize.dynamic_tflite import quantize_dynamic_tflite
from graphwright.transforms.quantize.options import QuantOptions
from tests.models import get_model

Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter

#: Converted in a child process (TensorFlow stays out of the test process): for each model
#: ``<name>_float``, ``<name>_dynamic`` (per-channel, the default) and (some) ``<name>_pertensor``
#: (``_experimental_disable_per_channel``) and ``<name>_float16``.  About a minute the first
#: time on two cores; cached in pytest's cache folder after.
CONVERT = r'''
import sys
from pathlib import Path
import numpy as np
import tensorflow as tf
import keras

out = Path(sys.argv[1])
rng = np.random.default_rng(0)
conv_w = rng.normal(0, 0.3, (3, 3, 8, 16)).astype(np.float32)
conv_w[..., 5] = 0.0                                                  # an all-zero output channel
ties = (rng.integers(-126, 126, (3, 3, 16, 16)) + 0.5).astype(np.float32)
ties[0, 0, 0, :] = 127.0                                              # scale exactly 1: q = w rounds a tie
dw_w = rng.normal(0, 0.3, (3, 3, 16, 8)).astype(np.float32)           # 1152 elements, 128 channels
tc_w = rng.normal(0, 0.3, (3, 3, 16, 128)).astype(np.float32)         # TRANSPOSE_CONV filter
small = rng.normal(0, 0.3, (1, 1, 16, 4)).astype(np.float32)          # 64 elements: stays float
fc_w = rng.normal(0, 0.3, (128, 48)).astype(np.float32)
fc_b = rng.normal(0, 0.1, (48,)).astype(np.float32)
bmm_w = rng.normal(0, 0.3, (2, 48, 24)).astype(np.float32)
table = rng.normal(0, 1.0, (100, 24)).astype(np.float32)
table2 = rng.normal(0, 1.0, (64, 24)).astype(np.float32)           # one GATHER and a MUL read it

@tf.function
def ops(x, ids):
    y = tf.nn.conv2d(x, conv_w, 1, "SAME")
    y = tf.nn.conv2d(y, ties, 1, "SAME")
    y = tf.nn.depthwise_conv2d(y, dw_w, [1, 1, 1, 1], "SAME")
    y = tf.nn.conv2d_transpose(y, tc_w, [1, 16, 16, 16], 2, "SAME")
    s = tf.nn.conv2d(y, small, 1, "SAME")
    v = tf.reshape(tf.reduce_mean(y, [1, 2]), [1, 1, 16])
    f = tf.matmul(tf.tile(tf.reshape(tf.reduce_mean(y, [1, 2]), [1, 1, 16]), [2, 5, 8]), fc_w) + fc_b
    b = tf.matmul(f, bmm_w)
    g = tf.gather(table, ids) * tf.gather(table, ids[:, ::-1])
    h = tf.gather(table2, ids) + tf.reduce_sum(table2 * tf.reduce_mean(x), 0)
    return s, b, g, v, h

def save(name, make, modes=("float", "dynamic", "pertensor", "float16")):
    for mode in modes:
        converter = make()
        if mode != "float":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if mode == "pertensor":
            converter._experimental_disable_per_channel = True
        if mode == "float16":
            converter.target_spec.supported_types = [tf.float16]
        (out / f"{name}_{mode}.tflite").write_bytes(converter.convert())

concrete = ops.get_concrete_function(tf.TensorSpec((1, 8, 8, 8)), tf.TensorSpec((1, 7), tf.int32))
save("ops", lambda: tf.lite.TFLiteConverter.from_concrete_functions([concrete]))
keras.utils.set_random_seed(0)
inp = keras.Input((6, 24), batch_size=1)
lstm = keras.Model(inp, keras.layers.LSTM(32, return_sequences=True)(inp))
save("lstm", lambda: tf.lite.TFLiteConverter.from_keras_model(lstm), ("float", "dynamic", "float16"))
import tf_keras  # Keras 2 LSTMs become one UNIDIRECTIONAL_SEQUENCE_LSTM
for name, units, features in (("seqlstm", 64, 32), ("seqlstm_small", 8, 8)):
    tf_keras.utils.set_random_seed(0)
    inp = tf_keras.Input((6, features), batch_size=1)
    fused = tf_keras.Model(inp, tf_keras.layers.LSTM(units, return_sequences=True)(inp))
    save(name, lambda: tf.lite.TFLiteConverter.from_keras_model(fused), ("float", "dynamic"))
'''


@pytest.fixture(scope="session")
def converted(request: pytest.FixtureRequest) -> Path:
    """The folder of the small converter-made models (built once per script and TF version)."""
    key = hashlib.sha256((CONVERT + version("tensorflow")).encode()).hexdigest()[:12]
    folder = Path(request.config.cache.mkdir(f"graphwright_tflite_dynamic_{key}"))
    if not (folder / "done").exists():
        subprocess.run([sys.executable, "-c", CONVERT, str(folder)], check=True, capture_output=True, timeout=900)
        (folder / "done").touch()
    return folder


# -- comparing two TFLite models operator by operator -------------------------------------
def _const(value: Value) -> tuple[Any, ...]:
    q = value.quant
    quant = None if q is None else (q.scale.tobytes(), q.zero_point.tolist(), q.axis if q.per_channel else 0)
    return ("const", value.dtype.value, tuple(value.shape), value.const.numpy().tobytes(), quant)


def _operand(value: Value | None, produced_at: dict[Value, int]) -> tuple[Any, ...] | None:
    """A constant by content (through a weight's DEQUANTIZE, with its version), an activation by producer."""
    if value is None:
        return None
    producer = value.producer
    if producer is not None and producer.op == "DEQUANTIZE" and producer.inputs[0].const is not None:
        return ("dequantized", producer.meta["tflite.version"], _const(producer.inputs[0]))
    if value.const is not None:
        return _const(value)
    q = value.quant
    return ("act", value.dtype.value, tuple(value.shape), produced_at.get(value),
            None if q is None else (q.scale.tobytes(), q.zero_point.tolist()))


def signature(model: Model) -> list[list[tuple[Any, ...]]]:
    """Per graph, per operator (DEQUANTIZE of a constant folded into its reader): op, version,
    options, operands, output types — everything the runtime reads, nothing about names or order
    of tensors in the file."""
    graphs = []
    for graph in model.graphs:
        produced_at: dict[Value, int] = {}
        rows: list[tuple[Any, ...]] = []
        for node in graph:
            if node.op == "DEQUANTIZE" and node.inputs[0].const is not None:
                continue
            attrs = tuple(sorted((k, repr(a.value)) for k, a in node.attrs.items()))
            operands = tuple(_operand(v, produced_at) for v in node.inputs)
            outputs = tuple((o.dtype.value, tuple(o.shape)) for o in node.outputs)
            rows.append((node.op, node.meta["tflite.version"], attrs, operands, outputs))
            for out in node.outputs:
                produced_at[out] = len(rows) - 1
        graphs.append(rows)
    return graphs


def assert_same_model(ours: Model, theirs: Model) -> None:
    mine, expected = signature(ours), signature(theirs)
    assert [len(g) for g in mine] == [len(g) for g in expected]
    for g, (rows, want) in enumerate(zip(mine, expected)):
        for i, (row, other) in enumerate(zip(rows, want)):
            assert row[:3] == other[:3], f"graph {g} operator {i}: {row[:3]} != {other[:3]}"
            for k, (a, b) in enumerate(zip(row[3], other[3])):
                assert a == b, f"graph {g} operator {i} ({row[0]}) input {k}: {str(a)[:200]} != {str(b)[:200]}"
            assert row[4] == other[4], f"graph {g} operator {i} ({row[0]}) outputs"
    codes = {(n.op, n.meta["tflite.version"]) for g in ours.graphs for n in g}
    assert codes == {(n.op, n.meta["tflite.version"]) for g in theirs.graphs for n in g}


def roundtrip(model: Model) -> tuple[Model, bytes]:
    data = gw.serialize(model)
    return read_model(data), data


def litert(data: bytes, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    for detail, x in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def feeds_of(data: bytes, seed: int) -> list[np.ndarray]:
    """Seeded inputs: floats uniform in [0, 1), integer ids in [0, 7) (valid for every table here)."""
    rng = np.random.default_rng(seed)
    interp = Interpreter(model_content=data)
    return [rng.uniform(0, 1, d["shape"]).astype(np.float32) if d["dtype"] == np.float32
            else rng.integers(0, 7, d["shape"]).astype(d["dtype"]) for d in interp.get_input_details()]


def _quantized(path: Path, **options: Any) -> tuple[Model, bytes, gw.TransformResult]:
    model = gw.load(path)
    result = quantize_dynamic_tflite(model, QuantOptions.build(**options))
    reread, data = roundtrip(model)
    return reread, data, result


# -- the cached real models ------------------------------------------------------------------
@pytest.mark.parametrize(("name", "quantized"), [("landmarks", 5), ("transformer", 13)])
def test_equals_the_converters_dynamic_range_model(name: str, quantized: int) -> None:
    theirs = get_model("tflite_real", f"{name}_dynamic").path
    ours, _, result = _quantized(get_model("tflite_real", f"{name}_float").path)
    assert result.changed and result.stats["nodes_quantized"] == quantized
    assert_same_model(ours, gw.load(theirs))
    hybrid = [n for n in ours.graph if any(v is not None and v.dtype.value == "int8" and v.const is not None
                                           for v in n.inputs)]
    assert len(hybrid) == quantized


@pytest.mark.parametrize("name", ["landmarks", "transformer"])
def test_litert_gives_the_converters_outputs(name: str) -> None:
    theirs = get_model("tflite_real", f"{name}_dynamic").path.read_bytes()
    _, ours, _ = _quantized(get_model("tflite_real", f"{name}_float").path)
    floats = get_model("tflite_real", f"{name}_float").path.read_bytes()
    for seed in range(3):
        feeds = feeds_of(theirs, seed)
        got, want, exact = litert(ours, feeds), litert(theirs, feeds), litert(floats, feeds)
        for a, b, f in zip(got, want, exact):
            np.testing.assert_array_equal(a, b)
            assert not np.array_equal(a, f)  # the hybrid kernels did run: not the float result
            np.testing.assert_allclose(a, f, atol=0.05 * float(np.abs(f).max()) + 1e-6)


# -- operator by operator on small converter-made models ----------------------------------------
@pytest.mark.parametrize(("mode", "per_channel"), [("dynamic", True), ("pertensor", False)])
def test_every_hybrid_operator_as_the_converter(converted: Path, mode: str, per_channel: bool) -> None:
    ours, data, result = _quantized(converted / "ops_float.tflite", per_channel=per_channel)
    theirs = gw.load(converted / f"ops_{mode}.tflite")
    assert_same_model(ours, theirs)
    versions = {n.op: n.meta["tflite.version"] for n in ours.graph}
    assert versions["DEPTHWISE_CONV_2D"] == (6 if per_channel else 4)
    assert {"TRANSPOSE_CONV", "BATCH_MATMUL", "GATHER", "DEQUANTIZE", "FULLY_CONNECTED"} <= set(versions)
    assert result.stats["nodes_left_float"] == 1  # the 64-element filter
    if not per_channel:
        return  # LiteRT's per-tensor hybrid DEPTHWISE_CONV_2D (v4) reads garbage, on the converter's file too
    feeds = feeds_of(data, 2)
    for a, b in zip(litert(data, feeds), litert((converted / f"ops_{mode}.tflite").read_bytes(), feeds)):
        np.testing.assert_array_equal(a, b)


def test_weights_inside_a_while_body(converted: Path) -> None:
    ours, data, result = _quantized(converted / "lstm_float.tflite")
    assert result.stats["nodes_quantized"] == 2 and len(ours.graphs) > 1
    assert_same_model(ours, gw.load(converted / "lstm_dynamic.tflite"))
    feeds = feeds_of(data, 1)
    for a, b in zip(litert(data, feeds), litert((converted / "lstm_dynamic.tflite").read_bytes(), feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("name", "quantized"), [("seqlstm", 1), ("seqlstm_small", 0)])
def test_sequence_lstm_all_gate_weights_or_none(converted: Path, name: str, quantized: int) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM: eight int8 gate weights per tensor, v3, asymmetric inputs —
    or, when one gate weight is under 1024 elements (8 units), all float, as the converter."""
    ours, data, result = _quantized(converted / f"{name}_float.tflite")
    assert result.stats["nodes_quantized"] == quantized
    assert_same_model(ours, gw.load(converted / f"{name}_dynamic.tflite"))
    feeds = feeds_of(data, 1)
    for a, b in zip(litert(data, feeds), litert((converted / f"{name}_dynamic.tflite").read_bytes(), feeds)):
        np.testing.assert_array_equal(a, b)


# -- options, refusals, other runtimes -----------------------------------------------------------
def test_excluded_operators_keep_their_float_weights_and_options() -> None:
    path = get_model("tflite_real", "transformer_float").path
    ours, _, result = _quantized(path, exclude_ops=["FULLY_CONNECTED", "GATHER"])
    excluded = sum(n.op in ("FULLY_CONNECTED", "GATHER") for n in gw.load(path).graph)
    assert result.stats["nodes_excluded"] == excluded > 13 and result.stats["nodes_quantized"] == 0
    assert not result.changed
    assert_same_model(ours, gw.load(path))


def test_an_integer_model_is_left_alone() -> None:
    path = get_model("tflite_real", "landmarks_int8").path
    model = gw.load(path)
    assert not quantize_dynamic_tflite(model, QuantOptions()).changed
    assert_same_model(model, gw.load(path))


def test_int4_weights_are_refused_in_one_line() -> None:
    model = gw.load(get_model("tflite_real", "landmarks_float").path)
    with pytest.raises(TransformError, match="int8") as error:
        quantize_dynamic_tflite(model, QuantOptions(weight_type="int4"))
    assert "\n" not in str(error.value)


def test_tflite_micro_has_no_hybrid_kernels() -> None:
    """Why there is no TFLM run: TFLM refuses the converter's dynamic-range model (and ours)."""
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    _, ours, _ = _quantized(get_model("tflite_real", "landmarks_float").path)
    for data in (ours, get_model("tflite_real", "landmarks_dynamic").path.read_bytes()):
        with pytest.raises(RuntimeError, match="failed to allocate"):
            runtime.Interpreter.from_bytes(data)
