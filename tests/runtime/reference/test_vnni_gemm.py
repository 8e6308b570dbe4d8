"""The fused int8 GEMM of the 1x1 convolutions on AVX512-VNNI (:class:`._gemm.VnniGemm`, the compiled
``vpdpbusd`` tiles of ``_jit_kernels.gemm_vnni`` with the requantization in the same pass).

* its outputs against onnxruntime's ``MatMulInteger`` sums (an independent integer GEMM) requantized
  with the int64 ``MultiplyByQuantizedMultiplier`` of :mod:`.fixedpoint`, on the operands that break
  fast integer kernels (all-min/all-max activations, zero points at both ends, weights at −128 and
  127) and on every row and column remainder of its 4-row, 64-column tiles;
* where it cannot be exact (a raw sum that could leave int32, weights beyond int8, K not a multiple
  of 4) it is not built;
* converter-made int8 models whose 1x1 convolutions take it give LiteRT's ``BUILTIN_REF`` integers on
  every tensor (``test_gemm`` and the real-model tests run them; here MobileNetV2's small ops model).

Skipped where the CPU (as LLVM sees it) has no AVX512-VNNI: the onnxruntime GEMM runs there.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference._gemm import IntegerGemm, VnniGemm, unsigned, vnni_exact
from graphwright.runtime.reference.fixedpoint import multiply_by_quantized_multiplier, quantize_multipliers
from graphwright.runtime.reference.requant import FastRequant
from tests.models import get_model

from ._oracle import assert_matches_reference

pytestmark = pytest.mark.skipif(not vnni_exact(), reason="no AVX512-VNNI here: the onnxruntime GEMM runs")


def _requant(rng: np.random.Generator, units: int, zp_out: int) -> tuple[FastRequant, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
    """A layer's double-rounding requantization: (compiled requantizer, bias, m, shift)."""
    m, shift = quantize_multipliers(rng.uniform(1e-4, 0.02, units))
    bias = rng.integers(-40000, 40000, units)
    fast = FastRequant.build(bias=bias, m=m, shift=shift, zp=zp_out, lo=-128, hi=127, rounding="double",
                             acc_dtype=np.float64, out_dtype=np.dtype(np.int8), native=True)
    assert fast is not None and fast.native is not None
    return fast, bias, m, shift


@pytest.mark.parametrize(("rows", "depth", "units", "zp_in", "extreme"), [
    (1, 4, 1, 0, None), (3, 8, 15, -128, None), (4, 16, 16, 127, None), (5, 16, 17, 3, None),
    (13, 24, 144, -128, -128), (13, 24, 144, 127, 127), (12544 // 16, 16, 96, -5, None),
    (49, 960, 160, 12, None), (7, 1152, 192, -128, -128), (6, 32, 200, 127, 127),
])
def test_fused_gemm_equals_onnxruntime_sums_requantized(rows: int, depth: int, units: int, zp_in: int,
                                                        extreme: int | None) -> None:
    rng = np.random.default_rng(rows * 7 + units)
    x = rng.integers(-128, 128, (rows, depth)).astype(np.int8) if extreme is None \
        else np.full((rows, depth), extreme, np.int8)
    w = rng.integers(-128, 128, (depth, units)).astype(np.float64)
    if extreme is not None:
        w[:, ::2] = -128
        w[:, 1::2] = 127
    fast, bias, m, shift = _requant(rng, units, zp_out=int(rng.integers(-128, 128)))
    fused = VnniGemm.build(w, zp_in, fast.native[1])  # type: ignore[index]
    ort = IntegerGemm.build(w, zp_in, np.dtype(np.int8), kinds=("u8u8",))
    assert fused is not None and ort is not None
    got = fused(x, np.empty((rows, units), np.int8))
    sums = ort(unsigned(x, np.empty(x.shape, np.uint8))).astype(np.int64)
    zp_out = int(fast.zp)
    want = np.clip(multiply_by_quantized_multiplier(sums + bias, m, shift, "double") + zp_out, -128, 127)
    assert np.array_equal(got, want)


def test_not_built_where_it_cannot_be_exact() -> None:
    rng = np.random.default_rng(3)
    constants = np.ones((7, 8), np.int64)
    assert VnniGemm.build(rng.integers(-128, 128, (6, 8)).astype(np.float64), 0, constants) is None  # K % 4
    assert VnniGemm.build(np.full((8, 8), 200.0), 0, constants) is None  # beyond int8
    assert VnniGemm.build(np.full((1 << 17, 8), -128.0), 0, constants) is None  # 255·Σ|w| ≥ 2^31


@pytest.mark.slow
def test_a_converter_made_model_on_it_matches_litert_reference() -> None:
    info = get_model("tflite_ops", "mobilenet_v2_int8")
    assert assert_matches_reference(info, seeds=range(4), jit=True) > 0
    interp = Interpreter(info.path, jit=True)
    interp.run({k: np.zeros(s, np.int8) for k, s in info.inputs.items()})
    fused = [n for n in interp.graph if isinstance(interp._cache[n].get("vnni"), VnniGemm)]
    assert fused  # its 1x1 convolutions took the fused GEMM
