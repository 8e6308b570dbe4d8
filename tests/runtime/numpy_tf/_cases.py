"""Kernel test cases: (op, inputs, attrs, tolerance), seeded, covering every NumPy kernel.

Inputs are NumPy arrays (a list of arrays for a list input such as Pack's
``values``).  ``ulps`` > 0 marks ops where TensorFlow uses Eigen's fast
approximations (exp, tanh, rsqrt...), which are not bit-exact with anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphwright.ir import DType


@dataclass
class Case:
    op: str
    args: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def id(self) -> str:
        kinds = ",".join(str(getattr(a, "dtype", "list")) for a in self.args)
        extra = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}({kinds}{';' + extra if extra else ''})"


def i32(*v: Any) -> np.ndarray:
    return np.array(v[0] if len(v) == 1 else v, dtype=np.int32)


_rng = np.random.default_rng(20240601)
INT_TYPES = (np.int32, np.int64, np.uint8, np.int8)
#: Transcendental ops: TF uses Eigen's approximations (measured up to ~8 ulp off).
APPROX = dict(rtol=2e-6, atol=2e-7)


def _ints(shape: tuple[int, ...], dtype: type, lo: int = -40, hi: int = 40) -> np.ndarray:
    info = np.iinfo(dtype)
    return _rng.integers(max(lo, info.min), min(hi, info.max), shape, endpoint=True).astype(dtype)


def _floats(shape: tuple[int, ...], scale: float = 3.0) -> np.ndarray:
    return (_rng.standard_normal(shape) * scale).astype(np.float32)


def _nonzero(a: np.ndarray) -> np.ndarray:
    return np.where(a == 0, np.ones_like(a), a)


def binary_cases() -> list[Case]:
    cases = []
    ops = ["Add", "AddV2", "Sub", "Mul", "Div", "TruncateDiv", "FloorDiv", "FloorMod", "TruncateMod", "Mod",
           "Maximum", "Minimum", "SquaredDifference", "RealDiv"]
    for dtype in (np.int32, np.int64):
        x, y = _ints((3, 4), dtype), _nonzero(_ints((4,), dtype, -7, 7))  # broadcasting, negatives
        cases += [Case(op, [x, y]) for op in ops]
        cases.append(Case("Pow", [_ints((3, 4), dtype, -6, 6), _ints((4,), dtype, 0, 5)]))
    for dtype in (np.uint8, np.int8):
        x, y = _ints((2, 5), dtype), _nonzero(_ints((2, 5), dtype, 0, 9))
        cases += [Case(op, [x, y]) for op in ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Maximum")]
    f, g = _floats((3, 4)), _nonzero(_floats((1, 4)))
    cases += [Case(op, [f, g]) for op in ops + ["DivNoNan", "MulNoNan"]]
    cases.append(Case("Pow", [np.abs(f), g], **APPROX))
    cases.append(Case("FloorDiv", [np.array([1.0, -1.0, 7.5, -7.5], np.float32), np.float32(0.1)]))  # floor(x/y)
    cases.append(Case("FloorMod", [np.array([5.0, -5.0, 5.0, -5.0, 0.0], np.float32),
                                   np.array([3.0, 3.0, -3.0, -3.0, -2.0], np.float32)]))
    cases.append(Case("DivNoNan", [f, np.array([0.0, 1.0, 0.0, 2.0], np.float32)]))
    # exact TF integer semantics
    neg = np.array([-7, 7, -7, 7, -1, 0], np.int32)
    div = np.array([2, -2, -2, 2, 3, -5], np.int32)
    cases += [Case(op, [neg, div]) for op in ("FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Div")]
    big = np.array([2**31 - 1, -2**31, 2**30], np.int32)
    cases += [Case("Add", [big, i32(1, -1, 2**30)]), Case("Mul", [big, i32(2, 3, 4)]),
              Case("Sub", [big, i32(-1, 1, -2**31)]), Case("AddV2", [big.astype(np.int64) * 2**32, np.int64(2**62)])]
    cases += [Case("FloorDiv", [i32(4, 5), i32(1, 0)]), Case("FloorMod", [i32(4, 5), i32(0, 1)]),
              Case("RealDiv", [i32(4, 5), i32(2, 1)]), Case("Pow", [i32(2, 3), i32(-1, 2)])]  # TF refuses all four
    nan = np.array([np.nan, 1.0, -np.inf, 2.0], np.float32)
    cases += [Case("Maximum", [nan, np.float32(1.5)]), Case("Minimum", [nan, np.float32(1.5)])]
    return cases


def comparison_cases() -> list[Case]:
    x, y = _ints((3, 4), np.int32, -3, 3), _ints((4,), np.int32, -3, 3)
    f = np.array([np.nan, 1.0, -0.0, 2.0], np.float32)
    b1, b2 = x > 0, y > 0
    cases = [Case(op, [x, y]) for op in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual")]
    cases += [Case(op, [f, np.float32(0.0)]) for op in ("Equal", "NotEqual", "Less", "GreaterEqual")]
    cases += [Case("Equal", [b1, b2]), Case("LogicalAnd", [b1, b2]), Case("LogicalOr", [b1, b2]),
              Case("LogicalNot", [b1]),
              Case("Equal", [np.array([b"a", b"bc"], dtype=object), np.array([b"a", b"b"], dtype=object)]),
              Case("Equal", [i32(1, 2, 3), i32(1, 2)], {"incompatible_shape_error": False}),
              Case("NotEqual", [i32(1, 2, 3), i32(1, 2)], {"incompatible_shape_error": False})]
    return cases


def unary_cases() -> list[Case]:
    f = np.concatenate([_floats((20,)), np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.0, 6.5, -1e-8], np.float32)])
    pos = np.abs(f) + np.float32(0.01)
    ints = np.array([-2**31, -5, 0, 3, 2**31 - 1], np.int32)
    cases = []
    for op in ("Neg", "Abs", "Square", "Floor", "Ceil", "Round", "Rint", "Sign", "Relu", "Relu6", "Softsign"):
        cases.append(Case(op, [f]))
    for op in ("Neg", "Abs", "Square", "Sign", "Relu", "Relu6"):
        cases.append(Case(op, [ints]))
    cases.append(Case("Relu6", [np.array([-3, 2, 9], np.int64)]))
    for op in ("Sqrt", "Rsqrt", "Reciprocal", "Inv", "Log", "Log1p"):
        cases.append(Case(op, [pos], **APPROX))
    for op in ("Exp", "Expm1", "Sin", "Cos", "Tanh", "Sigmoid", "Elu", "Selu", "Softplus"):
        cases.append(Case(op, [f], **APPROX))
    cases += [Case("Sqrt", [pos.astype(np.float64)]), Case("Sqrt", [ints]), Case("Exp", [ints])]  # ints: TF refuses
    half = (f / 4).astype(np.float16)
    cases += [Case(op, [np.abs(half) + np.float16(0.01) if op in ("Rsqrt", "Log", "Sqrt") else half])
              for op in ("Rsqrt", "Log", "Sqrt", "Exp", "Tanh", "Neg", "Square")]  # float16: via float32, exact
    cases += [Case("Sigmoid", [np.array([-100.0, -20.0, 0.0, 20.0, 100.0], np.float32)], **APPROX),
              Case("Softplus", [np.array([-30.0, -10.0, 0.0, 10.0, 30.0], np.float32)], **APPROX)]
    special = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32)
    cases += [Case(op, [special]) for op in ("IsNan", "IsInf", "IsFinite")]
    cases += [Case("LeakyRelu", [f], {"alpha": 0.1}), Case("LeakyRelu", [f])]
    return cases


def cast_cases() -> list[Case]:
    f = np.array([-3.7, -0.5, 0.0, 0.5, 2.5, 100.9, 255.0], np.float32)
    wide = (_rng.standard_normal(50) * 1e3).astype(np.float64)
    i64 = np.array([2**40 + 1, -(2**40) - 1, 3, -2**63, 2**63 - 1], np.int64)
    cases = [Case("Cast", [f], {"DstT": d}) for d in (DType.INT32, DType.INT64, DType.FLOAT64, DType.FLOAT16,
                                                        DType.BOOL)]
    cases += [Case("Cast", [np.abs(f)], {"DstT": DType.UINT8}), Case("Cast", [f / 2], {"DstT": DType.INT8}),
              Case("Cast", [np.array([2**24 + 3, -(2**24) - 3, 2**53 + 1], np.int64)], {"DstT": DType.FLOAT32,
                                                                                     "Truncate": True}),
              Case("Cast", [i64], {"DstT": DType.INT32}), Case("Cast", [i64], {"DstT": DType.FLOAT32}),
              Case("Cast", [i64], {"DstT": DType.FLOAT32, "Truncate": True}),
              Case("Cast", [np.array([True, False]), ], {"DstT": DType.FLOAT32}),
              Case("Cast", [i32(-1, 0, 7)], {"DstT": DType.BOOL}),
              Case("Cast", [i32(-1, 300, 7)], {"DstT": DType.UINT8}),
              Case("Cast", [wide], {"DstT": DType.FLOAT32}),
              Case("Cast", [wide / 7], {"DstT": DType.FLOAT32, "Truncate": True}),
              Case("Cast", [(wide / 7).astype(np.float32)], {"DstT": DType.FLOAT16, "Truncate": True}),
              Case("Cast", [np.array([np.nan, np.inf, 65520.0, 1e-8], np.float32)], {"DstT": DType.FLOAT16,
                                                                                    "Truncate": True}),
              Case("Cast", [f], {"DstT": DType.FLOAT32})]
    return cases


def select_cases() -> list[Case]:
    t, e = _floats((3, 4)), _floats((3, 4))
    return [Case("Select", [t > 0, t, e]), Case("Select", [np.array([True, False, True]), t, e]),
            Case("Select", [np.array(True), t, e]), Case("SelectV2", [np.array([True, False, True, False]), t, e]),
            Case("SelectV2", [t > 0, t, np.float32(0.0)]),
            Case("AddN", [[t, e, t]]), Case("AddN", [[i32(1, 2), i32(3, 4)]]),
            Case("ClipByValue", [t, np.float32(-0.5), np.float32(0.5)]),
            Case("ClipByValue", [i32(-5, 0, 5), np.int32(-1), np.int32(2)])]


def shape_cases() -> list[Case]:
    f, a = _floats((2, 3, 4)), _ints((3, 4), np.int64)
    s = np.array([b"x", b"yz", b""], dtype=object)
    return [
        Case("Identity", [f]), Case("Identity", [s]), Case("Snapshot", [a]), Case("StopGradient", [f]),
        Case("PreventGradient", [f]), Case("IdentityN", [[f, a]]), Case("CheckNumerics", [f], {"message": "m"}),
        Case("CheckNumerics", [np.array([1.0, np.nan], np.float32)], {"message": "m"}),
        Case("EnsureShape", [f], {"shape": (2, None, 4)}), Case("EnsureShape", [f], {"shape": (2, 4)}),
        Case("Shape", [f]), Case("Shape", [f], {"out_type": DType.INT64}), Case("Shape", [np.float32(1)]),
        Case("ShapeN", [[f, f[0]]]), Case("ShapeN", [[a, a.T]], {"out_type": DType.INT64}),
        Case("Size", [f]), Case("Size", [a], {"out_type": DType.INT64}), Case("Rank", [f]), Case("Rank", [s]),
        Case("Reshape", [f, i32(4, -1)]), Case("Reshape", [f, np.array([-1], np.int64)]),
        Case("Reshape", [f, i32(5, -1)]), Case("Reshape", [f, i32(-1, -1)]), Case("Reshape", [s, i32(1, 3)]),
        Case("Reshape", [np.zeros((0, 3), np.float32), i32(3, 0)]),
        Case("Squeeze", [f.reshape(1, 2, 1, 3, 4)]), Case("Squeeze", [f.reshape(1, 2, 1, 3, 4)], {"squeeze_dims": [-3]}),
        Case("Squeeze", [f.reshape(1, 2, 1, 3, 4)], {"squeeze_dims": [0, 2]}),
        Case("Squeeze", [f], {"squeeze_dims": [1]}),
        Case("ExpandDims", [f, i32(0)]), Case("ExpandDims", [f, i32(-1)]), Case("ExpandDims", [f, i32(3)]),
        Case("ExpandDims", [f, np.array([-4], np.int64)]), Case("ExpandDims", [f, i32(5)]),
        Case("ExpandDims", [np.float32(2), i32(0)]),
        Case("Pack", [[a, a, a]]), Case("Pack", [[a, a]], {"axis": 2}), Case("Pack", [[a, a]], {"axis": -1}),
        Case("Pack", [[np.int32(1), np.int32(2)]]), Case("Pack", [[a, a.T]]), Case("Pack", [[s, s]]),
        Case("Unpack", [f], {"num": 3, "axis": 1}), Case("Unpack", [f], {"num": 4, "axis": -1}),
        Case("Unpack", [a], {"num": 3}),
        Case("ConcatV2", [[f, f[:, :1]], i32(1)]), Case("ConcatV2", [[a, a, a], np.int64(-1)]),
        Case("ConcatV2", [[s, s], i32(0)]), Case("ConcatV2", [[a, f[0]], i32(0)]),
        Case("Concat", [i32(0), [a, a]]),
        Case("Transpose", [f, i32(2, 0, 1)]), Case("Transpose", [a, np.array([1, 0], np.int64)]),
        Case("Transpose", [f, i32(0, 0, 1)]),
        Case("Fill", [i32(2, 3), np.float32(1.5)]), Case("Fill", [np.array([3], np.int64), np.int32(7)]),
        Case("Fill", [i32(2, 0), np.float32(1.5)]), Case("Fill", [i32(2, -1), np.float32(1.5)]),
        Case("ZerosLike", [f]), Case("OnesLike", [a]), Case("OnesLike", [a > 0]), Case("ZerosLike", [a > 0]),
        Case("Tile", [a, i32(2, 3)]), Case("Tile", [f, np.array([1, 0, 2], np.int64)]), Case("Tile", [a, i32(2)]),
        Case("BroadcastTo", [a[0], i32(2, 3, 4)]), Case("BroadcastTo", [f, i32(3, 3, 4)]),
        Case("BroadcastTo", [np.float32(2), np.array([2, 2], np.int64)]),
        Case("Range", [i32(0), i32(10), i32(3)]), Case("Range", [i32(10), i32(-3), i32(-4)]),
        Case("Range", [np.int64(-5), np.int64(5), np.int64(1)]), Case("Range", [i32(3), i32(3), i32(1)]),
        Case("Range", [np.float32(0), np.float32(1), np.float32(0.1)]),
        Case("Range", [np.float32(-3), np.float32(7.3), np.float32(0.7)]),
        Case("Range", [np.float32(1), np.float32(0), np.float32(-0.1)]),
        Case("Range", [np.float64(0.5), np.float64(100), np.float64(0.3)]),
        Case("Range", [i32(0), i32(10), i32(-1)]), Case("Range", [i32(0), i32(10), i32(0)]),
        Case("NoOp", []),
    ]


def indexing_cases() -> list[Case]:
    f, p = _floats((3, 4)), _floats((2, 3, 4))
    return [
        Case("Slice", [f, i32(1, 1), i32(-1, 2)]), Case("Slice", [p, np.array([0, 1, 2], np.int64),
                                                                  np.array([2, -1, 1], np.int64)]),
        Case("Slice", [f, i32(2, 0), i32(2, 1)]), Case("Slice", [f, i32(0, 0), i32(3, 0)]),
        Case("Gather", [f, i32(2, 0, 2)]), Case("Gather", [f, i32([[1], [0]])]), Case("Gather", [f, i32(3)]),
        Case("GatherV2", [f, i32([[1, 0, 3]]), i32(1)]), Case("GatherV2", [p, np.int64(1), np.int64(-1)]),
        Case("GatherV2", [p, _ints((2, 5), np.int32, 0, 2), i32(1)], {"batch_dims": 1}),
        Case("GatherV2", [p, _ints((2, 5), np.int32, 0, 3), i32(2)], {"batch_dims": 1}),
        Case("GatherV2", [p, _ints((2, 3, 5), np.int32, 0, 3), i32(-1)], {"batch_dims": -1}),
        Case("GatherV2", [p, _ints((2, 3), np.int64, 0, 3), i32(2)], {"batch_dims": 2}),
        Case("GatherV2", [f, i32(-1), i32(0)]),
        Case("OneHot", [i32(0, 2, -1, 5), i32(4), np.float32(1), np.float32(0)]),
        Case("OneHot", [i32([[0, 2], [1, 3]]), i32(4), np.float32(5), np.float32(-1)], {"axis": 0}),
        Case("OneHot", [np.array([1, 0], np.int64), i32(3), np.int32(1), np.int32(0)], {"axis": 1}),
        Case("Split", [i32(1), f], {"num_split": 2}), Case("Split", [i32(-1), p], {"num_split": 4}),
        Case("Split", [i32(0), f], {"num_split": 2}),
        Case("SplitV", [f, i32(1, -1, 1), i32(1)], {"num_split": 3}),
        Case("SplitV", [p, np.array([2, 1], np.int64), i32(-2)], {"num_split": 2}),
        Case("SplitV", [f, i32(1, 1), i32(1)], {"num_split": 2}),
        Case("Pad", [f, i32([[1, 0], [2, 3]])]), Case("PadV2", [f, i32([[1, 0], [2, 3]]), np.float32(7)]),
        Case("Pad", [f, i32([[1, 0]])]),
        Case("MirrorPad", [f, i32([[1, 0], [2, 3]])], {"mode": "REFLECT"}),
        Case("MirrorPad", [f, i32([[3, 0], [2, 4]])], {"mode": "SYMMETRIC"}),
        Case("MirrorPad", [f, i32([[3, 0], [2, 3]])], {"mode": "REFLECT"}),
        Case("ReverseV2", [p, i32(1, -1)]), Case("ReverseV2", [f, np.array([], np.int32)]),
        Case("ReverseV2", [f, i32(0, 0)]),
        Case("Where", [f > 0]), Case("Where", [_ints((2, 3), np.int32, -1, 1)]),
    ]


def reduction_cases() -> list[Case]:
    f, a = _floats((3, 4, 5)), _ints((3, 4), np.int32, -50, 50)
    cases = []
    for op in ("Sum", "Prod", "Mean", "Max", "Min"):
        cases += [Case(op, [a, i32(1)]), Case(op, [a, i32(-1, 0)], {"keep_dims": True}),
                  Case(op, [a, np.array([], np.int32)]), Case(op, [f, np.int64(2)], rtol=1e-6, atol=1e-6),
                  Case(op, [f, i32(0, 2)], {"keep_dims": True}, rtol=1e-6, atol=1e-6),
                  Case(op, [a, i32(1, 1)]), Case(op, [a, i32(2)])]
    empty = np.zeros((0, 3), np.float32)
    cases += [Case(op, [empty, i32(0)]) for op in ("Sum", "Prod", "Max", "Min", "Mean")]
    cases += [Case(op, [empty.astype(np.int32), i32(0)]) for op in ("Max", "Min", "Sum")]
    cases += [Case("Mean", [i32([-7, -8]), i32(0)]), Case("Sum", [i32(2**31 - 1, 5), i32(0)]),
              Case("Prod", [np.array([2**40, 2**30], np.int64), i32(0)]),
              Case("Sum", [np.int32(4), i32(0)]), Case("Sum", [np.int32(4), np.array([], np.int32)])]
    b = a > 0
    cases += [Case("All", [b, i32(1)]), Case("Any", [b, i32(0)], {"keep_dims": True}),
              Case("All", [np.zeros((0,), bool), i32(0)]), Case("Any", [np.zeros((0,), bool), i32(0)])]
    cases += [Case("ArgMax", [f, i32(1)]), Case("ArgMin", [a, i32(0)], {"output_type": DType.INT32}),
              Case("ArgMax", [i32(3, 7, 7, 1), i32(0)]), Case("ArgMin", [f, np.int64(-1)])]
    return cases


def linalg_cases() -> list[Case]:
    f, g = _floats((3, 4)), _floats((4, 5))
    p, q = _floats((2, 3, 4)), _floats((4, 5))
    i, j = _ints((3, 4), np.int32), _ints((4, 2), np.int32)
    mm = dict(rtol=1e-5, atol=1e-5)
    return [
        Case("MatMul", [f, g], **mm), Case("MatMul", [f.T.copy(), g], {"transpose_a": True}, **mm),
        Case("MatMul", [f, g.T.copy()], {"transpose_b": True}, **mm),
        Case("MatMul", [f.T.copy(), g.T.copy()], {"transpose_a": True, "transpose_b": True}, **mm),
        Case("MatMul", [i, j]), Case("MatMul", [f, f]),
        Case("BatchMatMulV2", [p, q], **mm), Case("BatchMatMulV2", [p, np.swapaxes(p, 1, 2).copy()], **mm),
        Case("BatchMatMulV2", [p, p], {"adj_y": True}, **mm), Case("BatchMatMul", [p, p], {"adj_x": True}, **mm),
        Case("BatchMatMulV3", [p, q], {"Tout": DType.FLOAT32}, **mm),
        Case("BiasAdd", [p, _floats((4,))]), Case("BiasAdd", [p.reshape(2, 3, 4, 1), _floats((3,))],
                                                      {"data_format": "NCHW"}),
        Case("BiasAdd", [f, _floats((4,))], {"data_format": "NCHW"}), Case("BiasAdd", [i, _ints((4,), np.int32)]),
        Case("BiasAdd", [p, _floats((3,))]), Case("BiasAddV1", [p, _floats((4,))]),
    ]


def all_cases() -> list[Case]:
    return (binary_cases() + comparison_cases() + unary_cases() + cast_cases() + select_cases() + shape_cases()
            + indexing_cases() + reduction_cases() + linalg_cases())


def strided_slice_cases(count: int, seed: int) -> list[Case]:
    """Random StridedSlice specs: ranks 0-4 (size-0 dimensions too), every mask, out-of-range bounds."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        rank = int(rng.integers(0, 5))
        shape = tuple(int(d) for d in rng.integers(0, 6, rank))
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        k = int(rng.integers(0, rank + 3))
        index = np.int32 if rng.random() < 0.7 else np.int64
        begin = rng.integers(-8, 9, k).astype(index)
        end = rng.integers(-8, 9, k).astype(index)
        strides = rng.choice([-3, -2, -1, 1, 1, 2, 3] + ([0] if rng.random() < 0.05 else []), k).astype(index)
        bits = 1 << k

        def mask(p: float, k: int = k) -> int:
            return int(sum(1 << i for i in range(k) if rng.random() < p))

        ellipsis = 0
        if k and rng.random() < 0.35:
            ellipsis = 1 << int(rng.integers(0, k))
            if rng.random() < 0.1:
                ellipsis |= 1 << int(rng.integers(0, k))
        attrs = {"begin_mask": mask(0.3), "end_mask": mask(0.3), "ellipsis_mask": ellipsis % max(bits, 1),
                 "new_axis_mask": mask(0.2), "shrink_axis_mask": mask(0.3)}
        cases.append(Case("StridedSlice", [x, begin, end, strides], attrs))
    return cases


def strided_slice_classics() -> list[Case]:
    """Python-style slices as TF's __getitem__ writes them."""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)

    def ss(b: list[int], e: list[int], s: list[int], **masks: int) -> Case:
        return Case("StridedSlice", [x, i32(*b) if len(b) != 1 else np.array(b, np.int32),
                                     i32(*e) if len(e) != 1 else np.array(e, np.int32),
                                     i32(*s) if len(s) != 1 else np.array(s, np.int32)], masks)

    return [
        ss([0, 1], [0, 2], [1, 1], ellipsis_mask=1),                        # x[..., 1]
        ss([0, 1], [0, 2], [1, 1], ellipsis_mask=1, shrink_axis_mask=2),    # x[..., 1] (shrunk)
        ss([-1], [0], [1], shrink_axis_mask=1),                             # x[-1]
        ss([0], [0], [-1], begin_mask=1, end_mask=1),                       # x[::-1]
        ss([0, 0], [0, 0], [1, 1], begin_mask=1, end_mask=1, new_axis_mask=2),  # x[:, None]
        ss([0, 0, 2], [0, 0, 4], [1, 1, 1], ellipsis_mask=1, new_axis_mask=2),  # x[..., None, 2:4]
        ss([1, 0, -2], [2, 0, -1], [1, 1, 1], ellipsis_mask=2, shrink_axis_mask=5),  # x[1, ..., -2]
        ss([0, 2, 0], [0, 0, 0], [1, -1, 1], begin_mask=5, end_mask=7),     # x[:, 2::-1, :]
        ss([5], [-10], [-2], ), ss([-100], [100], [1]),                     # clamping
        ss([0, 0], [1, 1], [1, 1], new_axis_mask=3),                        # x[None, None]
        ss([3], [4], [1], shrink_axis_mask=1),                              # out of bounds: error
        ss([0], [1], [-1], shrink_axis_mask=1),                             # shrink needs stride > 0
    ]
