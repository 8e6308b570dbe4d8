"""The NumPy TF kernels against TensorFlow eager, op by op, on seeded inputs and edge cases.

Every case asserts that both give the same outputs (type, shape and values; exact unless the op is
one TensorFlow computes with Eigen's fast approximations) or that both refuse.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.ir import DType
from graphwright.runtime import numpy_tf

from . import _cases

CASES = _cases.all_cases()
STRIDED = _cases.strided_slice_classics() + _cases.strided_slice_cases(600, seed=7)


def test_every_kernel_has_cases() -> None:
    covered = {c.op for c in CASES + STRIDED}
    assert set(numpy_tf.KERNELS) <= covered, sorted(set(numpy_tf.KERNELS) - covered)


@pytest.mark.tf
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kernel_matches_tensorflow(case: _cases.Case) -> None:
    from ._kernel_oracle import same

    same(case.op, case.args, case.attrs, rtol=case.rtol, atol=case.atol)


@pytest.mark.tf
def test_strided_slice_matches_tensorflow_on_every_mask() -> None:
    from ._kernel_oracle import same

    results = [same(c.op, c.args, c.attrs) for c in STRIDED]
    computed = sum(1 for r in results if r)
    assert computed > len(STRIDED) // 2  # most specs are valid: the comparison is not vacuous
    for mask in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        assert any(r and c.attrs.get(mask) for c, r in zip(STRIDED, results)), f"no computed case uses {mask}"


@pytest.mark.tf
def test_transcendental_kernels_are_within_a_few_ulps_of_tensorflow() -> None:
    from ._kernel_oracle import ours, theirs

    x = np.random.default_rng(3).standard_normal(20000).astype(np.float32) * 4
    for op, arg in [("Rsqrt", np.abs(x) + 1e-3), ("Exp", x), ("Tanh", x), ("Sigmoid", x), ("Log", np.abs(x) + 1e-3)]:
        got, expected = ours(op, [arg])[0], theirs(op, [arg])[0]
        assert got.dtype == np.float32
        ulps = np.abs(got.astype(np.float64) - expected) / np.spacing(np.abs(expected).astype(np.float32))
        assert ulps.max() <= 16, (op, ulps.max())


def _refused(op: str, args: list[np.ndarray], attrs: dict | None = None) -> str:
    from ._kernel_oracle import ours

    with pytest.raises(numpy_tf.KernelError) as info:
        ours(op, args, attrs)
    return str(info.value)


@pytest.mark.tf
def test_we_refuse_where_tensorflow_answers_something_undefined() -> None:
    from ._kernel_oracle import theirs

    ints = np.array([3, -5, 14], np.int32)
    assert theirs("Round", [ints])[0].tolist() == [0, 0, 0]  # TF's integer Round is broken
    assert "floating point" in _refused("Round", [ints])
    out_of_range = np.array([-3.5, 3e9, np.nan], np.float32)
    theirs("Cast", [out_of_range], {"DstT": DType.INT32})  # x86 gives INT_MIN: undefined behaviour
    assert "outside the range" in _refused("Cast", [out_of_range], {"DstT": DType.INT32})
    assert "overflow" in _refused("FloorDiv", [np.array([-2**31], np.int32), np.array([-1], np.int32)])
    assert "NaN" in _refused("Relu", [np.array([np.nan, 1.0], np.float32)])
    half = np.random.default_rng(0).standard_normal((7, 300)).astype(np.float16) * 10
    theirs("Sum", [half, np.int32(0)])  # TF's half accumulation: neither float16 nor float32 sums match it
    assert "float16" in _refused("Sum", [half, np.int32(0)])


def test_integer_semantics_without_tensorflow() -> None:
    from ._kernel_oracle import node_for

    def run(op: str, *args: np.ndarray) -> np.ndarray:
        return numpy_tf.evaluate(node_for(op), list(args))[0]

    x, y = np.array([-7, 7, -7, 7], np.int32), np.array([2, -2, -2, 2], np.int32)
    assert run("FloorDiv", x, y).tolist() == [-4, -4, 3, 3]
    assert run("FloorMod", x, y).tolist() == [1, -1, -1, 1]
    assert run("TruncateDiv", x, y).tolist() == [-3, -3, 3, 3]
    assert run("TruncateMod", x, y).tolist() == [-1, 1, -1, 1]
    assert run("Add", np.array([2**31 - 1], np.int32), np.array([1], np.int32)).tolist() == [-2**31]
    assert run("Mul", np.float32(0.1), np.float32(3.0)).dtype == np.float32
    with pytest.raises(numpy_tf.KernelError, match="division by zero"):
        run("FloorDiv", x, np.zeros(4, np.int32))
    with pytest.raises(numpy_tf.KernelError, match="floating point"):
        run("RealDiv", x, y)


@pytest.mark.parametrize(("op", "args"), [
    ("Fill", [np.array([100000, 100000], np.int32), np.float32(1)]),
    ("Tile", [np.ones((1000,), np.float32), np.array([100000], np.int32)]),
    ("BroadcastTo", [np.float32(1), np.array([10**6, 10**6], np.int64)]),
    ("AddV2", [np.ones((100000, 1), np.float32), np.ones((1, 100000), np.float32)]),
    ("Range", [np.int64(0), np.int64(10**12), np.int64(1)]),
    ("OneHot", [np.arange(100000, dtype=np.int32), np.int32(100000), np.float32(1), np.float32(0)]),
    ("MatMul", [np.ones((100000, 1), np.float32), np.ones((1, 100000), np.float32)]),
    ("Pad", [np.ones((2, 2), np.float32), np.array([[0, 100000], [0, 100000]], np.int32)]),
    ("GatherV2", [np.ones((10, 100000), np.float32), np.zeros(10000, np.int32), np.int32(0)]),
])
def test_size_limit_is_checked_before_allocating(op: str, args: list[np.ndarray]) -> None:
    from ._kernel_oracle import node_for

    with pytest.raises(numpy_tf.ConstantTooLarge):
        numpy_tf.evaluate(node_for(op), args, max_bytes=1 << 20)


def test_size_limit_after_evaluation_and_unknown_ops() -> None:
    from ._kernel_oracle import node_for

    big = np.ones((600, 600), np.float32)
    with pytest.raises(numpy_tf.ConstantTooLarge):
        numpy_tf.evaluate(node_for("Transpose"), [big, np.array([1, 0], np.int32)], max_bytes=1 << 20)
    assert numpy_tf.evaluate(node_for("Transpose"), [big, np.array([1, 0], np.int32)])[0].shape == (600, 600)
    with pytest.raises(numpy_tf.KernelError, match="no NumPy kernel"):
        numpy_tf.evaluate(node_for("Erf"), [big])
    assert {"StridedSlice", "Rsqrt", "ConcatV2", "GatherV2", "Prod"} <= numpy_tf.supported_ops()
