"""Element-wise math and parametric activations, converted by the real TFLiteConverter
(family ``tflite_math``); every operator output is checked against LiteRT's reference kernels.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (each ``<model>_<mode>``, mode float / int8 / int16x8):

* ``unary``: one input of shape [2, 3, 5, 4] (batch 2, rank 4, values in [-1, 3) so the int8
  zero points are asymmetric) through EXP, LOG, SQRT, RSQRT, SQUARE, ABS, NEG, SIN, COS,
  FLOOR, SIGN, BUCKETIZE, ATAN2, ADD_N, LEAKY_RELU, GELU (tanh approximation and exact), LOG_SOFTMAX,
  L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION.  int8: the converter quantizes EXP, LOG,
  SQRT, RSQRT, ABS, LEAKY_RELU, GELU, LOG_SOFTMAX and L2_NORMALIZATION and leaves the others
  float between DEQUANTIZE and QUANTIZE; 16x8: it quantizes EXP, LOG, RSQRT, ABS, LEAKY_RELU
  and GELU only (:data:`INT16_UNARY`), the others are left out of that model;
* ``extra``: what LiteRT's reference resolver does not register, so the tests compare it with
  LiteRT's default kernels: ELU, CEIL, ROUND (float in both modes: the converter does not
  quantize them) and, on plain integer inputs, ABS, NEG, SIGN (int32) and NEG (int64) —
  ABS on int32 is operator version 5, past what BUILTIN_REF registers;
* ``prelu``: Keras PReLU with alpha per channel (``shared_axes=[1, 2]``, broadcast over
  the spatial axes) and with a full alpha tensor, alphas drawn in [-0.5, 0.5] so some are
  negative, on a [2, 4, 6, 3] input.

Edited from the converter's output with graphwright's own writer, for what the converter
does not make (still run by LiteRT as the oracle):

* ``elu_int8`` / ``relu01_{float,int8}``: a LEAKY_RELU model relabelled ELU (the int8 table
  path; the converter leaves ELU float) and RELU_0_TO_1 (the converter emits MINIMUM+RELU);
* ``widened_int16x8``: two PReLUs (per channel, full alpha) and ``sqrt(|x|)`` converted
  int8, activations then widened to symmetric int16 (the converter refuses PRELU and SQRT in
  16x8; LiteRT's kernels take int16, PRELU with int8 alpha);
* ``legacy_uint8``: PRELU, LEAKY_RELU, GELU (both forms), L2_NORMALIZATION and LOG_SOFTMAX
  converted int8, then made legacy uint8 (``tests/runtime/reference/uint8_models.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import graphwright as gw
from graphwright.ir import DType, QuantParams
from tests.runtime.reference.uint8_models import write_uint8_model

from ._info import ModelInfo
from ._tflite_common import SEED, Spec, build_converted, convert, info_of, mode_of

BUILDER_VERSION = 7

NAMES = (
    "unary_float", "unary_int8", "unary_int16x8",
    "extra_float", "extra_int8",
    "prelu_float", "prelu_int8",
    # edited from converter output (see the module docstring)
    "elu_int8", "relu01_float", "relu01_int8", "widened_int16x8", "legacy_uint8",
)
FAMILY = "tflite_math"
EDITED = NAMES[NAMES.index("elu_int8"):]

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
    "BUCKETIZE": lambda x: tf.raw_ops.Bucketize(input=x, boundaries=[-0.5, 0.0, 0.5, 2.0]),
    "ATAN2": lambda x: tf.math.atan2(x - 1.0, 0.5 - x),
    "ADD_N": lambda x: tf.add_n([x, tf.sin(x), tf.cos(x)]),
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
UNARY_SPEC = Spec((2, 3, 5, 4), low=-1.0, high=3.0)


def _unary(mode: str) -> tuple[Any, list[Spec]]:
    ops = INT16_UNARY if mode == "int16x8" else tuple(UNARY)

    def fn(x: tf.Tensor) -> list[tf.Tensor]:
        return [UNARY[op](x) for op in ops]

    return fn, [UNARY_SPEC]


def _extra(mode: str) -> tuple[Any, list[Spec]]:
    def fn(x: tf.Tensor, a: tf.Tensor, b: tf.Tensor) -> list[tf.Tensor]:
        return [*(f(x) for f in EXTRA.values()), tf.abs(a), tf.negative(a), tf.sign(a), tf.negative(b)]

    return fn, [UNARY_SPEC, Spec((2, 3, 4), "int32", -1000, 1000), Spec((3, 4), "int64", -(2**40), 2**40)]


def _prelu(mode: str) -> tuple[Any, list[Spec]]:
    alpha = keras.initializers.RandomUniform(-0.5, 0.5, seed=1)
    x = keras.Input((4, 6, 3), batch_size=2)
    per_channel = keras.layers.PReLU(alpha_initializer=alpha, shared_axes=[1, 2], name="prelu_channel")(x)
    y = keras.layers.Conv2D(3, 1, name="mix")(per_channel)
    full = keras.layers.PReLU(alpha_initializer=alpha, name="prelu_full")(y)
    return keras.Model(x, [per_channel, full]), [Spec((2, 4, 6, 3), low=-1.0, high=2.0)]


def _widened(mode: str) -> tuple[Any, list[Spec]]:
    alpha = keras.initializers.RandomUniform(-0.5, 0.5, seed=1)
    x = keras.Input((4, 6, 3), batch_size=2)
    y = keras.layers.LeakyReLU(0.5, name="leaky")(x)  # two PReLUs of one tensor share ops: neither is fused
    outs = [keras.layers.PReLU(alpha_initializer=alpha, shared_axes=[1, 2], name="prelu_channel")(x),
            keras.layers.PReLU(alpha_initializer=alpha, name="prelu_full")(y),
            keras.layers.Lambda(lambda v: tf.sqrt(tf.abs(v)), name="sqrt")(x)]
    return keras.Model(x, outs), [Spec((2, 4, 6, 3), low=-1.0, high=2.0)]


def _leaky(mode: str) -> tuple[Any, list[Spec]]:
    return (lambda x: tf.nn.leaky_relu(x, 0.2)), [UNARY_SPEC]


def _legacy(mode: str) -> tuple[Any, list[Spec]]:
    """What the uint8 reference kernels run: PRELU, LEAKY_RELU, GELU (both forms),
    L2_NORMALIZATION, LOG_SOFTMAX."""
    alpha = keras.initializers.RandomUniform(-0.5, 0.5, seed=2)
    L = keras.layers
    x = keras.Input(UNARY_SPEC.shape[1:], batch_size=UNARY_SPEC.shape[0])
    leaky = L.LeakyReLU(0.2, name="leaky")(x)
    outs = [
        L.PReLU(alpha_initializer=alpha, shared_axes=[1, 2], name="prelu")(x),
        leaky,
        L.Lambda(lambda v: tf.nn.gelu(v, approximate=True), name="gelu_tanh")(x),
        L.Lambda(lambda v: tf.nn.gelu(v, approximate=False), name="gelu_erfc")(leaky),
        L.Lambda(lambda v: tf.math.l2_normalize(v, axis=-1), name="l2")(x),
        L.Lambda(tf.nn.log_softmax, name="log_softmax")(x),
    ]
    return keras.Model(x, outs), [UNARY_SPEC]


def _relabel(model: gw.Model, old: str, new: str) -> None:
    """Turn every ``old`` operator into ``new`` (an operator without options the converter never
    emits from these graphs), keeping its tensors and their quantization."""
    for node in model.graph:
        if node.op == old:
            node.op = new
            node.attrs.clear()
            for key in ("tflite.options", "tflite.options2", "tflite.opcode"):
                node.meta.pop(key, None)
            node.meta["tflite.version"] = 1


def _widen_to_int16(model: gw.Model) -> None:
    """int8 activations -> symmetric int16 over the same real range (16x8 mode); int8
    constants (PRELU's alpha) stay int8, as the 16x8 kernels take them."""
    for value in {id(v): v for node in model.graph for v in (*node.inputs, *node.outputs) if v is not None}.values():
        if value.dtype is DType.INT8 and value.const is None and value.quant is not None:
            scale, zp = float(value.quant.scale[0]), int(value.quant.zero_point[0])
            top = max(abs(-128 - zp), abs(127 - zp)) * scale
            value.dtype = DType.INT16
            value.quant = QuantParams([np.float32(top / 32767)], [0])


def _edited(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Models the converter cannot make, from ones it makes: ELU and RELU_0_TO_1 relabelled
    from LEAKY_RELU, PRELU widened to 16x8, the uint8 kernels from an int8 model."""
    kind, mode = name.rsplit("_", 1)
    source = {"elu": _leaky, "relu01": _leaky, "widened": _widened, "legacy": _legacy}[kind]
    tf.keras.utils.set_random_seed(SEED)
    made, specs = source(mode)
    converted = model_path.with_suffix(".converted.tflite")
    converted.write_bytes(convert(made, "float" if mode == "float" else "int8", specs))
    if kind == "legacy":
        write_uint8_model(converted, model_path)
    else:
        model = gw.load(converted)
        if mode == "int16x8":
            _widen_to_int16(model)
        else:
            _relabel(model, "LEAKY_RELU", {"elu": "ELU", "relu01": "RELU_0_TO_1"}[kind])
        gw.save(model, model_path)
    converted.unlink()
    return info_of(FAMILY, name, model_path, reference_path, specs)


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name in EDITED:
        return _edited(name, model_path, reference_path)
    mode = mode_of(name)
    make = {"unary": _unary, "extra": _extra, "prelu": _prelu}[name[: -len(mode) - 1]]
    return build_converted(FAMILY, name, lambda: make(mode), model_path, reference_path)
