"""Exact 8-bit integer GEMMs for the convolutions, on onnxruntime's MLAS.

A convolution's sums ``Σ_k (x[m, k] − zp_in)·W[k, n]`` (8-bit activations, 8-bit weights,
weight zero point removed) are what onnxruntime's ``MatMulInteger`` computes: unsigned
activations ``a`` with a scalar zero point ``za``, weights ``b`` with a zero point ``zb``
(scalar or per column), int32 sums of ``(a − za)·(b − zb)``.  MLAS runs it with the
CPU's integer dot-product instructions (AVX512-VNNI / AVX-VNNI ``vpdpbusd``, AVX2
``vpmaddubsw``/``vpmaddwd``, NEON ``sdot``), 3–4x faster than the same sums as a float32
BLAS GEMM on MobileNet's shapes, with a per-call cost of ~7 µs.

* int8 activations become unsigned by flipping their sign bit: ``a = x + 128`` (one xor per
  byte), ``za = zp_in + 128``; uint8 activations are read as they are, ``za = zp_in``.
* Weights are passed as int8 (``b = W``, "u8s8") where the CPU's u8s8 kernel is exact, else
  as uint8 with a zero point (``b = W + zb``, "u8u8", MLAS widens both operands to 16 bits
  and multiplies with ``vpmaddwd``, exact on every CPU).  MLAS's AVX2 u8s8 kernel without
  VNNI adds pairs of products in int16 with saturation (``vpmaddubsw``), so it is not exact
  for all inputs; which kinds are exact is not a documented property of a CPU, so it is
  measured: :func:`exact_kinds` runs both on operands that saturate that kernel (all 255 against
  all 127 and all −128, long sums) and on random ones, and compares with int64 numpy, once per
  process.  A kind that differs is never used.
* The sums are used only where no int32 sum can overflow (``max|a − za| · Σ_k |W[k, n]| <
  2^31``), so they are the exact integers LiteRT's reference kernels accumulate.

Sessions are one-node models built once per layer (~0.5 ms) with one intra-op thread (as
LiteRT is benchmarked; the interpreter is a checker, its results must not depend on
threading) and graph optimizations off (the node runs as written).  A call goes to the
session's compiled ``run`` directly with one kept ``RunOptions``: the Python wrapper's
per-call input validation (our one fixed uint8 input needs none) and the default options
it builds cost ~2 µs of the ~6 µs a small call takes.
Cost: O(M·K·N) per call, memory O(M·N) for the int32 sums.

Where the CPU has AVX512-VNNI (and a once-per-process self-test passes, :func:`vnni_exact`), the int8
1x1 and KxK convolutions run :class:`VnniGemm` instead: compiled ``vpdpbusd`` tiles (numba intrinsics,
``_jit_kernels.gemm_vnni``) with the requantization fused, so the int32 sums stay in cache — no
onnxruntime call, no unsigned copy of the input, no second pass over sums in memory.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["IntegerGemm", "exact_kinds", "unsigned"]

#: the largest |sum| an int32 accumulator holds
_INT32_LIMIT = 2.0**31


@functools.cache
def _ort() -> tuple[object, object, object, object] | None:
    """(onnxruntime, onnx.helper, onnx.numpy_helper, onnx.TensorProto), or None when either does not load."""
    try:
        import onnxruntime  # type: ignore[import-untyped]  # lazy: slow to import, needed for 8-bit GEMMs only
        from onnx import TensorProto, helper, numpy_helper  # lazy: only to build the one-node GEMM models
    except Exception:  # a missing or broken install: the float GEMMs stay
        return None
    return onnxruntime, helper, numpy_helper, TensorProto


def _session(b: np.ndarray, zb: np.ndarray | None, za: int) -> object:
    """A session computing ``Y = Σ_k (A[m, k] − za)·(b[k, n] − zb)`` (int32) for uint8 ``A`` [M, K]."""
    ort, helper, numpy_helper, proto = _ort()  # type: ignore[misc]
    k, n = b.shape
    inputs = ["A", "B", "za"]
    initializers = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array(za, np.uint8), "za")]
    if zb is not None:
        inputs.append("zb")
        initializers.append(numpy_helper.from_array(zb, "zb"))
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", inputs, ["Y"])], "gemm",
        [helper.make_tensor_value_info("A", proto.UINT8, [None, k])],
        [helper.make_tensor_value_info("Y", proto.INT32, [None, n])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_cpu_mem_arena = False  # outputs from malloc: the memory the last layer freed, still in cache
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _weights(matrix: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(b, zb)`` with ``b − zb = matrix`` (exact integers [K, N]) for ``kind``, or None if they do not fit."""
    lo, hi = float(matrix.min(initial=0.0)), float(matrix.max(initial=0.0))
    if kind == "u8s8":
        if lo < -128 or hi > 127:
            return None
        return np.ascontiguousarray(matrix.astype(np.int8)), None
    zb = 128 if lo >= -128 and hi <= 127 else int(-lo)  # int8 weights, or uint8 ones less their zero point
    if hi + zb > 255:
        return None
    return np.ascontiguousarray((matrix + zb).astype(np.uint8)), np.array(zb, np.uint8)


def _matches(kind: str, a: np.ndarray, matrix: np.ndarray, za: int) -> bool:
    made = _weights(matrix, kind)
    if made is None:
        return False
    got = _session(*made, za).run(None, {"A": a})[0]  # type: ignore[attr-defined]
    return bool(np.array_equal(got, (a.astype(np.int64) - za) @ matrix.astype(np.int64)))


@functools.cache
def exact_kinds() -> tuple[str, ...]:
    """The weight kinds ("u8s8", "u8u8") whose onnxruntime sums are exact on this CPU (see the module
    docstring); empty without onnxruntime.  Measured once per process."""
    if _ort() is None:
        return ()
    rng = np.random.default_rng(11)
    cases = []
    for k in (64, 1000):  # the saturating extremes, then random operands
        cases.append((np.full((8, k), 255, np.uint8), np.full((k, 32), 127.0), 0))
        cases.append((np.full((8, k), 255, np.uint8), np.full((k, 32), -128.0), 0))
        cases.append((np.zeros((8, k), np.uint8), np.full((k, 32), -128.0), 255))
        cases.append((rng.integers(0, 256, (37, k)).astype(np.uint8),
                      rng.integers(-128, 128, (k, 19)).astype(np.float64), int(rng.integers(0, 256))))
    kinds = []
    try:
        for kind in ("u8s8", "u8u8"):
            if all(_matches(kind, a, w, za) for a, w, za in cases):
                kinds.append(kind)
    except Exception:  # an onnxruntime that cannot build or run the node: no integer GEMM
        return ()
    return tuple(kinds)


def unsigned(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """8-bit activations as the uint8 ``A`` of :class:`IntegerGemm` into ``out`` (same shape): int8 ``x + 128``
    (the sign bit flipped), uint8 ``x`` itself."""
    if x.dtype == np.int8:
        np.bitwise_xor(x.view(np.uint8), np.uint8(0x80), out=out)
    else:
        np.copyto(out, x)
    return out


class IntegerGemm:
    """``(x − zp_in) @ matrix`` as exact int32 sums for 8-bit ``x`` given as :func:`unsigned` rows [M, K]."""

    __slots__ = ("_args", "_run", "kind", "za")

    def __init__(self, session: object, kind: str, za: int) -> None:
        self.kind, self.za = kind, za
        inner = getattr(session, "_sess", None)  # the compiled session behind onnxruntime's Python wrapper
        if inner is not None and hasattr(inner, "run"):
            ort = _ort()[0]  # type: ignore[index]
            self._run, self._args = inner.run, (["Y"], ort.RunOptions())  # type: ignore[attr-defined]
        else:  # another onnxruntime layout: its public run
            self._run, self._args = session.run, (None, None)  # type: ignore[attr-defined]

    @classmethod
    def build(cls, matrix: np.ndarray, zp_in: int, in_dtype: np.dtype, kinds: tuple[str, ...] | None = None
              ) -> IntegerGemm | None:
        """The GEMM of the exact integer weights ``matrix`` [K, N] for ``in_dtype`` (int8 or uint8)
        activations with zero point ``zp_in``, or None where it would not be exact or onnxruntime
        is missing; ``kinds``: the weight kinds allowed (default :func:`exact_kinds`)."""
        if in_dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) or matrix.ndim != 2 or 0 in matrix.shape:
            return None
        za = zp_in + 128 if in_dtype == np.int8 else zp_in
        if not 0 <= za <= 255 or not np.array_equal(matrix, np.rint(matrix)):
            return None
        span = max(za, 255 - za)
        if span * float(np.abs(matrix).sum(axis=0).max()) >= _INT32_LIMIT:
            return None  # an int32 sum could wrap: the float path keeps the reference's arithmetic
        for kind in exact_kinds() if kinds is None else kinds:
            made = _weights(matrix, kind)
            if made is not None:
                return cls(_session(*made, za), kind, za)
        return None

    def __call__(self, a: np.ndarray) -> np.ndarray:
        """int32 sums [M, N] of the uint8 rows ``a`` [M, K]."""
        names, options = self._args
        return self._run(names, {"A": a}, options)[0]  # type: ignore[no-any-return, operator]


# -- the fused int8 GEMM on AVX512-VNNI (compiled, see ``_jit_kernels.gemm_vnni``) ----------------------


def _pack(matrix: np.ndarray) -> np.ndarray:
    """int8 weights [K, N] (K a multiple of 4) as ``gemm_vnni`` reads them: [blocks, K/4, 64, 4], block
    ``b`` holding columns ``64·b ..`` with four consecutive k of a column side by side; the last block
    laid out as wide as it needs (16·vectors columns, zeros beyond N) from its start."""
    k, n = matrix.shape
    blocks = (n + 63) // 64
    packed = np.zeros((blocks, k // 4, 64, 4), np.int8)
    for b in range(blocks):
        part = matrix[:, 64 * b:64 * b + 64]
        width = 16 * ((part.shape[1] + 15) // 16)
        block = np.zeros((k // 4, width, 4), np.int8)
        block[:, :part.shape[1], :] = part.reshape(k // 4, 4, -1).transpose(0, 2, 1)
        packed[b].reshape(-1)[:block.size] = block.reshape(-1)
    return packed


class VnniGemm:
    """``requantize((x − zp_in) @ matrix)`` for int8 ``x`` rows [M, K] in one compiled pass with the
    requantization fused (:func:`_jit_kernels.gemm_vnni`): no int32 sums written to memory and read back,
    no unsigned copy of the input, no onnxruntime call.  Built only where :func:`vnni_exact` holds, K is
    a multiple of 4, the weights are int8 and no raw sum can leave int32."""

    __slots__ = ("kernel", "offset4", "p4", "packed", "units")

    def __init__(self, kernel: object, packed: np.ndarray, offset: np.ndarray, constants: np.ndarray) -> None:
        self.kernel, self.packed, self.units = kernel, packed, int(offset.size)
        self.offset4 = np.ascontiguousarray(np.tile(offset, 4))
        self.p4 = np.ascontiguousarray(np.tile(constants, (1, 4)))

    @classmethod
    def build(cls, matrix: np.ndarray, zp_in: int, constants: np.ndarray, checked: bool = True) -> VnniGemm | None:
        """For exact integer weights ``matrix`` [K, N], int8 activations with zero point ``zp_in`` and the
        requantization constants ``constants`` [7, N] (``FastRequant.native``'s), or None; ``checked``:
        only where :func:`vnni_exact` holds (its own self-test builds unchecked)."""
        if matrix.ndim != 2 or 0 in matrix.shape or matrix.shape[0] % 4 or (checked and not vnni_exact()):
            return None
        if matrix.min() < -128 or matrix.max() > 127 or not np.array_equal(matrix, np.rint(matrix)):
            return None
        weights = matrix.astype(np.int64)
        if 255.0 * float(np.abs(weights).sum(axis=0).max()) >= _INT32_LIMIT or constants.shape != (7, matrix.shape[1]):
            return None
        from . import _jit_kernels  # lazy: numba

        offset = (zp_in + 128) * weights.sum(axis=0)
        return cls(_jit_kernels.gemm_vnni, _pack(weights.astype(np.int8)), offset.astype(np.int64),
                   np.asarray(constants, np.int64))

    def __call__(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` [M, N] (8-bit) from contiguous int8 rows ``x`` [M, K]."""
        self.kernel(x, self.packed, self.units, self.offset4, self.p4, out)  # type: ignore[operator]
        return out


@functools.cache
def vnni_exact() -> bool:
    """The CPU has AVX512-VNNI (as LLVM sees the host) and the fused kernel gives the same integers as
    int64 numpy on operands at the extremes and random ones, with every row and column remainder —
    checked once per process; False on any failure (another CPU, a numba that cannot compile it)."""
    try:
        import llvmlite.binding as llvm  # lazy: numba is optional; its LLVM binding only for this check

        features = llvm.get_host_cpu_features()
        if not (features.get("avx512vnni") and features.get("avx512bw") and features.get("avx512f")):
            return False
        rng = np.random.default_rng(5)
        for rows, depth, units, zp in ((9, 8, 20, -128), (13, 36, 77, 127), (5, 4, 130, 3), (4, 64, 16, 0)):
            for fill in (None, -128, 127):
                x = rng.integers(-128, 128, (rows, depth)).astype(np.int8) if fill is None \
                    else np.full((rows, depth), fill, np.int8)
                w = rng.integers(-128, 128, (depth, units))
                if fill is not None:
                    w[:, : units // 2] = -128
                    w[:, units // 2:] = 127
                ones = np.ones(units, np.int64)
                # constants of a requantization that leaves the sums (clamped to int8 after a shift by 8)
                constants = np.stack([ones << 30, ones << 30, ones << 7, 8 * ones, ones, -128 * ones, 127 * ones])
                made = VnniGemm.build(w.astype(np.float64), zp, constants, checked=False)
                if made is None:
                    return False
                got = made(x, np.empty((rows, units), np.int8))
                acc = (x.astype(np.int64) - zp) @ w.astype(np.int64)
                h = (acc * (1 << 30) + (1 << 30)) >> 31
                want = np.clip((h + (1 << 7) - (h < 0)) >> 8, -128, 127)
                if not np.array_equal(got, want):
                    return False
    except Exception:  # no VNNI-capable compile here: the onnxruntime GEMM stays
        return False
    return True
