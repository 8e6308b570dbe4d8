"""The index and layout operators — slicing, splitting, gathering, scattering, depth/space and
batch/space rearrangements, mirror padding, reversing, broadcasting, filling, ranges — and the
layout operators in int16, made by the real TFLiteConverter (family ``tflite_index``).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.

Models (``<model>_<mode>``):

* ``index_<mode>`` (float / int8 / int16x8): on batch-2 rank-4 inputs of different ranges and a
  rank-5 one: SLICE (size −1), SPLIT (negative axis), SPLIT_V (a −1 size), UNPACK (negative axis),
  GATHER (int32 and int64 indices, negative axis, batch_dims 1), GATHER_ND, MIRROR_PAD (REFLECT,
  and SYMMETRIC on rank 5), BROADCAST_TO (rank 5), FILL, REVERSE_V2 (two axes, a negative one),
  SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND (4-D and 3-D) and the layout operators RESHAPE, PAD, CONCATENATION and
  PACK (of differently scaled inputs: the converter gives them one scale in int8 and requantizes
  them with QUANTIZE in int16, so int16 takes one input twice), TRANSPOSE, STRIDED_SLICE,
  RESIZE_BILINEAR (three coordinate conventions), RESIZE_NEAREST_NEIGHBOR.  Index inputs are model
  inputs, fed in range.  Left out where LiteRT or the converter cannot:

  - not int16x8 (no 16x8 quantization in the converter; it leaves PADV2's value float):
    SCATTER_ND (repeated indices add up), SPACE_TO_DEPTH, WHERE, PADV2;
  - float only: TILE (BUILTIN_REF loads versions 1-2, the converter's int8 and int16 ones are 3),
    DEPTH_TO_SPACE (BUILTIN_REF loads version 1 only), REVERSE_SEQUENCE (no int8 kernel), RANGE
    (int32 and float), ZEROS_LIKE, ones_like (BROADCAST_TO: no ONES_LIKE builtin).

* ``direct_float`` / ``direct_int16x8``: flatbuffers written with the schema's object API (every
  operator tagged version 1, which BUILTIN_REF loads; its kernels dispatch on the tensor type),
  for what the converter does not emit: EMBEDDING_LOOKUP (float rows; int8 rows into float, per
  tensor and per row; uint8 rows; int64 rows), RANK, ZEROS_LIKE on float32, int32 and int64, and
  int8 DEPTH_TO_SPACE, TILE, UNPACK, GATHER (batch_dims 1 too) and GATHER_ND (the converter
  leaves UNPACK, GATHER and GATHER_ND of variable params float in its int8 model),
  bool GATHER, GATHER_ND, REVERSE_V2, SLICE, UNPACK, SCATTER_ND (repeated indices or), int32
  MIRROR_PAD, SPLIT_V, WHERE on float32, and uint8 GATHER, SLICE (int64 begin and size),
  MIRROR_PAD and CONCATENATION (requantizing an input of another scale); in
  both, EXPAND_DIMS and SQUEEZE (the converter writes RESHAPE); in int16: REVERSE_SEQUENCE (batch
  axis before and after the sequence axis), EMBEDDING_LOOKUP, GATHER with int16 indices, UNPACK,
  SPLIT, PADV2 (an int16 value), TILE, CONCATENATION of an input of another scale (copied, as
  LiteRT does: it requantizes uint8 only).  DEPTH_TO_SPACE and SPACE_TO_DEPTH have no int16
  kernel in LiteRT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tensorflow as tf
from tensorflow.lite.python import schema_py_generated as fb

from ._info import ModelInfo
from ._tflite_common import Spec, build_converted, info_of

BUILDER_VERSION = 13

NAMES = ("index_float", "index_int8", "index_int16x8", "direct_float", "direct_int16x8")
FAMILY = "tflite_index"

_LAYOUT = ("RESHAPE", "PAD", "CONCATENATION", "TRANSPOSE", "STRIDED_SLICE", "PACK", "RESIZE_BILINEAR",
           "RESIZE_NEAREST_NEIGHBOR", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND")
_INDEX = ("SLICE", "SPLIT", "SPLIT_V", "UNPACK", "GATHER", "GATHER_ND", "MIRROR_PAD", "BROADCAST_TO", "FILL",
          "REVERSE_V2")
#: what the converter cannot quantize to 16x8
_NOT_16X8 = ("SCATTER_ND", "SPACE_TO_DEPTH", "WHERE", "PADV2")

#: the operators each model must hold (the tests assert it, so a converter change cannot drop one silently)
EXPECTED_OPS = {
    "index_float": (*_INDEX, *_LAYOUT, *_NOT_16X8, "TILE", "DEPTH_TO_SPACE", "REVERSE_SEQUENCE", "RANGE", "ZEROS_LIKE"),
    "index_int8": (*_INDEX, *_LAYOUT, *_NOT_16X8),
    "index_int16x8": (*_INDEX, *_LAYOUT),
    "direct_float": ("EMBEDDING_LOOKUP", "RANK", "ZEROS_LIKE", "SQUEEZE", "EXPAND_DIMS", "DEPTH_TO_SPACE", "TILE",
                     "UNPACK", "GATHER", "GATHER_ND", "REVERSE_V2", "SLICE", "SCATTER_ND", "WHERE", "MIRROR_PAD",
                     "SPLIT_V", "CONCATENATION"),
    "direct_int16x8": ("REVERSE_SEQUENCE", "EMBEDDING_LOOKUP", "GATHER", "UNPACK", "SPLIT", "PADV2", "SQUEEZE",
                       "EXPAND_DIMS", "TILE", "CONCATENATION"),
}

#: h, y: batch-2 images of different ranges; v5: rank 5; then index inputs, each in the range its operator accepts
_SPECS = (Spec((2, 6, 8, 4)), Spec((2, 6, 8, 4), low=-3.0, high=3.0), Spec((2, 3, 1, 4, 2), low=-2.0, high=2.0),
          Spec((3,), "int32", 0, 6), Spec((2,), "int64", 0, 4), Spec((2, 3), "int32", 0, 8),
          Spec((3, 2), "int32", 0, 2), Spec((2,), "int32", 0, 9), Spec((1,), "int32", 1, 12))


def _index(mode: str) -> Callable[[], tuple[Any, Sequence[Spec]]]:
    def fn(h: tf.Tensor, y: tf.Tensor, v5: tf.Tensor, idx: tf.Tensor, idx64: tf.Tensor, bidx: tf.Tensor, nd: tf.Tensor,
           seqlen: tf.Tensor, n: tf.Tensor) -> dict[str, tf.Tensor]:
        # the converter requantizes differently scaled int16 inputs with QUANTIZE: int16 packs h twice
        other = h if mode == "int16x8" else y
        a, b = tf.split(h, 2, axis=-1)
        p, q, r = tf.split(h, [1, -1, 2], axis=1)
        u = tf.unstack(v5, axis=-2)
        rows = tf.reshape(h, [2, 48, 4])
        out = {
            "reshape": rows,
            "s2b_3d": tf.space_to_batch_nd(rows, [4], [[1, 3]]),
            "b2s_3d": tf.compat.v1.batch_to_space_nd(rows, [2], [[1, 2]]),
            "slice": tf.slice(h, [0, 1, 2, 0], [2, 3, -1, 2]),
            "split0": a, "split1": b, "splitv0": p, "splitv1": q, "splitv2": r, "unpack0": u[0], "unpack3": u[3],
            "gather": tf.gather(h, idx, axis=1),
            "gather_neg64": tf.gather(h, idx64, axis=-1),
            "gather_batch": tf.gather(h, bidx, axis=2, batch_dims=1),
            "gather_nd": tf.gather_nd(h, nd),
            "reflect": tf.pad(h, [[0, 0], [2, 1], [1, 3], [0, 0]], "REFLECT"),
            "symmetric": tf.pad(v5, [[1, 0], [0, 3], [1, 1], [0, 4], [2, 2]], "SYMMETRIC"),
            "broadcast": tf.broadcast_to(v5, [2, 3, 5, 4, 2]),
            "reverse": tf.reverse(h, [1, 2]),
            "reverse_neg": tf.reverse(h, [-1]),
            "s2b": tf.space_to_batch_nd(h, [2, 2], [[1, 1], [0, 2]]),
            "b2s": tf.compat.v1.batch_to_space_nd(h, [2, 1], [[0, 1], [0, 0]]),
            "fill": tf.fill([3, 2], h[0, 0, 0, 0]),
            # layout operators
            "pad": tf.pad(h, [[0, 0], [1, 2], [0, 1], [0, 0]]),
            "concat": tf.concat([h, other, h[:, :2]], axis=-3),
            "transpose": tf.transpose(h, [0, 2, 1, 3]),
            "strided": h[:, 1:5:2, ::-1, 1:],
            "pack": tf.stack([h, other], axis=1),
            "reverse_batch": tf.reverse(y, [0]),
            "bilinear": tf.image.resize(h, [9, 13], "bilinear"),
            "bilinear_align": tf.compat.v1.image.resize_bilinear(h, [11, 5], align_corners=True),
            "bilinear_legacy": tf.compat.v1.image.resize_bilinear(h, [4, 12]),
            "nearest": tf.image.resize(h, [9, 13], "nearest"),
            "nearest_align": tf.compat.v1.image.resize_nearest_neighbor(h, [11, 5], align_corners=True),
        }
        if mode != "int16x8":  # the converter has no 16x8 quantization of these
            out["scatter"] = tf.scatter_nd(nd, tf.reshape(h[0, :3], [3, 8, 4]), [2, 2, 8, 4])
            out["s2d"] = tf.nn.space_to_depth(h, 2)
            out["where"] = tf.where(h)  # float / int8 condition: non-zero elements
            out["padv2"] = tf.pad(h, [[1, 0], [0, 0], [2, 2], [0, 1]], constant_values=0.5)  # 16x8: a float value
        if mode == "float":  # BUILTIN_REF loads TILE versions 1-2 and DEPTH_TO_SPACE version 1 only
            out["tile"] = tf.tile(h, [1, 2, 1, 3])
            out["d2s"] = tf.nn.depth_to_space(h, 2)
            out["revseq"] = tf.reverse_sequence(h, seqlen, seq_axis=2, batch_axis=0)
            out["range"] = tf.range(0, n[0], 2)
            out["range_f"] = tf.range(2.0, h[0, 0, 0, 0], -0.3)
            out["zeros"] = tf.zeros_like(out["range"])
            out["ones"] = tf.ones_like(out["where"])
        return out

    def make() -> tuple[Any, Sequence[Spec]]:
        return fn, _SPECS

    return make


# -- flatbuffers the converter never writes ---------------------------------------------------------

_TYPES = {np.dtype(np.bool_): fb.TensorType.BOOL, np.dtype(np.float32): fb.TensorType.FLOAT32,
          np.dtype(np.int32): fb.TensorType.INT32,
          np.dtype(np.int64): fb.TensorType.INT64, np.dtype(np.int8): fb.TensorType.INT8,
          np.dtype(np.uint8): fb.TensorType.UINT8, np.dtype(np.int16): fb.TensorType.INT16}


class _Flat:
    """A one-subgraph TFLite model written with the schema's object API."""

    def __init__(self) -> None:
        self.tensors: list[Any] = []
        self.buffers: list[Any] = [fb.BufferT()]
        self.codes: list[int] = []
        self.ops: list[Any] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.specs: list[Spec] = []

    def tensor(self, name: str, shape: Sequence[int], dtype: Any, data: np.ndarray | None = None,
               scale: Sequence[float] | None = None, zero_point: Sequence[int] | None = None,
               axis: int = 0) -> int:
        t = fb.TensorT()
        t.name, t.shape, t.type = name, list(shape), _TYPES[np.dtype(dtype)]
        t.buffer = 0
        if data is not None:
            buf = fb.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data, dtype).tobytes(), np.uint8)
            self.buffers.append(buf)
            t.buffer = len(self.buffers) - 1
        if scale is not None:
            q = fb.QuantizationParametersT()
            q.scale, q.zeroPoint, q.quantizedDimension = list(scale), list(zero_point or [0] * len(scale)), axis
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def input(self, spec: Spec, name: str, **quant: Any) -> int:
        i = self.tensor(name, spec.shape, spec.dtype, **quant)
        self.inputs.append(i)
        self.specs.append(spec)
        return i

    def op(self, code: int, inputs: Sequence[int], outputs: Sequence[int], options_type: int = 0,
           options: Any = None) -> None:
        if code not in self.codes:
            self.codes.append(code)
        o = fb.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.codes.index(code), list(inputs), list(outputs)
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = options_type, options
        self.ops.append(o)
        self.outputs.extend(i for i in outputs if i not in self.outputs)

    def write(self, path: Path) -> None:
        model = fb.ModelT()
        model.version, model.description = 3, "graphwright tflite_index"
        codes = []
        for code in self.codes:
            c = fb.OperatorCodeT()
            c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
            codes.append(c)
        sub = fb.SubGraphT()
        sub.tensors, sub.inputs, sub.outputs, sub.operators = self.tensors, self.inputs, self.outputs, self.ops
        model.operatorCodes, model.subgraphs, model.buffers = codes, [sub], self.buffers
        b = flatbuffers.Builder(1024)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        path.write_bytes(bytes(b.Output()))


def _options(cls: Any, **fields: Any) -> Any:
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def _squeeze_expand(m: _Flat, x: int, shape: tuple[int, ...], dtype: Any, q: dict[str, Any]) -> None:
    """EXPAND_DIMS at a negative axis, then SQUEEZE of that axis (the converter writes RESHAPE for both)."""
    B = fb.BuiltinOperator
    axis = m.tensor("expand_axis", (1,), np.int32, np.asarray([-2], np.int32))
    wide = m.tensor("expanded", (*shape[:-1], 1, shape[-1]), dtype, **q)
    m.op(B.EXPAND_DIMS, [x, axis], [wide])
    m.op(B.SQUEEZE, [wide], [m.tensor("squeezed", shape, dtype, **q)], fb.BuiltinOptions.SqueezeOptions,
         _options(fb.SqueezeOptionsT, squeezeDims=[-2]))


def _bools_and_ints(m: _Flat, ids: int) -> None:
    """bool and int32 tensors through the index operators (SCATTER_ND of bools ors repeated indices)."""
    B, opts = fb.BuiltinOperator, fb.BuiltinOptions
    flags = m.input(Spec((4, 3), "bool"), "flags")
    tensor = m.tensor
    m.op(B.GATHER, [flags, tensor("pick", (2,), np.int64, np.asarray([2, 0]))], [tensor("gather_b", (4, 2), np.bool_)],
         opts.GatherOptions, _options(fb.GatherOptionsT, axis=-1))
    m.op(B.GATHER_ND, [flags, tensor("corners", (2, 2), np.int32, np.asarray([[3, 2], [0, 0]]))],
         [tensor("gather_nd_b", (2,), np.bool_)])
    m.op(B.REVERSE_V2, [flags, tensor("rows_axis", (1,), np.int32, np.asarray([0]))],
         [tensor("reverse_b", (4, 3), np.bool_)])
    m.op(B.SLICE, [flags, tensor("begin", (2,), np.int32, np.asarray([1, 0])),
                   tensor("size", (2,), np.int32, np.asarray([-1, 2]))], [tensor("slice_b", (3, 2), np.bool_)])
    m.op(B.UNPACK, [flags], [tensor(f"unpack_b{i}", (4,), np.bool_) for i in range(3)], opts.UnpackOptions,
         _options(fb.UnpackOptionsT, num=3, axis=1))
    m.op(B.SCATTER_ND, [tensor("targets", (4, 1), np.int32, np.asarray([[1], [1], [3], [0]])), flags,
                        tensor("scatter_shape", (2,), np.int32, np.asarray([5, 3]))],
         [tensor("scatter_b", (5, 3), np.bool_)])
    m.op(B.MIRROR_PAD, [ids, tensor("ids_pads", (1, 2), np.int32, np.asarray([[2, 5]]))],
         [tensor("mirror_i", (12,), np.int32)], opts.MirrorPadOptions, _options(fb.MirrorPadOptionsT, mode=1))
    m.op(B.SPLIT_V, [ids, tensor("ids_sizes", (2,), np.int32, np.asarray([2, -1])),
                     tensor("ids_axis", (), np.int32, np.asarray(0))],
         [tensor("split_i0", (2,), np.int32), tensor("split_i1", (3,), np.int32)], opts.SplitVOptions,
         _options(fb.SplitVOptionsT, numSplits=2))


def _legacy_uint8(m: _Flat) -> None:
    """uint8 (legacy quantization) through GATHER, SLICE, MIRROR_PAD, and CONCATENATION, which
    requantizes a uint8 input of another scale (LiteRT's ConcatenationWithScaling)."""
    B, opts, tensor = fb.BuiltinOperator, fb.BuiltinOptions, m.tensor
    q = {"scale": [0.02], "zero_point": [128]}
    a = m.input(Spec((2, 3, 4), "uint8", 0, 256), "legacy", **q)
    b = m.input(Spec((2, 3, 4), "uint8", 0, 256), "legacy_wide", scale=[0.05], zero_point=[100])
    m.op(B.GATHER, [a, tensor("u8_pick", (3,), np.int32, np.asarray([2, 2, 0]))],
         [tensor("gather_u8", (2, 3, 4), np.uint8, **q)], opts.GatherOptions, _options(fb.GatherOptionsT, axis=1))
    m.op(B.SLICE, [a, tensor("u8_begin", (3,), np.int64, np.asarray([1, 0, 1])),
                   tensor("u8_size", (3,), np.int64, np.asarray([1, -1, 3]))],
         [tensor("slice_u8", (1, 3, 3), np.uint8, **q)])
    m.op(B.MIRROR_PAD, [a, tensor("u8_pads", (3, 2), np.int64, np.asarray([[0, 1], [2, 2], [3, 0]]))],
         [tensor("mirror_u8", (3, 7, 7), np.uint8, **q)], opts.MirrorPadOptions, _options(fb.MirrorPadOptionsT, mode=0))
    m.op(B.CONCATENATION, [a, b], [tensor("concat_u8", (2, 3, 8), np.uint8, **q)], opts.ConcatenationOptions,
         _options(fb.ConcatenationOptionsT, axis=2))


def _direct_float(path: Path) -> list[Spec]:
    m, B = _Flat(), fb.BuiltinOperator
    rng = np.random.default_rng(0)
    ids = m.input(Spec((5,), "int32", 0, 6), "ids")
    x = m.input(Spec((2, 3, 4)), "x")
    table = m.tensor("table", (6, 3, 2), np.float32, rng.uniform(-1, 1, (6, 3, 2)).astype(np.float32))
    m.op(B.EMBEDDING_LOOKUP, [ids, table], [m.tensor("rows", (5, 3, 2), np.float32)])
    t8 = m.tensor("table_i8", (6, 4), np.int8, rng.integers(-128, 128, (6, 4)), scale=[0.037])
    m.op(B.EMBEDDING_LOOKUP, [ids, t8], [m.tensor("rows_i8", (5, 4), np.float32)])
    row_scales = rng.uniform(0.01, 0.2, 6).astype(np.float32).tolist()
    tc = m.tensor("table_rows", (6, 4), np.int8, rng.integers(-128, 128, (6, 4)), scale=row_scales,
                  zero_point=[0] * 6)
    m.op(B.EMBEDDING_LOOKUP, [ids, tc], [m.tensor("rows_per_row", (5, 4), np.float32)])
    tu = m.tensor("table_u8", (6, 4), np.uint8, rng.integers(0, 256, (6, 4)), scale=[0.011])
    m.op(B.EMBEDDING_LOOKUP, [ids, tu], [m.tensor("rows_u8", (5, 4), np.float32)])
    m.op(B.RANK, [x], [m.tensor("rank", (), np.int32)])
    m.op(B.ZEROS_LIKE, [x], [m.tensor("zeros_f", (2, 3, 4), np.float32)])
    m.op(B.ZEROS_LIKE, [ids], [m.tensor("zeros_i", (5,), np.int32)])
    wide = m.tensor("table_i64", (6, 2), np.int64, rng.integers(-2**40, 2**40, (6, 2)))
    rows64 = m.tensor("rows_i64", (5, 2), np.int64)
    m.op(B.EMBEDDING_LOOKUP, [ids, wide], [rows64])
    m.op(B.ZEROS_LIKE, [rows64], [m.tensor("zeros_i64", (5, 2), np.int64)])
    _squeeze_expand(m, x, (2, 3, 4), np.float32, {})
    q8 = {"scale": [0.05], "zero_point": [-7]}
    image = m.input(Spec((2, 2, 3, 8), "int8", -128, 128), "image", **q8)
    m.op(fb.BuiltinOperator.DEPTH_TO_SPACE, [image], [m.tensor("d2s", (2, 4, 6, 2), np.int8, **q8)],
         fb.BuiltinOptions.DepthToSpaceOptions, _options(fb.DepthToSpaceOptionsT, blockSize=2))
    multiples = m.tensor("multiples", (4,), np.int32, np.asarray([2, 1, 1, 3], np.int32))
    m.op(fb.BuiltinOperator.TILE, [image, multiples], [m.tensor("tile", (4, 2, 3, 24), np.int8, **q8)])
    m.op(fb.BuiltinOperator.UNPACK, [image], [m.tensor(f"unpack{i}", (2, 2, 8), np.int8, **q8) for i in range(3)],
         fb.BuiltinOptions.UnpackOptions, _options(fb.UnpackOptionsT, num=3, axis=-2))
    # the converter leaves GATHER / GATHER_ND of variable int8 params float
    m.op(fb.BuiltinOperator.GATHER, [image, ids], [m.tensor("gather_i8", (2, 2, 3, 5), np.int8, **q8)],
         fb.BuiltinOptions.GatherOptions, _options(fb.GatherOptionsT, axis=-1))
    rows = m.tensor("rows_per_batch", (2, 2), np.int32, np.asarray([[2, 0], [1, 1]]))
    m.op(fb.BuiltinOperator.GATHER, [image, rows], [m.tensor("gather_batch_i8", (2, 2, 2, 8), np.int8, **q8)],
         fb.BuiltinOptions.GatherOptions, _options(fb.GatherOptionsT, axis=2, batchDims=1))
    cells = m.tensor("cells", (3, 2), np.int64, np.asarray([[1, 0], [0, 1], [1, 1]]))
    m.op(fb.BuiltinOperator.GATHER_ND, [image, cells], [m.tensor("gather_nd_i8", (3, 3, 8), np.int8, **q8)])
    _bools_and_ints(m, ids)
    _legacy_uint8(m)
    # on the float input: never all zero, so never an empty output, which LiteRT's Python API cannot read
    m.op(fb.BuiltinOperator.WHERE, [x], [m.tensor("where_f", (0, 3), np.int64)])
    m.write(path)
    return m.specs


def _direct_int16(path: Path) -> list[Spec]:
    m, B, opts = _Flat(), fb.BuiltinOperator, fb.BuiltinOptions
    rng = np.random.default_rng(0)
    q = {"scale": [0.0004], "zero_point": [0]}
    x = m.input(Spec((3, 5, 2, 4), "int16", -32768, 32768), "x", **q)
    lengths = m.input(Spec((3,), "int32", 0, 6), "lengths")
    blen = m.input(Spec((2,), "int64", 0, 4), "lengths_b")
    ids = m.input(Spec((4,), "int16", 0, 5), "ids")
    lookup = m.input(Spec((4,), "int32", 0, 7), "lookup_ids")
    m.op(B.REVERSE_SEQUENCE, [x, lengths], [m.tensor("revseq", (3, 5, 2, 4), np.int16, **q)],
         opts.ReverseSequenceOptions, _options(fb.ReverseSequenceOptionsT, seqDim=1, batchDim=0))
    m.op(B.REVERSE_SEQUENCE, [x, blen], [m.tensor("revseq_batch_after", (3, 5, 2, 4), np.int16, **q)],
         opts.ReverseSequenceOptions, _options(fb.ReverseSequenceOptionsT, seqDim=1, batchDim=2))
    table = m.tensor("table", (7, 3), np.int16, rng.integers(-32768, 32768, (7, 3)), **q)
    m.op(B.EMBEDDING_LOOKUP, [lookup, table], [m.tensor("rows", (4, 3), np.int16, **q)])
    m.op(B.GATHER, [x, ids], [m.tensor("gather", (3, 4, 2, 4), np.int16, **q)], opts.GatherOptions,
         _options(fb.GatherOptionsT, axis=-3, batchDims=0))
    m.op(B.UNPACK, [x], [m.tensor(f"unpack{i}", (3, 5, 4), np.int16, **q) for i in range(2)], opts.UnpackOptions,
         _options(fb.UnpackOptionsT, num=2, axis=-2))
    axis = m.tensor("split_axis", (), np.int32, np.asarray(-1, np.int32))
    m.op(B.SPLIT, [axis, x], [m.tensor(f"split{i}", (3, 5, 2, 2), np.int16, **q) for i in range(2)],
         opts.SplitOptions, _options(fb.SplitOptionsT, numSplits=2))
    pads = m.tensor("pads", (4, 2), np.int32, np.asarray([[1, 0], [0, 2], [1, 1], [0, 0]], np.int32))
    value = m.tensor("pad_value", (), np.int16, np.asarray(-1234, np.int16), **q)
    m.op(B.PADV2, [x, pads, value], [m.tensor("padv2", (4, 7, 4, 4), np.int16, **q)])
    _squeeze_expand(m, x, (3, 5, 2, 4), np.int16, q)
    multiples = m.tensor("multiples", (4,), np.int32, np.asarray([1, 2, 3, 1], np.int32))
    m.op(B.TILE, [x, multiples], [m.tensor("tile", (3, 10, 6, 4), np.int16, **q)])
    # int16 inputs of another scale than the output: LiteRT copies their integers, never requantizes
    coarse = m.input(Spec((3, 5, 2, 4), "int16", -32768, 32768), "coarse", scale=[0.003], zero_point=[0])
    m.op(B.CONCATENATION, [x, coarse], [m.tensor("concat", (3, 5, 2, 8), np.int16, **q)],
         opts.ConcatenationOptions, _options(fb.ConcatenationOptionsT, axis=-1))
    m.write(path)
    return m.specs


_DIRECT = {"direct_float": _direct_float, "direct_int16x8": _direct_int16}


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    if name in _DIRECT:
        specs = _DIRECT[name](model_path)
        return info_of(FAMILY, name, model_path, reference_path, specs)
    return build_converted(FAMILY, name, _index(name.rsplit("_", 1)[1]), model_path, reference_path)
