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
  bilinear resize up, skip concatenations, a 64x64 sigmoid mask; ``unet256``: the same at
  256x256 (a full-size mask: where accumulation order and resizing drift shows in float);
* ``segmenter256``: a MediaPipe-selfie-style segmenter at 256x256 — HARD_SWISH, squeeze-excite
  (global average pools over 128x128, 64x64 and 32x32 maps: long float sums), TRANSPOSE_CONV
  and half-pixel bilinear resize up, skip adds, a 256x256 sigmoid mask;
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
    "unet_float", "unet_int8", "unet_int16x8", "unet_float16", "unet256_float", "unet256_int8",
    "segmenter256_float", "segmenter256_int8",
    "transformer_float", "transformer_int8", "transformer_int16x8", "transformer_dynamic",
    "resnet50_float", "resnet50_int8", "resnet50_int16x8",
    "densenet121_float", "densenet121_int8", "densenet121_int16x8",
    "nasnet_mobile_float", "nasnet_mobile_int8", "nasnet_mobile_int16x8",
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


def _unet(size: int = 64) -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((size, size, 3), batch_size=1, name="image")
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
    return keras.Model(x, mask, name="unet"), [Spec((1, size, size, 3), low=0.0)]


def _segmenter256() -> tuple[keras.Model, list[Spec]]:
    def squeeze_excite(v: keras.KerasTensor, name: str) -> keras.KerasTensor:
        channels = int(v.shape[-1])
        w = L.GlobalAveragePooling2D(keepdims=True, name=f"{name}_pool")(v)
        w = L.Conv2D(max(channels // 4, 4), 1, activation="relu", name=f"{name}_reduce")(w)
        w = L.Conv2D(channels, 1, activation="hard_sigmoid", name=f"{name}_expand")(w)
        return L.Multiply(name=f"{name}_scale")([v, w])

    def block(v: keras.KerasTensor, filters: int, stride: int, name: str) -> keras.KerasTensor:
        v = L.DepthwiseConv2D(3, strides=stride, padding="same", name=f"{name}_dw")(v)
        v = L.BatchNormalization(name=f"{name}_dw_bn")(v)
        v = L.Activation("hard_swish", name=f"{name}_dw_act")(v)
        v = L.BatchNormalization(name=f"{name}_bn")(L.Conv2D(filters, 1, use_bias=False, name=f"{name}_pw")(v))
        return squeeze_excite(L.Activation("hard_swish", name=f"{name}_act")(v), f"{name}_se")

    x = keras.Input((256, 256, 3), batch_size=1, name="image")
    y = L.Conv2D(16, 3, strides=2, padding="same", name="stem")(x)             # 128x128
    y = squeeze_excite(L.Activation("hard_swish", name="stem_act")(L.BatchNormalization(name="stem_bn")(y)), "stem_se")
    skips = [y]
    for i, filters in enumerate((24, 32)):                                       # 64x64, 32x32
        y = block(y, filters, 2, f"enc{i}")
        skips.append(y)
    y = block(y, 32, 1, "mid")
    y = L.Conv2DTranspose(24, 2, strides=2, name="up1")(y)                       # 64x64
    y = L.Activation("hard_swish", name="dec1_act")(L.Add(name="skip1")([y, skips[1]]))
    y = L.Resizing(128, 128, interpolation="bilinear", name="up0")(y)            # 128x128, half-pixel
    y = L.Add(name="skip0")([L.Conv2D(16, 1, name="up0_proj")(y), skips[0]])
    y = L.Conv2DTranspose(1, 2, strides=2, name="head")(L.Activation("hard_swish", name="dec0_act")(y))
    return keras.Model(x, L.Activation("sigmoid", name="mask")(y), name="segmenter256"), \
        [Spec((1, 256, 256, 3), low=0.0)]


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
    makers = {"landmarks": _landmarks, "unet": _unet, "unet256": lambda: _unet(256),
              "segmenter256": _segmenter256,
              "transformer": lambda: _transformer(mode != "int16x8")}
    model, specs = makers[kind]() if kind in makers else _application(kind)
    randomized = randomize_keras_model(model, SEED)
    # 16x8 as people convert it: operators the converter cannot quantize to 16x8 (PRELU,
    # HARD_SWISH) stay float between DEQUANTIZE and QUANTIZE
    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
           tf.lite.OpsSet.TFLITE_BUILTINS] if mode == "int16x8" else None
    model_path.write_bytes(convert(model, mode, specs, ops=ops))
    return info_of("tflite_real", name, model_path, reference_path, specs, randomized=randomized)
