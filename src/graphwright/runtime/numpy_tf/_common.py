"""What every kernel family shares: the kernel signature, the error type and argument helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import GraphwrightError
from ...ir import DType, Node

__all__ = [
    "Kernel", "SizeEstimate", "KernelError", "ConstantTooLarge", "BudgetExceeded",
    "attr", "fail", "axis_of", "int_list", "int_scalar", "np_dtype", "require", "require_float",
    "require_integer", "require_numeric", "require_same_dtype", "FLOAT_KINDS", "INT_KINDS",
]

#: A kernel: the node (for its attributes) and its input arrays -> its output arrays.
Kernel = Callable[[Node, list[np.ndarray]], list[np.ndarray]]
#: Bytes the largest output of a node will take, computed from the inputs before evaluating.
SizeEstimate = Callable[[Node, list[np.ndarray]], int]

#: NumPy dtype kinds: floating point (f), complex (c), signed (i) and unsigned (u) integers.
FLOAT_KINDS = "fc"
INT_KINDS = "iu"


class KernelError(GraphwrightError):
    """An op cannot be evaluated on these inputs: TensorFlow would fail, or we cannot match it exactly.

    Constant folding treats it as "not constant": the node stays in the graph.
    """


class ConstantTooLarge(KernelError):
    """An output would exceed the byte limit given to :func:`~graphwright.runtime.numpy_tf.evaluate`."""

    def __init__(self, message: str, nbytes: int = 0) -> None:
        super().__init__(message)
        self.nbytes = nbytes


class BudgetExceeded(ConstantTooLarge):
    """The outputs would take more than what is left of the caller's total budget."""


def attr(node: Node, name: str, default: Any = None) -> Any:
    """The value of attribute ``name``, or ``default`` (TF's op-def default) when absent."""
    return node.attr(name, default)


def require(condition: bool, node: Node, message: str) -> None:
    """Raise :class:`KernelError` with ``message`` unless ``condition`` holds.

    (Hot paths test first and build their message only on failure: formatting
    dtypes costs more than most kernels on scalars.)
    """
    if not condition:
        raise KernelError(f"{node.op}: {message}")


def fail(node: Node, message: str) -> KernelError:
    return KernelError(f"{node.op}: {message}")


def require_float(node: Node, *arrays: np.ndarray) -> None:
    """TF registers these kernels for floating point (and complex) types only."""
    for a in arrays:
        if a.dtype.kind not in FLOAT_KINDS:
            raise fail(node, f"no kernel for {a.dtype} (floating point only)")


def require_integer(node: Node, *arrays: np.ndarray) -> None:
    for a in arrays:
        if a.dtype.kind not in INT_KINDS:
            raise fail(node, f"expected an integer tensor, got {a.dtype}")


def require_numeric(node: Node, *arrays: np.ndarray) -> None:
    """Numbers only: no strings (``object``) and no booleans."""
    for a in arrays:
        if a.dtype.kind not in "iufc":
            raise fail(node, f"no kernel for {a.dtype}")


def require_same_dtype(node: Node, arrays: Sequence[np.ndarray]) -> None:
    if arrays:
        first = arrays[0].dtype
        if not all(a.dtype == first for a in arrays):
            raise fail(node, f"inputs of different types {[str(a.dtype) for a in arrays]}")


def np_dtype(node: Node, dtype: Any) -> np.dtype:
    """The NumPy dtype of a TF type attribute value (a :class:`DType`)."""
    require(isinstance(dtype, DType), node, f"type attribute is {dtype!r}, not a type")
    np_type = dtype.numpy
    require(np_type is not None and dtype is not DType.STRING and not dtype.value.startswith("q"),
            node, f"no NumPy form for {dtype.value}")
    assert np_type is not None
    return np_type


def int_scalar(node: Node, a: np.ndarray, what: str) -> int:
    """A scalar (or one-element) integer input, as a Python int."""
    if a.dtype.kind not in INT_KINDS:
        raise fail(node, f"{what} must be an integer, got {a.dtype}")
    if a.size != 1 or a.ndim > 1:
        raise fail(node, f"{what} must be a scalar, got shape {list(a.shape)}")
    return int(a.reshape(()))


def int_list(node: Node, a: np.ndarray, what: str) -> list[int]:
    """A 1-D (or scalar) integer input as Python ints."""
    if a.dtype.kind not in INT_KINDS:
        raise fail(node, f"{what} must be integers, got {a.dtype}")
    if a.ndim > 1:
        raise fail(node, f"{what} must be a vector, got shape {list(a.shape)}")
    return a.reshape(-1).tolist()


def axis_of(node: Node, axis: int, rank: int, *, extra: int = 0) -> int:
    """``axis`` in ``[-rank-extra, rank+extra)`` made non-negative (``extra=1`` for ExpandDims/Pack)."""
    span = rank + extra
    if not -span <= axis < span:
        raise fail(node, f"axis {axis} is out of range for rank {rank}")
    return axis + span if axis < 0 else axis
