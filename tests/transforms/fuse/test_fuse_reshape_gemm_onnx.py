"""fuse_reshape_gemm on hand-built graphs: flatten + Gemm + unflatten becomes MatMul + Add, equal on
onnxruntime at two sizes of the dynamic dims; an unflattening the shape probe does not confirm is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

import graphwright.transforms.fuse.fuse_reshape_gemm_onnx  # noqa: F401 - registers fuse_reshape_gemm
from graphwright.formats import onnx as onnx_format
from graphwright.ir import check
from graphwright.transforms import TransformContext, TransformResult, get

from ._helpers_onnx import assert_same, build, init, node, ops, vi

K, N = 6, 5
DIMS = ({"batch": 2, "seq": 5}, {"batch": 3, "seq": 4})


def flattened_gemm(*, trans_b: bool = False, bias_row: bool = False, swap: bool = False) -> onnx.ModelProto:
    """GPT-2's Conv1D as exported: x.view(-1, K) @ W + b, viewed back to (batch, seq, N)."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    b = rng.normal(0, 0.3, (1, N) if bias_row else N).astype(np.float32)
    inits = [init("w", w), init("b", b), init("flat", np.array([-1, K], np.int64)), init("n", np.array([N], np.int64)),
             init("i0", np.array([0], np.int64)), init("i1", np.array([1], np.int64)), init("i2", np.array([2], np.int64))]
    lead = ["s0", "s1"] if not swap else ["s1", "s0"]  # swap: (seq, batch, N), a different tensor
    nodes = [node("Reshape", ["x", "flat"], ["x2"]), node("Gemm", ["x2", "w", "b"], ["g"], transB=int(trans_b)),
             node("Shape", ["x"], ["shp"]), node("Slice", ["shp", "i0", "i1"], ["s0"]),
             node("Slice", ["shp", "i1", "i2"], ["s1"]), node("Concat", [*lead, "n"], ["target"], axis=0),
             node("Reshape", ["g", "target"], ["y"])]
    return build(nodes, [vi("x", ["batch", "seq", K])], [vi("y", [None, None, N])], inits)


def fuse(proto: onnx.ModelProto, **params: Any) -> tuple[onnx.ModelProto, TransformResult]:
    model = onnx_format.from_proto(onnx.load_from_string(proto.SerializeToString()), None)
    get("infer_shapes").fn(model, TransformContext())
    result = get("fuse_reshape_gemm").fn(model, TransformContext(), **params)
    check(model.graph)
    out = onnx_format.to_proto(model)
    onnx.checker.check_model(out)
    return out, result


@pytest.mark.parametrize("kwargs", [{}, {"trans_b": True}, {"bias_row": True}], ids=["plain", "trans_b", "bias_row"])
def test_becomes_matmul_and_add(kwargs: dict[str, Any]) -> None:
    before = flattened_gemm(**kwargs)
    after, result = fuse(before, target="onnxruntime")
    assert result.stats["fused"] == 1, result.notes
    assert ops(after)["MatMul"] == 1 and ops(after)["Add"] == 1
    assert not any(ops(after)[op] for op in ("Gemm", "Reshape"))
    read = {i for n in after.graph.node for i in n.input}
    assert "target" not in read  # the unflattening's shape glue is dead (simplify's dead-code pass drops it)
    matmul = next(n for n in after.graph.node if n.op_type == "MatMul")
    assert matmul.input[0] == "x"
    for dims in DIMS:
        assert_same(before, after, dims=dims)


def test_unflattening_to_other_leading_dims_is_refused() -> None:
    before = flattened_gemm(swap=True)
    after, result = fuse(before, target="onnxruntime")
    assert not result.changed and ops(after) == ops(before)
    assert any("(2, 5, 6) and 'y' (5, 2, 5) are not (B, S, 6) and (B, S, 5)" in n for n in result.notes), result.notes


def test_standard_target_changes_nothing() -> None:
    before = flattened_gemm()
    after, result = fuse(before)
    assert not result.changed and ops(after) == ops(before)
    assert "target=onnxruntime" in result.notes[0]
