"""Complex numbers and the FFT, as LiteRT's kernels: REAL, IMAG and COMPLEX_ABS of complex64 /
complex128 values; RFFT2D of float32 (in double, as LiteRT's Ooura rdft2d), to complex64.
O(output size); RFFT2D O(n log n).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, ints, kernel
from .prepare import OpCheck, Shape, prepare_rule


@kernel("REAL", "IMAG", "COMPLEX_ABS")
def complex_part(ctx: OpContext) -> list[np.ndarray]:
    """The real part, imaginary part or magnitude of complex64 (float32) / complex128 (float64) values."""
    x = ctx.x(0)
    if x.dtype.kind != "c":
        raise ctx.error(f"its input is {x.dtype}; LiteRT's kernel takes complex64 or complex128")
    part = {"REAL": np.real, "IMAG": np.imag, "COMPLEX_ABS": np.abs}[ctx.node.op](x)
    return [np.ascontiguousarray(part, ctx.out_dtype())]


@kernel("RFFT2D")
def rfft2d(ctx: OpContext) -> list[np.ndarray]:
    """The 2-D real FFT over the last two dimensions (what ``tf.signal.stft`` and ``rfft2d`` become):
    the input cropped or zero-padded to ``fft_length`` (input 1), transformed in double as LiteRT's
    kernel does (its Ooura rdft2d: the same transform to within float rounding), the
    ``fft_length[1] / 2 + 1`` non-negative frequencies as complex64."""
    x, lengths = ctx.x(0), [int(n) for n in ints(ctx.x(1))]
    if x.dtype != np.float32 or x.ndim < 2:
        raise ctx.error(f"its input is {x.dtype} of rank {x.ndim}; LiteRT's kernel takes float32 of rank 2 or more")
    return [np.fft.rfft2(x.astype(np.float64), s=lengths, axes=(-2, -1)).astype(np.complex64)]


# -- prepare checks ------------------------------------------------------------------------------------


@prepare_rule("REAL", "IMAG", "COMPLEX_ABS", arity=(1, 1))
def _complex_part_shape(op: OpCheck) -> list[Shape]:
    return [op.shape(0)]


@prepare_rule("RFFT2D", arity=(2, 2))
def _rfft2d_shape(op: OpCheck) -> list[Shape]:
    op.need(1, "fft_length")
    x, lengths = op.shape(0), op.ints(1, "fft_length")
    if lengths is None or x is None:
        return [None]
    if len(lengths) != 2 or any(n <= 0 or n & (n - 1) for n in lengths):
        raise op.fail(f"fft_length {lengths} is not two powers of two, as LiteRT's kernel needs")
    if len(x) < 2:
        raise op.fail(f"its input {list(x)} has rank below 2")
    return [(*x[:-2], lengths[0], lengths[1] // 2 + 1)]
