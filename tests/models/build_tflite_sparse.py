"""Sparse TFLite models from the converter's sparsity support
(``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``) on pruned weights.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Names (one model per mode, batch 2):

* ``pruned_float``: a 3x3 convolution with 70% of its weights zero (random pattern) and a
  dense layer likewise — both become sparse constants read through DENSIFY (CSR over the last
  dimension, uint8/uint16 index vectors) — and a dense layer pruned in 1x4 blocks, which the
  converter leaves sparse on FULLY_CONNECTED itself (block map, a dense block dimension).
* ``pruned_int8``: the same model full-integer (``DEFAULT`` + ``EXPERIMENTAL_SPARSITY``): every
  pruned weight is an int8 sparse constant behind DENSIFY.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from ._info import ModelInfo, save_reference
from ._tflite_common import SEED, Spec, convert, mode_of
from .build_tflite import _details_to_info, tflite_op_histogram

BUILDER_VERSION = 1

NAMES = ("pruned_float", "pruned_int8")
L = keras.layers


def _pruned() -> tuple[keras.Model, list[Spec]]:
    x = keras.Input((6, 6, 4), batch_size=2, name="image")
    a = L.Conv2D(16, 3, padding="same", activation="relu", name="conv_random")(x)
    b = L.Flatten(name="flat")(a)
    c = L.Dense(48, activation="relu", name="dense_random")(b)
    d = L.Dense(10, name="dense_blocks")(c)
    model = keras.Model(x, d)
    rng = np.random.default_rng(0)
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        kernel = weights[0]
        if layer.name == "dense_blocks":  # Keras [in, out] -> TFLite [out, in]: blocks of 4 inputs
            keep = np.repeat(rng.random((kernel.shape[0] // 4, kernel.shape[1])) < 0.3, 4, axis=0)
        else:
            keep = rng.random(kernel.shape) < 0.3
        weights[0] = kernel * keep
        weights[1] = rng.uniform(-0.5, 0.5, weights[1].shape).astype(np.float32)
        layer.set_weights(weights)
    return model, [Spec((2, 6, 6, 4))]


def _sparsity(name: str) -> Any:
    def configure(converter: Any) -> None:
        converter.optimizations = ([tf.lite.Optimize.EXPERIMENTAL_SPARSITY] if mode_of(name) == "float"
                                   else [tf.lite.Optimize.DEFAULT, tf.lite.Optimize.EXPERIMENTAL_SPARSITY])

    return configure


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """As ``build_converted``, but the reference run uses LiteRT's built-in kernels without the
    XNNPACK delegate, which refuses the int8 FULLY_CONNECTED fed by DENSIFY."""
    tf.keras.utils.set_random_seed(SEED)
    model, specs = _pruned()
    model_path.write_bytes(convert(model, mode_of(name), specs, configure=_sparsity(name)))
    interp = Interpreter(model_path=str(model_path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    info = ModelInfo(family="tflite_sparse", name=name, format="tflite", path=model_path,
                     reference=reference_path, **_details_to_info(interp))
    (detail,) = interp.get_input_details()
    rng = np.random.default_rng(SEED)
    if np.dtype(detail["dtype"]).kind == "f":
        x = rng.uniform(-1, 1, detail["shape"]).astype(np.float32)
    else:
        x = rng.integers(-128, 128, detail["shape"]).astype(detail["dtype"])
    interp.set_tensor(detail["index"], x)
    interp.invoke()
    save_reference(reference_path, [x], [np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()])
    return replace(info, metadata={"op_histogram": tflite_op_histogram(model_path), "ranges": {}})
