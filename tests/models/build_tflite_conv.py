"""Convolution and matrix-product operators, converted by the real TFLiteConverter in float32,
full-int8 and 16x8 (int16 activations, int8 weights).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``convs``: TRANSPOSE_CONV (SAME stride 2 with bias, VALID stride 2x1 without),
  CONV_2D, DEPTHWISE_CONV_2D (multiplier 2), FULLY_CONNECTED on a rank-3 input
  (keep_num_dims) and on a flat one, batch 2;
* ``matmul``: BATCH_MATMUL of two variable operands — batch dims broadcast (rank 4 against
  rank 3, rank 5), adj_x / adj_y, rank 2 — and against constant right-hand sides;
* ``conv3d_float``: CONV_3D (SAME with strides and ReLU, VALID) and CONV_3D_TRANSPOSE
  (SAME stride 2, VALID) — LiteRT has these in float only;
* ``tconv_int8``: TRANSPOSE_CONV alone (the tests make a legacy uint8 model from it);
* ``hybrid_float``: dynamic-range quantization (int8 weights, float activations) of a
  FULLY_CONNECTED, as the converter makes it without a representative dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ._info import ModelInfo
from ._keras_common import randomize_keras_model
from ._tflite_common import SEED, Spec, build_converted

BUILDER_VERSION = 2

NAMES = (
    "convs_float", "convs_int8", "convs_int16x8",
    "matmul_float", "matmul_int8", "matmul_int16x8",
    "conv3d_float",
    "hybrid_float",
    "tconv_int8",
)
L = keras.layers


def _convs() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((5, 6, 3), batch_size=2, name="image")
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", name="tconv_same")(x)
    b = L.Conv2DTranspose(3, (2, 3), strides=(2, 1), padding="valid", use_bias=False,
                          name="tconv_valid")(a)
    c = L.Conv2D(5, 3, strides=2, padding="same", activation="relu6", name="conv")(b)
    d = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="dw")(c)
    rows = L.Reshape((-1, 10), name="rows")(d)
    e = L.Dense(7, activation="relu", name="dense_rank3")(rows)  # FULLY_CONNECTED keep_num_dims
    f = L.Dense(4, name="dense_flat")(L.Flatten(name="flat")(e))
    return keras.Model(x, [b, f], name="convs"), [Spec((2, 5, 6, 3))]


def _tconv() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((4, 5, 3), batch_size=2, name="image")
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", name="tconv_same")(x)
    b = L.Conv2DTranspose(3, (3, 2), strides=(1, 2), padding="valid", use_bias=False, name="tconv_valid")(a)
    return keras.Model(x, b, name="tconv"), [Spec((2, 4, 5, 3))]


def _matmul() -> tuple[Any, list[Spec]]:
    rng = np.random.default_rng(SEED)
    w3 = tf.constant(rng.uniform(-1, 1, (3, 5, 6)).astype(np.float32))
    w2 = tf.constant(rng.uniform(-1, 1, (6, 4)).astype(np.float32))

    def fn(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor, d: tf.Tensor) -> tuple[tf.Tensor, ...]:
        ab = tf.linalg.matmul(a, b, adjoint_b=True)  # [2,1,3,4] x [3,5,4]^T -> [2,3,3,5]
        abw = tf.linalg.matmul(ab, w3)  # constant RHS, batch broadcast -> [2,3,3,6]
        flat = tf.linalg.matmul(tf.reshape(abw, (18, 6)), w2)  # rank 2, constant RHS
        cd = tf.linalg.matmul(c, d, adjoint_a=True)  # rank 5: [1,2,1,4,3]^T x [2,1,2,4,2] -> [2,2,2,3,2]
        sq = tf.linalg.matmul(flat, flat, adjoint_a=True)  # rank 2, both variable: [4,4]
        return abw, flat, cd, sq

    return fn, [Spec((2, 1, 3, 4)), Spec((3, 5, 4)), Spec((1, 2, 1, 4, 3)), Spec((2, 1, 2, 4, 2))]


def _conv3d() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((4, 5, 6, 2), batch_size=2, name="volume")
    a = L.Conv3D(3, (2, 3, 3), strides=(1, 2, 1), padding="same", activation="relu", name="c3_same")(x)
    b = L.Conv3D(4, 2, padding="valid", name="c3_valid")(a)
    c = L.Conv3DTranspose(3, 3, strides=2, padding="same", name="t3_same")(b)
    d = L.Conv3DTranspose(2, (2, 1, 3), strides=(1, 2, 1), padding="valid", use_bias=False, name="t3_valid")(c)
    return keras.Model(x, d, name="conv3d"), [Spec((2, 4, 5, 6, 2))]


def _hybrid() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((3, 40), batch_size=2, name="features")
    a = L.Dense(48, activation="relu", name="dense_rank3")(x)
    b = L.Dense(8, name="dense_flat")(L.Flatten(name="flat")(a))
    return keras.Model(x, b, name="hybrid"), [Spec((2, 3, 40))]


def _dynamic_range(converter: Any) -> None:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]


def _randomized(make: Any) -> Any:
    """``make`` with its Keras model's biases drawn at random (zero biases are dropped by the converter)."""

    def made() -> tuple[Any, list[Spec]]:
        model, specs = make()
        if isinstance(model, keras.Model):
            randomize_keras_model(model, SEED)
        return model, specs

    return made


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    kind = name.rsplit("_", 1)[0]
    makers = {"tconv": _tconv, "convs": _convs, "matmul": _matmul, "conv3d": _conv3d, "hybrid": _hybrid}
    options = {"configure": _dynamic_range} if kind == "hybrid" else {}
    return build_converted("tflite_conv", name, _randomized(makers[kind]), model_path, reference_path, **options)
