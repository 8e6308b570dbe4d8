"""The fused recurrent operators, as the converter emits them from ``tf_keras`` layers (Keras 3's
recurrent layers become WHILE loops instead: see ``build_tflite_control.py``).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``lstm``: two stacked ``tf_keras.layers.LSTM`` (batch 2, 4 time steps, weights drawn with
  standard deviation 1.5) -> two UNIDIRECTIONAL_SEQUENCE_LSTM, the second time-major after a
  TRANSPOSE; in int8 the full-integer LSTM (int8 activations, int16 cell state, nonzero
  zero points).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted

BUILDER_VERSION = 2

NAMES = ("lstm_float", "lstm_int8")

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


_MAKERS = {"lstm": _lstm}


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    model = name.rsplit("_", 1)[0]
    return build_converted("tflite_sequence", name, _MAKERS[model], model_path, reference_path)
