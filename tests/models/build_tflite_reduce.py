"""Reductions, selections and pooling, converted by the real TFLiteConverter (float32,
full-int8, 16x8), for the reference interpreter's reduce_ops and pool kernels.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``):

* ``reduce``: a rank-4 batch-2 activation reduced by SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD
  and MEAN over single, negative, multiple and all axes, with and without keep_dims; ARG_MAX /
  ARG_MIN (int32 and int64 indices) and TOPK_V2 on a rectified copy (ties) and on an input; a rank-3 and a
  rank-5 input; average and max pooling.
* ``ints_float``: int32 / int64 / bool tensors: SUM, REDUCE_MAX/MIN/PROD, REDUCE_ANY/ALL,
  ARG_MAX/ARG_MIN, TOPK_V2 and CUMSUM (plain, exclusive, reverse).
* ``cumsum_float``: float CUMSUM (exclusive / reverse, negative axis).
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted

BUILDER_VERSION = 8

NAMES = ("reduce_float", "reduce_int8", "reduce_int16x8", "sums_int8", "sums_int16x8", "ints_float", "cumsum_float")
FAMILY = "tflite_reduce"


def _reduce(quantized: bool, selections: bool) -> tuple[object, list[Spec]]:
    """``selections``: also ARG_MAX/ARG_MIN/TOPK_V2 (the 16x8 quantizer has none of them);
    ``quantized``: without SUM (LiteRT's reference SUM misreads quantized tensors: see ``sums``)."""
    specs = [Spec((2, 3, 4, 5), low=-1.0, high=2.0), Spec((2, 6, 5)), Spec((2, 2, 3, 2, 4)),
             Spec((2, 3, 4, 5), low=0.5, high=1.5)]

    def model(a: tf.Tensor, y: tf.Tensor, z: tf.Tensor, w: tf.Tensor) -> tuple[tf.Tensor, ...]:
        outs = [
            tf.reduce_max(a, axis=-1),
            tf.reduce_min(a, axis=[0, 2], keepdims=True),
            tf.reduce_prod(w, axis=2),
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
        if not quantized:
            outs += [tf.reduce_sum(a, axis=1), tf.reduce_sum(a, axis=[-1, 1], keepdims=True),
                     tf.reduce_sum(y, axis=-2, keepdims=True)]
        if selections:
            ties = tf.nn.relu(a - 0.5)  # many zeros: ties
            outs += [tf.math.argmax(ties, axis=-1, output_type=tf.int32),
                     tf.math.argmin(ties, axis=1, output_type=tf.int64),
                     tf.math.top_k(tf.reshape(ties, (2, 60)), k=7).values,
                     tf.math.argmax(y, axis=1, output_type=tf.int32), tf.math.top_k(y, k=3).indices]
        return tuple(outs)

    return model, specs


def _sums() -> tuple[object, list[Spec]]:
    specs = [Spec((2, 3, 4, 5), low=-1.0, high=2.0), Spec((2, 6, 5), low=-0.25, high=0.5)]

    def model(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (tf.reduce_sum(a, axis=1), tf.reduce_sum(a, axis=[-1, 1], keepdims=True),
                tf.reduce_sum(a, axis=[0, 1, 2, 3]), tf.reduce_sum(b, axis=[1, 2], keepdims=True),
                tf.reduce_sum(b, axis=-1))

    return model, specs


def _ints() -> tuple[object, list[Spec]]:
    specs = [Spec((2, 3, 5), "int32", -4, 5), Spec((3, 4), "int64", -3, 4), Spec((2, 3, 5), "bool")]

    def model(i: tf.Tensor, j: tf.Tensor, flags: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (
            tf.reduce_sum(i, axis=-1), tf.reduce_max(i, axis=[0, 2], keepdims=True), tf.reduce_min(j, axis=0),
            tf.reduce_prod(i, axis=1), tf.reduce_sum(j, axis=[0, 1]), tf.reduce_prod(j, axis=-1),
            tf.reduce_any(flags, axis=1), tf.reduce_all(flags, axis=[-1, 0], keepdims=True),
            tf.math.argmax(i, axis=-1, output_type=tf.int64), tf.math.argmin(i, axis=0, output_type=tf.int32),
            tf.math.top_k(i, k=3).values, tf.math.top_k(i, k=2).indices,
            tf.math.cumsum(i, axis=1), tf.math.cumsum(i, axis=-1, exclusive=True, reverse=True),
            tf.math.cumsum(j, axis=0, reverse=True),
        )

    return model, specs


def _cumsum() -> tuple[object, list[Spec]]:
    specs = [Spec((2, 7, 3))]

    def model(x: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (tf.math.cumsum(x, axis=1), tf.math.cumsum(x, axis=-1, exclusive=True),
                tf.math.cumsum(x, axis=0, reverse=True), tf.math.cumsum(x, axis=1, exclusive=True, reverse=True))

    return model, specs


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    makers = {"reduce_float": lambda: _reduce(False, True), "reduce_int8": lambda: _reduce(True, True),
              "reduce_int16x8": lambda: _reduce(True, False), "ints_float": _ints,
              "sums_int8": _sums, "sums_int16x8": _sums, "cumsum_float": _cumsum}
    return build_converted(FAMILY, name, makers[name], model_path, reference_path)
