"""Elementwise TF ops: arithmetic, comparisons, logic, activations, Cast and Select.

Each simple op is one line of a table: the NumPy function and which input
types TensorFlow has a kernel for.  Results keep the input type (float32 is
computed in float32, integers wrap around on overflow exactly as TF's C++
does); broadcasting follows NumPy's rules, which are TF's.  Where TF's result
is an error (integer division by zero) or undefined behaviour of its C++
(``INT_MIN / -1``, casting an out-of-range float to an integer), the kernel
raises :class:`KernelError` rather than guess.

Exactness: +, −, ×, ÷, √, comparisons, casts and integer ops give TF's bits.
float16 functions are computed in float32 and rounded once, as Eigen does.
Transcendental functions (exp, log, tanh, sigmoid, rsqrt, pow...) agree with
TF within a few ulps: TF uses Eigen's fast approximations (measured up to ~8
ulps from the correctly rounded result), NumPy its own; neither is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...ir import Node
from ._common import (
    FLOAT_KINDS,
    Kernel,
    KernelError,
    SizeEstimate,
    attr,
    fail,
    np_dtype,
    require,
    require_float,
    require_same_dtype,
)

__all__ = ["KERNELS", "SIZES", "BINARY", "UNARY", "COMPARISONS"]

Check = Callable[[Node, np.ndarray], None]
Fn = Callable[..., np.ndarray]


# -- input type checks (TF registers each op for a set of types) -----------------------
def _numbers(node: Node, a: np.ndarray) -> None:
    if a.dtype.kind not in "iufc":
        raise fail(node, f"no kernel for {a.dtype}")


def _reals(node: Node, a: np.ndarray) -> None:
    if a.dtype.kind not in "iuf":
        raise fail(node, f"no kernel for {a.dtype}")


def _floats(node: Node, a: np.ndarray) -> None:
    require_float(node, a)


def _real_floats(node: Node, a: np.ndarray) -> None:
    if a.dtype.kind != "f":
        raise fail(node, f"no kernel for {a.dtype} (real floating point only)")


def _bools(node: Node, a: np.ndarray) -> None:
    if a.dtype != np.bool_:
        raise fail(node, f"expected bool, got {a.dtype}")


def _any(node: Node, a: np.ndarray) -> None:
    if a.dtype.kind not in "biufcO":
        raise fail(node, f"no kernel for {a.dtype}")


# -- integer division: TF errors on zero divisors; INT_MIN / -1 is undefined in its C++ --
def _check_int_division(x: np.ndarray, y: np.ndarray) -> None:
    if x.dtype.kind not in "iu":
        return
    if np.any(y == 0):
        raise KernelError("integer division by zero")
    if x.dtype.kind == "i" and np.any((x == np.iinfo(x.dtype).min) & (y == -1)):
        raise KernelError("integer overflow in INT_MIN / -1 (undefined in TensorFlow)")


def _truncate_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in FLOAT_KINDS:
        return np.trunc(x / y) if x.dtype.kind == "f" else x / y
    _check_int_division(x, y)
    q = np.floor_divide(x, y)
    return q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(x.dtype)


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x / y if x.dtype.kind in FLOAT_KINDS else _truncate_div(x, y)


def _floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.floor(x / y)  # TF: floor of the rounded quotient (not Python's divmod rule)
    if x.dtype.kind == "c":
        raise KernelError("no FloorDiv kernel for complex numbers")
    _check_int_division(x, y)
    return np.floor_divide(x, y)


def _floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        r = np.fmod(x, y)
        return np.where((r != 0) & ((y < 0) != (r < 0)), r + y, r)
    _check_int_division(x, y)
    return np.remainder(x, y)


def _truncate_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        _check_int_division(x, y)
    return np.fmod(x, y)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu" and np.any(y < 0):
        raise KernelError("integers to negative integer powers are not allowed")
    return np.power(x, y)


def _div_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y == 0, np.zeros_like(x), x / np.where(y == 0, np.ones_like(y), y))


def _mul_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y == 0, np.zeros_like(x), x * y)


def _squared_difference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = x - y
    return d * np.conj(d) if d.dtype.kind == "c" else d * d


#: op -> (function, accepted input types); both inputs have the same type, the result too.
BINARY: dict[str, tuple[Fn, Check]] = {
    "Add": (np.add, _numbers),                            # x + y
    "AddV2": (np.add, _numbers),                          # x + y
    "Sub": (np.subtract, _numbers),                       # x - y
    "Mul": (np.multiply, _numbers),                       # x * y
    "RealDiv": (np.true_divide, _floats),                 # x / y (TF has no integer RealDiv)
    "Div": (_div, _numbers),                              # x / y; integers truncate toward 0
    "TruncateDiv": (_truncate_div, _numbers),             # trunc(x / y)
    "FloorDiv": (_floor_div, _numbers),                   # floor(x / y)
    "FloorMod": (_floor_mod, _reals),                     # x - floor(x / y)·y (sign of y)
    "TruncateMod": (_truncate_mod, _reals),               # C fmod (sign of x)
    "Mod": (_truncate_mod, _reals),                       # C fmod (sign of x)
    "Maximum": (np.maximum, _reals),                      # max(x, y), NaN propagates
    "Minimum": (np.minimum, _reals),                      # min(x, y), NaN propagates
    "Pow": (_pow, _numbers),                              # x ** y
    "SquaredDifference": (_squared_difference, _numbers),  # (x - y)²
    "DivNoNan": (_div_no_nan, _floats),                   # y == 0 ? 0 : x / y
    "MulNoNan": (_mul_no_nan, _floats),                   # y == 0 ? 0 : x * y
}

#: op -> (function, accepted input types); the result is bool.
COMPARISONS: dict[str, tuple[Fn, Check]] = {
    "Equal": (np.equal, _any),                            # x == y
    "NotEqual": (np.not_equal, _any),                     # x != y
    "Less": (np.less, _reals),                            # x < y
    "LessEqual": (np.less_equal, _reals),                 # x <= y
    "Greater": (np.greater, _reals),                      # x > y
    "GreaterEqual": (np.greater_equal, _reals),           # x >= y
    "LogicalAnd": (np.logical_and, _bools),               # x ∧ y
    "LogicalOr": (np.logical_or, _bools),                 # x ∨ y
}


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.exp(-x) + x.dtype.type(1))


def _relu(x: np.ndarray) -> np.ndarray:
    _no_nan(x)
    return np.maximum(x, x.dtype.type(0))


def _relu6(x: np.ndarray) -> np.ndarray:
    _no_nan(x)
    return np.minimum(np.maximum(x, x.dtype.type(0)), x.dtype.type(6))


def _no_nan(x: np.ndarray) -> None:
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise KernelError("NaN input: TensorFlow's result is unspecified")


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.expm1(x), x)


def _selu(x: np.ndarray) -> np.ndarray:
    alpha, scale = x.dtype.type(1.6732632423543772848170429916717), x.dtype.type(1.0507009873554804934193349852946)
    return np.where(x < 0, scale * alpha * np.expm1(x), scale * x)


def _softsign(x: np.ndarray) -> np.ndarray:
    return x / (np.abs(x) + x.dtype.type(1))


def _softplus(x: np.ndarray) -> np.ndarray:
    # TF: x above -threshold, exp(x) below threshold, log1p(exp(x)) between.
    threshold = np.log(np.finfo(x.dtype).eps).astype(x.dtype) + x.dtype.type(2)
    return np.where(x > -threshold, x, np.where(x < threshold, np.exp(x), np.log1p(np.exp(x))))


#: op -> (function, accepted input types); the result has the input's type.
UNARY: dict[str, tuple[Fn, Check]] = {
    "Neg": (np.negative, _numbers),                       # -x (wraps for INT_MIN)
    "Abs": (np.abs, _reals),                              # |x|
    "Square": (np.square, _numbers),                      # x²
    "Sqrt": (np.sqrt, _floats),                           # √x
    "Rsqrt": (_rsqrt, _floats),                           # 1/√x
    "Reciprocal": (np.reciprocal, _floats),               # 1/x
    "Inv": (np.reciprocal, _floats),                      # 1/x
    "Exp": (np.exp, _floats),                             # eˣ
    "Expm1": (np.expm1, _floats),                         # eˣ - 1
    "Log": (np.log, _floats),                             # ln x
    "Log1p": (np.log1p, _floats),                         # ln(1 + x)
    "Sin": (np.sin, _floats),                             # sin x
    "Cos": (np.cos, _floats),                             # cos x
    "Floor": (np.floor, _real_floats),                    # ⌊x⌋
    "Ceil": (np.ceil, _real_floats),                      # ⌈x⌉
    "Round": (np.rint, _real_floats),                     # nearest, ties to even (TF zeroes integers)
    "Rint": (np.rint, _real_floats),                      # nearest, ties to even
    "Sign": (np.sign, _reals),                            # -1, 0 or 1
    "Tanh": (np.tanh, _floats),                           # tanh x
    "Sigmoid": (_sigmoid, _real_floats),                  # 1 / (1 + e⁻ˣ)
    "Relu": (_relu, _reals),                              # max(x, 0)
    "Relu6": (_relu6, _reals),                            # min(max(x, 0), 6)
    "Elu": (_elu, _real_floats),                          # x < 0 ? eˣ - 1 : x
    "Selu": (_selu, _real_floats),                        # scale·(x < 0 ? α(eˣ - 1) : x)
    "Softsign": (_softsign, _real_floats),                # x / (|x| + 1)
    "Softplus": (_softplus, _real_floats),                # ln(1 + eˣ), TF's thresholds
}

#: op -> (function, accepted input types); the result is bool.
PREDICATES: dict[str, tuple[Fn, Check]] = {
    "IsNan": (np.isnan, _real_floats),                    # x ≠ x
    "IsInf": (np.isinf, _real_floats),                    # |x| = ∞
    "IsFinite": (np.isfinite, _real_floats),              # neither NaN nor ∞
    "LogicalNot": (np.logical_not, _bools),               # ¬x
}


def _unary_kernel(fn: Fn, check: Check, *, to_bool: bool) -> Kernel:
    def kernel(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
        (x,) = inputs
        check(node, x)
        if x.dtype == np.float16 and not to_bool:  # Eigen computes half functions in float, rounds once
            return [fn(x.astype(np.float32)).astype(np.float16)]
        return [_typed(node, fn(x), np.dtype(np.bool_) if to_bool else x.dtype)]

    return kernel


def _binary_kernel(fn: Fn, check: Check, *, to_bool: bool) -> Kernel:
    def kernel(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, y = inputs
        require_same_dtype(node, [x, y])
        check(node, x)
        if node.op in ("Equal", "NotEqual") and not attr(node, "incompatible_shape_error", True):
            try:
                np.broadcast_shapes(x.shape, y.shape)
            except ValueError:  # TF: shapes that do not broadcast are simply unequal
                return [np.array(node.op == "NotEqual")]
        try:
            out = fn(x, y)
        except KernelError as e:
            raise KernelError(f"{node.op}: {e}") from None
        return [_typed(node, out, np.dtype(np.bool_) if to_bool else x.dtype)]

    return kernel


def _typed(node: Node, out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.asarray(out)
    if out.dtype != dtype:
        raise fail(node, f"internal: computed {out.dtype}, expected {dtype}")
    return out


# -- ops with their own rules ---------------------------------------------------------
def _cast(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    dst = np_dtype(node, attr(node, "DstT"))
    src = x.dtype
    if src == dst:
        return [x]
    require(src.kind in "biuf" or (src.kind == "c" and dst.kind == "c"), node, f"cannot cast {src} to {dst}")
    if src.kind == "f" and dst.kind in "iu":
        _check_float_to_int(node, x, dst)
    elif src.kind == "f" and dst.kind == "f" and dst.itemsize < src.itemsize and attr(node, "Truncate", False):
        x = _zero_low_mantissa_bits(x, dst)
    return [x.astype(dst)]


def _check_float_to_int(node: Node, x: np.ndarray, dst: np.dtype) -> None:
    """TF's C++ static_cast truncates toward 0; NaN, ±∞ and out-of-range values are undefined."""
    wide = x.astype(np.float64)
    bits = dst.itemsize * 8
    lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1)) if dst.kind == "i" else (0.0, 2.0**bits)
    t = np.trunc(wide)
    require(bool(np.all(np.isfinite(wide) & (t >= lo) & (t < hi))), node,
            f"values outside the range of {dst} (TensorFlow's result is undefined)")


def _zero_low_mantissa_bits(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """``Truncate=true``: clear the mantissa bits the narrower type drops, then round (TF's rule; NaN untouched)."""
    src_bits = {np.dtype(np.float64): 52, np.dtype(np.float32): 23, np.dtype(np.float16): 10}[x.dtype]
    dst_bits = {np.dtype(np.float32): 23, np.dtype(np.float16): 10}[dst]
    uint = np.dtype(f"u{x.dtype.itemsize}")
    mask = uint.type((~((1 << (src_bits - dst_bits)) - 1)) & ((1 << (8 * x.dtype.itemsize)) - 1))
    cleared = (np.ascontiguousarray(x).view(uint) & mask).view(x.dtype)
    return np.where(np.isnan(x), x, cleared)


def _select(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    cond, t, e = inputs
    require(cond.dtype == np.bool_, node, f"condition must be bool, got {cond.dtype}")
    require_same_dtype(node, [t, e])
    require(t.shape == e.shape, node, f"branches have different shapes {list(t.shape)} and {list(e.shape)}")
    if cond.ndim == 0:
        return [t if bool(cond) else e]
    if cond.shape == t.shape:
        return [np.where(cond, t, e)]
    require(cond.ndim == 1 and t.ndim >= 1 and cond.shape[0] == t.shape[0], node,
            f"condition of shape {list(cond.shape)} does not select rows of {list(t.shape)}")
    return [np.where(cond.reshape((-1,) + (1,) * (t.ndim - 1)), t, e)]


def _select_v2(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    cond, t, e = inputs
    require(cond.dtype == np.bool_, node, f"condition must be bool, got {cond.dtype}")
    require_same_dtype(node, [t, e])
    return [np.where(cond, t, e)]


def _add_n(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    require(len(inputs) >= 1, node, "needs at least one input")
    require_same_dtype(node, inputs)
    _numbers(node, inputs[0])
    require(all(a.shape == inputs[0].shape for a in inputs), node, "inputs have different shapes")
    total = inputs[0]
    for a in inputs[1:]:
        total = total + a
    return [np.asarray(total, dtype=inputs[0].dtype)]


def _clip_by_value(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    t, lo, hi = inputs
    require_same_dtype(node, inputs)
    _reals(node, t)
    for bound in (lo, hi):
        require(bound.ndim == 0 or bound.shape == t.shape, node, "bounds must be scalars or shaped like the input")
    require(not (t.dtype.kind == "f" and (np.isnan(t).any() or np.isnan(lo).any() or np.isnan(hi).any())),
            node, "NaN input: TensorFlow's result is unspecified")
    require(bool(np.all(lo <= hi)), node, "clip_value_min is above clip_value_max")
    return [np.asarray(np.minimum(np.maximum(t, lo), hi), dtype=t.dtype)]


def _leaky_relu(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    _real_floats(node, x)
    alpha = x.dtype.type(attr(node, "alpha", 0.2))
    return [np.where(x > 0, x, x * alpha)]


KERNELS: dict[str, Kernel] = {
    **{op: _binary_kernel(fn, check, to_bool=False) for op, (fn, check) in BINARY.items()},
    **{op: _binary_kernel(fn, check, to_bool=True) for op, (fn, check) in COMPARISONS.items()},
    **{op: _unary_kernel(fn, check, to_bool=False) for op, (fn, check) in UNARY.items()},
    **{op: _unary_kernel(fn, check, to_bool=True) for op, (fn, check) in PREDICATES.items()},
    "Cast": _cast,
    "Select": _select,
    "SelectV2": _select_v2,
    "AddN": _add_n,
    "ClipByValue": _clip_by_value,
    "LeakyRelu": _leaky_relu,
}


# -- output sizes, checked before evaluating (broadcasting can multiply sizes) --------
def _broadcast_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    shapes = [a.shape for a in inputs]
    if all(s == shapes[0] for s in shapes) or all(len(s) == 0 for s in shapes[1:]):
        return max(a.nbytes for a in inputs)
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        return 0  # the kernel reports the mismatch
    itemsize = max(a.dtype.itemsize for a in inputs)
    return math.prod(shape) * itemsize  # Python ints: no overflow on hostile shapes


def _cast_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    return int(inputs[0].size) * np_dtype(node, attr(node, "DstT")).itemsize


SIZES: dict[str, SizeEstimate] = {
    **{op: _broadcast_bytes for op in (*BINARY, *COMPARISONS, "SelectV2")},
    "Cast": _cast_bytes,
}
