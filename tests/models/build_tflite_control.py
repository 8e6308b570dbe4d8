"""Control flow and resource variables, as the converter emits them.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``keras_rnn``: Keras 3 LSTM (returning its sequence) then GRU — each a WHILE loop whose
  condition subgraph compares counters (LESS, LOGICAL_AND) and whose body runs one time step
  (FULLY_CONNECTED, GATHER, SPLIT, LOGISTIC, TANH, SLICE, CONCATENATION...); the converter
  crashes on its int8 conversion;
* ``loop``: a ``tf.while_loop`` of three steps ``v = tanh(1.5·v + 0.1)`` — quantized, the loop
  carries float values between DEQUANTIZE/QUANTIZE and the body computes in int8 (MUL, ADD,
  TANH); the 16x8 conversion fails (no calibration range for the loop counter);
* ``stateful``: a ``tf.Module`` with a variable: CALL_ONCE (its initializer subgraph assigns
  the variable), VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE (a float variable in both modes),
  and an IF on a boolean input of shape [1] (``tf.cond`` on it reshaped to a scalar) with a
  subgraph per branch.  The variable keeps its value from run to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import SEED, Spec, build_converted, info_of, mode_of, representative

BUILDER_VERSION = 4

NAMES = ("keras_rnn_float", "loop_int8", "stateful_float", "stateful_int8")

BATCH, STEPS, FEATURES = 2, 4, 3


def _keras_rnn() -> tuple[Any, list[Spec]]:
    import keras

    inp = keras.Input((STEPS, FEATURES), batch_size=BATCH)
    x = keras.layers.LSTM(5, return_sequences=True)(inp)
    x = keras.layers.GRU(4)(x)
    return keras.Model(inp, x), [Spec((BATCH, STEPS, FEATURES))]


def _loop() -> tuple[Any, list[Spec]]:
    def loop(x: tf.Tensor) -> tf.Tensor:
        def body(i: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return i + 1, tf.nn.tanh(v * 1.5 + 0.1)

        return tf.while_loop(lambda i, v: i < 3, body, (tf.constant(0), x))[1]

    return loop, [Spec((BATCH, FEATURES))]


class _Stateful(tf.Module):
    """``v = v / 2 + branch(x)``, returning ``v + branch(x)``; the branch picked by ``flag``."""

    def __init__(self) -> None:
        super().__init__()
        self.v = tf.Variable(tf.fill((BATCH, FEATURES), 0.25))

    @tf.function(input_signature=[tf.TensorSpec((BATCH, FEATURES), tf.float32, name="x"),
                                  tf.TensorSpec((1,), tf.bool, name="flag")])
    def __call__(self, x: tf.Tensor, flag: tf.Tensor) -> tf.Tensor:
        y = tf.cond(tf.reshape(flag, ()), lambda: x * 2.0 + 1.0, lambda: x - 3.0)
        self.v.assign(self.v * 0.5 + y)
        return self.v.read_value() + y


def _stateful(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Converted with the module, so its variable stays a resource variable (int8: the arithmetic
    between QUANTIZE/DEQUANTIZE in int8, the variable float)."""
    tf.keras.utils.set_random_seed(SEED)
    module = _Stateful()
    specs = [Spec((BATCH, FEATURES)), Spec((1,), "bool")]
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    if mode_of(name) == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative(specs)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    model_path.write_bytes(converter.convert())
    return info_of("tflite_control", name, model_path, reference_path, specs)


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name.startswith("stateful_"):
        return _stateful(name, model_path, reference_path)
    make = _loop if name.startswith("loop_") else _keras_rnn
    return build_converted("tflite_control", name, make, model_path, reference_path)
