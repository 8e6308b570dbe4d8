"""Static output shapes for fuse_remapper's no-broadcast checks (the residual Add, the side input).

Grappler decides "the Add does not broadcast" from its shape inference; frozen Keras graphs carry
no shapes, so the value shapes a convolutional network needs are filled in here, in one pass in
graph order (O(N)), for the ops listed; any other op leaves its outputs unknown (and a fusion
needing them is refused with that reason).  Only unknown shapes are written: known ones stay.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...ir import Graph, Node, constant_value

__all__ = ["annotate_shapes"]

Shape = tuple[int, ...]

_SAME_AS_INPUT = frozenset({
    "Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", "Identity", "Neg", "Erf", "Erfc", "Square", "Sqrt",
    "Rsqrt", "Softmax", "BiasAdd", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx",
    "Abs", "Exp", "Log", "Softplus", "Swish", "_MklSwish", "HardSwish", "Selu", "Gelu",
})
_BROADCAST = frozenset({"Add", "AddV2", "Mul", "Sub", "RealDiv", "Maximum", "Minimum", "Pow", "SquaredDifference"})
_WINDOWED = frozenset({"Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", "_FusedConv2D",
                       "_FusedDepthwiseConv2dNative"})


def _ints(node: Node, name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    raw = node.attrs.get(name)
    return tuple(int(v) for v in node.attr(name)) if raw is not None else default


def _text(node: Node, name: str, default: str) -> str:
    raw = node.attr(name, default)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _const(node: Node, index: int) -> np.ndarray | None:
    value = node.inputs[index] if index < len(node.inputs) else None
    tensor = constant_value(value) if value is not None else None
    return tensor.numpy() if tensor is not None else None


def _windowed(node: Node, shapes: list[Shape | None]) -> Shape | None:
    x = shapes[0]
    if x is None or len(x) != 4:
        return None
    nchw = _text(node, "data_format", "NHWC").startswith("NC")
    h_axis, c_axis = (2, 1) if nchw else (1, 3)
    strides, dilations = _ints(node, "strides", (1, 1, 1, 1)), _ints(node, "dilations", (1, 1, 1, 1))
    if node.op in ("MaxPool", "AvgPool"):
        ksize = _ints(node, "ksize", (1, 1, 1, 1))
        kernel, channels = (ksize[h_axis], ksize[h_axis + 1]), x[c_axis]
    else:
        w = shapes[1]
        if w is None or len(w) != 4:
            return None
        kernel = (w[0], w[1])
        channels = w[2] * w[3] if "Depthwise" in node.op else w[3]
    padding = _text(node, "padding", "VALID")
    explicit = _ints(node, "explicit_paddings", ())
    out = list(x)
    for i in range(2):
        axis = h_axis + i
        size, stride, dil = x[axis], strides[axis], dilations[axis]
        span = (kernel[i] - 1) * dil + 1
        if padding == "SAME":
            out[axis] = math.ceil(size / stride)
        elif padding == "VALID":
            out[axis] = math.ceil((size - span + 1) / stride)
        elif padding == "EXPLICIT" and len(explicit) == 8:
            out[axis] = (size + explicit[2 * axis] + explicit[2 * axis + 1] - span) // stride + 1
        else:
            return None
    out[c_axis] = channels
    return tuple(out)


def _broadcast(shapes: list[Shape | None]) -> Shape | None:
    if any(s is None for s in shapes):
        return None
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))  # type: ignore[arg-type]
    except ValueError:
        return None


def _reduce(node: Node, shapes: list[Shape | None]) -> Shape | None:
    x, axes = shapes[0], _const(node, 1)
    if x is None or axes is None:
        return None
    picked = {int(a) % len(x) for a in np.atleast_1d(axes)}
    if node.attr("keep_dims", False):
        return tuple(1 if i in picked else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in picked)


def _pad(node: Node, shapes: list[Shape | None]) -> Shape | None:
    x, pads = shapes[0], _const(node, 1)
    if x is None or pads is None or pads.shape != (len(x), 2):
        return None
    return tuple(int(d + p[0] + p[1]) for d, p in zip(x, pads))


def _concat(node: Node, shapes: list[Shape | None]) -> Shape | None:
    parts, axis = shapes[:-1], _const(node, len(node.inputs) - 1)
    if axis is None or not parts or any(p is None for p in parts):
        return None
    first = parts[0]
    assert first is not None
    a = int(axis) % len(first)
    return tuple(sum(p[a] for p in parts if p is not None) if i == a else d for i, d in enumerate(first))


def _matmul(node: Node, shapes: list[Shape | None]) -> Shape | None:
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    rows = a[1] if node.attr("transpose_a", False) else a[0]
    cols = b[0] if node.attr("transpose_b", False) else b[1]
    return (rows, cols)


def _reshape(node: Node, shapes: list[Shape | None]) -> Shape | None:
    x, target = shapes[0], _const(node, 1)
    if x is None or target is None:
        return None
    dims = [int(d) for d in np.atleast_1d(target)]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(x) // known if known else 0
    return tuple(dims) if -1 not in dims else None


def _squeeze(node: Node, shapes: list[Shape | None]) -> Shape | None:
    x = shapes[0]
    if x is None:
        return None
    dims = {int(d) % len(x) for d in _ints(node, "squeeze_dims", ())}
    return tuple(d for i, d in enumerate(x) if not (i in dims if dims else d == 1))


_RULES: dict[str, Callable[[Node, list[Shape | None]], Shape | None]] = {
    **{op: _windowed for op in _WINDOWED},
    "Mean": _reduce, "Max": _reduce, "Sum": _reduce, "Pad": _pad, "PadV2": _pad, "MirrorPad": _pad,
    "ConcatV2": _concat, "MatMul": _matmul, "_FusedMatMul": _matmul, "Reshape": _reshape, "Squeeze": _squeeze,
}


def annotate_shapes(graph: Graph) -> int:
    """Fill in unknown output-0 shapes (graph order; producers first); returns how many were set."""
    count = 0
    for node in graph:
        if not node.outputs or node.outputs[0].shape is not None:
            continue
        shapes: list[Shape | None] = []
        for value in node.inputs:
            shape = value.shape if value is not None else None
            shapes.append(tuple(shape) if shape is not None and all(d is not None for d in shape) else None)
        if not shapes:
            continue
        if node.op == "IdentityN":  # output i is input i (Keras' swish with its custom gradient)
            for out, shape in zip(node.outputs, shapes):
                if out.shape is None and shape is not None:
                    out.shape = shape
                    count += 1
            continue
        if node.op in _SAME_AS_INPUT:
            shape = shapes[0]
        elif node.op in _BROADCAST:
            shape = _broadcast(shapes)
        else:
            rule = _RULES.get(node.op)
            shape = rule(node, shapes) if rule is not None else None
        if shape is not None:
            node.outputs[0].shape = shape
            count += 1
    return count
