"""Reductions, selections and pooling, converted by the real TFLiteConverter (float32,
full-int8, 16x8), for the reference interpreter's reduce_ops and pool kernels.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``reduce`` (float, int8, 16x8): batch-2 rank-3/4/5 activations reduced by REDUCE_MAX,
  REDUCE_MIN, REDUCE_PROD and MEAN over single, negative, multiple and all axes, with and
  without keep_dims; average and max pooling; ARG_MAX / ARG_MIN (int32 and int64 indices) and
  TOPK_V2 on a rectified copy (ties) and on an input (not 16x8: the quantizer has none of them).
  In float also SUM, CUMSUM (exclusive / reverse, negative axis) and int32 / int64 / bool
  inputs through SUM, REDUCE_MAX/MIN/PROD, REDUCE_ANY/ALL, ARG_MAX/ARG_MIN, TOPK_V2, CUMSUM.
* ``sums`` (int8, 16x8): quantized SUM with rescaling (LiteRT's reference SUM reads int8/int16
  tensors as uint8 bytes, so these are checked against TFLite Micro).
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted

BUILDER_VERSION = 10

NAMES = ("reduce_float", "reduce_int8", "reduce_int16x8", "sums_int8", "sums_int16x8")
FAMILY = "tflite_reduce"


def _reduce(mode: str) -> tuple[object, list[Spec]]:
    """The ``reduce`` model in ``mode``: SUM only in float (LiteRT's reference SUM misreads
    quantized tensors: see ``sums``), ARG_MAX/ARG_MIN/TOPK_V2 not in 16x8 (its quantizer has
    none of them), the int32/int64/bool inputs and float CUMSUM only in float (the integer
    modes quantize every float operator)."""
    specs = [Spec((2, 3, 4, 5), low=-1.0, high=2.0), Spec((2, 6, 5)), Spec((2, 2, 3, 2, 4)),
             Spec((2, 3, 4, 5), low=0.5, high=1.5)]
    if mode == "float":
        specs += [Spec((2, 3, 5), "int32", -4, 5), Spec((3, 4), "int64", -3, 4), Spec((2, 3, 5), "bool")]

    def model(a: tf.Tensor, y: tf.Tensor, z: tf.Tensor, w: tf.Tensor, *plain: tf.Tensor) -> tuple[tf.Tensor, ...]:
        outs = [
            tf.reduce_max(a, axis=-1),
            tf.reduce_min(a, axis=[0, 2], keepdims=True),
            tf.reduce_prod(w, axis=2),
            tf.reduce_prod(w, axis=[-1, 1], keepdims=True),  # the rescaled steps follow the input order
            tf.reduce_mean(a, axis=1),
            tf.reduce_mean(a, axis=-1, keepdims=True),
            tf.reduce_mean(a, axis=[0, 1, 2, 3]),
            tf.reduce_mean(a, axis=[1, 2], keepdims=True),
            tf.reduce_max(y, axis=[0, -1]),
            tf.reduce_mean(z, axis=[2, 4]),
            tf.reduce_min(z, axis=3),
            tf.nn.avg_pool2d(a, 2, 1, "SAME"),
            tf.nn.max_pool2d(a, [2, 3], [1, 2], "VALID"),
        ]
        if mode != "int16x8":
            ties = tf.nn.relu(a - 0.5)  # many zeros: ties
            outs += [tf.math.argmax(ties, axis=-1, output_type=tf.int32),
                     tf.math.argmin(ties, axis=1, output_type=tf.int64),
                     tf.math.top_k(tf.reshape(ties, (2, 60)), k=7).values,
                     tf.math.argmax(y, axis=1, output_type=tf.int32), tf.math.top_k(y, k=3).indices]
        if mode == "float":
            outs += [tf.reduce_sum(a, axis=1), tf.reduce_sum(a, axis=[-1, 1], keepdims=True),
                     tf.reduce_sum(y, axis=-2, keepdims=True),
                     tf.math.cumsum(y, axis=1), tf.math.cumsum(y, axis=-1, exclusive=True),
                     tf.math.cumsum(y, axis=0, reverse=True), tf.math.cumsum(y, axis=1, exclusive=True, reverse=True),
                     *_plain(*plain)]
        return tuple(outs)

    return model, specs


def _plain(i: tf.Tensor, j: tf.Tensor, flags: tf.Tensor) -> list[tf.Tensor]:
    """int32 / int64 / bool reductions, selections and running sums."""
    return [
        tf.reduce_sum(i, axis=-1), tf.reduce_max(i, axis=[0, 2], keepdims=True), tf.reduce_min(j, axis=0),
        tf.reduce_prod(i, axis=1), tf.reduce_sum(j, axis=[0, 1]), tf.reduce_prod(j, axis=-1),
        tf.reduce_any(flags, axis=1), tf.reduce_all(flags, axis=[-1, 0], keepdims=True),
        tf.math.argmax(i, axis=-1, output_type=tf.int64), tf.math.argmin(i, axis=0, output_type=tf.int32),
        tf.math.top_k(i, k=3).values, tf.math.top_k(i, k=2).indices,
        tf.math.cumsum(i, axis=1), tf.math.cumsum(i, axis=-1, exclusive=True, reverse=True),
        tf.math.cumsum(j, axis=0, reverse=True),
    ]


def _sums() -> tuple[object, list[Spec]]:
    specs = [Spec((2, 3, 4, 5), low=-1.0, high=2.0), Spec((2, 6, 5), low=-0.25, high=0.5)]

    def model(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (tf.reduce_sum(a, axis=1), tf.reduce_sum(a, axis=[-1, 1], keepdims=True),
                tf.reduce_sum(a, axis=[0, 1, 2, 3]), tf.reduce_sum(b, axis=[1, 2], keepdims=True),
                tf.reduce_sum(b, axis=-1))

    return model, specs


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    part, mode = name.split("_")
    return build_converted(FAMILY, name, _sums if part == "sums" else lambda: _reduce(mode), model_path,
                           reference_path)
