"""Convolution and matrix-product operators, converted by the real TFLiteConverter in float32,
full-int8 and 16x8 (int16 activations, int8 weights).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``convs``: TRANSPOSE_CONV (SAME stride 2 with bias, VALID stride 2x1 without),
  CONV_2D (plain and grouped), DEPTHWISE_CONV_2D (multiplier 2), FULLY_CONNECTED on a rank-3 input
  (keep_num_dims) and on a flat one, batch 2; and, on four more inputs, BATCH_MATMUL of two
  variable operands — batch dims broadcast (rank 4 against rank 3, rank 5), adj_x / adj_y,
  rank 2 — and against constant right-hand sides;
* ``conv3d_float``: CONV_3D (SAME with strides and ReLU, VALID) and CONV_3D_TRANSPOSE
  (SAME stride 2, VALID) — LiteRT has these in float only;
* ``tconv_int8``: TRANSPOSE_CONV alone (the tests make a legacy uint8 model from it);
* ``hybrid_float``: dynamic-range quantization (int8 weights, float activations, the input
  quantized at run time) of CONV_2D (plain and grouped), DEPTHWISE_CONV_2D, TRANSPOSE_CONV, BATCH_MATMUL with a
  constant right-hand side and FULLY_CONNECTED (keep_num_dims and flat), as the converter
  makes them without a representative dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ._info import ModelInfo
from ._keras_common import randomize_keras_model
from ._tflite_common import SEED, Spec, build_converted, representative

BUILDER_VERSION = 6

NAMES = (
    "convs_float", "convs_int8", "convs_int16x8",
    "conv3d_float",
    "hybrid_float",
    "tconv_int8",
)
L = keras.layers


def _matmuls(a: keras.KerasTensor, b: keras.KerasTensor, c: keras.KerasTensor,
             d: keras.KerasTensor) -> list[keras.KerasTensor]:
    """BATCH_MATMUL: broadcast batch dims, adj_x / adj_y, ranks 2 to 5, variable and constant RHS."""
    rng = np.random.default_rng(SEED)
    w3 = tf.constant(rng.uniform(-1, 1, (3, 5, 6)).astype(np.float32))
    w2 = tf.constant(rng.uniform(-1, 1, (6, 4)).astype(np.float32))
    ab = L.Lambda(lambda t: tf.linalg.matmul(t[0], t[1], adjoint_b=True), name="ab")([a, b])  # [2,3,3,5]
    abw = L.Lambda(lambda t: tf.linalg.matmul(t, w3), name="abw")(ab)  # constant RHS, broadcast: [2,3,3,6]
    flat = L.Lambda(lambda t: tf.linalg.matmul(tf.reshape(t, (18, 6)), w2), name="flat_mm")(abw)  # rank 2
    cd = L.Lambda(lambda t: tf.linalg.matmul(t[0], t[1], adjoint_a=True), name="cd")([c, d])  # rank 5
    sq = L.Lambda(lambda t: tf.linalg.matmul(t, t, adjoint_a=True), name="sq")(flat)  # rank 2, [4, 4]
    return [abw, flat, cd, sq]


#: the convs model's inputs: the image, then the BATCH_MATMUL operands
_CONVS_INPUTS = {"image": (2, 5, 6, 3), "x0": (2, 1, 3, 4), "x1": (3, 5, 4), "x2": (1, 2, 1, 4, 3), "x3": (2, 1, 2, 4, 2)}


def _convs() -> tuple[keras.Model, list[Spec]]:
    inputs = [keras.Input(shape[1:], batch_size=shape[0], name=name) for name, shape in _CONVS_INPUTS.items()]
    x, operands = inputs[0], inputs[1:]
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", name="tconv_same")(x)
    b = L.Conv2DTranspose(3, (2, 3), strides=(2, 1), padding="valid", use_bias=False,
                          name="tconv_valid")(a)
    c = L.Conv2D(6, 3, strides=2, padding="same", activation="relu6", name="conv")(b)
    c = L.Conv2D(6, 3, padding="same", groups=3, name="grouped")(c)  # 3 groups of 2 channels
    d = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="dw")(c)
    rows = L.Reshape((-1, 12), name="rows")(d)
    e = L.Dense(7, activation="relu", name="dense_rank3")(rows)  # FULLY_CONNECTED keep_num_dims
    f = L.Dense(4, name="dense_flat")(L.Flatten(name="flat")(e))
    outputs = [b, f, *_matmuls(*operands)]
    return keras.Model(inputs, outputs, name="convs"), [Spec(shape) for shape in _CONVS_INPUTS.values()]


def _tconv() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((4, 5, 3), batch_size=2, name="image")
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", name="tconv_same")(x)
    b = L.Conv2DTranspose(3, (3, 2), strides=(1, 2), padding="valid", use_bias=False, name="tconv_valid")(a)
    return keras.Model(x, b, name="tconv"), [Spec((2, 4, 5, 3))]


def _conv3d() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((4, 5, 6, 2), batch_size=2, name="volume")
    a = L.Conv3D(3, (2, 3, 3), strides=(1, 2, 1), padding="same", activation="relu", name="c3_same")(x)
    b = L.Conv3D(4, 2, padding="valid", name="c3_valid")(a)
    c = L.Conv3DTranspose(3, 3, strides=2, padding="same", name="t3_same")(b)
    d = L.Conv3DTranspose(2, (2, 1, 3), strides=(1, 2, 1), padding="valid", use_bias=False, name="t3_valid")(c)
    return keras.Model(x, d, name="conv3d"), [Spec((2, 4, 5, 6, 2))]


def _hybrid() -> tuple[keras.Model, list[Spec]]:
    """Layers with at least 1024 weights (smaller ones stay float under dynamic-range quantization)."""
    x = keras.Input((6, 6, 16), batch_size=2, name="image")
    a = L.Conv2D(32, 3, padding="same", activation="relu", name="conv")(x)
    a = L.Conv2D(32, 3, padding="same", groups=2, name="grouped")(a)
    b = L.DepthwiseConv2D(5, depth_multiplier=2, padding="same", name="dw")(a)
    c = L.Conv2DTranspose(16, 3, strides=2, padding="same", name="tconv")(a)
    w3 = tf.constant(np.random.default_rng(SEED).uniform(-1, 1, (2, 16, 64)).astype(np.float32))
    d = L.Lambda(lambda v: tf.linalg.matmul(v, w3), name="bmm")(L.Reshape((144, 16), name="rows")(c))
    e = L.Dense(48, activation="relu", name="dense_rank3")(L.Reshape((36, 64), name="pixels")(b))
    f = L.Dense(8, name="dense_flat")(L.Flatten(name="flat")(e))
    return keras.Model(x, [d, f], name="hybrid"), [Spec((2, 6, 6, 16))]


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


def _by_name(converter: Any) -> None:
    """Calibrate the convs model with samples keyed by input name: the converter matches a list
    of samples to the file's input order, which is not the Keras inputs' order."""
    if converter.representative_dataset is not None:
        samples = representative([Spec(shape) for shape in _CONVS_INPUTS.values()])
        converter.representative_dataset = lambda: (dict(zip(_CONVS_INPUTS, s, strict=True)) for s in samples())


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    kind = name.rsplit("_", 1)[0]
    makers = {"tconv": _tconv, "convs": _convs, "conv3d": _conv3d, "hybrid": _hybrid}
    options = {"configure": {"convs": _by_name, "hybrid": _dynamic_range}[kind]} if kind in ("convs", "hybrid") else {}
    return build_converted("tflite_conv", name, _randomized(makers[kind]), model_path, reference_path, **options)
