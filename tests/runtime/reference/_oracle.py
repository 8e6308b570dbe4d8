"""The contract every per-operator corpus test asserts, against LiteRT's reference kernels
(``litert-ref``, the ``BUILTIN_REF`` resolver): every operator output, on several seeded
inputs (the first two all-min and all-max for integer inputs, all -1 / +1 for float ones):

* integer tensors (int8/int16/uint8 quantized, int32/int64/bool results) identical element by element;
* float tensors within ``rtol`` of the tensor's largest magnitude or — where that fails — within
  what LiteRT's own default kernels (``litert``: optimized kernels, XNNPACK) deviate from the
  reference kernels on that tensor (the issue's ``max(1e-5, LiteRT's deviation)``).

The seeds run one after another on one graphwright interpreter and one LiteRT interpreter (per
kernel set), as a deployed stateful model runs: variable tensors (LSTM/RNN states), resource
variables and the random generators carry over from seed to seed on both sides, as LiteRT
carries them across ``invoke()`` calls.  LiteRT's default kernels, run only where a float tensor
needs their deviation, are brought to the same point by replaying the earlier seeds first.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphwright.ir import Node, Value
from graphwright.runtime.base import Session
from graphwright.runtime.execute import prepare
from graphwright.runtime.reference import Interpreter
from tests.models import ModelInfo

__all__ = ["assert_matches_reference", "feeds_for"]


def feeds_for(info: ModelInfo, seed: int) -> dict[str, np.ndarray]:
    """Seed 0: every input at its minimum; seed 1: at its maximum; then seeded random values.
    Index inputs (given a range at build time in ``metadata["ranges"]``) stay in range."""
    ranges: Mapping[str, tuple[float, float]] = info.metadata.get("ranges", {})
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape in info.inputs.items():
        dtype = np.dtype(info.input_dtypes.get(name, info.input_dtype))
        if dtype == np.bool_:
            feeds[name] = np.full(shape, seed == 1) if seed < 2 else rng.random(shape) < 0.5
            continue
        if name in ranges and dtype.kind in "iu" and name not in info.quantization:
            lo, hi = int(ranges[name][0]), int(ranges[name][1]) - 1
        elif dtype.kind in "iu":
            lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
        else:
            lo, hi = -1.0, 1.0
        if seed == 0:
            feeds[name] = np.full(shape, lo, dtype)
        elif seed == 1:
            feeds[name] = np.full(shape, hi, dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
        else:
            feeds[name] = rng.uniform(lo, hi, shape).astype(dtype)
    return feeds


def _litert_keeps(node: Node, value: Value) -> bool:
    """Whether LiteRT gives ``value`` a value to compare: not a resource variable's handle, nor a
    WHILE output nothing reads (LiteRT leaves such loop values unallocated)."""
    if value.dtype is not None and value.dtype.value == "resource":
        return False
    return not (node.op == "WHILE" and not value.uses() and not value.is_graph_output)


def assert_matches_reference(info: ModelInfo, seeds: range = range(6), *, rtol: float = 1e-5,
                             jit: bool | None = None, other: str = "litert-ref") -> int:
    """Assert the contract above on every operator output; return how many tensors were compared."""
    interp = Interpreter(info.path, jit=jit)
    names = [v.name for node in interp.graph for v in node.outputs if _litert_keeps(node, v)]
    oracle = prepare(info.path, backend=other, options={"preserve_all_tensors": True})
    optimized = _Replayed(info, names)  # LiteRT's default kernels, run when a float tensor needs them
    history: list[dict[str, np.ndarray]] = []  # the feeds run so far, to replay on them
    compared = 0
    for seed in seeds:
        feeds = feeds_for(info, seed)
        history.append(feeds)
        mine = interp.trace(feeds)
        theirs = oracle.run(dict(feeds), names)
        default: dict[str, np.ndarray] | None = None  # LiteRT's default kernels on this seed, run when needed
        for node in interp.graph:
            for v in node.outputs:
                if not _litert_keeps(node, v):
                    continue
                assert v.name in theirs, f"{info.name}: LiteRT has no tensor {v.name!r}"
                a, b = np.asarray(mine[v.name]), np.asarray(theirs[v.name])
                where = f"{info.name} seed {seed}: {node.op} {v.name!r}"
                assert a.shape == b.shape, f"{where}: shape {a.shape} vs {b.shape}"
                assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} vs {b.dtype}"
                if a.dtype.kind in "fc":  # float and complex: within the bound
                    finite = np.isfinite(b)
                    np.testing.assert_array_equal(np.isfinite(a), finite, err_msg=where)
                    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=where)
                    scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0
                    bound = rtol * max(scale, 1e-30)
                    if finite.any() and float(np.abs(a[finite] - b[finite]).max()) > bound:
                        if default is None:
                            default = optimized.tensors(history)
                        theirs_default = np.asarray(default[v.name])[finite].astype(np.complex128 if
                                                                                   a.dtype.kind == "c" else np.float64)
                        bound = max(bound, float(np.abs(theirs_default - b[finite]).max()))
                    np.testing.assert_allclose(a[finite], b[finite], rtol=0, atol=bound, err_msg=where)
                else:
                    if not np.array_equal(a, b):
                        diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
                        raise AssertionError(f"{where}: {np.count_nonzero(diff)} of {a.size} elements differ "
                                             f"(max {diff.max()})")
                compared += 1
    return compared


class _Replayed:
    """LiteRT's default kernels on one interpreter, made when first needed, that has run every
    earlier feed first, in order, so that its state (variables, generators) is the oracle's."""

    def __init__(self, info: ModelInfo, names: list[str]) -> None:
        self.info, self.names = info, names
        self.session: Session | None = None
        self.done = 0  # how many feeds of the history it has run

    def tensors(self, history: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Every tensor of ``names`` on the last feeds of ``history``."""
        if self.session is None:
            self.session = prepare(self.info.path, backend="litert", options={"preserve_all_tensors": True})
        for feeds in history[self.done:-1]:
            self.session.run(dict(feeds), self.names)
        self.done = len(history)
        return self.session.run(dict(history[-1]), self.names)
