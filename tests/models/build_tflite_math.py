"""Element-wise math and parametric activations, converted by the real TFLiteConverter
(family ``tflite_math``); every operator output is checked against LiteRT's reference kernels.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``, mode float / int8 / int16x8):

* ``unary``: one input of shape [2, 3, 5, 4] (batch 2, rank 4, values in [-1, 3) so the int8
  zero points are asymmetric) through EXP, LOG, SQRT, RSQRT, SQUARE, ABS, NEG, SIN, COS,
  FLOOR, CEIL, ROUND, SIGN, ELU, LEAKY_RELU, GELU (tanh approximation and exact), LOG_SOFTMAX,
  L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION.  int8: the converter quantizes EXP, LOG,
  SQRT, RSQRT, ABS, LEAKY_RELU, GELU, LOG_SOFTMAX and L2_NORMALIZATION and leaves the others
  float between DEQUANTIZE and QUANTIZE; 16x8: it quantizes EXP, LOG, RSQRT, ABS, LEAKY_RELU
  and GELU only (:data:`INT16_UNARY`), the others are left out of that model;
* ``prelu``: Keras PReLU with alpha per channel (``shared_axes=[1, 2]``, broadcast over
  the spatial axes) and with a full alpha tensor, alphas drawn in [-0.5, 0.5] so some are
  negative, on a [2, 4, 6, 3] input.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted, mode_of

BUILDER_VERSION = 2

NAMES = (
    "unary_float", "unary_int8", "unary_int16x8",
    "extra_float", "extra_int8",
    "prelu_float", "prelu_int8",
)
FAMILY = "tflite_math"

#: operator -> what the ``unary`` model computes with it (input ``x`` in [-1, 3))
UNARY: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "EXP": tf.math.exp,
    "LOG": lambda x: tf.math.log(tf.abs(x)),
    "SQRT": lambda x: tf.sqrt(tf.abs(x)),
    "RSQRT": lambda x: tf.math.rsqrt(tf.abs(x)),
    "ABS": tf.abs,
    "SQUARE": tf.square,
    "NEG": tf.negative,
    "SIN": lambda x: tf.sin(3.0 * x),
    "COS": lambda x: tf.cos(3.0 * x),
    "FLOOR": lambda x: tf.floor(4.0 * x),
    "SIGN": lambda x: tf.sign(x - 0.5),
    "LEAKY_RELU": lambda x: tf.nn.leaky_relu(x, 0.2),
    "GELU": lambda x: tf.nn.gelu(x, approximate=True),
    # on another tensor than GELU's: with a shared 0.5·x the converter fuses neither
    "GELU_EXACT": lambda x: tf.nn.gelu(tf.nn.leaky_relu(x, 0.2), approximate=False),
    "LOG_SOFTMAX": tf.nn.log_softmax,
    "L2_NORMALIZATION": lambda x: tf.math.l2_normalize(x, axis=-1),
    "LOCAL_RESPONSE_NORMALIZATION": lambda x: tf.nn.local_response_normalization(x, depth_radius=1, bias=1.5,
                                                                                   alpha=0.5, beta=0.75),
}
#: operators LiteRT's reference resolver (BUILTIN_REF) does not register: the ``extra`` model
#: holding them is checked against LiteRT's default kernels
EXTRA: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "ELU": tf.nn.elu,
    "CEIL": lambda x: tf.math.ceil(4.0 * x),
    "ROUND": lambda x: tf.round(4.0 * x),  # halves to even: 4x hits .5 often in float32
}
#: the operators the converter quantizes to 16x8 (it refuses the others in that mode)
INT16_UNARY = ("EXP", "LOG", "RSQRT", "ABS", "LEAKY_RELU", "GELU", "GELU_EXACT")
#: operators each model must contain (a test asserts it)
EXPECTED: dict[str, tuple[str, ...]] = {
    "unary_float": tuple(op for op in UNARY if op != "GELU_EXACT"),
    "unary_int8": tuple(op for op in UNARY if op != "GELU_EXACT"),
    "unary_int16x8": tuple(op for op in INT16_UNARY if op != "GELU_EXACT"),
    "extra_float": tuple(EXTRA),
    "extra_int8": tuple(EXTRA),
    "prelu_float": ("PRELU",),
    "prelu_int8": ("PRELU",),
}
UNARY_SPEC = Spec((2, 3, 5, 4), low=-1.0, high=3.0)


def _unary(mode: str) -> tuple[Any, list[Spec]]:
    ops = INT16_UNARY if mode == "int16x8" else tuple(UNARY)

    def fn(x: tf.Tensor) -> list[tf.Tensor]:
        return [UNARY[op](x) for op in ops]

    return fn, [UNARY_SPEC]


def _extra(mode: str) -> tuple[Any, list[Spec]]:
    def fn(x: tf.Tensor) -> list[tf.Tensor]:
        return [f(x) for f in EXTRA.values()]

    return fn, [UNARY_SPEC]


def _prelu(mode: str) -> tuple[Any, list[Spec]]:
    alpha = keras.initializers.RandomUniform(-0.5, 0.5, seed=1)
    x = keras.Input((4, 6, 3), batch_size=2)
    per_channel = keras.layers.PReLU(alpha_initializer=alpha, shared_axes=[1, 2], name="prelu_channel")(x)
    y = keras.layers.Conv2D(3, 1, name="mix")(per_channel)
    full = keras.layers.PReLU(alpha_initializer=alpha, name="prelu_full")(y)
    return keras.Model(x, [per_channel, full]), [Spec((2, 4, 6, 3), low=-1.0, high=2.0)]


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    mode = mode_of(name)
    make = {"unary": _unary, "extra": _extra, "prelu": _prelu}[name[: -len(mode) - 1]]
    return build_converted(FAMILY, name, lambda: make(mode), model_path, reference_path)
