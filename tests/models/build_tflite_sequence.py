"""The fused recurrent operators, as the converter emits them from ``tf_keras`` layers (Keras 3's
recurrent layers become WHILE loops instead: see ``build_tflite_control.py``).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``lstm``: two stacked ``tf_keras.layers.LSTM`` (batch 2, 4 time steps, weights drawn with
  standard deviation 1.5) -> two UNIDIRECTIONAL_SEQUENCE_LSTM, the second time-major after a
  TRANSPOSE; in int8 the full-integer LSTM (int8 activations, int16 cell state, nonzero
  zero points).  (The converter refuses 16x8 LSTMs.)
* ``hybrid_lstm``: a ``tf_keras`` LSTM of 40 units on 40 features converted with dynamic-range
  quantization (``Optimize.DEFAULT``, no representative data): float activations, int8 weights,
  ``asymmetric_quantize_inputs`` (the hybrid kernel);
* ``recurrent``: what no Keras layer converts to, written with graphwright's TFLite writer (states
  as variable tensors): UNIDIRECTIONAL_SEQUENCE_RNN (tanh) and BIDIRECTIONAL_SEQUENCE_LSTM
  (batch-major, two outputs) on a sequence, SVDF (rank 2, relu) on one frame;
* ``svdf``: in int8, SVDF with int16 time weights and state (LiteRT's integer SVDF), written the
  same way with chosen scales and zero points.
* ``rnn``: written with the schema's object API (no converter emits them; hidden states as
  variable tensors): the one-step basic RNN (RNN) in float32 (tanh, then relu on its output) and
  hybrid (int8 weights: symmetric input quantization with relu6, asymmetric with
  tanh), and the hybrid UNIDIRECTIONAL_SEQUENCE_RNN (time-major asymmetric, batch-major
  symmetric).  Tests compare one seed per fresh interpreter, and runs in a row.
* ``integer_lstm``: in int8, full-integer UNIDIRECTIONAL_SEQUENCE_LSTMs the converter does not make
  from Keras layers, written with the schema's object API (int16 cell states, five intermediates):
  input gate, peepholes, layer normalization, a projection (3 outputs of 4 cells) with its bias,
  cell and projection clips (batch- and time-major); CIFG with layer norm and peepholes,
  time-major; peepholes and layer norm without projection; a projection alone, with a nonzero
  hidden zero point; and the one-step LSTM operator with peepholes, layer norm and a projection.
* ``hybrid_recurrent``: hybrid LSTMs (float activations, int8 weights) written likewise: the
  sequence LSTM with int8 peepholes, an int8 projection with a float bias, cell and projection
  clips (asymmetric input quantization); the one-step LSTM, CIFG with layer norm and peepholes
  (symmetric); BIDIRECTIONAL_SEQUENCE_LSTM, time-major, outputs merged (asymmetric); SVDF with
  int8 feature and time weights (rank 2; asymmetric with relu, symmetric without activation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as fb

from ._info import ModelInfo
from ._tflite_common import SEED, Spec, build_converted, info_of
from .build_tflite_index import _Flat, _options

BUILDER_VERSION = 13

NAMES = ("lstm_float", "lstm_int8", "hybrid_lstm_float", "recurrent_float", "svdf_int8", "rnn_float", "integer_lstm_int8", "hybrid_recurrent_float")

BATCH, STEPS, FEATURES = 2, 4, 3


def _lstm() -> tuple[Any, list[Spec]]:
    import tf_keras

    def weights(seed: int) -> dict[str, Any]:  # large enough that int8's cell state needs 2^-15 or more
        return {"kernel_initializer": tf_keras.initializers.RandomNormal(stddev=1.5, seed=seed),
                "recurrent_initializer": tf_keras.initializers.RandomNormal(stddev=1.5, seed=seed + 1)}

    inp = tf_keras.Input((STEPS, FEATURES), batch_size=BATCH)
    x = tf_keras.layers.LSTM(5, return_sequences=True, **weights(1))(inp)
    x = tf_keras.layers.Lambda(lambda v: tf.transpose(v, [1, 0, 2]))(x)
    x = tf_keras.layers.LSTM(4, time_major=True, return_sequences=True, **weights(3))(x)
    return tf_keras.Model(inp, x), [Spec((BATCH, STEPS, FEATURES))]


def _hybrid_lstm(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    import tf_keras

    tf.keras.utils.set_random_seed(SEED)
    inp = tf_keras.Input((STEPS, 40), batch_size=BATCH)
    model = tf_keras.Model(inp, tf_keras.layers.LSTM(40, return_sequences=True)(inp))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # weights of 1600 values or more become int8
    model_path.write_bytes(converter.convert())
    return info_of("tflite_sequence", name, model_path, reference_path)


def _recurrent(model_path: Path) -> None:
    from graphwright.formats import tflite
    from graphwright.ir import Attr, DType, Graph, Model, Node, Tensor, Value

    rng = np.random.default_rng(SEED)
    g = Graph("tflite", "main")

    def weights(name: str, shape: tuple[int, ...]) -> Value:
        return g.add_initializer(Value(name, const=Tensor.from_numpy(rng.uniform(-0.8, 0.8, shape).astype(np.float32))))

    def state(name: str, shape: tuple[int, ...]) -> Value:
        value = Value(name, DType.FLOAT32, shape)
        value.meta["tflite.is_variable"] = True
        return g.add_state(value)

    def op(kind: str, inputs: list[Value | None], *shapes: tuple[int, ...], **attrs: Attr) -> list[Value]:
        outs = [Value(f"{kind.lower()}{i or ''}", DType.FLOAT32, shape) for i, shape in enumerate(shapes)]
        g.append(Node(kind, inputs, dialect="tflite", name=outs[0].name, attrs=attrs, outputs=outs))
        return outs

    units, filters, memory = 5, 6, 4
    x, frame = Value("x", DType.FLOAT32, (BATCH, STEPS, FEATURES)), Value("frame", DType.FLOAT32, (BATCH, FEATURES))
    g.set_inputs([x, frame])
    rnn, = op("UNIDIRECTIONAL_SEQUENCE_RNN", [x, weights("rnn_w", (units, FEATURES)), weights("rnn_r", (units, units)),
             weights("rnn_b", (units,)), state("rnn_h", (BATCH, units))], (BATCH, STEPS, units),
             time_major=Attr.bool(False), fused_activation_function=Attr.int(4), asymmetric_quantize_inputs=Attr.bool(False))
    svdf, = op("SVDF", [frame, weights("svdf_features", (filters, FEATURES)), weights("svdf_times", (filters, memory)),
              weights("svdf_b", (filters // 2,)), state("svdf_memory", (BATCH, filters * memory))],
              (BATCH, filters // 2), rank=Attr.int(2), fused_activation_function=Attr.int(1),
              asymmetric_quantize_inputs=Attr.bool(False))
    directions: list[Value | None] = []
    for d in ("fw", "bw"):
        directions += [*(weights(f"{d}_input_{k}", (units, FEATURES)) for k in range(4)),
                       *(weights(f"{d}_recurrent_{k}", (units, units)) for k in range(4)), None, None, None,
                       *(weights(f"{d}_bias_{k}", (units,)) for k in range(4)), None, None]
    states = [state(f"{d}_{s}", (BATCH, units)) for d in ("fw", "bw") for s in ("h", "c")]
    forward, backward = op("BIDIRECTIONAL_SEQUENCE_LSTM", [x, *directions, *states, *[None] * 9],
                           (BATCH, STEPS, units), (BATCH, STEPS, units), fused_activation_function=Attr.int(4),
                           cell_clip=Attr.float(0.0), proj_clip=Attr.float(0.0), merge_outputs=Attr.bool(False),
                           time_major=Attr.bool(False), asymmetric_quantize_inputs=Attr.bool(False))
    g.set_outputs([rnn, svdf, forward, backward])
    model_path.write_bytes(tflite.serialize(Model(g, "tflite")))


def _svdf_int8(model_path: Path) -> None:
    from graphwright.formats import tflite
    from graphwright.ir import Attr, DType, Graph, Model, Node, QuantParams, Tensor, Value

    rng = np.random.default_rng(SEED)
    g = Graph("tflite", "main")

    def quant(scale: float, zero_point: int = 0) -> QuantParams:
        return QuantParams(np.asarray([scale], np.float32), np.asarray([zero_point], np.int64), 0)

    def weights(name: str, array: np.ndarray, q: QuantParams) -> Value:
        return g.add_initializer(Value(name, const=Tensor.from_numpy(array), quant=q))

    filters, memory = 6, 4
    frame = Value("frame", DType.INT8, (BATCH, FEATURES), quant=quant(1 / 64, 3))
    g.set_inputs([frame])
    state = Value("svdf_memory", DType.INT16, (BATCH, filters * memory), quant=quant(1 / 1024))
    state.meta["tflite.is_variable"] = True
    g.add_state(state)
    out = Value("svdf", DType.INT8, (BATCH, filters // 2), quant=quant(0.1, -5))
    inputs = [frame, weights("svdf_features", rng.integers(-127, 128, (filters, FEATURES)).astype(np.int8), quant(0.01)),
              weights("svdf_times", rng.integers(-1500, 1500, (filters, memory)).astype(np.int16), quant(1 / 2048)),
              weights("svdf_b", rng.integers(-500, 500, (filters // 2,)).astype(np.int32), quant(1 / 1024 / 2048)),
              state]
    g.append(Node("SVDF", inputs, dialect="tflite", name="svdf", outputs=[out], attrs={
        "rank": Attr.int(2), "fused_activation_function": Attr.int(1), "asymmetric_quantize_inputs": Attr.bool(False)}))
    g.set_outputs([out])
    model_path.write_bytes(tflite.serialize(Model(g, "tflite")))


def _rnn(model_path: Path) -> list[Spec]:
    """RNN (float32 and hybrid) and hybrid UNIDIRECTIONAL_SEQUENCE_RNN, as the module docstring says."""
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    tensor = m.tensor
    rng = np.random.default_rng(SEED)

    def const(name: str, *shape: int) -> int:
        return tensor(name, shape, np.float32, rng.uniform(-0.7, 0.7, shape).astype(np.float32))

    def int8(name: str, rows: int, cols: int, scale: float) -> int:
        return tensor(name, (rows, cols), np.int8, rng.integers(-127, 128, (rows, cols)).astype(np.int8), scale=[scale])

    def state(name: str, *shape: int) -> int:
        i = tensor(name, shape, np.float32)
        m.tensors[i].isVariable = True
        return i

    depth, units, wide = 6, 5, 4
    step = m.input(Spec((BATCH, depth)), "step")
    # float32: tanh, then a relu RNN on the first one's output
    first = tensor("rnn_tanh", (BATCH, units), np.float32)
    m.op(B.RNN, [step, const("w_tanh", units, depth), const("r_tanh", units, units), const("b_tanh", units),
                 state("h_tanh", BATCH, units)], [first], opts.RNNOptions,
         _options(fb.RNNOptionsT, fusedActivationFunction=4))
    m.op(B.RNN, [first, const("w_relu", wide, units), const("r_relu", wide, wide), const("b_relu", wide),
                 state("h_relu", BATCH, wide)], [tensor("rnn_relu", (BATCH, wide), np.float32)], opts.RNNOptions,
         _options(fb.RNNOptionsT, fusedActivationFunction=1))
    # hybrid: int8 weights of their own scales, symmetric (relu6) and asymmetric (tanh) input quantization
    for name, act, asymmetric in (("rnn_hybrid_symmetric", 3, False), ("rnn_hybrid_asymmetric", 4, True)):
        m.op(B.RNN, [step, int8(f"{name}_w", units, depth, 0.006), int8(f"{name}_r", units, units, 0.004),
                     const(f"{name}_b", units), state(f"{name}_h", BATCH, units)],
             [tensor(name, (BATCH, units), np.float32)], opts.RNNOptions,
             _options(fb.RNNOptionsT, fusedActivationFunction=act, asymmetricQuantizeInputs=asymmetric))
    # the hybrid sequence RNN, time-major and batch-major
    time_first = m.input(Spec((STEPS, BATCH, depth)), "sequence")
    batch_first = m.input(Spec((BATCH, STEPS, depth)), "sequence_batch_major")
    for name, time_major, asymmetric in (("seq_rnn_hybrid_time", True, True), ("seq_rnn_hybrid_batch", False, False)):
        lead = (STEPS, BATCH) if time_major else (BATCH, STEPS)
        m.op(B.UNIDIRECTIONAL_SEQUENCE_RNN,
             [time_first if time_major else batch_first, int8(f"{name}_w", units, depth, 0.008),
              int8(f"{name}_r", units, units, 0.005), const(f"{name}_b", units), state(f"{name}_h", BATCH, units)],
             [tensor(name, (*lead, units), np.float32)], opts.SequenceRNNOptions,
             _options(fb.SequenceRNNOptionsT, timeMajor=time_major, fusedActivationFunction=4,
                      asymmetricQuantizeInputs=asymmetric))
    m.write(model_path)
    return m.specs


def _integer_lstm(model_path: Path) -> list[Spec]:
    """Three full-integer LSTMs, as the module docstring says."""
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    tensor = m.tensor
    rng = np.random.default_rng(SEED)
    depth, cells = 5, 4

    def ints(name: str, shape: tuple[int, ...], dtype: Any, low: int, high: int, scale: float, zp: int = 0) -> int:
        return tensor(name, shape, dtype, rng.integers(low, high, shape).astype(dtype), scale=[scale], zero_point=[zp])

    def state(name: str, shape: tuple[int, ...], dtype: Any, scale: float, zp: int = 0) -> int:
        i = tensor(name, shape, dtype, scale=[scale], zero_point=[zp])
        m.tensors[i].isVariable = True
        return i

    x = m.input(Spec((BATCH, STEPS, depth), "int8"), "x", scale=[1 / 64], zero_point=[3])
    x_time = m.input(Spec((STEPS, BATCH, depth), "int8"), "x_time_major", scale=[1 / 50], zero_point=[-4])
    for name, cifg, peephole, norm, units, hidden_zp, time_major, clips in (
            ("full", False, True, True, 3, -3, False, (1.0, 0.5)),
            ("cifg_norm", True, True, True, cells, 0, True, (0.0, 0.0)),
            ("peephole_norm", False, True, True, cells, 2, False, (0.0, 0.0)),
            ("full_time_major", False, True, False, 3, 0, True, (0.7, 0.0)),
            ("projection", False, False, False, 3, 5, False, (0.0, 0.0))):
        operands = [-1] * 24
        operands[0] = x_time if time_major else x
        for g in range(4):
            if cifg and g == 0:
                continue
            operands[1 + g] = ints(f"{name}_w{g}", (cells, depth), np.int8, -127, 128, 0.012 + 0.003 * g)
            operands[5 + g] = ints(f"{name}_r{g}", (cells, units), np.int8, -127, 128, 0.015 + 0.002 * g)
            operands[12 + g] = ints(f"{name}_b{g}", (cells,), np.int32, -3000, 3000, 2e-5)
            if norm:
                operands[20 + g] = ints(f"{name}_ln{g}", (cells,), np.int16, 4000, 30000, 6e-5 + 1e-5 * g)
        if peephole:
            for k, g in enumerate((0, 1, 3)):
                if not (cifg and g == 0):
                    operands[9 + k] = ints(f"{name}_p{g}", (cells,), np.int16, -6000, 6000, 1e-4 + 2e-5 * k)
        if units != cells:
            operands[16] = ints(f"{name}_proj", (units, cells), np.int8, -127, 128, 0.011)
            operands[17] = ints(f"{name}_proj_b", (units,), np.int32, -800, 800, 4e-5)
        operands[18] = state(f"{name}_h", (BATCH, units), np.int8, 1 / 96, -9)
        operands[19] = state(f"{name}_c", (BATCH, cells), np.int16, 2.0 ** -11)
        gates = [tensor(f"{name}_gate{g}", (), np.int16, scale=[0.0007 + 0.0001 * g]) for g in range(4)]
        hidden = tensor(f"{name}_hidden", (), np.int8, scale=[1 / 120], zero_point=[hidden_zp])
        lead = (STEPS, BATCH) if time_major else (BATCH, STEPS)
        out = tensor(name, (*lead, units), np.int8, scale=[1 / 96], zero_point=[-9])
        m.op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, operands, [out], opts.UnidirectionalSequenceLSTMOptions,
             _options(fb.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=4, cellClip=clips[0],
                      projClip=clips[1], timeMajor=time_major))
        m.ops[-1].intermediates = [*gates, hidden]
    # the one-step LSTM operator, full-integer with peepholes, layer norm and a projection
    step = m.input(Spec((BATCH, depth), "int8"), "x_step", scale=[1 / 40], zero_point=[1])
    operands = [-1] * 24
    operands[0] = step
    for g in range(4):
        operands[1 + g] = ints(f"step_w{g}", (cells, depth), np.int8, -127, 128, 0.014 + 0.002 * g)
        operands[5 + g] = ints(f"step_r{g}", (cells, 3), np.int8, -127, 128, 0.016 + 0.001 * g)
        operands[12 + g] = ints(f"step_b{g}", (cells,), np.int32, -3000, 3000, 2e-5)
        operands[20 + g] = ints(f"step_ln{g}", (cells,), np.int16, 4000, 30000, 7e-5 + 1e-5 * g)
    for k in range(3):
        operands[9 + k] = ints(f"step_p{k}", (cells,), np.int16, -6000, 6000, 1.2e-4 + 2e-5 * k)
    operands[16] = ints("step_proj", (3, cells), np.int8, -127, 128, 0.012)
    operands[18] = state("step_h", (BATCH, 3), np.int8, 1 / 90, 4)
    operands[19] = state("step_c", (BATCH, cells), np.int16, 2.0 ** -12)
    out = tensor("step", (BATCH, 3), np.int8, scale=[1 / 90], zero_point=[4])
    m.op(B.LSTM, operands, [out], opts.LSTMOptions, _options(fb.LSTMOptionsT, fusedActivationFunction=4,
                                                             cellClip=0.9, projClip=0.0))
    m.ops[-1].intermediates = [*(tensor(f"step_gate{g}", (), np.int16, scale=[0.0008 + 0.0001 * g])
                                 for g in range(4)), tensor("step_hidden", (), np.int8, scale=[1 / 110], zero_point=[-2])]
    m.write(model_path)
    return m.specs


def _hybrid_recurrent(model_path: Path) -> list[Spec]:
    """Hybrid LSTMs with peepholes, projections, layer norm, and a bidirectional one (see the module docstring)."""
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    tensor = m.tensor
    rng = np.random.default_rng(SEED)
    depth, cells, units = 6, 5, 3

    def int8(name: str, *shape: int, scale: float = 0.01) -> int:
        return tensor(name, shape, np.int8, rng.integers(-127, 128, shape).astype(np.int8), scale=[scale])

    def const(name: str, *shape: int, low: float = -0.5, high: float = 0.5) -> int:
        return tensor(name, shape, np.float32, rng.uniform(low, high, shape).astype(np.float32))

    def state(name: str, *shape: int) -> int:
        i = tensor(name, shape, np.float32)
        m.tensors[i].isVariable = True
        return i

    def cell(prefix: str, n_output: int, cifg: bool = False, peephole: bool = True,
             projection: bool = False, norm: bool = False) -> list[int]:
        """One direction's 17 operands (weights, peepholes, biases, projection) and the 4 layer-norm ones."""
        ops = [-1] * 21
        for g in range(4):
            if cifg and g == 0:
                continue
            ops[g] = int8(f"{prefix}_w{g}", cells, depth, scale=0.008 + 0.002 * g)
            ops[4 + g] = int8(f"{prefix}_r{g}", cells, n_output, scale=0.01 + 0.002 * g)
            ops[11 + g] = const(f"{prefix}_b{g}", cells)
            if norm:
                ops[17 + g] = const(f"{prefix}_ln{g}", cells, low=0.5, high=1.5)
        if peephole:
            for k, g in enumerate((0, 1, 3)):
                if not (cifg and g == 0):
                    ops[8 + k] = int8(f"{prefix}_p{g}", cells, scale=0.004)
        if projection:
            ops[15], ops[16] = int8(f"{prefix}_proj", n_output, cells, scale=0.012), const(f"{prefix}_proj_b", n_output)
        return ops

    x = m.input(Spec((BATCH, STEPS, depth)), "x")
    full = cell("seq", units, projection=True)
    m.op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, [x, *full[:17], state("seq_h", BATCH, units), state("seq_c", BATCH, cells),
                                          *full[17:]],
         [tensor("seq_lstm", (BATCH, STEPS, units), np.float32)], opts.UnidirectionalSequenceLSTMOptions,
         _options(fb.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=4, cellClip=0.8, projClip=0.3,
                  timeMajor=False, asymmetricQuantizeInputs=True))
    step = m.input(Spec((BATCH, depth)), "x_step")
    norm = cell("step", cells, cifg=True, norm=True)
    m.op(B.LSTM, [step, *norm[:17], state("step_h", BATCH, cells), state("step_c", BATCH, cells), *norm[17:]],
         [tensor("step_lstm", (BATCH, cells), np.float32)], opts.LSTMOptions,
         _options(fb.LSTMOptionsT, fusedActivationFunction=4, asymmetricQuantizeInputs=False))
    x_time = m.input(Spec((STEPS, BATCH, depth)), "x_time_major")
    forward, backward = cell("fw", cells, peephole=False)[:17], cell("bw", cells, peephole=False)[:17]
    states = [state(f"bi_{d}_{k}", BATCH, cells) for d in ("fw", "bw") for k in ("h", "c")]
    m.op(B.BIDIRECTIONAL_SEQUENCE_LSTM, [x_time, *forward, *backward, *states, *[-1] * 9],
         [tensor("bi_lstm", (STEPS, BATCH, 2 * cells), np.float32)], opts.BidirectionalSequenceLSTMOptions,
         _options(fb.BidirectionalSequenceLSTMOptionsT, fusedActivationFunction=4, mergeOutputs=True,
                  timeMajor=True, asymmetricQuantizeInputs=True))
    filters, memory = 6, 4
    for name, asymmetric, act in (("svdf_hybrid", True, 1), ("svdf_hybrid_symmetric", False, 0)):
        m.op(B.SVDF, [step, int8(f"{name}_features", filters, depth, scale=0.01), int8(f"{name}_times", filters, memory,
                                                                                     scale=0.008),
                      const(f"{name}_b", filters // 2), state(f"{name}_memory", BATCH, filters * memory)],
             [tensor(name, (BATCH, filters // 2), np.float32)], opts.SVDFOptions,
             _options(fb.SVDFOptionsT, rank=2, fusedActivationFunction=act, asymmetricQuantizeInputs=asymmetric))
    m.write(model_path)
    return m.specs


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name == "hybrid_recurrent_float":
        return info_of("tflite_sequence", name, model_path, reference_path, _hybrid_recurrent(model_path))
    if name == "integer_lstm_int8":
        return info_of("tflite_sequence", name, model_path, reference_path, _integer_lstm(model_path))
    if name == "rnn_float":
        return info_of("tflite_sequence", name, model_path, reference_path, _rnn(model_path))
    if name == "hybrid_lstm_float":
        return _hybrid_lstm(name, model_path, reference_path)
    if name == "svdf_int8":
        _svdf_int8(model_path)
        return info_of("tflite_sequence", name, model_path, reference_path)
    if name == "recurrent_float":
        _recurrent(model_path)
        return info_of("tflite_sequence", name, model_path, reference_path)
    return build_converted("tflite_sequence", name, _lstm, model_path, reference_path)
