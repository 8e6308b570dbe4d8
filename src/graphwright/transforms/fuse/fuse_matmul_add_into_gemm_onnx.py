"""fuse_matmul_add_into_gemm: MatMul + Add on 2-D operands becomes one Gemm.

Before::  y = MatMul(A[M, K], B[K, N]); z = Add(y, C)
After::   z = Gemm(A, B, C)          (alpha = beta = 1: z = A·B + C)

Exact in shape only where Gemm's contract holds: ``A`` and ``B`` of rank 2
(known), ``C`` of rank at most 2 that broadcasts to ``[M, N]`` without changing
it (each of its dims 1 or equal to the output's, so ``Add`` and Gemm's
unidirectional broadcast agree), float types Gemm accepts.  The MatMul output
must be read only by the Add and not be a graph output.  The Add node becomes
the Gemm (its output keeps its name).  All graphs; O(N + E).
"""

from __future__ import annotations

from ...ir import DType, Model, Node, Value, topological_order
from .._onnx import all_graphs, drop_node, is_standard, only_reader
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_matmul_add_into_gemm"]

_GEMM_TYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16})


def _rank2(value: Value | None) -> bool:
    return value is not None and value.shape is not None and len(value.shape) == 2


def _c_fits(c: Value, out: Value) -> bool:
    if c.shape is None or len(c.shape) > 2 or out.shape is None:
        return False
    for dim, full in zip(reversed(c.shape), reversed(out.shape)):
        if dim != 1 and (dim is None or dim != full):
            return False
    return True


def _fuse(add: Node) -> bool:
    for k in (0, 1):
        y, c = add.inputs[k], add.inputs[1 - k]
        matmul = y.producer if y is not None else None
        if y is None or c is None or matmul is None or matmul.op != "MatMul" or not is_standard(matmul):
            continue
        if matmul.graph is not add.graph or only_reader(y) is not add or len(matmul.inputs) != 2:
            continue
        a, b = matmul.inputs
        if not (_rank2(a) and _rank2(b) and _rank2(y)) or y.dtype not in _GEMM_TYPES or c.dtype != y.dtype:
            continue
        if not _c_fits(c, y) or add.output.shape is None or tuple(add.output.shape) != tuple(y.shape):  # type: ignore[arg-type]
            continue
        add.op = "Gemm"
        add.attrs = {}
        add.set_inputs([a, b, c])
        drop_node(matmul)
        return True
    return False


@transform("fuse_matmul_add_into_gemm", dialects={"onnx"})
def fuse_matmul_add_into_gemm(model: Model, ctx: TransformContext) -> TransformResult:
    """Turn Add(MatMul(A, B), C) on 2-D operands into Gemm(A, B, C)."""
    fused = 0
    for graph in all_graphs(model):
        for node in topological_order(graph):
            if node.graph is None or node.op != "Add" or not is_standard(node) or len(node.inputs) != 2:
                continue
            if _fuse(node):
                fused += 1
    return TransformResult(bool(fused), {"gemms_made": fused})
