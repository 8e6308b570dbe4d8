"""Data-movement operators: RESHAPE, SQUEEZE, EXPAND_DIMS, PAD(V2), CONCATENATION,
TRANSPOSE, STRIDED_SLICE, TILE, PACK, SHAPE, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND,
RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR.

Values are moved, not changed, except: PAD fills quantized tensors with the
output zero point; CONCATENATION of uint8 inputs whose scale or zero point differ
from the output's requantizes ``round(x·s + (−zp_in·s)) + zp_out`` in float32
with ``s = s_in·(1/s_out)`` (LiteRT refuses such int8 inputs and copies int16 ones
unchanged); RESIZE_BILINEAR on integers (int8, uint8, int16) uses 10-bit fixed-point
weights: ``y = (Σ q·wy·wx + 2^19·sign) / 2^20`` (C division).  Every operator here
also runs int16 (16x8) tensors, as LiteRT's kernels do.  All O(output size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._common import OpContext, Quant, ints, kernel, round_half_away, type_range
from .prepare import check_size

if TYPE_CHECKING:
    from ...ir import Value


def _new_shape(ctx: OpContext, x: np.ndarray) -> list[int]:
    if ctx.has(1):
        shape = ints(ctx.x(1))
    else:
        shape = ints(ctx.attr("new_shape", []) or [])
    if not shape and x.size != 1:
        out = ctx.out_value().shape
        if out is None or any(not isinstance(d, int) for d in out):
            raise ctx.error("no target shape")
        shape = [int(d) if d is not None else -1 for d in out]
    return shape


@kernel("RESHAPE", int16=True)
def reshape(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    if len(ctx.arrays) < 2 or ctx.arrays[1] is None or _constant(ctx.in_value(1)):
        # the target shape is the operator's own (attribute or constant): a view of any input of
        # this shape, kept as the operator's runner (later runs go straight to it)
        target = x.reshape(_reshaped(ctx, x)).shape
        ctx.cache["compiled"] = (x.shape, x.dtype, lambda v: v.reshape(target))
        return [x.reshape(target)]
    shape = ctx.x(1)
    key = (x.shape, shape.dtype, shape.tobytes())
    known = ctx.cache.get("target")  # a computed shape (EfficientNet's squeeze-and-excite): the last one's
    if known is not None and known[0] == key:
        return [x.reshape(known[1])]
    target = x.reshape(_reshaped(ctx, x)).shape
    ctx.cache["target"] = (key, target)
    return [x.reshape(target)]


def _constant(v: Value) -> bool:
    """A tensor whose value the file fixes: a buffer no operator writes and no run feeds."""
    return v.const is not None and v.producer is None and not v.is_graph_input and not v.is_state


def _reshaped(ctx: OpContext, x: np.ndarray) -> list[int]:
    """RESHAPE's target shape for ``x``, or the one-line error."""
    shape = _new_shape(ctx, x)
    try:
        x.reshape(shape)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    return shape


@kernel("SQUEEZE", int16=True)
def squeeze(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    dims = ints(ctx.attr("squeeze_dims", []) or [])
    axes = tuple(d % x.ndim for d in dims) if dims else tuple(i for i, s in enumerate(x.shape) if s == 1)
    return [np.squeeze(x, axis=axes)]


@kernel("EXPAND_DIMS", int16=True)
def expand_dims(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    axis = ints(ctx.x(1))[0]
    return [np.expand_dims(x, axis if axis >= 0 else axis + x.ndim + 1)]


def _pad_value(ctx: OpContext, x: np.ndarray) -> float | int:
    if ctx.has(2):
        return ctx.x(2).reshape(-1)[0].item()
    q = ctx.out_quant()
    return q.zp if q is not None and x.dtype.kind in "iu" else 0


@kernel("PAD", "PADV2", int16=True)
def pad(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    pads = np.asarray(ctx.x(1)).reshape(-1, 2)
    if pads.shape[0] != x.ndim or np.any(pads < 0):
        raise ctx.error(f"paddings {pads.tolist()} do not fit a rank-{x.ndim} input")
    check_size("its output", [d + int(a) + int(b) for d, (a, b) in zip(x.shape, pads)], x.itemsize, ctx.error)
    return [np.pad(x, [tuple(int(v) for v in p) for p in pads], constant_values=_pad_value(ctx, x))]


@kernel("CONCATENATION", int16=True)
def concatenation(ctx: OpContext) -> list[np.ndarray]:
    axis = int(ctx.attr("axis", 0))
    dtype = ctx.out_dtype()
    parts = [ctx.x(i) for i in range(len(ctx.arrays))]
    qo = ctx.out_quant()
    if dtype == np.uint8 and qo is not None:  # ConcatenationWithScaling
        parts = [_requantize(p, ctx.in_quant(i), qo, dtype) for i, p in enumerate(parts)]
    elif dtype == np.int8 and qo is not None and any(_rescales(ctx.in_quant(i), qo) for i in range(len(parts))):
        raise ctx.error("an int8 input is quantized differently from the output, which LiteRT refuses")
    return [np.concatenate(parts, axis=axis).astype(dtype)]


def _rescales(qi: Quant | None, qo: Quant) -> bool:
    return qi is not None and (qi.zp != qo.zp or np.float32(qi.s) != np.float32(qo.s))


def _requantize(x: np.ndarray, qi: Quant | None, qo: Quant, dtype: np.dtype) -> np.ndarray:
    if qi is None or not _rescales(qi, qo):
        return x
    scale = np.float32(qi.s) * (np.float32(1) / np.float32(qo.s))
    bias = np.float32(-qi.zp) * scale
    v = round_half_away((x.astype(np.float32) * scale + bias).astype(np.float32)).astype(np.int64) + qo.zp
    return np.clip(v, *type_range(dtype)).astype(dtype)


@kernel("TRANSPOSE", int16=True)
def transpose(ctx: OpContext) -> list[np.ndarray]:
    return [np.transpose(ctx.x(0), ints(ctx.x(1)))]


@kernel("STRIDED_SLICE", int16=True)
def strided_slice(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    begin, end, strides = ints(ctx.x(1)), ints(ctx.x(2)), ints(ctx.x(3))
    if int(ctx.attr("ellipsis_mask", 0) or 0) or int(ctx.attr("new_axis_mask", 0) or 0):
        raise ctx.error("ellipsis_mask/new_axis_mask are not implemented")
    bmask, emask = int(ctx.attr("begin_mask", 0) or 0), int(ctx.attr("end_mask", 0) or 0)
    shrink = int(ctx.attr("shrink_axis_mask", 0) or 0)
    offset = bool(ctx.attr("offset", False))
    index: list[slice | int] = []
    for i in range(len(begin)):
        if shrink >> i & 1:
            index.append(begin[i])
            continue
        b = None if bmask >> i & 1 else begin[i]
        e = None if emask >> i & 1 else (begin[i] + end[i] if offset else end[i])
        index.append(slice(b, e, strides[i]))
    return [np.array(x[tuple(index)])]


@kernel("TILE", int16=True)
def tile(ctx: OpContext) -> list[np.ndarray]:
    x, multiples = ctx.x(0), ints(ctx.x(1))
    if len(multiples) != x.ndim or min(multiples, default=0) < 0:
        raise ctx.error(f"multiples {multiples} do not fit a rank-{x.ndim} input")
    check_size("its output", [d * m for d, m in zip(x.shape, multiples)], x.itemsize, ctx.error)
    return [np.tile(x, multiples)]


@kernel("PACK", int16=True)
def pack(ctx: OpContext) -> list[np.ndarray]:
    """Stacks values unchanged; LiteRT refuses quantized inputs whose scale or zero point differ
    from the output's (it never requantizes)."""
    parts = [ctx.x(i) for i in range(len(ctx.arrays))]
    qo = ctx.out_quant()
    if qo is not None and any(_rescales(ctx.in_quant(i), qo) for i in range(len(parts))):
        raise ctx.error("an input is quantized differently from the output, which LiteRT refuses")
    return [np.stack(parts, axis=int(ctx.attr("axis", 0))).astype(ctx.out_dtype())]


@kernel("SHAPE")
def shape(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    made = np.asarray(x.shape, dtype=ctx.out_dtype())
    # a function of the input's shape alone: the operator's runner while that shape stays
    ctx.cache["compiled"] = (x.shape, x.dtype, lambda v: made.copy())
    return [made.copy()]


def _block_4d(ctx: OpContext) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Input, block and paddings/crops of SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND; a 3-D input is
    run as 4-D of width 1, as LiteRT does."""
    x, block, pads = ctx.x(0), ints(ctx.x(1)), np.asarray(ctx.x(2)).reshape(-1, 2)
    if x.ndim == 3 and len(block) == 1 and len(pads) == 1:
        return x[:, :, None, :], [*block, 1], np.concatenate([pads, np.zeros((1, 2), pads.dtype)])
    if x.ndim != 4 or len(block) != 2 or len(pads) != 2:
        raise ctx.error(f"block {block} does not fit input {list(x.shape)}")
    return x, block, pads


def _input_rank(ctx: OpContext, y: np.ndarray) -> np.ndarray:
    return y[:, :, 0, :] if ctx.x(0).ndim == 3 else y


@kernel("SPACE_TO_BATCH_ND", int16=True)
def space_to_batch_nd(ctx: OpContext) -> list[np.ndarray]:
    x, (bh, bw), pads = _block_4d(ctx)
    q = ctx.out_quant()
    fill = q.zp if q is not None and x.dtype.kind in "iu" else 0  # the output zero point, as LiteRT
    xp = np.pad(x, [(0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)], constant_values=fill)
    n, h, w, c = xp.shape
    y = xp.reshape(n, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return [np.ascontiguousarray(_input_rank(ctx, y.reshape(bh * bw * n, h // bh, w // bw, c)))]


@kernel("BATCH_TO_SPACE_ND", int16=True)
def batch_to_space_nd(ctx: OpContext) -> list[np.ndarray]:
    x, (bh, bw), crops = _block_4d(ctx)
    nb, h, w, c = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, h * bh, w * bw, c)
    (ct, cb), (cl, cr) = crops
    return [np.ascontiguousarray(_input_rank(ctx, y[:, ct:h * bh - cb, cl:w * bw - cr, :]))]


def _resize_flags(ctx: OpContext) -> tuple[bool, bool]:
    return bool(ctx.attr("align_corners", False)), bool(ctx.attr("half_pixel_centers", False))


def _resize_size(ctx: OpContext, x: np.ndarray) -> tuple[int, int]:
    """The output size (a tensor the run may compute), bounded before anything is allocated."""
    size = ints(ctx.x(1))
    if len(size) != 2 or min(size) < 1 or x.ndim != 4:
        raise ctx.error(f"size {size} does not fit input {list(x.shape)}")
    check_size("its output", (x.shape[0], size[0], size[1], x.shape[3]), 8 * 4, ctx.error)
    return size[0], size[1]


@kernel("RESIZE_NEAREST_NEIGHBOR", int16=True)
def resize_nearest(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    oh, ow = _resize_size(ctx, x)
    align, half = _resize_flags(ctx)

    def index(out: int, size: int) -> np.ndarray:
        scale = np.float32((size - 1) / (out - 1)) if align and out > 1 else np.float32(size) / np.float32(out)
        pos = (np.arange(out, dtype=np.float32) + np.float32(0.5 if half else 0.0)) * scale
        idx = round_half_away(pos) if align else np.floor(pos)
        idx = np.minimum(idx.astype(np.int64), size - 1)
        return np.maximum(idx, 0) if half else idx

    return [x[:, index(oh, x.shape[1])][:, :, index(ow, x.shape[2])]]


@kernel("RESIZE_BILINEAR", int16=True)
def resize_bilinear(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.x(0)
    oh, ow = _resize_size(ctx, x)
    align, half = _resize_flags(ctx)
    h, w = x.shape[1], x.shape[2]
    if x.dtype.kind == "f":
        def axis(out: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            scale = (np.float32(size - 1) / np.float32(out - 1)) if align and out > 1 \
                else np.float32(size) / np.float32(out)
            v = np.arange(out, dtype=np.float32)
            pos = ((v + np.float32(0.5)) * scale - np.float32(0.5)) if half else v * scale
            pos = pos.astype(np.float32)
            lo = np.maximum(np.floor(pos).astype(np.int64), 0)
            hi = np.minimum(np.ceil(pos).astype(np.int64), size - 1)
            return pos, lo, hi

        y_, y0, y1 = axis(oh, h)
        x_, x0, x1 = axis(ow, w)
        dy = (y_ - y0.astype(np.float32))[None, :, None, None]
        dx = (x_ - x0.astype(np.float32))[None, None, :, None]
        one = np.float32(1)
        g = x.astype(np.float32)
        out = (g[:, y0][:, :, x0] * (one - dy) * (one - dx) + g[:, y1][:, :, x0] * dy * (one - dx)
               + g[:, y0][:, :, x1] * (one - dy) * dx + g[:, y1][:, :, x1] * dy * dx)
        return [out.astype(ctx.out_dtype())]

    def axis_q(out: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if align and out > 1:
            s10 = ((1 << 10) * (size - 1) + (out - 1) // 2) // (out - 1)
        else:
            s10 = ((1 << 10) * size + out // 2) // out
        v = np.arange(out, dtype=np.int64)
        pos = v * s10 + s10 // 2 - (1 << 9) if half else v * s10
        lo = np.maximum(np.where(pos >= 0, pos >> 10, -((-pos) >> 10)), 0)
        up = pos + (1 << 10) - 1
        hi = np.minimum(np.where(up >= 0, up >> 10, -((-up) >> 10)), size - 1)
        return pos, lo, hi

    y_, y0, y1 = axis_q(oh, h)
    x_, x0, x1 = axis_q(ow, w)
    fy = (y_ - (y0 << 10))[None, :, None, None]
    fx = (x_ - (x0 << 10))[None, None, :, None]
    one_q = 1 << 10
    g = x.astype(np.int64)
    acc = (g[:, y0][:, :, x0] * (one_q - fy) * (one_q - fx) + g[:, y1][:, :, x0] * fy * (one_q - fx)
           + g[:, y0][:, :, x1] * (one_q - fy) * fx + g[:, y1][:, :, x1] * fy * fx)
    if ctx.rounding == "single":
        out_i = (acc + (1 << 19)) >> 20
    else:
        num = acc + np.where(acc > 0, 1 << 19, -(1 << 19))
        out_i = np.where(num >= 0, num >> 20, -((-num) >> 20))
    return [out_i.astype(ctx.out_dtype())]
