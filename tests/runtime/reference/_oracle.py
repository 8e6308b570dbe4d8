"""The contract every per-operator corpus test asserts, against LiteRT's reference kernels
(``litert-ref``, the ``BUILTIN_REF`` resolver): every operator output, on several seeded
inputs (the first two all-min and all-max for integer inputs, all -1 / +1 for float ones):

* integer tensors (int8/int16/uint8 quantized, int32/int64/bool results) identical element by element;
* float tensors within ``rtol`` of the tensor's largest magnitude or — where that fails — within
  what LiteRT's own default kernels (``litert``: optimized kernels, XNNPACK) deviate from the
  reference kernels on that tensor (the issue's ``max(1e-5, LiteRT's deviation)``);
* but a QUANTIZE of a float operator's output, one code off only where its float input differs
  from LiteRT's: then checked again on LiteRT's float input, exactly, with everything after it
  (see ``assert_matches_reference``);
* and an int8 / int16 SUM, whose ``BUILTIN_REF`` kernel is wrong (:data:`BROKEN_REFERENCE`): checked
  alone (a one-operator model of it) against TensorFlow Lite Micro, exactly; what reads it is
  then checked on ``BUILTIN_REF``'s own SUM output.

The seeds run one after another on one graphwright interpreter and one LiteRT interpreter (per
kernel set), as a deployed stateful model runs: variable tensors (LSTM/RNN states), resource
variables and the random generators carry over from seed to seed on both sides, as LiteRT
carries them across ``invoke()`` calls.  LiteRT's default kernels, run only where a float tensor
needs their deviation, are brought to the same point by replaying the earlier seeds first.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from graphwright.formats import load, save
from graphwright.ir import Node, Value
from graphwright.runtime.base import Session
from graphwright.runtime.execute import Job, execute, prepare
from graphwright.runtime.reference import Interpreter
from tests.models import ModelInfo

__all__ = ["BROKEN_REFERENCE", "assert_matches_reference", "feeds_for"]

#: (operator, input type) whose LiteRT ``BUILTIN_REF`` kernel computes something else than the
#: operator means, so that another oracle checks it, and why
_MISREAD_SUM = ("LiteRT's reduce.cc EvalSum<kReference> calls reference_ops::QuantizedMeanOrSum with "
                "GetTensorData<uint8_t> for int8 and int16 tensors too: the input is read as uint8 bytes (int8 -1 as "
                "255), the sum clamped to [0, 255] and stored as bytes (mostly -1). LiteRT's optimized kernel (float "
                "rescaling, within one code) and TFLM (the reference integer rescaling, as graphwright) compute "
                "the signed sum; test_reduce_ops checks the converter's quantized SUMs on TFLM likewise")
BROKEN_REFERENCE = {("SUM", "int8"): _MISREAD_SUM, ("SUM", "int16"): _MISREAD_SUM}


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
                             jit: bool | None = None, other: str = "litert-ref",
                             boundaries: list[str] | None = None) -> int:
    """Assert the contract above on every operator output; return how many tensors were compared.

    One exception, where a float tensor (within its bound) is rounded to integers: a QUANTIZE of
    a float operator's output may differ from LiteRT's by one code, only at elements whose float
    input differs from LiteRT's — the float kernel's rounding (LiteRT's LSTM/FFT/CONV_3D sum in
    another order) moved a value across a code boundary.  Then that seed is traced again with
    LiteRT's float values given to the QUANTIZE (``Interpreter.trace(given=...)``), which must
    then equal LiteRT's exactly, as must everything after it; each such tensor is appended to
    ``boundaries`` (when given) as ``"seed S: name (n elements ±1)"``."""
    names = [v.name for node in Interpreter(info.path, jit=jit).graph for v in node.outputs
             if _litert_keeps(node, v)]
    oracle = prepare(info.path, backend=other,  # TFLM keeps every tensor anyway
                     options={"preserve_all_tensors": True} if other.startswith("litert") else {})
    optimized = _Replayed(info, names)  # LiteRT's default kernels, run when a float tensor needs them
    done: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []  # (feeds, given) run so far
    interp = Interpreter(info.path, jit=jit)
    compared = 0
    for seed in seeds:
        feeds = feeds_for(info, seed)
        theirs = oracle.run(dict(feeds), names)
        given: dict[str, np.ndarray] = {}
        while True:
            mine = interp.trace(feeds, given)
            count, boundary = _compare(info, seed, interp, mine, theirs, rtol, given,
                                       lambda feeds=feeds: optimized.tensors([f for f, _ in done] + [feeds]), other)
            if boundary is None:
                break
            value, differing = boundary
            if boundaries is not None:
                boundaries.append(f"seed {seed}: {value}" + (f" ({differing} elements ±1)" if differing else ""))
            # trace this seed again, LiteRT's float values given to the QUANTIZE, on an interpreter
            # brought to the state before this seed (the earlier seeds replayed with their givens)
            interp = Interpreter(info.path, jit=jit)
            for earlier, earlier_given in done:
                interp.trace(earlier, earlier_given)
        compared += count
        done.append((feeds, given))
    return compared


def _compare(info: ModelInfo, seed: int, interp: Interpreter, mine: Mapping[str, np.ndarray],
             theirs: Mapping[str, np.ndarray], rtol: float, given: dict[str, np.ndarray],
             default_kernels: Callable[[], dict[str, np.ndarray]], other: str) -> tuple[int, tuple[str, int] | None]:
    """Compare every tensor in execution order; how many were compared and None, or — at a QUANTIZE
    one code off because its float input differs (see above) — its name and how many elements
    differ, after adding LiteRT's float input to ``given``.  Raises on any other difference."""
    compared = 0
    default: dict[str, np.ndarray] | None = None
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
                        default = default_kernels()
                    theirs_default = np.asarray(default[v.name])[finite].astype(np.complex128 if
                                                                               a.dtype.kind == "c" else np.float64)
                    bound = max(bound, float(np.abs(theirs_default - b[finite]).max()))
                np.testing.assert_allclose(a[finite], b[finite], rtol=0, atol=bound, err_msg=where)
            elif not np.array_equal(a, b):
                diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
                if other == "litert-ref" and node.inputs and node.inputs[0] is not None \
                        and node.outputs[0].name not in given \
                        and (node.op, np.asarray(mine[node.inputs[0].name]).dtype.name) in BROKEN_REFERENCE:
                    _assert_alone_on_tflm(info, node, mine, where)
                    given[v.name] = b.copy()  # what reads it: checked on BUILTIN_REF's own value
                    return compared, (f"{v.name} (BUILTIN_REF's broken {node.op}; TFLM exact)", 0)
                source = node.inputs[0] if node.op == "QUANTIZE" and node.inputs else None
                if source is not None and source.name not in given and diff.max() == 1 \
                        and np.asarray(theirs.get(source.name, a)).dtype.kind == "f":
                    x, y = np.asarray(mine[source.name]), np.asarray(theirs[source.name])
                    moved = (x != y).reshape(x.shape)
                    if moved.shape == diff.shape and moved[diff > 0].all():
                        given[source.name] = y.copy()
                        return compared, (v.name, int(np.count_nonzero(diff)))
                raise AssertionError(f"{where}: {np.count_nonzero(diff)} of {a.size} elements differ "
                                     f"(max {diff.max()})")
            compared += 1
    return compared, None


class _Replayed:
    """LiteRT's default kernels on one interpreter, made when first needed, that has run every
    earlier feed first, in order, so that its state (variables, generators) is the oracle's."""

    def __init__(self, info: ModelInfo, names: list[str]) -> None:
        self.info, self.names = info, names
        self.session: Session | None = None
        self.done = 0  # how many feeds of the history it has run
        self.last: dict[str, np.ndarray] = {}  # its tensors on the last of them

    def tensors(self, history: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Every tensor of ``names`` on the last feeds of ``history`` (each feed runs once)."""
        if self.done == len(history):
            return self.last
        if self.session is None:
            self.session = prepare(self.info.path, backend="litert", options={"preserve_all_tensors": True})
        for feeds in history[self.done:-1]:
            self.session.run(dict(feeds), self.names)
        self.done = len(history)
        self.last = self.session.run(dict(history[-1]), self.names)
        return self.last


def _assert_alone_on_tflm(info: ModelInfo, node: Node, mine: Mapping[str, np.ndarray], where: str) -> None:
    """``node`` as a one-operator model (its first input fed, the others constants) on TFLM: its
    outputs must equal ours (traced on the same input, which matched LiteRT's)."""
    model = load(info.path)
    alone = next(n for n in model.graph if n.outputs and n.outputs[0].name == node.outputs[0].name)
    model.graph.set_outputs(list(alone.outputs))
    model.graph.remove([n for n in list(model.graph) if n is not alone], force=True)
    x = alone.inputs[0]
    model.graph.set_inputs([x])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "alone.tflite"
        save(model, path)
        names = [v.name for v in alone.outputs]
        micro = execute(path, {x.name: np.asarray(mine[x.name])}, Job(backend="tflm", outputs=names)).outputs
    for name in names:
        if not np.array_equal(micro[name], mine[name]):
            diff = np.abs(np.asarray(micro[name], np.int64) - np.asarray(mine[name], np.int64))
            raise AssertionError(f"{where}: differs from TFLM's (alone) in {np.count_nonzero(diff)} of {diff.size} "
                                 f"elements (max {diff.max()})")
