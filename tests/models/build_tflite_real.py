"""Whole models of the kind people deploy, converted by the real TFLiteConverter with random
weights (randomized biases and batch-norm statistics): the reference interpreter must run
every one of them, tensor for tensor as LiteRT's reference kernels.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``, mode float / int8 / int16x8, and float16 weights or dynamic-range
quantization for some — see ``_tflite_common.convert``):

* ``landmarks``: a PReLU-heavy face-detector/landmark CNN in the BlazeFace style — 5x5
  depthwise blocks with channel-padded residual adds, PReLU with shared spatial axes,
  max-pool shortcuts, and a multi-output head (box regressors reshaped and concatenated
  over two scales, sigmoid scores, landmark points from a dense layer);
* ``unet``: a U-Net-style segmenter — strided convolutions down, TRANSPOSE_CONV and
  bilinear resize up, skip concatenations, a 64x64 sigmoid mask;
* ``transformer``: a small transformer encoder — token embedding (GATHER), multi-head
  self-attention (BATCH_MATMUL, softmax), LayerNorm as the converter decomposes it,
  GELU feed-forward, mean pooling, a classifier;
* ``resnet50`` / ``densenet121`` / ``nasnet_mobile`` / ``mobilenet_v3_large``: Keras applications
  (weights=None) at small inputs; ``*_224``: MobileNetV2, MobileNetV3Small and EfficientNetB0 at
  224x224 (1000 classes), the speed benchmark's models.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from ._info import ModelInfo
from ._keras_common import randomize_keras_model
from ._tflite_common import SEED, Spec, convert, info_of, mode_of

BUILDER_VERSION = 1

NAMES = (
    "landmarks_float", "landmarks_int8", "landmarks_int16x8", "landmarks_float16", "landmarks_dynamic",
    "unet_float", "unet_int8", "unet_int16x8", "unet_float16",
    "transformer_float", "transformer_int8", "transformer_int16x8", "transformer_dynamic",
    "resnet50_float", "resnet50_int8",
    "densenet121_float", "densenet121_int8",
    "nasnet_mobile_float", "nasnet_mobile_int8",
    "mobilenet_v3_large_float", "mobilenet_v3_large_int16x8",
    # the speed benchmark's classifiers (benchmarks/tflite_speed.py), at the size they are deployed
    "mobilenet_v2_224_float", "mobilenet_v2_224_int8", "mobilenet_v3_small_224_float", "mobilenet_v3_small_224_int8",
    "efficientnet_b0_224_float", "efficientnet_b0_224_int8",
)
L = keras.layers


def _blaze_block(x: keras.KerasTensor, filters: int, stride: int, name: str) -> keras.KerasTensor:
    y = L.DepthwiseConv2D(5, strides=stride, padding="same", name=f"{name}_dw")(x)
    y = L.Conv2D(filters, 1, name=f"{name}_pw")(y)
    shortcut = x
    if stride == 2:
        shortcut = L.MaxPooling2D(2, name=f"{name}_pool")(shortcut)
    extra = filters - int(x.shape[-1])
    if extra:
        shortcut = L.Lambda(lambda v, e=extra: tf.pad(v, [[0, 0], [0, 0], [0, 0], [0, e]]), name=f"{name}_chpad")(shortcut)
    y = L.Add(name=f"{name}_add")([y, shortcut])
    return L.PReLU(shared_axes=[1, 2], name=f"{name}_prelu")(y)


def _landmarks() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    y = L.Conv2D(16, 5, strides=2, padding="same", name="stem")(x)
    y = L.PReLU(shared_axes=[1, 2], name="stem_prelu")(y)
    y = _blaze_block(y, 16, 1, "b1")
    y = _blaze_block(y, 24, 2, "b2")
    mid = _blaze_block(y, 24, 1, "b3")                       # 16x16
    low = _blaze_block(_blaze_block(mid, 32, 2, "b4"), 32, 1, "b5")  # 8x8
    heads = []
    for feat, anchors, tag in ((mid, 2, "16"), (low, 6, "8")):
        boxes = L.Conv2D(anchors * 4, 3, padding="same", name=f"reg{tag}")(feat)
        heads.append(L.Reshape((-1, 4), name=f"reg{tag}_flat")(boxes))
    regressors = L.Concatenate(axis=1, name="regressors")(heads)
    score = L.Conv2D(1, 3, padding="same", name="score")(low)
    score = L.Activation("sigmoid", name="score_sigmoid")(L.GlobalMaxPooling2D(name="score_max")(score))
    flat = L.GlobalAveragePooling2D(name="gap")(low)
    points = L.Dense(2 * 6, name="points")(L.PReLU(name="points_prelu")(L.Dense(32, name="points_fc")(flat)))
    return keras.Model(x, [regressors, score, points], name="landmarks"), [Spec((1, 64, 64, 3), low=0.0)]


def _unet() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    skips, y = [], x
    for i, filters in enumerate((8, 16, 32)):
        y = L.Conv2D(filters, 3, padding="same", activation="relu", name=f"enc{i}")(y)
        skips.append(y)
        y = L.Conv2D(filters, 3, strides=2, padding="same", activation="relu", name=f"down{i}")(y)
    y = L.Conv2D(32, 3, padding="same", activation="relu", name="bottleneck")(y)
    for i, filters in zip((2, 1, 0), (32, 16, 8)):
        if i == 1:
            y = L.UpSampling2D(2, interpolation="bilinear", name=f"up{i}")(y)
        else:
            y = L.Conv2DTranspose(filters, 3, strides=2, padding="same", name=f"up{i}")(y)
        y = L.Concatenate(name=f"skip{i}")([y, skips[i]])
        y = L.Conv2D(filters, 3, padding="same", activation="relu", name=f"dec{i}")(y)
    mask = L.Conv2D(1, 1, activation="sigmoid", name="mask")(y)
    return keras.Model(x, mask, name="unet"), [Spec((1, 64, 64, 3), low=0.0)]


class _MulLayerNorm(L.Layer):
    """LayerNorm with the variance as mean((x - mean)^2) by MUL: LiteRT has no int16
    SQUARED_DIFFERENCE, which Keras' LayerNormalization becomes."""

    def build(self, shape: tuple[int, ...]) -> None:
        self.gamma = self.add_weight(shape=(shape[-1],), initializer="ones")
        self.beta = self.add_weight(shape=(shape[-1],), initializer="zeros")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        d = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        return d * tf.math.rsqrt(tf.reduce_mean(d * d, axis=-1, keepdims=True) + 1e-5) * self.gamma + self.beta


def _transformer(tokens: bool = True) -> tuple[keras.Model, list[Spec]]:
    """From token ids (GATHER of an embedding table), or — in 16x8, where the converter cannot
    calibrate an integer input and LiteRT has no int16 SQUARED_DIFFERENCE — from the embedded
    sequence, with LayerNorm's variance by MUL."""
    def norm(name: str) -> L.Layer:
        return L.LayerNormalization(epsilon=1e-5, name=name) if tokens else _MulLayerNorm(name=name)

    vocab, length, width, heads = 64, 12, 32, 4
    if tokens:
        x = keras.Input((length,), batch_size=1, dtype="int32", name="tokens")
        y = L.Embedding(vocab, width, name="embed")(x)
        spec = Spec((1, length), "int32", 0, vocab)
    else:
        x = y = keras.Input((length, width), batch_size=1, name="embedded")
        spec = Spec((1, length, width))
    y = y + keras.ops.convert_to_tensor(np.random.default_rng(SEED).normal(0, 0.1, (1, length, width)).astype(np.float32))
    for b in range(2):
        a = L.MultiHeadAttention(heads, width // heads, name=f"attn{b}")(y, y)
        y = norm(f"ln{b}a")(y + a)
        f = L.Dense(2 * width, activation="gelu", name=f"ff{b}a")(y)
        y = norm(f"ln{b}b")(y + L.Dense(width, name=f"ff{b}b")(f))
    pooled = L.GlobalAveragePooling1D(name="pool")(y)
    logits = L.Dense(5, name="classifier")(pooled)
    return keras.Model(x, L.Softmax(name="probs")(logits), name="transformer"), [spec]


def _application(name: str) -> tuple[keras.Model, list[Spec]]:
    apps = {
        "resnet50": (keras.applications.ResNet50, (64, 64, 3)),
        "densenet121": (keras.applications.DenseNet121, (64, 64, 3)),
        "nasnet_mobile": (keras.applications.NASNetMobile, (64, 64, 3)),
        "mobilenet_v3_large": (keras.applications.MobileNetV3Large, (64, 64, 3)),
        "mobilenet_v2_224": (keras.applications.MobileNetV2, (224, 224, 3)),
        "mobilenet_v3_small_224": (keras.applications.MobileNetV3Small, (224, 224, 3)),
        "efficientnet_b0_224": (keras.applications.EfficientNetB0, (224, 224, 3)),
    }
    make, shape = apps[name]
    model = make(weights=None, input_shape=shape, classes=1000 if name.endswith("_224") else 10)
    return model, [Spec((1, *shape), low=0.0)]


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    keras.utils.set_random_seed(SEED)
    kind, mode = name.rsplit("_", 1)[0], mode_of(name)
    makers = {"landmarks": _landmarks, "unet": _unet, "transformer": lambda: _transformer(mode != "int16x8")}
    model, specs = makers[kind]() if kind in makers else _application(kind)
    randomized = randomize_keras_model(model, SEED)
    # 16x8 as people convert it: operators the converter cannot quantize to 16x8 (PRELU,
    # HARD_SWISH) stay float between DEQUANTIZE and QUANTIZE
    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
           tf.lite.OpsSet.TFLITE_BUILTINS] if mode == "int16x8" else None
    model_path.write_bytes(convert(model, mode, specs, ops=ops))
    return info_of("tflite_real", name, model_path, reference_path, specs, randomized=randomized)
