"""Small TFLite models that exercise each operator of the reference interpreter,
and a full-integer MobileNetV2, all made by the real TFLiteConverter.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Names:

* ``convs_int8`` / ``convs_float``: dilated, strided, asymmetric-SAME (even
  kernel) and VALID convolutions, depthwise with multiplier 2, max/average
  pooling with partial windows, PAD, ADD of tensors with different scales,
  SUB, MUL, CONCATENATION, RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR,
  TRANSPOSE, STRIDED_SLICE, MEAN, RESHAPE, FULLY_CONNECTED, SOFTMAX.
* ``acts_int8`` / ``acts_float``: LOGISTIC, TANH, RELU, RELU6, HARD_SWISH,
  SQUEEZE, and a float-in/float-out int8 model (QUANTIZE/DEQUANTIZE at the edges).
* ``mobilenet_v2_int8``: keras MobileNetV2 (weights=None, 96x96) full-integer int8.
* ``mobilenet_v3_small_int8``, ``efficientnet_b0_int8``: keras MobileNetV3Small and
  EfficientNetB0 (weights=None, 64x64, 10 classes) full-integer int8 — HARD_SWISH,
  squeeze-and-excite blocks (MEAN, broadcast MUL), swish as LOGISTIC + MUL.
* ``misc_int8`` / ``misc_float``: standalone RELU and RELU6 (after a concatenation,
  where they cannot be fused), MEAN with keep_dims over H,W, SQUEEZE, broadcast
  MUL by a per-channel constant, VALID strided pooling.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from ._info import ModelInfo, save_reference
from ._keras_common import randomize_keras_model
from .build_tflite import _details_to_info, representative_dataset, run_tflite, tflite_op_histogram

BUILDER_VERSION = 2  # bump to rebuild cached models made by this module

NAMES = ("convs_int8", "convs_float", "acts_int8", "acts_float", "mobilenet_v2_int8", "misc_int8", "misc_float",
         "mobilenet_v3_small_int8", "efficientnet_b0_int8")
SEED = 0
L = keras.layers


def _convs_model() -> keras.Model:
    x = keras.Input((17, 18, 3), batch_size=1, name="image")
    a = L.Conv2D(8, 3, dilation_rate=2, padding="same", activation="relu", name="dilated")(x)
    b = L.Conv2D(8, 3, strides=2, padding="same", activation="relu6", name="strided")(a)
    c = L.Conv2D(8, 4, padding="same", name="asym_same")(b)  # pad 1 top/left, 2 bottom/right
    d = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="dw_mult2")(c)
    d = L.Conv2D(8, 1, name="pw")(d)
    e = L.Add(name="add_scales")([b, L.Rescaling(4.0, name="widen")(d)])  # different scales
    f = L.Subtract(name="sub")([e, c])
    g = L.Multiply(name="mul")([f, b])
    h = L.Concatenate(name="concat")([g, c])
    p = L.MaxPooling2D(3, strides=2, padding="same", name="maxpool")(h)
    q = L.AveragePooling2D(3, strides=2, padding="same", name="avgpool")(h)
    r = L.Conv2D(6, 2, padding="valid", name="valid")(L.ZeroPadding2D(((1, 2), (0, 1)), name="pad")(p + q))
    up = L.Resizing(14, 10, interpolation="bilinear", name="bilinear")(r)
    nn = L.Resizing(14, 10, interpolation="nearest", name="nearest")(r)
    t = L.Permute((2, 1, 3), name="transpose")(up + nn)
    s = L.Lambda(lambda v: v[:, 1:-1:2, ::3, 1:5], name="slice")(t)
    m = L.GlobalAveragePooling2D(name="gap")(s)
    flat = L.Reshape((-1,), name="reshape")(r)
    logits = L.Dense(10, name="fc")(L.Concatenate(name="concat2")([m, flat]))
    return keras.Model(x, L.Softmax(name="softmax")(logits), name="convs")


def _acts_model() -> keras.Model:
    x = keras.Input((8, 8, 4), batch_size=1, name="image")
    a = L.Conv2D(8, 3, padding="same", name="conv")(x)
    sig = L.Activation("sigmoid", name="sigmoid")(a)
    tnh = L.Activation("tanh", name="tanh")(a)
    rel = L.ReLU(name="relu")(L.Conv2D(8, 1, name="conv_relu")(a) * 1.0)
    r6 = L.ReLU(6.0, name="relu6")(L.Subtract(name="sub_r6")([a, tnh]))
    hs = L.Activation("hard_swish", name="hswish")(L.Add(name="add_hs")([a, sig]))
    y = L.Concatenate(name="concat")([sig, tnh, rel, r6, hs])
    y = L.Conv2D(1, 8, padding="valid", name="head")(y)  # [1, 1, 1, 1]
    y = L.Lambda(lambda v: keras.ops.squeeze(v, axis=(1, 2)), name="squeeze")(y)
    return keras.Model(x, y, name="acts")


def _misc_model() -> keras.Model:
    import tensorflow as tf  # the tf ops below give SQUEEZE / keep_dims MEAN

    x = keras.Input((9, 10, 4), batch_size=1, name="image")
    a = L.Conv2D(6, 3, padding="same", name="conv_a")(x)
    b = L.Conv2D(6, 1, name="conv_b")(x)
    c = L.Concatenate(name="cat")([a, b])
    r = L.ReLU(name="relu")(c)
    r6 = L.ReLU(6.0, name="relu6")(L.Concatenate(name="cat6")([b, a]))
    m = L.Lambda(lambda v: v * tf.constant(np.linspace(0.5, 2.0, 12, dtype=np.float32)), name="scale")(r + r6)
    p = L.AveragePooling2D(2, strides=2, padding="valid", name="avg_valid")(m)
    q = L.MaxPooling2D(3, strides=2, padding="valid", name="max_valid")(m)
    g = L.Lambda(lambda v: tf.reduce_mean(v, axis=[1, 2], keepdims=True), name="gap_keep")(p)
    h = L.Lambda(lambda v: tf.reduce_mean(v, axis=[1, 2], keepdims=True), name="gap_keep2")(q)
    s = L.Lambda(lambda v: tf.squeeze(v, axis=[1, 2]), name="squeeze")(g + h)
    return keras.Model(x, L.Dense(5, name="fc")(s), name="misc")


def _convert(model: keras.Model, int8: bool, float_io: bool = False) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        shape = (1, *(int(d) for d in model.inputs[0].shape[1:]))
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative_dataset(shape, count=32)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if not float_io:
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
    return converter.convert()


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Build, convert, write and check that LiteRT runs it; return its ModelInfo."""
    keras.utils.set_random_seed(SEED)
    if name == "mobilenet_v2_int8":
        model = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3), classes=1000)
    elif name == "mobilenet_v3_small_int8":
        model = keras.applications.MobileNetV3Small(weights=None, input_shape=(64, 64, 3), classes=10)
    elif name == "efficientnet_b0_int8":
        model = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10)
    elif name.startswith("convs"):
        model = _convs_model()
    elif name.startswith("misc"):
        model = _misc_model()
    else:
        model = _acts_model()
    randomized = randomize_keras_model(model, SEED)
    int8 = name.endswith("int8")
    model_path.write_bytes(_convert(model, int8, float_io=name == "acts_int8"))

    interp = Interpreter(model_path=str(model_path))
    info = ModelInfo(
        family="tflite_ops", name=name, format="tflite", path=model_path, reference=reference_path,
        **_details_to_info(interp),
    )
    feeds = info.sample_inputs(SEED)
    got = run_tflite(model_path, feeds)
    save_reference(reference_path, list(feeds.values()), got)
    meta: dict[str, Any] = {
        "keras_model_name": model.name,
        "randomized": randomized,
        "op_histogram": tflite_op_histogram(model_path),
        "num_tensors": len(interp.get_tensor_details()),
        "output_finite": bool(all(np.isfinite(g.astype(np.float64)).all() for g in got)),
    }
    return replace(info, metadata=meta)
