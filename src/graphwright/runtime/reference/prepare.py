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
    ACT_NONE,
    ACT_SIGN_BIT,
    KERNELS,
    PAD_SAME,
    PAD_VALID,
    OpContext,
    output_size,
    padding_before,
)
from .fixedpoint import quantize_multiplier

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
#: op -> (fewest inputs, most inputs) its kernel reads; every kernel writes one output
_ARITY: dict[str, tuple[int, int]] = {
    "CONV_2D": (2, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3), "AVERAGE_POOL_2D": (1, 1),
    "MAX_POOL_2D": (1, 1), "MEAN": (2, 2), "ADD": (2, 2), "SUB": (2, 2), "MUL": (2, 2), "RELU": (1, 1),
    "RELU6": (1, 1), "RELU_N1_TO_1": (1, 1), "LOGISTIC": (1, 1), "TANH": (1, 1), "HARD_SWISH": (1, 1),
    "SOFTMAX": (1, 1), "QUANTIZE": (1, 1), "DEQUANTIZE": (1, 1), "RESHAPE": (1, 2), "SQUEEZE": (1, 1),
    "EXPAND_DIMS": (2, 2), "PAD": (2, 2), "PADV2": (2, 3), "CONCATENATION": (1, _MANY), "TRANSPOSE": (2, 2),
    "STRIDED_SLICE": (4, 4), "TILE": (2, 2), "PACK": (1, _MANY), "SHAPE": (1, 1), "SPACE_TO_BATCH_ND": (3, 3),
    "BATCH_TO_SPACE_ND": (3, 3), "RESIZE_BILINEAR": (2, 2), "RESIZE_NEAREST_NEIGHBOR": (2, 2),
}
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
    register the checks of their own operators beside their kernels."""

    def register(fn: Rule) -> Rule:
        for name in ops:
            _RULES[name] = fn
            if arity is not None:
                _ARITY[name] = arity
                _OUTPUTS[name] = outputs
        return fn

    return register


_rule = prepare_rule
#: the public name of an operator under check (what a rule receives)
OpCheck = _Op


def _activation(op: _Op) -> None:
    act = op.int_attr("fused_activation_function", ACT_NONE)
    if not ACT_NONE <= act <= ACT_SIGN_BIT:
        raise op.fail(f"fused activation {act} does not exist")


def _window(op: _Op, h: int, w: int, kh: int, kw: int, dilated: bool) -> tuple[int, int, int, int, int]:
    """(stride_h, stride_w, padding, oh, ow) of a convolution or pool, refusing empty outputs."""
    sh = op.int_attr("stride_h", 1, 1)
    sw = op.int_attr("stride_w", 1, 1)
    dh = op.int_attr("dilation_h_factor", 1, 1) if dilated else 1
    dw = op.int_attr("dilation_w_factor", 1, 1) if dilated else 1
    padding = op.int_attr("padding", PAD_SAME)
    if padding not in (PAD_SAME, PAD_VALID):
        raise op.fail(f"padding {padding} is neither SAME (0) nor VALID (1)")
    if kh < 1 or kw < 1:
        raise op.fail(f"its window is {kh}x{kw}; it must be at least 1x1")
    oh, ow = output_size(h, kh, sh, dh, padding), output_size(w, kw, sw, dw, padding)
    if oh < 1 or ow < 1:
        raise op.fail(f"its {kh}x{kw} window (dilation {dh}x{dw}) does not fit the {h}x{w} input with "
                      "VALID padding" if padding == PAD_VALID else f"its output would be {oh}x{ow}")
    return sh, sw, padding, oh, ow


def _bias(op: _Op, channels: int) -> None:
    if op.has(2):
        shape = op.shape(2)
        if shape is not None and math.prod(shape) != channels:
            raise op.fail(f"bias of shape {list(shape)} does not have {channels} values")
        _channels(op, 2, channels)


@_rule("CONV_2D")
def _conv(op: _Op) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "filter")
    _activation(op)
    x, w = op.rank(0, 4), op.rank(1, 4)
    if w is not None:
        _channels(op, 1, w[0])
        _bias(op, w[0])
    if x is None or w is None:
        return [None]
    o, kh, kw, ci = w
    if ci < 1 or x[3] % ci or o % (x[3] // ci):  # grouped: x[3] // ci groups, each o // groups filters
        raise op.fail(f"filter {list(w)} has {ci} input channels, which do not divide the input {list(x)} "
                      f"and its {o} filters into groups")
    _, _, _, oh, ow = _window(op, x[1], x[2], kh, kw, True)
    check_size("its padded input buffer", (x[0], *_padded(op, x, kh, kw, oh, ow), x[3]), 8, op.too_large)
    check_size("its im2col buffer", (x[0], oh, ow, kh * kw * x[3]), 8, op.too_large)
    return [(x[0], oh, ow, o)]


def _padded(op: _Op, x: tuple[int, ...], kh: int, kw: int, oh: int, ow: int) -> tuple[int, int]:
    """(height, width) of the zero-padded input a convolution kernel allocates (as ``conv_common._geometry``),
    plus the spare row of the depthwise kernel's flat layout."""
    sh, sw = op.int_attr("stride_h", 1), op.int_attr("stride_w", 1)
    dh, dw = op.int_attr("dilation_h_factor", 1), op.int_attr("dilation_w_factor", 1)
    same = op.int_attr("padding", PAD_SAME) == PAD_SAME
    pt = padding_before(x[1], kh, sh, dh, oh)[0] if same else 0
    pl = padding_before(x[2], kw, sw, dw, ow)[0] if same else 0
    return (max((oh - 1) * sh + (kh - 1) * dh + 1, x[1] + pt) + 1,
            max((ow - 1) * sw + (kw - 1) * dw + 1, x[2] + pl))


@_rule("DEPTHWISE_CONV_2D")
def _depthwise(op: _Op) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "filter")
    _activation(op)
    x, w = op.rank(0, 4), op.rank(1, 4)
    if w is not None:
        if w[0] != 1:
            raise op.fail(f"filter {list(w)} is not 1xHxWxC")
        _channels(op, 1, w[3])
        _bias(op, w[3])
    if x is None or w is None:
        return [None]
    _, kh, kw, co = w
    if x[3] < 1 or co % x[3]:
        raise op.fail(f"filter {list(w)} has {co} channels, not a multiple of the input's {x[3]}")
    _, _, _, oh, ow = _window(op, x[1], x[2], kh, kw, True)
    check_size("its padded input buffer", (x[0], *_padded(op, x, kh, kw, oh, ow), co), 8, op.too_large)
    return [(x[0], oh, ow, co)]


@_rule("FULLY_CONNECTED")
def _fully_connected(op: _Op) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "weights")
    _activation(op)
    x, w = op.shape(0), op.rank(1, 2)
    if w is None:
        return [None]
    units, depth = w
    _channels(op, 1, units)
    _bias(op, units)
    if depth < 1:
        raise op.fail(f"weights {list(w)} have no input depth")
    if x is None:
        return [None]
    size = math.prod(x)
    if size % depth:
        raise op.fail(f"input {list(x)} of {size} elements does not split into rows of {depth}")
    if op.attr("keep_num_dims", False):
        if not x or x[-1] != depth:
            raise op.fail(f"keep_num_dims with input {list(x)} whose last dimension is not {depth}")
        return [(*x[:-1], units)]
    return [(size // depth, units)]


@_rule("AVERAGE_POOL_2D", "MAX_POOL_2D")
def _pool(op: _Op) -> list[Shape]:
    op.need(0, "input")
    _activation(op)
    x = op.rank(0, 4)
    kh, kw = op.int_attr("filter_height", 1, 1), op.int_attr("filter_width", 1, 1)
    if x is None:
        op.int_attr("stride_h", 1, 1)
        op.int_attr("stride_w", 1, 1)
        return [None]
    sh, sw, padding, oh, ow = _window(op, x[1], x[2], kh, kw, False)
    pt = padding_before(x[1], kh, sh, 1, oh)[0] if padding == PAD_SAME else 0
    pl = padding_before(x[2], kw, sw, 1, ow)[0] if padding == PAD_SAME else 0
    padded = (x[0], max((oh - 1) * sh + kh, x[1] + pt), max((ow - 1) * sw + kw, x[2] + pl), x[3])
    check_size("its padded input buffer", padded, 8, op.too_large)
    check_size("its window buffer", (x[0], oh, ow, kh * kw, x[3]), 8, op.too_large)
    return [(x[0], oh, ow, x[3])]


@_rule("MEAN")
def _mean(op: _Op) -> list[Shape]:
    op.need(0, "input")
    op.need(1, "axes")
    x = op.shape(0)
    axes = op.ints(1, "axes")
    if x is None or axes is None:
        return [None]
    if not x:
        return [()]
    if any(not -len(x) <= a < len(x) for a in axes):
        raise op.fail(f"axes {axes} do not fit a rank-{len(x)} input")
    reduced = sorted({a % len(x) for a in axes})
    if any(x[a] == 0 for a in reduced):
        raise op.fail(f"it averages over an empty axis of input {list(x)}")
    if op.attr("keep_dims", False):
        return [tuple(1 if i in reduced else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in reduced)]


def _broadcast(op: _Op, *indices: int) -> Shape:
    shapes = [op.shape(i) for i in indices]
    if any(s is None for s in shapes):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))  # type: ignore[arg-type]
    except ValueError:
        raise op.fail(f"inputs of shapes {' and '.join(str(list(s)) for s in shapes)} "  # type: ignore[arg-type]
                      "do not broadcast together") from None


broadcast_shape = _broadcast


@_rule("ADD", "SUB", "MUL")
def _binary(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1)
    _activation(op)
    return [_broadcast(op, 0, 1)]


@_rule("RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "QUANTIZE", "DEQUANTIZE")
def _unary(op: _Op) -> list[Shape]:
    op.need(0)
    return [op.shape(0)]


@_rule("HARD_SWISH")
def _hard_swish(op: _Op) -> list[Shape]:
    op.need(0)
    value, out = op.node.inputs[0], op.node.outputs[0] if op.node.outputs else None
    if value is not None and out is not None and value.quant is not None and out.quant is not None \
            and value.quant.scale.size and out.quant.scale.size and value.dtype is not None \
            and value.dtype.numpy is not None and np.dtype(value.dtype.numpy).kind in "iu":
        s_in, s_out = np.float32(value.quant.scale.reshape(-1)[0]), np.float32(out.quant.scale.reshape(-1)[0])
        hires = np.float32(np.float32(1.0 / 128.0) * s_in)  # as the kernel (and LiteRT's Prepare) computes it
        if s_out > 0 and quantize_multiplier(float(np.float32(hires / s_out)))[1] > 0:
            raise op.fail(f"input scale {float(s_in)} is 64 or more times its output scale {float(s_out)}: the "
                          "output multiplier would need a left shift, which the fixed-point kernel cannot do")
    return [op.shape(0)]


@_rule("SOFTMAX")
def _softmax(op: _Op) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    beta = op.attr("beta", 1.0)
    if beta is not None and not math.isfinite(float(beta)):
        raise op.fail(f"beta is {beta}")
    if x is not None and (not x or x[-1] == 0):
        raise op.fail(f"input {list(x)} has no last axis to normalize over")
    return [x]


def _target_shape(op: _Op, x: Shape) -> Shape:
    if op.has(1):
        shape = op.ints(1, "shape")
    else:
        shape = [int(v) for v in (op.attr("new_shape", []) or [])]
    if shape is None or x is None:
        return None
    size = math.prod(x)
    if not shape and size != 1:
        declared = op.node.outputs[0].shape if op.node.outputs else None
        if declared is None or any(not isinstance(d, int) for d in declared):
            raise op.fail("it has no target shape")
        shape = [int(d) if d is not None else -1 for d in declared]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise op.fail(f"target shape {shape} is not a shape")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or size % known:
            raise op.fail(f"input {list(x)} cannot be reshaped to {shape}")
        return tuple(size // known if d == -1 else d for d in shape)
    if known != size:
        raise op.fail(f"input {list(x)} of {size} elements cannot be reshaped to {shape}")
    return tuple(shape)


@_rule("RESHAPE")
def _reshape(op: _Op) -> list[Shape]:
    op.need(0)
    return [_target_shape(op, op.shape(0))]


def _view(shape: Sequence[int]) -> np.ndarray:
    """A zero-stride array of ``shape``: numpy indexing on it gives output shapes without memory."""
    return np.broadcast_to(np.zeros((), np.bool_), tuple(shape))


@_rule("SQUEEZE")
def _squeeze(op: _Op) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    if x is None:
        return [None]
    dims = [int(d) for d in (op.attr("squeeze_dims", []) or [])]
    if not x and dims:
        raise op.fail("it squeezes a scalar")
    if any(not -len(x) <= d < len(x) for d in dims):
        raise op.fail(f"squeeze_dims {dims} do not fit input {list(x)}")
    axes = {d % len(x) for d in dims} if dims else {i for i, s in enumerate(x) if s == 1}
    if dims and len(axes) != len(dims):
        raise op.fail(f"squeeze_dims {dims} name a dimension twice")
    if any(x[a] != 1 for a in axes):
        raise op.fail(f"squeeze_dims {dims} name dimensions of input {list(x)} that are not 1")
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


@_rule("EXPAND_DIMS")
def _expand_dims(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1, "axis")
    x, axis = op.shape(0), op.ints(1, "axis")
    if x is None or axis is None:
        return [None]
    if len(axis) != 1 or not -len(x) - 1 <= axis[0] <= len(x):
        raise op.fail(f"axis {axis} does not fit a rank-{len(x)} input")
    a = axis[0] if axis[0] >= 0 else axis[0] + len(x) + 1
    return [(*x[:a], 1, *x[a:])]


@_rule("PAD", "PADV2")
def _pad(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1, "paddings")
    x, pads = op.shape(0), op.ints(1, "paddings")
    if op.has(2) and op.shape(2) is not None and math.prod(op.shape(2)) < 1:  # type: ignore[arg-type]
        raise op.fail("its constant value input is empty")
    if x is None or pads is None:
        return [None]
    if len(pads) != 2 * len(x) or any(p < 0 for p in pads):
        raise op.fail(f"paddings {pads} do not fit a rank-{len(x)} input")
    return [tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x))]


@_rule("CONCATENATION")
def _concatenation(op: _Op) -> list[Shape]:
    _activation(op)
    if not op.node.inputs or any(v is None for v in op.node.inputs):
        raise op.fail("an input is missing")
    shapes = op.shapes
    if any(s is None for s in shapes):
        return [None]
    rank = len(shapes[0])  # type: ignore[arg-type]
    axis = op.int_attr("axis", 0)
    if any(len(s) != rank for s in shapes) or not -rank <= axis < rank:  # type: ignore[arg-type]
        raise op.fail(f"inputs {[list(s) for s in shapes]} (axis {axis}) do not concatenate")  # type: ignore[arg-type]
    a = axis % rank
    first = shapes[0]
    if any(s[:a] + s[a + 1:] != first[:a] + first[a + 1:] for s in shapes):  # type: ignore[index]
        raise op.fail(f"inputs {[list(s) for s in shapes]} differ outside axis {axis}")  # type: ignore[arg-type]
    return [(*first[:a], sum(s[a] for s in shapes), *first[a + 1:])]  # type: ignore[index]


@_rule("TRANSPOSE")
def _transpose(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1, "permutation")
    x, perm = op.shape(0), op.ints(1, "permutation")
    if x is None or perm is None:
        return [None]
    if sorted(perm) != list(range(len(x))):
        raise op.fail(f"permutation {perm} does not fit a rank-{len(x)} input")
    return [tuple(x[p] for p in perm)]


@_rule("STRIDED_SLICE")
def _strided_slice(op: _Op) -> list[Shape]:
    for i, what in enumerate(("input", "begin", "end", "strides")):
        op.need(i, what)
    x = op.shape(0)
    begin, end, strides = op.ints(1, "begin"), op.ints(2, "end"), op.ints(3, "strides")
    if x is None or begin is None or end is None or strides is None:
        return [None]
    if not len(begin) == len(end) == len(strides) or len(begin) > len(x):
        raise op.fail(f"begin {begin}, end {end} and strides {strides} do not fit input {list(x)}")
    if 0 in strides:
        raise op.fail(f"strides {strides} hold a zero")
    if int(op.attr("ellipsis_mask", 0) or 0) or int(op.attr("new_axis_mask", 0) or 0):
        return [None]  # refused by the kernel, by name
    bmask, emask = int(op.attr("begin_mask", 0) or 0), int(op.attr("end_mask", 0) or 0)
    shrink, offset = int(op.attr("shrink_axis_mask", 0) or 0), bool(op.attr("offset", False))
    index: list[slice | int] = []
    for i in range(len(begin)):
        if shrink >> i & 1:
            if not -x[i] <= begin[i] < x[i]:
                raise op.fail(f"begin {begin[i]} of shrunk axis {i} lies outside input {list(x)}")
            index.append(begin[i])
            continue
        b = None if bmask >> i & 1 else begin[i]
        e = None if emask >> i & 1 else (begin[i] + end[i] if offset else end[i])
        index.append(slice(b, e, strides[i]))
    return [tuple(_view(x)[tuple(index)].shape)]


@_rule("TILE")
def _tile(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1, "multiples")
    x, multiples = op.shape(0), op.ints(1, "multiples")
    if x is None or multiples is None:
        return [None]
    if len(multiples) != len(x) or any(m < 0 for m in multiples):
        raise op.fail(f"multiples {multiples} do not fit a rank-{len(x)} input")
    return [tuple(d * m for d, m in zip(x, multiples))]


@_rule("PACK")
def _pack(op: _Op) -> list[Shape]:
    if not op.node.inputs or any(v is None for v in op.node.inputs):
        raise op.fail("an input is missing")
    shapes = op.shapes
    if any(s is None for s in shapes):
        return [None]
    first = shapes[0]
    axis = op.int_attr("axis", 0)
    if any(s != first for s in shapes) or not -len(first) - 1 <= axis <= len(first):  # type: ignore[arg-type]
        raise op.fail(f"inputs {[list(s) for s in shapes]} (axis {axis}) do not stack")  # type: ignore[arg-type]
    a = axis if axis >= 0 else axis + len(first) + 1  # type: ignore[arg-type]
    return [(*first[:a], len(shapes), *first[a:])]  # type: ignore[index]


@_rule("SHAPE")
def _shape(op: _Op) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    return [None if x is None else (len(x),)]


def _block(op: _Op) -> tuple[Shape, list[int] | None, list[int] | None]:
    """Input shape, block and paddings/crops, a 3-D input seen as 4-D of width 1 (as LiteRT runs it)."""
    for i, what in enumerate(("input", "block shape", "paddings")):
        op.need(i, what)
    x = op.rank(0, 3, 4)
    spatial = (1, 2) if x is None else (len(x) - 2,)
    block, pads = op.ints(1, "block shape"), op.ints(2, "paddings")
    if block is not None and (len(block) not in spatial or any(b < 1 for b in block)):
        raise op.fail(f"block shape {block} is not {' or '.join(map(str, spatial))} positive sizes")
    if pads is not None and (len(pads) not in [2 * n for n in spatial] or any(p < 0 for p in pads)):
        raise op.fail(f"paddings/crops {pads} are not {' or '.join(str(2 * n) for n in spatial)} sizes >= 0")
    if x is not None and len(x) == 3:
        x = (x[0], x[1], 1, x[2])
        block = None if block is None else [*block, 1]
        pads = None if pads is None else [*pads, 0, 0]
    return x, block, pads


def _as_input_rank(op: _Op, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A 4-D block operator output back to the input's rank (3-D: without the width)."""
    x = op.shape(0)
    return shape if x is None or len(x) == 4 else (shape[0], shape[1], shape[3])


@_rule("SPACE_TO_BATCH_ND")
def _space_to_batch(op: _Op) -> list[Shape]:
    x, block, pads = _block(op)
    if x is None or block is None or pads is None:
        return [None]
    h, w = x[1] + pads[0] + pads[1], x[2] + pads[2] + pads[3]
    if h % block[0] or w % block[1]:
        raise op.fail(f"padded size {h}x{w} is not a multiple of block {block}")
    return [_as_input_rank(op, (x[0] * block[0] * block[1], h // block[0], w // block[1], x[3]))]


@_rule("BATCH_TO_SPACE_ND")
def _batch_to_space(op: _Op) -> list[Shape]:
    x, block, crops = _block(op)
    if x is None or block is None or crops is None:
        return [None]
    if x[0] % (block[0] * block[1]):
        raise op.fail(f"batch {x[0]} is not a multiple of block {block}")
    h, w = x[1] * block[0] - crops[0] - crops[1], x[2] * block[1] - crops[2] - crops[3]
    if h < 0 or w < 0:
        raise op.fail(f"crops {crops} are larger than the {x[1] * block[0]}x{x[2] * block[1]} output")
    return [_as_input_rank(op, (x[0] // (block[0] * block[1]), h, w, x[3]))]


@_rule("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def _resize(op: _Op) -> list[Shape]:
    op.need(0)
    op.need(1, "size")
    x, size = op.rank(0, 4), op.ints(1, "size")
    if size is not None and (len(size) != 2 or any(s < 1 for s in size)):
        raise op.fail(f"size {size} is not two positive sizes")
    if x is not None and (x[1] < 1 or x[2] < 1):
        raise op.fail(f"input {list(x)} has no pixels to resize")
    if x is None or size is None:
        return [None]
    out = (x[0], size[0], size[1], x[3])
    check_size("its output", out, 8 * 4, op.too_large)  # four int64 corner products per element
    return [out]
