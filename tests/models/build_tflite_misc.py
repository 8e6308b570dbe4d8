"""The remaining BUILTIN_REF operators (issue 11, misc part).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Names:

* ``misc_float``: from the converter — ONE_HOT (float, int32, bool outputs; axis 0 and -1),
  BROADCAST_ARGS, UNIQUE (float and int32 values; int32 and int64 indices), MATRIX_DIAG,
  MATRIX_SET_DIAG (float, int32), SPARSE_TO_DENSE (float, int32; rows and a scalar value),
  NON_MAX_SUPPRESSION_V4 and V5 (soft-NMS sigma) on overlapping random boxes.
* ``direct_float``: written with the schema's object API (the converter never emits them):
  L2_POOL_2D (SAME and VALID, fused RELU6); FAKE_QUANT (8 and 4 bits; LiteRT refuses
  narrow_range); the value types the converter leaves out — ONE_HOT and SPARSE_TO_DENSE (int64
  indices) of int8, uint8 and int64, MATRIX_DIAG and UNIQUE of those and int16, UNIQUE of int8
  with int32 and int64 indices, MATRIX_SET_DIAG of int8, BROADCAST_ARGS of int64 shapes;
  EMBEDDING_LOOKUP_SPARSE (sum, mean, sqrtn); HASHTABLE_LOOKUP (float32, int32, uint8 values;
  keys missed and hit); REAL, IMAG, COMPLEX_ABS of a complex64 input; LSH_PROJECTION (sparse and
  dense, weighted; keys of every FarmHash length class).
* ``recurrent_float``: written likewise, states as variable tensors (tests compare one seed per
  fresh interpreter): the full LSTM (input gate, peepholes, projection, clips; CIFG with layer
  norm; hybrid with int8 weights) and BIDIRECTIONAL_SEQUENCE_RNN (float and hybrid; time- and
  batch-major; merged and split).
* ``random_float``: written likewise: seeded RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL and MULTINOMIAL
  (their generators go on from run to run: tests compare one seed per fresh interpreter, and runs
  in a row).
* ``detection_float`` / ``detection_uint8``: the custom operator ``TFLite_Detection_PostProcess``
  (box encodings, class scores with a background class, constant anchors -> boxes, classes,
  scores, count), fast NMS (two classes per detection) and regular NMS: two operators on the
  same inputs; uint8: encodings, scores and anchors quantized.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tensorflow as tf
from flatbuffers import flexbuffers
from tensorflow.lite.python import schema_py_generated as fb

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted, info_of
from .build_tflite_index import _Flat, _options

BUILDER_VERSION = 12

NAMES = ("misc_float", "direct_float", "recurrent_float", "random_float", "detection_float", "detection_uint8")
FAMILY = "tflite_misc"

#: the operators each model must hold (the tests assert it)
EXPECTED_OPS = {
    "misc_float": ("ONE_HOT", "BROADCAST_ARGS", "UNIQUE", "MATRIX_DIAG", "MATRIX_SET_DIAG", "SPARSE_TO_DENSE",
                   "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5"),
    "direct_float": ("L2_POOL_2D", "FAKE_QUANT", "ONE_HOT", "SPARSE_TO_DENSE", "MATRIX_DIAG", "MATRIX_SET_DIAG",
                     "BROADCAST_ARGS", "UNIQUE", "EMBEDDING_LOOKUP_SPARSE", "HASHTABLE_LOOKUP", "REAL", "IMAG",
                     "COMPLEX_ABS", "LSH_PROJECTION"),
    "recurrent_float": ("LSTM", "BIDIRECTIONAL_SEQUENCE_RNN"),
    "random_float": ("RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL"),
    "detection_float": ("TFLite_Detection_PostProcess",),
    "detection_uint8": ("TFLite_Detection_PostProcess",),
}

#: dims: a shape for BROADCAST_ARGS (LiteRT aborts on two constant shapes, which the converter makes of tf.shape)
_MISC_SPECS = (Spec((2, 3, 4)), Spec((2, 3), "int32", -1, 6), Spec((12,), "int32", 0, 4), Spec((10, 4), low=0.0),
               Spec((10,), low=0.0), Spec((4,), "int32", 1, 2))


def _misc(x: tf.Tensor, idx: tf.Tensor, ids: tf.Tensor, corners: tf.Tensor, scores: tf.Tensor,
          dims: tf.Tensor) -> dict[str, tf.Tensor]:
    # boxes [y, x, y + h, x + w] of random sizes, overlapping often
    boxes = tf.concat([corners[:, :2], corners[:, :2] + 0.6 * corners[:, 2:]], axis=1)
    u, ui = tf.unique(tf.reshape(x, [-1]))
    v, vi = tf.unique(ids, out_idx=tf.int64)
    sel4, n4 = tf.raw_ops.NonMaxSuppressionV4(boxes=boxes, scores=scores, max_output_size=6, iou_threshold=0.4,
                                              score_threshold=0.2, pad_to_max_output_size=True)
    sel5, sc5, n5 = tf.raw_ops.NonMaxSuppressionV5(boxes=boxes, scores=scores, max_output_size=7, iou_threshold=0.6,
                                                   score_threshold=0.1, soft_nms_sigma=0.5,
                                                   pad_to_max_output_size=True)
    return {
        "one_hot": tf.one_hot(idx, 5, on_value=2.0, off_value=-1.0),
        "one_hot_axis0": tf.one_hot(idx, 4, on_value=7, off_value=3, axis=0, dtype=tf.int32),
        "one_hot_bool": tf.one_hot(ids, 3, on_value=True, off_value=False, dtype=tf.bool),
        "broadcast_args": tf.raw_ops.BroadcastArgs(s0=dims, s1=tf.constant([3, 1, 5], tf.int32)),
        "unique": u, "unique_idx": ui, "unique_i": v, "unique_idx64": vi,
        "diag": tf.linalg.diag(x),
        "diag_i": tf.linalg.diag(idx),
        "set_diag": tf.linalg.set_diag(x, x[:, :, 1] * 2.0),
        "set_diag_i": tf.linalg.set_diag(tf.reshape(ids, [3, 4]), idx[0]),
        "sparse": tf.compat.v1.sparse_to_dense(tf.constant([[0, 1], [2, 3], [3, 0]]), [4, 5], x[0, 0, :3],
                                               default_value=0.5),
        "sparse_i": tf.compat.v1.sparse_to_dense(tf.constant([4, 1]), [6], ids[0], default_value=-2),
        "nms4": sel4, "nms4_count": n4, "nms5": sel5, "nms5_scores": sc5, "nms5_count": n5,
    }


# -- flatbuffers ------------------------------------------------------------------------------------

def _direct(path: Path) -> list[Spec]:
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    x = m.input(Spec((2, 7, 6, 3), low=-3.0, high=3.0), "x")
    for name, padding, (kh, kw), (sh, sw), act in (("l2_same", 0, (3, 2), (2, 2), 3), ("l2_valid", 1, (2, 3), (1, 2), 0)):
        oh = (7 + sh - 1) // sh if padding == 0 else (7 - kh + sh) // sh
        ow = (6 + sw - 1) // sw if padding == 0 else (6 - kw + sw) // sw
        m.op(B.L2_POOL_2D, [x], [m.tensor(name, (2, oh, ow, 3), np.float32)], opts.Pool2DOptions,
             _options(fb.Pool2DOptionsT, padding=padding, strideH=sh, strideW=sw, filterHeight=kh, filterWidth=kw,
                      fusedActivationFunction=act))
    for name, low, high, bits, narrow in (("fake_quant", -1.3, 2.1, 8, False), ("fake_quant_4bit", -0.4, 0.7, 4, False)):
        m.op(B.FAKE_QUANT, [x], [m.tensor(name, (2, 7, 6, 3), np.float32)], opts.FakeQuantOptions,
             _options(fb.FakeQuantOptionsT, min=low, max=high, numBits=bits, narrowRange=narrow))
    _integer_types(m)
    _lookups(m)
    _complex(m)
    _lsh(m)
    m.write(path)
    return m.specs


def _integer_types(m: _Flat) -> None:
    """The integer types the converter's graphs leave out: int64 indices and shapes, 8/16-bit and
    int64 values (quantized ones are copied as integers)."""
    B, opts, tensor = fb.BuiltinOperator, fb.BuiltinOptions, m.tensor
    ids = m.input(Spec((2, 3), "int64", -1, 5), "ids64")
    dims = m.input(Spec((3,), "int64", 1, 2), "dims64")
    small = m.input(Spec((9,), "int8", -3, 3), "small", scale=[0.1], zero_point=[0])
    values = {np.int8: np.asarray([5, -7], np.int8), np.uint8: np.asarray([200, 3], np.uint8),
              np.int16: np.asarray([-300, 9], np.int16), np.int64: np.asarray([2**40, -1], np.int64)}
    for dtype, (on, off) in values.items():
        label = np.dtype(dtype).name
        table = tensor(f"values_{label}", (3,), dtype, np.asarray([on, off, on]))
        diag = tensor(f"diag_{label}", (3, 3), dtype)
        m.op(B.MATRIX_DIAG, [table], [diag])
        flat = tensor(f"diag_flat_{label}", (9,), dtype)
        m.op(B.RESHAPE, [diag, tensor(f"flat_shape_{label}", (1,), np.int32, np.asarray([9], np.int32))], [flat])
        m.op(B.UNIQUE, [flat], [tensor(f"unique_{label}", (9,), dtype), tensor(f"unique_idx_{label}", (9,), np.int32)],
             opts.UniqueOptions, _options(fb.UniqueOptionsT, idxOutType=fb.TensorType.INT32))
        if dtype == np.int16:  # LiteRT's ONE_HOT and SPARSE_TO_DENSE have no int16
            continue
        m.op(B.ONE_HOT, [ids, tensor(f"depth_{label}", (), np.int32, np.asarray(4, np.int32)),
                         tensor(f"on_{label}", (), dtype, np.asarray(on)), tensor(f"off_{label}", (), dtype, np.asarray(off))],
             [tensor(f"one_hot_{label}", (2, 4, 3), dtype)], opts.OneHotOptions, _options(fb.OneHotOptionsT, axis=1))
        m.op(B.SPARSE_TO_DENSE, [tensor(f"rows_{label}", (3, 2), np.int64, np.asarray([[0, 0], [1, 2], [2, 1]])),
                                 tensor(f"dense_shape_{label}", (2,), np.int64, np.asarray([3, 4])), table,
                                 tensor(f"default_{label}", (), dtype, np.asarray(off))],
             [tensor(f"sparse_{label}", (3, 4), dtype)])
    m.op(B.BROADCAST_ARGS, [dims, tensor("dims_b", (2,), np.int64, np.asarray([4, 1]))],
         [tensor("broadcast_args64", (3,), np.int64)])
    for label, idx in (("i32", np.int32), ("i64", np.int64)):
        m.op(B.UNIQUE, [small], [tensor(f"unique_{label}", (9,), np.int8, scale=[0.1], zero_point=[0]),
                                 tensor(f"unique_idx_{label}", (9,), idx)], opts.UniqueOptions,
             _options(fb.UniqueOptionsT, idxOutType=fb.TensorType.INT32 if idx == np.int32 else fb.TensorType.INT64))
    square = tensor("square_i8", (2, 3, 3), np.int8, np.arange(18).reshape(2, 3, 3), scale=[0.1], zero_point=[0])
    m.op(B.MATRIX_SET_DIAG, [square, tensor("new_diag", (2, 3), np.int8, -np.arange(6).reshape(2, 3),
                                            scale=[0.1], zero_point=[0])],
         [tensor("set_diag_i8", (2, 3, 3), np.int8, scale=[0.1], zero_point=[0])])


def _lookups(m: _Flat) -> None:
    """EMBEDDING_LOOKUP_SPARSE (each combiner; a bucket met twice apart) and HASHTABLE_LOOKUP."""
    B, opts, tensor = fb.BuiltinOperator, fb.BuiltinOptions, m.tensor
    rng = np.random.default_rng(1)
    ids = m.input(Spec((7,), "int32", 0, 5), "sparse_ids")
    weights = m.input(Spec((7,), low=0.5, high=2.0), "sparse_weights")
    table = tensor("sparse_table", (5, 2, 3), np.float32, rng.uniform(-1, 1, (5, 2, 3)))
    rows = tensor("sparse_rows", (7, 3), np.int32, np.asarray([[0, 0, 0], [0, 1, 1], [0, 1, 2], [1, 0, 0], [1, 0, 1],
                                                               [0, 1, 3], [1, 2, 0]]))
    shape = tensor("sparse_shape", (3,), np.int32, np.asarray([2, 3, 4]))
    for combiner in (0, 1, 2):
        m.op(B.EMBEDDING_LOOKUP_SPARSE, [ids, rows, shape, weights, table],
             [tensor(f"embedding_sparse_{combiner}", (2, 3, 2, 3), np.float32)], opts.EmbeddingLookupSparseOptions,
             _options(fb.EmbeddingLookupSparseOptionsT, combiner=combiner))
    keys = tensor("keys", (6,), np.int32, np.asarray([-40, -3, 0, 2, 9, 1000]))
    lookups = m.input(Spec((8,), "int32", -4, 11), "hash_lookups")
    for label, dtype, data in (("f32", np.float32, rng.uniform(-1, 1, (6, 2))), ("i32", np.int32, np.arange(12) - 5),
                               ("u8", np.uint8, np.arange(12) * 20)):
        m.op(B.HASHTABLE_LOOKUP, [lookups, keys, tensor(f"hash_values_{label}", (6, 2), dtype, np.asarray(data).reshape(6, 2))],
             [tensor(f"hash_{label}", (8, 2), dtype), tensor(f"hits_{label}", (8,), np.uint8)])


def _recurrent(path: Path) -> list[Spec]:
    """Three full LSTMs (input gate, peepholes, projection, cell and projection clips; CIFG with layer
    norm; hybrid: int8 weights, asymmetric input quantization) and four BIDIRECTIONAL_SEQUENCE_RNNs
    (float: time-major merged, batch-major split; hybrid: time-major split, batch-major merged with
    asymmetric input quantization); states are variable tensors."""
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    tensor = m.tensor
    rng = np.random.default_rng(2)

    def const(name: str, *shape: int) -> int:
        return tensor(name, shape, np.float32, rng.uniform(-0.6, 0.6, shape).astype(np.float32))

    def state(name: str, *shape: int) -> int:
        i = tensor(name, shape, np.float32)
        m.tensors[i].isVariable = True
        return i

    batch, depth, cells, units = 2, 5, 4, 3
    x = m.input(Spec((batch, depth)), "step")
    full = [-1] * 24
    for g, gate in enumerate(("i", "f", "c", "o")):
        full[1 + g], full[5 + g], full[12 + g] = const(f"w_{gate}", cells, depth), const(f"r_{gate}", cells, units), \
            const(f"b_{gate}", cells)
    full[9], full[10], full[11] = const("p_i", cells), const("p_f", cells), const("p_o", cells)
    full[16], full[17] = const("projection", units, cells), const("projection_bias", units)
    full[0], full[18], full[19] = x, state("h_full", batch, units), state("c_full", batch, cells)
    m.op(B.LSTM, full, [tensor("lstm_full", (batch, units), np.float32)], opts.LSTMOptions,
         _options(fb.LSTMOptionsT, fusedActivationFunction=4, cellClip=1.5, projClip=0.8))
    cifg = [-1] * 24
    for g, gate in enumerate(("i", "f", "c", "o")):
        if g:
            cifg[1 + g], cifg[5 + g] = const(f"cifg_w_{gate}", cells, depth), const(f"cifg_r_{gate}", cells, cells)
            cifg[12 + g], cifg[20 + g] = const(f"cifg_b_{gate}", cells), const(f"cifg_norm_{gate}", cells)
    cifg[0], cifg[18], cifg[19] = x, state("h_cifg", batch, cells), state("c_cifg", batch, cells)
    m.op(B.LSTM, cifg, [tensor("lstm_cifg_norm", (batch, cells), np.float32)], opts.LSTMOptions,
         _options(fb.LSTMOptionsT, fusedActivationFunction=1))
    hybrid = [-1] * 24
    for g, gate in enumerate(("i", "f", "c", "o")):
        for base, name, cols in ((1, "w", depth), (5, "r", cells)):
            hybrid[base + g] = tensor(f"hybrid_{name}_{gate}", (cells, cols), np.int8,
                                      rng.integers(-127, 128, (cells, cols)), scale=[0.004 * (g + 1)])
        hybrid[12 + g] = const(f"hybrid_b_{gate}", cells)
    hybrid[0], hybrid[18], hybrid[19] = x, state("h_hybrid", batch, cells), state("c_hybrid", batch, cells)
    m.op(B.LSTM, hybrid, [tensor("lstm_hybrid", (batch, cells), np.float32)], opts.LSTMOptions,
         _options(fb.LSTMOptionsT, fusedActivationFunction=4, asymmetricQuantizeInputs=True))
    steps, width = 4, 3
    time_first = m.input(Spec((steps, batch, depth)), "sequence")
    batch_first = m.input(Spec((batch, steps, depth)), "sequence_batch_major")
    for name, time_major, merge, act in (("birnn_merged", True, True, 4), ("birnn_split", False, False, 1),
                                         ("birnn_hybrid", True, False, 4), ("birnn_hybrid_batch", False, True, 1)):
        operands = [time_first if time_major else batch_first]
        for direction, n in (("fw", width), ("bw", width + 1)):
            if name.startswith("birnn_hybrid"):
                operands += [tensor(f"{name}_{direction}_{kind}", (n, cols), np.int8, rng.integers(-127, 128, (n, cols)),
                                    scale=[0.01]) for kind, cols in (("w", depth), ("r", n))]
            else:
                operands += [const(f"{name}_{direction}_w", n, depth), const(f"{name}_{direction}_r", n, n)]
            operands += [const(f"{name}_{direction}_b", n), state(f"{name}_{direction}_h", batch, n)]
        lead = (steps, batch) if time_major else (batch, steps)
        outs = [tensor(name, (*lead, 2 * width + 1), np.float32)] if merge else \
            [tensor(f"{name}_fw", (*lead, width), np.float32), tensor(f"{name}_bw", (*lead, width + 1), np.float32)]
        m.op(B.BIDIRECTIONAL_SEQUENCE_RNN, [*operands, -1, -1, -1], outs, opts.BidirectionalSequenceRNNOptions,
             _options(fb.BidirectionalSequenceRNNOptionsT, timeMajor=time_major, mergeOutputs=merge,
                      fusedActivationFunction=act, asymmetricQuantizeInputs=name == "birnn_hybrid_batch"))
    m.write(path)
    return m.specs


def _complex(m: _Flat) -> None:
    """REAL, IMAG and COMPLEX_ABS of a complex64 input (the corpus feeds real values; the tests also
    feed complex ones)."""
    B, tensor = fb.BuiltinOperator, m.tensor
    z = m.input(Spec((2, 3, 4), "float32"), "z")
    m.tensors[z].type = fb.TensorType.COMPLEX64
    for op, name in ((B.REAL, "real"), (B.IMAG, "imag"), (B.COMPLEX_ABS, "complex_abs")):
        m.op(op, [z], [tensor(name, (2, 3, 4), np.float32)])


def _lsh(m: _Flat) -> None:
    """LSH_PROJECTION sparse and dense, with and without weights, on keys of 5, 16, 24, 44 and 208 bytes
    (each of FarmHash's length classes; 208: three 64-byte rounds and a last one)."""
    B, opts, tensor = fb.BuiltinOperator, fb.BuiltinOptions, m.tensor
    rng = np.random.default_rng(3)
    functions = tensor("lsh_functions", (3, 4), np.float32, rng.uniform(-1, 1, (3, 4)))
    inputs = {"lsh_i8": m.input(Spec((5,), "int8", -128, 128), "lsh_i8"),
              "lsh_i32": m.input(Spec((4, 3), "int32", -1000, 1000), "lsh_i32"),
              "lsh_f32_short": m.input(Spec((2, 5)), "lsh_f32_short"),
              "lsh_f32": m.input(Spec((3, 10)), "lsh_f32"),
              "lsh_f32_long": m.input(Spec((2, 3, 17)), "lsh_f32_long")}
    weights = tensor("lsh_weights", (4,), np.float32, rng.uniform(-1, 1, 4))
    for name, x in inputs.items():
        m.op(B.LSH_PROJECTION, [functions, x], [tensor(f"{name}_sparse", (3,), np.int32)], opts.LSHProjectionOptions,
             _options(fb.LSHProjectionOptionsT, type=1))
        m.op(B.LSH_PROJECTION, [functions, x] + ([weights] if name == "lsh_i32" else []),
             [tensor(f"{name}_dense", (12,), np.int32)], opts.LSHProjectionOptions,
             _options(fb.LSHProjectionOptionsT, type=2))


def _random(path: Path) -> list[Spec]:
    """RANDOM_UNIFORM (sizes 8 and 27: a partial last generator step), RANDOM_STANDARD_NORMAL and
    MULTINOMIAL (int64 and int32 samples, an infinite logit), each seeded (LiteRT keeps seeds as
    C ints: 2^32 is 0, -2^40 - 5 is -5)."""
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    tensor = m.tensor
    shape = m.input(Spec((3,), "int32", 2, 4), "shape")
    logits = m.input(Spec((3, 5), low=-3.0, high=3.0), "logits")
    for op, name, seed, seed2 in ((B.RANDOM_UNIFORM, "uniform", 7, 3), (B.RANDOM_UNIFORM, "uniform_seed2", 2**32, -(2**40) - 5)):
        m.op(op, [shape], [tensor(name, (2, 2, 2), np.float32)], opts.RandomOptions,
             _options(fb.RandomOptionsT, seed=seed, seed2=seed2))
    # an even size: for an odd one LiteRT's Box-Muller writes one float past the output
    m.op(B.RANDOM_STANDARD_NORMAL, [tensor("normal_shape", (3,), np.int32, np.asarray([3, 2, 3], np.int32))],
         [tensor("normal", (3, 2, 3), np.float32)], opts.RandomOptions, _options(fb.RandomOptionsT, seed=1, seed2=0))
    minus_inf = tensor("minus_inf", (3, 1), np.float32, np.full((3, 1), -np.inf, np.float32))
    wide = tensor("logits_wide", (3, 6), np.float32)
    m.op(B.CONCATENATION, [logits, minus_inf], [wide], opts.ConcatenationOptions,
         _options(fb.ConcatenationOptionsT, axis=1))
    for name, samples, dtype, seed in (("multinomial", 9, np.int64, 11), ("multinomial_i32", 4, np.int32, 12)):
        m.op(B.MULTINOMIAL, [wide, tensor(f"{name}_samples", (), np.int32, np.asarray(samples, np.int32))],
             [tensor(name, (3, samples), dtype)], opts.RandomOptions, _options(fb.RandomOptionsT, seed=seed, seed2=1))
    m.write(path)
    return m.specs


class _WithCustom(_Flat):
    """A flat model that may hold operators of one custom code."""

    def __init__(self) -> None:
        super().__init__()
        self.custom_code = ""

    def custom(self, code: str, inputs: Sequence[int], outputs: Sequence[int], options: bytes) -> None:
        self.custom_code = code
        self.op(fb.BuiltinOperator.CUSTOM, inputs, outputs)
        self.ops[-1].customOptions = np.frombuffer(options, np.uint8)

    def write(self, path: Path) -> None:
        super().write(path)
        model = fb.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
        for code in model.operatorCodes:
            if code.builtinCode == fb.BuiltinOperator.CUSTOM:
                code.customCode = self.custom_code
        b = flatbuffers.Builder(1024)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        path.write_bytes(bytes(b.Output()))


def _flex(**fields: Any) -> bytes:
    builder = flexbuffers.Builder()
    with builder.Map():
        for key, value in fields.items():
            if isinstance(value, bool):
                builder.Bool(key, value)
            elif isinstance(value, int):
                builder.Int(key, value)
            else:
                builder.Float(key, value)
    return bytes(builder.Finish())


def _detection(path: Path, quantized: bool) -> list[Spec]:
    m = _WithCustom()
    rng = np.random.default_rng(0)
    boxes, classes = 24, 3
    centers = rng.uniform(0.1, 0.9, (boxes, 2))
    sizes = rng.uniform(0.1, 0.5, (boxes, 2))
    anchors = np.concatenate([centers, sizes], axis=1).astype(np.float32)  # [y, x, h, w]
    if quantized:
        qb, qs, qa = ({"scale": [0.05], "zero_point": [128]}, {"scale": [1 / 256], "zero_point": [0]},
                      {"scale": [1 / 255], "zero_point": [0]})
        enc = m.input(Spec((1, boxes, 4), "uint8", 0, 256), "box_encodings", **qb)
        cls = m.input(Spec((1, boxes, classes + 1), "uint8", 0, 256), "class_scores", **qs)
        anc = m.tensor("anchors", (boxes, 4), np.uint8, np.clip(np.round(anchors * 255), 0, 255), **qa)
    else:
        enc = m.input(Spec((1, boxes, 4)), "box_encodings")
        cls = m.input(Spec((1, boxes, classes + 1), low=0.0), "class_scores")
        anc = m.tensor("anchors", (boxes, 4), np.float32, anchors)
    common = {"y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0, "nms_iou_threshold": 0.5,
              "num_classes": classes, "max_detections": 6}
    # fast NMS leaves the slots after its last detection unwritten (LiteRT's arena holds anything there):
    # its threshold keeps every box, so that six detections fill them on every input
    for prefix, options in (("fast", {"max_classes_per_detection": 2, "nms_score_threshold": -2.0,
                                      "use_regular_nms": False}),
                            ("regular", {"max_classes_per_detection": 1, "nms_score_threshold": 0.2,
                                         "use_regular_nms": True, "detections_per_class": 4})):
        slots = 6 * options["max_classes_per_detection"]
        outs = [m.tensor(f"{prefix}_boxes", (1, slots, 4), np.float32),
                m.tensor(f"{prefix}_classes", (1, slots), np.float32),
                m.tensor(f"{prefix}_scores", (1, slots), np.float32),
                m.tensor(f"{prefix}_count", (1,), np.float32)]
        m.custom("TFLite_Detection_PostProcess", [enc, cls, anc], outs, _flex(**common, **options))
    m.write(path)
    return m.specs


_DIRECT = {"direct_float": _direct, "recurrent_float": _recurrent, "random_float": _random, "detection_float": lambda p: _detection(p, False),
           "detection_uint8": lambda p: _detection(p, True)}


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name in _DIRECT:
        specs = _DIRECT[name](model_path)
        return info_of(FAMILY, name, model_path, reference_path, specs)
    return build_converted(FAMILY, name, lambda: (_misc, _MISC_SPECS), model_path, reference_path)
