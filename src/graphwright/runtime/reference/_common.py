"""What every reference kernel shares: the per-operator context, quantization
parameters, fused-activation ranges and TFLite's padding rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import VerificationError
from ...ir import Node, Value

__all__ = [
    "CUSTOM_KERNELS",
    "FLAVORS",
    "INT16_KERNELS",
    "KERNELS",
    "OpContext",
    "Quant",
    "REFUSED",
    "activation_range",
    "clamp_cast",
    "kernel",
    "padding_before",
    "round_half_away",
]

#: fused_activation_function values (TFLite ActivationFunctionType)
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)
#: Padding enum
PAD_SAME, PAD_VALID = 0, 1

Kernel = Callable[["OpContext"], list[np.ndarray]]
#: operator name -> kernel (filled by the kernel modules through :func:`kernel`)
KERNELS: dict[str, Kernel] = {}
#: operators whose kernel computes int16-quantized outputs (the 16x8 mode); the others are refused on them
INT16_KERNELS: set[str] = set()
#: custom operators (by custom code) that have a kernel; every other custom operator is refused
CUSTOM_KERNELS: set[str] = set()
#: operators refused on purpose, with the reason (e.g. their outputs depend on LiteRT's random state)
REFUSED: dict[str, str] = {}
#: whose kernels the interpreter follows: LiteRT's reference kernels, or TensorFlow Lite Micro's
#: (which differ on a few operators; each such kernel branches on ``OpContext.flavor``)
FLAVORS = ("litert", "tflm")


def kernel(*ops: str, int16: bool = False, custom: bool = False) -> Callable[[Kernel], Kernel]:
    """Register a kernel under one or more BuiltinOperator names (``int16``: it also
    runs int16-quantized outputs, bit-exact with the reference kernels; ``custom``: the
    names are custom codes, as LiteRT's BUILTIN_REF resolver also registers a few custom ops)."""

    def register(fn: Kernel) -> Kernel:
        for op in ops:
            if op in KERNELS:  # a second module claiming an operator would silently replace the first
                raise RuntimeError(f"two reference kernels registered for {op}: "
                                   f"{KERNELS[op].__module__}.{KERNELS[op].__name__} and {fn.__module__}.{fn.__name__}")
            KERNELS[op] = fn
            if int16:
                INT16_KERNELS.add(op)
            if custom:
                CUSTOM_KERNELS.add(op)
        return fn

    return register


@dataclass(frozen=True, slots=True)
class Quant:
    """Quantization of one tensor: per-tensor ``scale``/``zero_point`` (float32/int),
    or per-channel arrays along ``axis``."""

    scale: np.ndarray  # float32
    zero_point: np.ndarray  # int64
    axis: int

    @property
    def s(self) -> float:
        """The per-tensor scale, as the float32 the runtime holds (returned as a Python float)."""
        return float(self.scale.reshape(-1)[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point.reshape(-1)[0])


class OpContext:
    """One operator being run: its node, input arrays and the interpreter's options."""

    __slots__ = ("arrays", "cache", "flavor", "jit", "node", "rounding")

    def __init__(self, node: Node, arrays: list[np.ndarray | None], rounding: str,
                 cache: dict[str, Any] | None = None, jit: bool = False, flavor: str = "litert") -> None:
        self.node = node
        self.arrays = arrays
        self.rounding = rounding
        #: whose kernels to compute as (one of :data:`FLAVORS`)
        self.flavor = flavor
        #: run the hot loops compiled (see :mod:`.jit`)
        self.jit = jit
        #: per-node values derived from constants (weights, multipliers), kept across runs
        self.cache: dict[str, Any] = {} if cache is None else cache

    def x(self, i: int) -> np.ndarray:
        a = self.arrays[i]
        if a is None:
            raise self.error(f"input {i} is missing")
        return a

    def has(self, i: int) -> bool:
        return i < len(self.arrays) and self.arrays[i] is not None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attr(name, default)

    def in_value(self, i: int) -> Value:
        v = self.node.inputs[i]
        assert v is not None
        return v

    def out_value(self, i: int = 0) -> Value:
        return self.node.outputs[i]

    def in_quant(self, i: int) -> Quant | None:
        return quant_of(self.in_value(i))

    def out_quant(self, i: int = 0) -> Quant | None:
        return quant_of(self.out_value(i))

    def out_dtype(self, i: int = 0) -> np.dtype:
        dt = self.out_value(i).dtype
        if dt is None or dt.numpy is None:
            raise self.error("its output has no numeric dtype")
        return np.dtype(dt.numpy)

    def error(self, what: str) -> VerificationError:
        return VerificationError(
            f"the reference interpreter cannot run operator {self.node.op} ({self.node.name!r}): {what}"
        )


def quant_of(value: Value) -> Quant | None:
    q = value.quant
    if q is None or q.scale.size == 0:
        return None
    zp = q.zero_point if q.zero_point.size else np.zeros(q.scale.shape, np.int64)
    return Quant(np.asarray(q.scale, np.float32), np.asarray(zp, np.int64), int(q.axis))


def round_half_away(x: np.ndarray | float | np.floating[Any]) -> np.ndarray:
    """C ``round``: halves away from zero (in the dtype of ``x``)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return x
    t = np.trunc(x)
    return np.where(np.abs(x - t) == 0.5, t + np.sign(x), np.round(x))


def reduce_in_order(x: np.ndarray, axes: Sequence[int], keepdims: bool, product: bool = False) -> np.ndarray:
    """Float sum (or product) over ``axes`` accumulated element by element in input order in
    x's float type, as LiteRT's reference loops add (numpy's own sum is pairwise: a few ulps off,
    which matters where a sum nearly cancels, as LayerNorm's mean does)."""
    axes = sorted(a % x.ndim for a in axes) if x.ndim else []
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + axes).reshape(*[x.shape[a] for a in kept], -1)
    scan = np.cumprod if product else np.cumsum
    if moved.shape[-1]:
        total = scan(moved, axis=-1, dtype=x.dtype)[..., -1]
    else:
        total = np.full(moved.shape[:-1], 1 if product else 0, x.dtype)
    return total.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)]) if keepdims else total


def type_range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def activation_range(ctx: OpContext, act: int, dtype: np.dtype) -> tuple[float, float]:
    """Clamp bounds of a fused activation: reals for float outputs, quantized ints else.

    Quantized: ``zp + round(f / scale)`` in float32 for f in {0, 6, ±1}, intersected
    with the type's range (TFLite's CalculateActivationRangeQuantized).
    """
    if dtype.kind == "f":  # LiteRT's float range: no activation still clamps to +-FLT_MAX (inf included)
        top = float(np.finfo(np.float32).max)
        bounds = {ACT_NONE: (-top, top), ACT_RELU: (0.0, top),
                  ACT_RELU_N1_TO_1: (-1.0, 1.0), ACT_RELU6: (0.0, 6.0)}
        if act not in bounds:
            raise ctx.error(f"fused activation {act} is not implemented")
        return bounds[act]
    qmin, qmax = type_range(dtype)
    q = ctx.out_quant()
    if act == ACT_NONE:
        return qmin, qmax
    if q is None:
        raise ctx.error("a quantized output without quantization parameters")
    scale = np.float32(q.s)

    def quantize(f: float) -> int:
        return q.zp + int(round_half_away(np.float32(f) / scale))

    if act == ACT_RELU:
        return max(qmin, quantize(0.0)), qmax
    if act == ACT_RELU6:
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if act == ACT_RELU_N1_TO_1:
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    raise ctx.error(f"fused activation {act} is not implemented")


def apply_activation(ctx: OpContext, y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float output: clamp to the fused activation (TANH/SIGN_BIT too); cast to ``dtype``."""
    act = int(ctx.attr("fused_activation_function", ACT_NONE) or 0)
    if act == ACT_TANH:
        return np.tanh(y).astype(dtype)
    if act == ACT_SIGN_BIT:
        return np.signbit(y).astype(dtype)
    lo, hi = activation_range(ctx, act, dtype)
    return np.clip(y, lo, hi).astype(dtype)


def clamp_cast(ctx: OpContext, acc: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integer accumulator -> output dtype, clamped to the fused activation range."""
    act = int(ctx.attr("fused_activation_function", ACT_NONE) or 0)
    lo, hi = activation_range(ctx, act, dtype)
    return np.clip(acc, lo, hi).astype(dtype)


def output_size(size: int, k: int, stride: int, dilation: int, padding: int) -> int:
    eff = (k - 1) * dilation + 1
    if padding == PAD_SAME:
        return (size + stride - 1) // stride
    return (size + stride - eff) // stride


def padding_before(size: int, k: int, stride: int, dilation: int, out: int) -> tuple[int, int]:
    """TFLite padding (before, after): ``total = max((out−1)·stride + eff_k − size, 0)``,
    ``before = total // 2`` so the odd pixel goes after (bottom/right)."""
    eff = (k - 1) * dilation + 1
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def static_shape(ctx: OpContext, i: int = 0) -> tuple[int, ...] | None:
    """The output's static shape from the file, when every dim is known."""
    shape = ctx.out_value(i).meta.get("tflite.shape") or ctx.out_value(i).shape
    if shape is None:
        return None
    dims = [d for d in shape if isinstance(d, int) and d >= 0]
    return tuple(dims) if len(dims) == len(shape) else None


def ints(a: np.ndarray | Sequence[int]) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]
