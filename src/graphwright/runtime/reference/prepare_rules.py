"""The prepare checks (output shapes, and refusals of what the kernels cannot run) of the core
operators: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, AVERAGE_POOL_2D, MAX_POOL_2D, MEAN,
ADD, SUB, MUL, the unary element-wise operators, HARD_SWISH, SOFTMAX and the shape operators
(RESHAPE, SQUEEZE, EXPAND_DIMS, PAD, CONCATENATION, TRANSPOSE, STRIDED_SLICE, TILE, PACK, SHAPE,
SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, RESIZE_*), each with its arity.  The other operators'
checks sit beside their kernels; what runs them is :mod:`.prepare`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._common import ACT_NONE, ACT_SIGN_BIT, PAD_SAME, PAD_VALID, output_size, padding_before
from .fixedpoint import quantize_multiplier
from .prepare import MANY, OpCheck, Shape, _channels, broadcast_shape, check_size, prepare_rule


def _activation(op: OpCheck) -> None:
    act = op.int_attr("fused_activation_function", ACT_NONE)
    if not ACT_NONE <= act <= ACT_SIGN_BIT:
        raise op.fail(f"fused activation {act} does not exist")


def _window(op: OpCheck, h: int, w: int, kh: int, kw: int, dilated: bool) -> tuple[int, int, int, int, int]:
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


def _bias(op: OpCheck, channels: int) -> None:
    if op.has(2):
        shape = op.shape(2)
        if shape is not None and math.prod(shape) != channels:
            raise op.fail(f"bias of shape {list(shape)} does not have {channels} values")
        _channels(op, 2, channels)


@prepare_rule("CONV_2D", arity=(2, 3))
def _conv(op: OpCheck) -> list[Shape]:
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


def _padded(op: OpCheck, x: tuple[int, ...], kh: int, kw: int, oh: int, ow: int) -> tuple[int, int]:
    """(height, width) of the zero-padded input a convolution kernel allocates (as ``conv_common._geometry``),
    plus the spare row of the depthwise kernel's flat layout."""
    sh, sw = op.int_attr("stride_h", 1), op.int_attr("stride_w", 1)
    dh, dw = op.int_attr("dilation_h_factor", 1), op.int_attr("dilation_w_factor", 1)
    same = op.int_attr("padding", PAD_SAME) == PAD_SAME
    pt = padding_before(x[1], kh, sh, dh, oh)[0] if same else 0
    pl = padding_before(x[2], kw, sw, dw, ow)[0] if same else 0
    return (max((oh - 1) * sh + (kh - 1) * dh + 1, x[1] + pt) + 1,
            max((ow - 1) * sw + (kw - 1) * dw + 1, x[2] + pl))


@prepare_rule("DEPTHWISE_CONV_2D", arity=(2, 3))
def _depthwise(op: OpCheck) -> list[Shape]:
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


@prepare_rule("FULLY_CONNECTED", arity=(2, 3))
def _fully_connected(op: OpCheck) -> list[Shape]:
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


@prepare_rule("AVERAGE_POOL_2D", "MAX_POOL_2D", arity=(1, 1))
def _pool(op: OpCheck) -> list[Shape]:
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


@prepare_rule("MEAN", arity=(2, 2))
def _mean(op: OpCheck) -> list[Shape]:
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


@prepare_rule("ADD", "SUB", "MUL", arity=(2, 2))
def _binary(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1)
    _activation(op)
    return [broadcast_shape(op, 0, 1)]


@prepare_rule("RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "QUANTIZE", "DEQUANTIZE", arity=(1, 1))
def _unary(op: OpCheck) -> list[Shape]:
    op.need(0)
    return [op.shape(0)]


@prepare_rule("HARD_SWISH", arity=(1, 1))
def _hard_swish(op: OpCheck) -> list[Shape]:
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


@prepare_rule("SOFTMAX", arity=(1, 1))
def _softmax(op: OpCheck) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    beta = op.attr("beta", 1.0)
    if beta is not None and not math.isfinite(float(beta)):
        raise op.fail(f"beta is {beta}")
    if x is not None and (not x or x[-1] == 0):
        raise op.fail(f"input {list(x)} has no last axis to normalize over")
    return [x]


def _target_shape(op: OpCheck, x: Shape) -> Shape:
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


@prepare_rule("RESHAPE", arity=(1, 2))
def _reshape(op: OpCheck) -> list[Shape]:
    op.need(0)
    return [_target_shape(op, op.shape(0))]


def _view(shape: Sequence[int]) -> np.ndarray:
    """A zero-stride array of ``shape``: numpy indexing on it gives output shapes without memory."""
    return np.broadcast_to(np.zeros((), np.bool_), tuple(shape))


@prepare_rule("SQUEEZE", arity=(1, 1))
def _squeeze(op: OpCheck) -> list[Shape]:
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


@prepare_rule("EXPAND_DIMS", arity=(2, 2))
def _expand_dims(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1, "axis")
    x, axis = op.shape(0), op.ints(1, "axis")
    if x is None or axis is None:
        return [None]
    if len(axis) != 1 or not -len(x) - 1 <= axis[0] <= len(x):
        raise op.fail(f"axis {axis} does not fit a rank-{len(x)} input")
    a = axis[0] if axis[0] >= 0 else axis[0] + len(x) + 1
    return [(*x[:a], 1, *x[a:])]


@prepare_rule("PAD", arity=(2, 2))
@prepare_rule("PADV2", arity=(2, 3))
def _pad(op: OpCheck) -> list[Shape]:
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


@prepare_rule("CONCATENATION", arity=(1, MANY))
def _concatenation(op: OpCheck) -> list[Shape]:
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


@prepare_rule("TRANSPOSE", arity=(2, 2))
def _transpose(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1, "permutation")
    x, perm = op.shape(0), op.ints(1, "permutation")
    if x is None or perm is None:
        return [None]
    if sorted(perm) != list(range(len(x))):
        raise op.fail(f"permutation {perm} does not fit a rank-{len(x)} input")
    return [tuple(x[p] for p in perm)]


@prepare_rule("STRIDED_SLICE", arity=(4, 4))
def _strided_slice(op: OpCheck) -> list[Shape]:
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


@prepare_rule("TILE", arity=(2, 2))
def _tile(op: OpCheck) -> list[Shape]:
    op.need(0)
    op.need(1, "multiples")
    x, multiples = op.shape(0), op.ints(1, "multiples")
    if x is None or multiples is None:
        return [None]
    if len(multiples) != len(x) or any(m < 0 for m in multiples):
        raise op.fail(f"multiples {multiples} do not fit a rank-{len(x)} input")
    return [tuple(d * m for d, m in zip(x, multiples))]


@prepare_rule("PACK", arity=(1, MANY))
def _pack(op: OpCheck) -> list[Shape]:
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


@prepare_rule("SHAPE", arity=(1, 1))
def _shape(op: OpCheck) -> list[Shape]:
    op.need(0)
    x = op.shape(0)
    return [None if x is None else (len(x),)]


def _block(op: OpCheck) -> tuple[Shape, list[int] | None, list[int] | None]:
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


def _as_input_rank(op: OpCheck, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A 4-D block operator output back to the input's rank (3-D: without the width)."""
    x = op.shape(0)
    return shape if x is None or len(x) == 4 else (shape[0], shape[1], shape[3])


@prepare_rule("SPACE_TO_BATCH_ND", arity=(3, 3))
def _space_to_batch(op: OpCheck) -> list[Shape]:
    x, block, pads = _block(op)
    if x is None or block is None or pads is None:
        return [None]
    h, w = x[1] + pads[0] + pads[1], x[2] + pads[2] + pads[3]
    if h % block[0] or w % block[1]:
        raise op.fail(f"padded size {h}x{w} is not a multiple of block {block}")
    return [_as_input_rank(op, (x[0] * block[0] * block[1], h // block[0], w // block[1], x[3]))]


@prepare_rule("BATCH_TO_SPACE_ND", arity=(3, 3))
def _batch_to_space(op: OpCheck) -> list[Shape]:
    x, block, crops = _block(op)
    if x is None or block is None or crops is None:
        return [None]
    if x[0] % (block[0] * block[1]):
        raise op.fail(f"batch {x[0]} is not a multiple of block {block}")
    h, w = x[1] * block[0] - crops[0] - crops[1], x[2] * block[1] - crops[2] - crops[3]
    if h < 0 or w < 0:
        raise op.fail(f"crops {crops} are larger than the {x[1] * block[0]}x{x[2] * block[1]} output")
    return [_as_input_rank(op, (x[0] // (block[0] * block[1]), h, w, x[3]))]


@prepare_rule("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", arity=(2, 2))
def _resize(op: OpCheck) -> list[Shape]:
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
