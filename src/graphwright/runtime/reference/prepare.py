"""What the kernels assume, checked once per input shape before anything runs (LiteRT's Prepare).

A TFLite file that loads (indices, buffers and shapes well formed, see
``formats/tflite/validate.py``) can still describe an operator no kernel can run:
a zero, NaN or infinite scale (a division by zero), a stride of 0, operands whose
shapes do not fit the operator, a requantization shift out of range, an output of
tens of GiB.  :func:`check_graph` walks the operators in execution order with the
tensors' static shapes and the values of small integer tensors (constants, SHAPE
outputs and what is computed from them, which give RESHAPE its target), checks
each operator against what its kernel assumes and raises a one-line
:class:`~graphwright.errors.VerificationError` naming the operator and what to do.

The interpreter runs it when it is built (for the file's input shapes) and again
only when a run feeds other input shapes (cached per shapes), so a run costs one
tuple comparison.  Where a shape depends on values only known at run time, the
checks that need it are skipped here and the kernels that allocate from such
values (PAD, TILE, RESIZE, RESHAPE) bound the size themselves.  O(operators);
no tensor data is read but constants and small shape tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import VerificationError
from ...ir import Graph, Node, Value
from ._common import (
    KERNELS,
    OpContext,
)

__all__ = ["MANY", "MAX_TENSOR_BYTES", "OpCheck", "Shape", "broadcast_shape", "check_graph", "check_size", "prepare_rule",
           "static_input_shape"]

#: Largest tensor (or kernel scratch buffer) the interpreter allocates, in bytes.
MAX_TENSOR_BYTES = 2 << 30
#: Integer tensors up to this many elements have their values followed (shape arithmetic).
_VALUE_ELEMENTS = 64
#: Ops evaluated here when every input value is known (they compute shapes in real models).
_EVALUATED = frozenset({
    "SHAPE", "STRIDED_SLICE", "PACK", "CONCATENATION", "RESHAPE", "SQUEEZE", "EXPAND_DIMS",
    "ADD", "SUB", "MUL", "TRANSPOSE", "TILE",
})
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)

Shape = tuple[int, ...] | None


class _Op:
    """One operator under check: its node, input shapes and known input values."""

    __slots__ = ("node", "shapes", "values")

    def __init__(self, node: Node, shapes: list[Shape], values: list[np.ndarray | None]) -> None:
        self.node, self.shapes, self.values = node, shapes, values

    def fail(self, what: str, advice: str = "the model is invalid") -> VerificationError:
        return VerificationError(
            f"the reference interpreter cannot run operator {self.node.op} ({self.node.name!r}): {what}; {advice}"
        )

    def too_large(self, what: str) -> VerificationError:
        return self.fail(what, "feed smaller inputs, or run the model on LiteRT (--engine litert)")

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attr(name, default)

    def int_attr(self, name: str, default: int, low: int | None = None, high: int | None = None) -> int:
        value = self.attr(name, default)
        value = default if value is None else value
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise self.fail(f"attribute {name} is {value!r}, not an integer") from None
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise self.fail(f"attribute {name} is {value}; it must be {bounds}")
        return value

    def has(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] is not None

    def shape(self, i: int) -> Shape:
        return self.shapes[i] if i < len(self.shapes) else None

    def need(self, i: int, what: str = "") -> None:
        if not self.has(i):
            raise self.fail(f"input {i}{' (' + what + ')' if what else ''} is missing")

    def rank(self, i: int, *ranks: int) -> Shape:
        shape = self.shape(i)
        if shape is not None and len(shape) not in ranks:
            expected = " or ".join(str(r) for r in ranks)
            raise self.fail(f"input {i} has shape {list(shape)}; a rank-{expected} tensor is needed")
        return shape

    def ints(self, i: int, what: str) -> list[int] | None:
        """The known values of integer input ``i`` (None: only known at run time)."""
        value = self.values[i] if i < len(self.values) else None
        if value is None:
            return None
        if value.dtype.kind not in "iu":
            raise self.fail(f"input {i} ({what}) holds {value.dtype} values, not integers")
        return [int(v) for v in value.reshape(-1)]


def static_input_shape(value: Value) -> Shape:
    """The shape LiteRT allocates for a graph input before any resize: the file's ``shape``."""
    shape = value.meta.get("tflite.shape") or value.shape
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _nbytes(shape: Sequence[int], itemsize: int) -> int:
    return math.prod(shape) * itemsize


def check_size(what: str, shape: Sequence[int], itemsize: int, fail: Callable[[str], Exception]) -> None:
    """Refuse a tensor or buffer of ``shape`` over :data:`MAX_TENSOR_BYTES` (exact integers)."""
    if any(d < 0 for d in shape):
        raise fail(f"{what} would have a negative dimension {list(shape)}")
    size = _nbytes(shape, itemsize)
    if size > MAX_TENSOR_BYTES:
        raise fail(f"{what} of shape {list(shape)} would take {size / 2**30:.1f} GiB, over the reference "
                   f"interpreter's limit of {MAX_TENSOR_BYTES >> 30} GiB per tensor")


def check_graph(graph: Graph, input_shapes: Sequence[Shape], rounding: str) -> None:
    """Check every operator of ``graph`` for graph inputs of ``input_shapes`` (see module docstring)."""
    shapes: dict[Value, Shape] = {}
    values: dict[Value, np.ndarray] = {}
    for value, shape in zip(graph.inputs, input_shapes, strict=True):
        shapes[value] = shape
        if shape is not None:
            check_size(f"input {value.name!r}", shape, _itemsize(value), _input_error)
    for node in graph:
        for v in node.inputs:
            if v is not None and v not in shapes:
                _constant(v, shapes, values)
        op = _Op(node, [None if v is None else shapes.get(v) for v in node.inputs],
                 [None if v is None else values.get(v) for v in node.inputs])
        _check_arity(op)
        _check_quantization(op)
        rule = _RULES.get(node.op)
        outs = rule(op) if rule is not None else [None] * len(node.outputs)
        for value, shape in zip(node.outputs, outs, strict=False):
            if shape is not None:
                check_size(f"output {value.name!r}", shape, max(_itemsize(value), 8), op.too_large)  # int64 temporaries
            shapes[value] = shape
        if node.op == "SHAPE" and outs and outs[0] is not None and node.inputs and shapes.get(node.inputs[0]) \
                is not None and node.outputs[0].dtype is not None and node.outputs[0].dtype.numpy is not None:
            values[node.outputs[0]] = np.asarray(shapes[node.inputs[0]], node.outputs[0].dtype.numpy)
        elif node.op in _EVALUATED and node.outputs and all(
                v is None or v in values for v in node.inputs) \
                and all(s is not None and math.prod(s) <= _VALUE_ELEMENTS for s in outs[:1]):
            arrays = [None if v is None else values[v] for v in node.inputs]
            try:
                results = KERNELS[node.op](OpContext(node, arrays, rounding, {}, False))  # type: ignore[arg-type]
            except VerificationError:
                raise
            except (ArithmeticError, ValueError, IndexError, TypeError) as e:
                raise op.fail(f"its inputs do not fit it ({type(e).__name__}: {e})") from None
            for value, array in zip(node.outputs, results, strict=False):
                array = np.asarray(array)
                if array.dtype.kind in "iu" and array.size <= _VALUE_ELEMENTS:
                    values[value] = array
                    shapes[value] = tuple(array.shape)


def _input_error(what: str) -> VerificationError:
    return VerificationError(f"the reference interpreter cannot run this model: {what}; feed smaller inputs")


def _itemsize(value: Value) -> int:
    dtype = value.dtype
    size = None if dtype is None else dtype.itemsize
    return int(size) if size else 1


def _constant(value: Value, shapes: dict[Value, Shape], values: dict[Value, np.ndarray]) -> None:
    """A tensor no operator writes: a constant (its shape, and small integer values), a state, or unknown."""
    const = value.const
    if const is None:
        shapes[value] = static_input_shape(value) if value.shape is not None else None
        return
    shapes[value] = tuple(const.shape)
    if const.dtype.numpy is not None and np.dtype(const.dtype.numpy).kind in "iu" and const.size <= _VALUE_ELEMENTS:
        try:
            values[value] = np.asarray(const.numpy())
        except (ValueError, TypeError):  # sparse or undecodable: the kernel reports it
            pass


# -- arity -------------------------------------------------------------------------------------------

_MANY = 1 << 30
MANY = _MANY  # "no upper bound" in an arity
#: op -> (fewest inputs, most inputs) its kernel reads (given with its rule, see :func:`prepare_rule`)
_ARITY: dict[str, tuple[int, int]] = {}
#: op -> how many outputs its kernel writes (the ops given an arity; one unless registered otherwise)
_OUTPUTS: dict[str, int] = {}


def _check_arity(op: _Op) -> None:
    low, high = _ARITY.get(op.node.op, (0, _MANY))
    count = len(op.node.inputs)
    if not low <= count <= high:
        expected = f"{low}" if low == high else f"{low} to {high}" if high < _MANY else f"at least {low}"
        raise op.fail(f"it has {count} input{'s' if count != 1 else ''}, where {expected} are expected")
    outputs = op.node.outputs
    expected_outputs = _OUTPUTS.get(op.node.op, 1 if op.node.op in _ARITY else None)
    if expected_outputs == 0:
        if outputs:
            raise op.fail(f"it has {len(outputs)} outputs, where none are expected")
    elif not outputs or outputs[0].meta.get("tflite.omitted"):
        raise op.fail("it has no output tensor")
    if expected_outputs is not None and len(outputs) != expected_outputs:
        raise op.fail(f"it has {len(outputs)} outputs, where {expected_outputs} {'is' if expected_outputs == 1 else 'are'} "
                      "expected")
    for role, values in (("input", op.node.inputs), ("output", outputs)):
        for i, value in enumerate(values):
            if value is None:
                continue
            dtype = value.dtype
            if dtype is not None and dtype.value == "resource":
                continue  # a resource variable's handle (VAR_HANDLE's id)
            # complex tensors: what REAL, IMAG and COMPLEX_ABS read
            if dtype is None or dtype.numpy is None or np.dtype(dtype.numpy).kind not in "biufc":
                kind = "none" if dtype is None else dtype.value
                code = value.meta.get("tflite.type")
                raise op.fail(f"{role} {i} ({value.name!r}) has type {kind}{f' (code {code})' if code else ''}, "
                              "which no reference kernel computes with")
            if value.const is not None and value.meta.get("tflite.sparsity") is not None:
                try:  # a sparse constant: kernels read it densified (see formats/tflite/sparsity.py)
                    value.const.numpy()
                except ValueError as e:
                    raise op.fail(f"{role} {i}: {e}") from None


# -- quantization -----------------------------------------------------------------------------------

_MOVING = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "STRIDED_SLICE", "TILE", "PACK",
                     "SHAPE", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "RESIZE_NEAREST_NEIGHBOR"})


#: kernels that never divide the input scale by the output's: SOFTMAX folds beta times the input
#: scale into its own clamped multiplier (Keras' masked attention gives it scales near 1e36)
_OWN_INPUT_SCALING = frozenset({"SOFTMAX"})


def _check_quantization(op: _Op) -> None:
    """Scales the kernels divide by or multiply with: finite, and positive normal floats for
    activations (``1/scale`` must be finite in float32); zero points inside their storage type;
    an activation's scale over the output's finite in float32, 256 times over (QUANTIZE's 8-bit
    multiplier), as the kernels compute it."""
    if op.node.op in _MOVING:
        return  # values are moved, never requantized
    _check_scales(op)
    out = op.node.outputs[0] if op.node.outputs else None
    s_out = _activation_scale(out)
    if s_out is None or op.node.op in _OWN_INPUT_SCALING:
        return
    for i, value in enumerate(op.node.inputs):
        s_in = _activation_scale(value)
        if s_in is not None and value is not None and value.const is None:
            with np.errstate(over="ignore"):
                ratio = np.float32(np.float32(s_in) / np.float32(s_out))
                finite = bool(np.isfinite(np.float32(256) * ratio))
            if not finite:
                raise op.fail(f"input {i} scale {s_in} over output scale {s_out} overflows float32 "
                              "(no requantization multiplier can hold it)")


def _activation_scale(value: Value | None) -> float | None:
    """The largest scale of an integer tensor (checked by :func:`_check_scales`), or None."""
    if value is None or value.quant is None or value.quant.scale.size == 0 or value.dtype is None \
            or value.dtype.numpy is None or np.dtype(value.dtype.numpy).kind not in "iu":
        return None
    return float(np.max(value.quant.scale))


def _check_scales(op: _Op) -> None:
    for role, values in (("input", op.node.inputs), ("output", op.node.outputs)):
        for i, value in enumerate(values):
            if value is None or value.quant is None or value.quant.scale.size == 0:
                continue
            dtype = value.dtype.numpy if value.dtype is not None else None
            if dtype is None or np.dtype(dtype).kind not in "iu":
                continue
            q = value.quant
            scale = np.asarray(q.scale, np.float64).reshape(-1)
            where = f"{role} {i} ({value.name!r})"
            bad = np.flatnonzero(~np.isfinite(scale) | (scale < 0))
            if len(bad):
                raise op.fail(f"{where} has quantization scale {_show(scale, bad[0])}; scales must be finite "
                              "and positive")
            bad = np.flatnonzero(scale < _FLOAT32_TINY) if value.const is None else ()
            if len(bad):
                raise op.fail(f"{where} has quantization scale {_show(scale, bad[0])}; an activation's scale "
                              "must be a positive normal float")
            info = np.iinfo(dtype)
            zp = np.asarray(q.zero_point, np.int64).reshape(-1)
            bad = np.flatnonzero((zp < info.min) | (zp > info.max)) if info.bits <= 16 else ()
            if len(bad):  # 32-bit tensors (biases): their zero points are not used
                at = f" (channel {bad[0]})" if zp.size > 1 else ""
                raise op.fail(f"{where} has zero point {zp[bad[0]]}{at} outside the {np.dtype(dtype)} range")
            if zp.size > 1 and zp.size != scale.size:
                raise op.fail(f"{where} has {scale.size} scales but {zp.size} zero points")


def _show(array: np.ndarray, at: int) -> str:
    """Element ``at`` of a per-tensor or per-channel parameter, saying which channel."""
    return str(array[at].item()) if array.size == 1 else f"{array[at].item()} (channel {at})"


def _channels(op: _Op, i: int, count: int) -> None:
    """Input ``i`` (weights or bias) has one scale or one per output channel."""
    value = op.node.inputs[i] if op.has(i) else None
    if value is None or value.quant is None:
        return
    n = value.quant.scale.size
    if n not in (0, 1, count):
        raise op.fail(f"input {i} ({value.name!r}) has {n} quantization scales for {count} output channels")


# -- rules: output shapes (None: unknown), refusing what the kernels cannot run -----------------------

Rule = Callable[[_Op], list[Shape]]
_RULES: dict[str, Rule] = {}


def prepare_rule(*ops: str, arity: tuple[int, int] | None = None, outputs: int = 1) -> Callable[[Rule], Rule]:
    """Register ``fn(op) -> output shapes`` as the prepare check of ``ops`` (and, with ``arity``,
    the fewest and most inputs their kernel reads and the ``outputs`` it writes).  Kernel modules
    register the checks of their own operators beside their kernels; the core operators' are in
    :mod:`.prepare_rules`."""

    def register(fn: Rule) -> Rule:
        for name in ops:
            _RULES[name] = fn
            if arity is not None:
                _ARITY[name] = arity
                _OUTPUTS[name] = outputs
        return fn

    return register


#: the public name of an operator under check (what a rule receives)
OpCheck = _Op


def broadcast_shape(op: _Op, *indices: int) -> Shape:
    """The broadcast shape of inputs ``indices`` (None: one unknown), refusing shapes that do not broadcast."""
    shapes = [op.shape(i) for i in indices]
    if any(s is None for s in shapes):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))  # type: ignore[arg-type]
    except ValueError:
        raise op.fail(f"inputs of shapes {' and '.join(str(list(s)) for s in shapes)} "  # type: ignore[arg-type]
                      "do not broadcast together") from None

