"""TF matrix products and bias addition: MatMul, BatchMatMul (V1/V2/V3), BiasAdd, BiasAddV1.

``MatMul(a, b)`` is ``op(a) · op(b)`` with ``op`` a transpose when
``transpose_a``/``transpose_b`` is set; ``BatchMatMul*`` multiply the last two
dimensions, broadcasting the leading ones (V2, V3), with ``adj_x``/``adj_y``
the conjugate transpose; ``BiasAdd(x, b)`` adds the vector ``b`` along the
channel dimension (last for NHWC, 1 for NCHW).  Float results are computed in
the input type (BLAS summation order may differ from Eigen's by rounding).
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import Node
from ._common import Kernel, SizeEstimate, attr, np_dtype, require, require_same_dtype

__all__ = ["KERNELS", "SIZES"]


def _matmul(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    a, b = inputs
    require_same_dtype(node, [a, b])
    require(a.dtype.kind in "iufc", node, f"no kernel for {a.dtype}")
    require(a.ndim == 2 and b.ndim == 2, node, "inputs must be matrices")
    a = a.T if attr(node, "transpose_a", False) else a
    b = b.T if attr(node, "transpose_b", False) else b
    require(a.shape[1] == b.shape[0], node, f"cannot multiply {list(a.shape)} by {list(b.shape)}")
    return [np.matmul(a, b).astype(a.dtype)]


def _adjoint(x: np.ndarray) -> np.ndarray:
    x = np.swapaxes(x, -1, -2)
    return np.conj(x) if x.dtype.kind == "c" else x


def _batch_matmul(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, y = inputs
    if node.op == "BatchMatMulV3":
        dtype = np_dtype(node, attr(node, "Tout")) if attr(node, "Tout") is not None else x.dtype
        x, y = x.astype(dtype), y.astype(dtype)
    require_same_dtype(node, [x, y])
    require(x.dtype.kind in "iufc", node, f"no kernel for {x.dtype}")
    require(x.ndim >= 2 and y.ndim >= 2, node, "inputs must be at least 2-D")
    if node.op == "BatchMatMul":
        require(x.shape[:-2] == y.shape[:-2], node, "batch dimensions differ (BatchMatMul does not broadcast)")
    x = _adjoint(x) if attr(node, "adj_x", False) else x
    y = _adjoint(y) if attr(node, "adj_y", False) else y
    require(x.shape[-1] == y.shape[-2], node, f"cannot multiply {list(x.shape)} by {list(y.shape)}")
    try:
        np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        require(False, node, f"batch dimensions {list(x.shape[:-2])} and {list(y.shape[:-2])} do not broadcast")
    return [np.matmul(x, y).astype(x.dtype)]


def _bias_add(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, bias = inputs
    require_same_dtype(node, [x, bias])
    require(x.dtype.kind in "iufc", node, f"no kernel for {x.dtype}")
    require(x.ndim >= 2, node, "input must be at least 2-D")
    require(bias.ndim == 1, node, f"bias must be 1-D, got shape {list(bias.shape)}")
    fmt = attr(node, "data_format", b"NHWC") if node.op == "BiasAdd" else b"NHWC"
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    require(fmt in ("NHWC", "NCHW"), node, f"unsupported data_format {fmt!r}")
    channel = 1 if fmt == "NCHW" else x.ndim - 1
    require(x.shape[channel] == bias.shape[0], node,
            f"bias of {bias.shape[0]} values for {x.shape[channel]} channels")
    shape = [1] * x.ndim
    shape[channel] = bias.shape[0]
    return [(x + bias.reshape(shape)).astype(x.dtype)]


KERNELS: dict[str, Kernel] = {
    "MatMul": _matmul,
    "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul,
    "BatchMatMulV3": _batch_matmul,
    "BiasAdd": _bias_add,
    "BiasAddV1": _bias_add,
}


def _matmul_bytes(node: Node, inputs: list[np.ndarray]) -> int:
    a, b = inputs
    if a.ndim < 2 or b.ndim < 2:
        return 0
    rows = a.shape[-1] if attr(node, "transpose_a", False) or attr(node, "adj_x", False) else a.shape[-2]
    cols = b.shape[-2] if attr(node, "transpose_b", False) or attr(node, "adj_y", False) else b.shape[-1]
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        return 0
    return math.prod(batch) * rows * cols * max(a.dtype.itemsize, 4)


SIZES: dict[str, SizeEstimate] = {op: _matmul_bytes for op in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")}
