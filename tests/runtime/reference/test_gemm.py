"""The exact integer GEMM of the 8-bit convolutions (onnxruntime's ``MatMulInteger``, :mod:`._gemm`).

* its int32 sums against int64 numpy products on the operands that break fast integer kernels:
  all-min/all-max activations, zero points at both ends, weights at −128 and 127, long sums;
* the per-process check of which weight kinds are exact catches a saturating kernel;
* converter-made int8 models whose every convolution runs on it — with their zero points moved
  to the extremes and weights set to −128 — still give LiteRT's ``BUILTIN_REF`` integers on
  every tensor.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.ir import DType, Model, QuantParams, Tensor
from graphwright.runtime.reference import Interpreter, _gemm
from graphwright.runtime.reference._gemm import IntegerGemm, VnniGemm, exact_kinds, unsigned
from tests.models import get_model

from ._oracle import assert_matches_reference


def test_widened_products_are_exact_on_this_cpu() -> None:
    """u8u8 (both operands widened to 16 bits) is exact on every MLAS kernel; the check must agree."""
    assert "u8u8" in exact_kinds()


def _expected(x: np.ndarray, zp: int, w: np.ndarray) -> np.ndarray:
    return (x.astype(np.int64) - zp) @ w.astype(np.int64)


CASES = [  # (activation dtype, zero point, K)
    (np.int8, -128, 27), (np.int8, 127, 64), (np.int8, 0, 960), (np.int8, -128, 8192),
    (np.uint8, 0, 144), (np.uint8, 255, 1280), (np.uint8, 128, 8192),
]


@pytest.mark.parametrize("kind", exact_kinds())
@pytest.mark.parametrize(("dtype", "zp", "depth"), CASES, ids=[f"{np.dtype(d).name}-zp{z}-k{k}" for d, z, k in CASES])
def test_integer_gemm_equals_int64_products(kind: str, dtype: type, zp: int, depth: int) -> None:
    rng = np.random.default_rng(depth + zp + 128)
    info = np.iinfo(dtype)
    w = rng.integers(-128, 128, (depth, 24)).astype(np.float32)
    w[:, 0], w[:, 1], w[:, 2] = -128, 127, 0  # whole columns at the extremes
    gemm = IntegerGemm.build(w, zp, np.dtype(dtype), kinds=(kind,))
    assert gemm is not None and gemm.kind == kind
    rows = [np.full((5, depth), info.min, dtype), np.full((5, depth), info.max, dtype),
            rng.integers(info.min, info.max, (300, depth), endpoint=True).astype(dtype)]
    for x in rows:
        got = gemm(unsigned(x, np.empty(x.shape, np.uint8)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _expected(x, zp, w))


@pytest.mark.parametrize("kind", exact_kinds())
def test_legacy_uint8_weights_with_a_zero_point(kind: str) -> None:
    """uint8 weights less their zero point (−zp_w … 255 − zp_w) do not fit int8: u8u8 takes them."""
    rng = np.random.default_rng(3)
    w = rng.integers(0, 256, (200, 16)) - 37
    gemm = IntegerGemm.build(w.astype(np.float64), 90, np.dtype(np.uint8), kinds=(kind,))
    if kind == "u8s8":
        assert gemm is None
        return
    assert gemm is not None
    x = rng.integers(0, 256, (50, 200)).astype(np.uint8)
    np.testing.assert_array_equal(gemm(x), _expected(x, 90, w))


def test_sums_that_could_wrap_stay_on_the_exact_float_path() -> None:
    w = np.full((70_000, 4), 127.0)  # 255·127·70000 > 2^31
    assert IntegerGemm.build(w, -128, np.dtype(np.int8)) is None
    assert IntegerGemm.build(np.full((8, 4), 0.5), 0, np.dtype(np.int8)) is None  # not integers
    assert IntegerGemm.build(np.ones((8, 4)), 0, np.dtype(np.int16)) is None  # 16-bit activations


def test_a_saturating_kernel_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A u8s8 kernel adding pairs of products in int16 with saturation (AVX2's ``vpmaddubsw``)
    fails the per-process check, so u8s8 is not used; the widened kind still is."""

    class Saturating:
        def __init__(self, b: np.ndarray, zb: np.ndarray | None, za: int) -> None:
            self.b, self.zb, self.za = b.astype(np.int64), zb, za

        def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            a = feeds["A"].astype(np.int64)
            b = self.b - (0 if self.zb is None else int(self.zb))
            if self.zb is None:  # pairs of u8·s8 products clamped to int16, as vpmaddubsw
                pairs = a[:, 0::2, None] * b[None, 0::2] + a[:, 1::2, None] * b[None, 1::2]
                raw = np.clip(pairs, -32768, 32767).sum(axis=1)
            else:
                raw = a @ b
            return [(raw - self.za * b.sum(axis=0)).astype(np.int32)]

    monkeypatch.setattr(_gemm, "_session", Saturating)
    exact_kinds.cache_clear()
    try:
        assert exact_kinds() == ("u8u8",)
    finally:
        monkeypatch.undo()
        exact_kinds.cache_clear()


#: operators that requantize their int8 input (any zero point), so a changed zero point stays a valid model
_REQUANTIZING = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL"})


def _extremes(model: Model) -> None:
    """The zero point of every int8 activation made and read by requantizing operators (and of
    the model's input) at −128 or 127, alternately; the first input channel of every filter at −128."""
    flip = False
    for node in model.graph:
        for v in node.outputs:
            if v.dtype is DType.INT8 and v.quant is not None and v.quant.scale.size == 1 \
                    and node.op in _REQUANTIZING and v.users() and all(u.op in _REQUANTIZING for u in v.users()) \
                    and not v.is_graph_output:
                v.quant = QuantParams(v.quant.scale, [127 if flip else -128])
                flip = not flip
        if node.op == "CONV_2D" and node.inputs[1].const is not None:
            w = node.inputs[1].const.numpy().copy()
            w[..., 0] = -128
            node.inputs[1].const = Tensor.from_numpy(w)
    for v in model.graph.inputs:
        if v.dtype is DType.INT8 and v.quant is not None and all(u.op in _REQUANTIZING for u in v.users()):
            v.quant = QuantParams(v.quant.scale, [-128])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["convs_int8", "mobilenet_v2_int8"])
def test_convolutions_on_the_integer_gemm_match_litert_reference(name: str, tmp_path: Path) -> None:
    info = get_model("tflite_ops", name)
    model = gw.load(info.path)
    _extremes(model)
    gw.save(model, tmp_path / "extremes.tflite")
    variant = replace(info, path=tmp_path / "extremes.tflite")
    for case in (info, variant):
        assert assert_matches_reference(case, seeds=range(4), jit=True) > 0
        interp = Interpreter(case.path, jit=True)
        interp.run({k: np.zeros(s, np.int8) for k, s in case.inputs.items()})
        convs = [n for n in interp.graph if n.op == "CONV_2D"]
        assert convs and all(isinstance(interp._cache[n].get("gemm"), IntegerGemm)  # or the fused VNNI GEMM (1x1)
                             or isinstance(interp._cache[n].get("vnni"), VnniGemm) for n in convs)
