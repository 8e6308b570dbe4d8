"""What the per-operator TFLite corpora share: conversion in the three modes people ship
(float32, full-integer int8, 16x8) and the ModelInfo of a converted file.

Runs inside a build subprocess (imports TensorFlow).  A corpus module
``build_tflite_<part>.py`` declares ``NAMES`` (``<model>_<mode>``, mode one of
:data:`MODES`), ``BUILDER_VERSION`` and ``build(name, model_path, reference_path)``,
usually as ``return build_converted(name, make, model_path, reference_path)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from ._info import ModelInfo, save_reference
from .build_tflite import _details_to_info, run_tflite, tflite_op_histogram

MODES = ("float", "int8", "int16x8", "float16", "dynamic")
SEED = 0


@dataclass(frozen=True)
class Spec:
    """One model input: shape, dtype and the range the representative data (and the test
    inputs) draw from — integers in [low, high), floats uniform in [low, high)."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = -1.0
    high: float = 1.0
    name: str | None = None

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        if np.dtype(self.dtype).kind in "iu":
            return rng.integers(int(self.low), int(self.high), self.shape).astype(self.dtype)
        if np.dtype(self.dtype) == np.bool_:
            return rng.random(self.shape) < 0.5
        return rng.uniform(self.low, self.high, self.shape).astype(self.dtype)


def mode_of(name: str) -> str:
    """``"gather_int16x8"`` -> ``"int16x8"`` (the suffix after the last model part)."""
    for mode in MODES:
        if name.endswith("_" + mode):
            return mode
    raise ValueError(f"model name {name!r} ends with none of {MODES}")


def representative(specs: Sequence[Spec], count: int = 32, seed: int = SEED) -> Callable[[], Iterator[list[np.ndarray]]]:
    def gen() -> Iterator[list[np.ndarray]]:
        rng = np.random.default_rng(seed)
        for _ in range(count):
            yield [s.sample(rng) for s in specs]

    return gen


def convert(model: Any, mode: str, specs: Sequence[Spec], *, float_io: bool = False,
            ops: Sequence[Any] | None = None, configure: Callable[[Any], None] | None = None) -> bytes:
    """Convert a Keras model or a ``tf.function`` (traced with ``specs``) in ``mode``:

    * ``float``: float32 as the converter emits by default;
    * ``int8``: full-integer (``TFLITE_BUILTINS_INT8``), int8 in/out unless ``float_io``;
    * ``int16x8``: int16 activations with int8 weights
      (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``), int16 in/out unless ``float_io``;
    * ``float16``: float16 weights, DEQUANTIZE'd to float32 at load (how many mobile models ship);
    * ``dynamic``: dynamic-range quantization — int8 weights, float activations (hybrid kernels).

    Integer (index) inputs stay integers in every mode.  ``ops`` overrides the supported op
    sets; ``configure(converter)`` sets anything else (e.g. ``_experimental_...`` flags).
    """
    if isinstance(model, tf.types.experimental.GenericFunction) or (callable(model) and not hasattr(model, "inputs")):
        signature = [tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), name=s.name or f"x{i}") for i, s in enumerate(specs)]
        fn = model if isinstance(model, tf.types.experimental.GenericFunction) else tf.function(model)
        concrete = fn.get_concrete_function(*signature)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    else:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if mode in ("float16", "dynamic"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if mode == "float16":
            converter.target_spec.supported_types = [tf.float16]
    elif mode != "float":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative(specs)
        if mode == "int8":
            converter.target_spec.supported_ops = list(ops or [tf.lite.OpsSet.TFLITE_BUILTINS_INT8])
            io = tf.int8
        elif mode == "int16x8":
            converter.target_spec.supported_ops = list(
                ops or [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8])
            io = tf.int16
        else:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        if not float_io and any(np.dtype(s.dtype).kind == "f" for s in specs):
            converter.inference_input_type = io
            converter.inference_output_type = io
    elif ops is not None:
        converter.target_spec.supported_ops = list(ops)
    if configure is not None:
        configure(converter)
    return converter.convert()


def info_of(family: str, name: str, model_path: Path, reference_path: Path, specs: Sequence[Spec] | None = None,
            **metadata: Any) -> ModelInfo:
    """Check LiteRT runs the written file; record its interface, a reference run and its op histogram.

    ``specs`` (in input order) give integer inputs their valid ranges in ``metadata["ranges"]``
    (tests draw indices from them); float inputs are drawn by the tests themselves."""
    interp = Interpreter(model_path=str(model_path))
    info = ModelInfo(family=family, name=name, format="tflite", path=model_path, reference=reference_path,
                     **_details_to_info(interp))
    ranges = {}
    if specs is not None:
        for detail, spec in zip(interp.get_input_details(), specs):
            ranges[detail["name"]] = (spec.low, spec.high)
    rng = np.random.default_rng(SEED)
    feeds = {}
    for detail in interp.get_input_details():
        lo, hi = ranges.get(detail["name"], (None, None))
        dtype = np.dtype(detail["dtype"])
        shape = tuple(int(d) for d in detail["shape"])
        if lo is not None and dtype.kind in "iu" and not detail["quantization"][0]:
            feeds[detail["name"]] = rng.integers(int(lo), int(hi), shape).astype(dtype)
        elif dtype.kind in "iu":
            info_ = np.iinfo(dtype)
            feeds[detail["name"]] = rng.integers(info_.min, info_.max, shape, endpoint=True).astype(dtype)
        elif dtype == np.bool_:
            feeds[detail["name"]] = rng.random(shape) < 0.5
        else:
            feeds[detail["name"]] = rng.uniform(-1, 1, shape).astype(dtype)
    got = run_tflite(model_path, feeds)
    save_reference(reference_path, list(feeds.values()), got)
    meta = {"op_histogram": tflite_op_histogram(model_path), "ranges": ranges, **metadata}
    return replace(info, metadata=meta)


def build_converted(family: str, name: str, make: Callable[[], tuple[Any, Sequence[Spec]]], model_path: Path,
                    reference_path: Path, **convert_options: Any) -> ModelInfo:
    """``make()`` -> (Keras model or function, input specs); convert in the mode the name ends with."""
    tf.keras.utils.set_random_seed(SEED)
    model, specs = make()
    model_path.write_bytes(convert(model, mode_of(name), specs, **convert_options))
    return info_of(family, name, model_path, reference_path, specs)
