"""The binary, comparison, logical, select and cast operators, and the 16x8 mode of the basic
element-wise ones, made by the real TFLiteConverter (family ``tflite_binary``).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (``<model>_<mode>``):

* ``binary_<mode>`` (float / int8): MAXIMUM, MINIMUM, SELECT_V2 and DIV on a
  rank-5 input broadcast against a rank-5 input of other size-1 dimensions; FLOOR_DIV, FLOOR_MOD,
  POW (float), SQUARED_DIFFERENCE, the six comparisons, LOGICAL_AND/OR/NOT (rank 4 against
  rank 3, and scalar constants); SELECT (float) — both operands variable and one constant;
* ``integers_float``: the same operators on int32 and int64 tensors (odd divisors, so never
  zero; small exponents), FLOOR_DIV on int16, FLOOR_MOD on int8, LESS on int16, and CAST
  between float32, int32, int64, bool, int16 and int8;
* ``activations_int16x8``: ADD, SUB, MUL (broadcast and not), LOGISTIC, TANH, SOFTMAX, RELU,
  RELU6, MAXIMUM, MINIMUM with int16 activations, QUANTIZE from float and DEQUANTIZE to float at
  the edges (float inputs and outputs) — the converter has no 16x8 comparison, logical, select
  or HARD_SWISH;
* ``pot_int16x8``: what the converter never writes, made from a converted 16x8 model through
  graphwright's IR and writer: ADD and (broadcast) SUB with ``pot_scale_int16`` and
  power-of-two scales (LiteRT's shift-and-saturate path), MUL of int16 operands to an int8
  output, NOT_EQUAL (rescaled) and LESS (stored values) of int16 operands of different scales,
  SELECT_V2 of int16 operands, a broadcast int16 DIV, LOGISTIC and TANH of a power-of-two
  input scale, QUANTIZE int8 -> int16 from an int8 graph input and int16 -> int8
  to an int8 output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted, convert, info_of

BUILDER_VERSION = 8

NAMES = ("binary_float", "binary_int8", "integers_float", "activations_int16x8", "pot_int16x8")
FAMILY = "tflite_binary"

#: a rank-5 pair whose size-1 dimensions differ (the converter keeps rank-5 broadcasting for MAXIMUM,
#: MINIMUM, DIV, SUB and SELECT_V2 and inserts BROADCAST_TO for the others), a rank-3 and a rank-4 operand
A5, B5, C3, E4 = (2, 1, 3, 1, 4), (1, 2, 1, 3, 1), (3, 1, 4), (2, 1, 3, 1)


def _positive(x: tf.Tensor) -> tf.Tensor:
    """|x| + 0.5 with operators of this corpus only (MAXIMUM, MUL, ADD): a divisor that is never zero."""
    return tf.maximum(x, x * -1.0) + 0.5


def _binary(mode: str) -> Callable[[], tuple[Any, Sequence[Spec]]]:
    specs = (Spec(A5), Spec(B5, low=-2.0, high=2.0), Spec(C3, low=-0.5, high=0.5), Spec(E4), Spec(E4, "bool"))

    def make() -> tuple[Any, Sequence[Spec]]:
        def fn(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor, e: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
            out = {
                "maximum": tf.maximum(a, b), "minimum_const": tf.minimum(a, 0.25), "minimum": tf.minimum(e, c),
                "select_v2": tf.where(k, a, b * 2.0),  # three-way broadcast to rank 5
            }
            either = tf.logical_or(tf.logical_not(k), tf.logical_and(k, tf.less(e, 0.0)))
            out["select_v2_const"] = tf.where(either, c, -0.75)
            lt, le = tf.less(e, c), tf.less_equal(e, -0.5)
            gt, ge = tf.greater(c, e), tf.greater_equal(c, 0.1)
            both = tf.logical_and(lt, ge)
            out["eq"] = tf.where(tf.equal(e, c), e, c)
            out["logic"] = tf.where(tf.logical_or(tf.logical_not(gt), le), c, e)
            out["ne_or"] = tf.where(tf.logical_or(tf.not_equal(e, c), both), e, c)
            out["sqdiff"] = tf.math.squared_difference(e, c)
            out["sqdiff_const"] = tf.math.squared_difference(c, 0.3)
            out["div"] = a / _positive(b)  # rank 5
            out["div_const"] = tf.math.divide(2.0, _positive(c))
            if mode == "float":
                divisor = _positive(c)
                out["floordiv"] = tf.math.floordiv(e * 5.0, divisor)
                out["floormod"] = tf.math.floormod(e * 5.0, divisor)
                out["floormod_const"] = tf.math.floormod(c * 7.0, -0.7)
                out["pow"] = tf.pow(divisor, e)
                out["pow_const"] = tf.pow(divisor, 1.5)
                out["cast"] = tf.cast(tf.cast(a * 10.0, tf.int32), tf.float32)
                out["select"] = tf.compat.v1.where(tf.less(a, a * 0.5), a, a * 3.0)  # same shapes: SELECT
            return out

        return fn, specs

    return make


def _integers() -> tuple[Any, Sequence[Spec]]:
    specs = (Spec((2, 3, 1, 4), "int32", -40, 40), Spec((1, 3, 5, 1), "int32", -5, 5), Spec(A5))

    def fn(i: tf.Tensor, j: tf.Tensor, f: tf.Tensor) -> dict[str, tf.Tensor]:
        odd = j * 2 + 1  # never zero, both signs
        wide, wide_j = tf.cast(i, tf.int64), tf.cast(odd, tf.int64)
        flags = tf.greater(i, j)
        return {
            "div": tf.raw_ops.Div(x=i, y=odd),
            "floordiv": tf.math.floordiv(i, odd),
            "floormod": tf.math.floormod(i, odd),
            "floormod64": tf.math.floormod(wide, wide_j),
            "floormod_const": tf.math.floormod(i, -3),
            "pow": tf.pow(odd, tf.math.floordiv(j + 5, 3)),
            "maximum": tf.maximum(i, odd), "minimum": tf.minimum(i, 7),
            "maximum64": tf.maximum(wide, wide_j), "minimum64": tf.minimum(wide, wide_j),
            "sqdiff": tf.math.squared_difference(i, odd),
            "eq": tf.cast(tf.equal(i, odd), tf.int32), "ne": tf.cast(tf.not_equal(wide, wide_j), tf.int32),
            "lt": tf.cast(tf.less(i, 3), tf.int32), "le": tf.cast(tf.less_equal(wide, wide_j), tf.int32),
            "ge": tf.cast(tf.greater_equal(i, odd), tf.float32),
            "select_v2": tf.where(flags, i, odd), "select64": tf.where(flags, wide, 5),
            "to_int32": tf.cast(f * 100.0, tf.int32), "to_int64": tf.cast(f * 1000.0, tf.int64),
            "to_bool": tf.cast(tf.cast(f * 2.0, tf.int32), tf.bool),
            "bool_to_float": tf.cast(tf.cast(i, tf.bool), tf.float32),
            "narrow": tf.cast(tf.cast(tf.cast(i * 7, tf.int8), tf.int16) * 300, tf.int32),
            "to_int8": tf.cast(tf.cast(wide * 5, tf.int16), tf.int8),
            "floordiv16": tf.math.floordiv(tf.cast(i * 300, tf.int16), tf.cast(odd, tf.int16)),
            "floormod8": tf.math.floormod(tf.cast(i, tf.int8), tf.cast(odd, tf.int8)),
            "less16": tf.cast(tf.less(tf.cast(i, tf.int16), tf.cast(odd, tf.int16)), tf.int32),
            "int64_to_float": tf.cast(wide * 3, tf.float32),
        }

    return fn, specs


def _activations() -> tuple[Any, Sequence[Spec]]:
    specs = (Spec((2, 3, 4, 5)), Spec((1, 3, 1, 5), low=-3.0, high=3.0), Spec((2, 3, 4, 5), low=-4.0, high=4.0))

    def fn(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> dict[str, tf.Tensor]:
        s = a + c  # same shapes
        d = a - b  # broadcast
        m = s * d
        m2 = c * b  # broadcast
        return {
            "sum_const": b + 0.5, "diff_same": c - a,
            "logistic": tf.sigmoid(m), "tanh": tf.tanh(d), "softmax": tf.nn.softmax(m2 * 2.0),
            "relu_fused": tf.nn.relu(s - m2), "relu6_fused": tf.nn.relu6(m2 * 3.0),
            "relu": tf.nn.relu(a), "relu6": tf.nn.relu6(c),  # on inputs: standalone operators
            "maximum": tf.maximum(m, b), "minimum": tf.minimum(d, 0.5),
        }

    return fn, specs


_MAKERS: dict[str, Callable[[], tuple[Any, Sequence[Spec]]]] = {
    "binary_float": _binary("float"), "binary_int8": _binary("int8"),
    "integers_float": _integers, "activations_int16x8": _activations,
}


def _build_pot(model_path: Path, reference_path: Path) -> ModelInfo:
    from graphwright import formats
    from graphwright.ir import Attr, DType, Node, QuantParams

    specs = (Spec((1, 4, 4, 8)), Spec((1, 4, 4, 8)), Spec((1, 1, 1, 8)))

    def fn(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"add": a + b, "sub": a - b, "sub_broadcast": a - c, "mul": a * b, "maximum": tf.maximum(a, b),
                "minimum": tf.minimum(a, b), "quotient": a * c, "logistic": tf.sigmoid(c), "tanh": tf.tanh(c)}

    converted = model_path.with_name(model_path.stem + "-converted.tflite")
    converted.write_bytes(convert(fn, "int16x8", specs, float_io=True))
    model = formats.load(converted)
    graph = model.graph

    def quantize(value: Any, dtype: DType, log2_scale: int, zero_point: int = 0) -> None:
        value.dtype = dtype
        value.quant = QuantParams(np.array([2.0**log2_scale], np.float32), np.array([zero_point], np.int64), 0)

    def find(op: str, second: str) -> Node:
        return next(n for n in graph if n.op == op and n.inputs[1].name == second)

    def reader(node: Node) -> Node:
        return next(n for n in graph if node.outputs[0] in n.inputs)

    def to_bool(node: Node, op: str) -> None:  # the node becomes a comparison, its DEQUANTIZE a CAST
        node.op, node.attrs = op, {}
        node.outputs[0].dtype, node.outputs[0].quant = DType.BOOL, None
        reader(node).op = "CAST"

    values = {v.name: v for n in graph for v in n.outputs}
    # x2 at 2^-12: LOGISTIC and TANH take their power-of-two input path
    for name, log2_scale in (("x0_int16", -15), ("x1_int16", -16), ("x2_int16", -12)):
        quantize(values[name], DType.INT16, log2_scale)
    add, sub = find("ADD", "x1_int16"), find("SUB", "x2_int16")  # power-of-two path, the SUB broadcast
    for node, log2_scale in ((add, -15), (sub, -12)):
        node.attrs["pot_scale_int16"] = Attr.bool(True)
        quantize(node.outputs[0], DType.INT16, log2_scale)
    reader(sub).op = "QUANTIZE"  # requantize int16 -> int8
    quantize(reader(sub).outputs[0], DType.INT8, -6, 2)
    quantize(next(v for v in graph.inputs if v.name == "x2"), DType.INT8, -6, -5)  # QUANTIZE int8 -> int16
    quantize(find("MUL", "x1_int16").outputs[0], DType.INT8, -7, 3)  # int16 x int16 -> int8
    quotient = find("MUL", "x2_int16")  # the converter has no 16x8 DIV
    quotient.op = "DIV"
    # an output scale of 2^-14 keeps LiteRT's final shift within int32 (below, C's shift is undefined)
    quantize(quotient.outputs[0], DType.INT16, -14)
    to_bool(find("SUB", "x1_int16"), "NOT_EQUAL")  # rescaled: the operands' scales differ
    pair = [values["x0_int16"], values["x1_int16"]]  # MINIMUM/MAXIMUM read them requantized to one scale
    less = next(n for n in graph if n.op == "MINIMUM")
    to_bool(less, "LESS")  # int16 LESS compares the stored values
    less.set_inputs(pair)
    select = next(n for n in graph if n.op == "MAXIMUM")
    select.op = "SELECT_V2"
    select.set_inputs([less.outputs[0], *pair])
    late = [select, reader(select)]  # after the LESS they read
    graph.sort([n for n in graph if n not in late] + late)
    formats.save(model, model_path)
    converted.unlink()
    return info_of(FAMILY, "pot_int16x8", model_path, reference_path)


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name == "pot_int16x8":
        return _build_pot(model_path, reference_path)
    options = {"float_io": True} if name == "activations_int16x8" else {}
    return build_converted(FAMILY, name, _MAKERS[name], model_path, reference_path, **options)
