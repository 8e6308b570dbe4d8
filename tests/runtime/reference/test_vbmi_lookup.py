"""The 8-bit table lookups on AVX512-VBMI (``elementwise._vbmi_lookup``: 64 bytes per step, two
``vpermi2b`` and a select) give numpy's gather, and the swish of an int8 EfficientNet-style model
read through them — in runs, where the gate LOGISTIC is left out and the MUL's table is called as a
runner, and in traces — equals LiteRT's ``BUILTIN_REF`` on its output, run after run."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.runtime.execute import prepare
from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference.table_lookup import _byte_lookup, _vbmi_lookup

from ._oracle import assert_matches_reference, feeds_for
from .conftest import model


def test_vector_lookup_is_numpy_gather() -> None:
    llvm = pytest.importorskip("llvmlite.binding")
    features = llvm.get_host_cpu_features()
    if not (features.get("avx512vbmi") and features.get("avx512bw") and features.get("avx512f")):
        pytest.skip("no AVX512-VBMI on this host (as LLVM sees it): the scalar gather runs")
    lookup = _vbmi_lookup()
    assert lookup is not None, "the host has AVX512-VBMI but the vector lookup failed its self-test"
    rng = np.random.default_rng(3)
    for size in (0, 1, 5, 63, 64, 65, 127, 128, 129, 1000, 64 * 97 + 31):
        table = rng.integers(0, 256, 256).astype(np.uint8)
        x = rng.integers(0, 256, size).astype(np.uint8)
        x[: min(size, 4)] = [0, 127, 128, 255][: min(size, 4)]  # both halves' edges
        out = np.full(size, 77, np.uint8)
        lookup(x, table, out)
        np.testing.assert_array_equal(out, table[x])
    # through _byte_lookup: int8 tensors of any shape, contiguous or not
    table = rng.integers(-128, 128, 256).astype(np.int8)
    run = _byte_lookup(table, True)
    x = rng.integers(-128, 128, (1, 13, 11, 7)).astype(np.int8)
    for view in (x, x[:, ::2, :, 1:]):
        got = run(view)
        assert got.dtype == np.int8 and got.shape == view.shape
        np.testing.assert_array_equal(got, table[view.view(np.uint8)])


def test_swish_through_vector_lookup_matches_litert_reference_kernels() -> None:
    info = model("tflite_ops", "efficientnet_b0_int8")
    assert assert_matches_reference(info, range(2), jit=True) > 0  # every tensor of two traces
    interp = Interpreter(info.path, jit=True)
    with prepare(info.path, backend="litert-ref") as oracle:
        for seed in range(4):  # runs: the gates left out from the second run on, the MUL tables as runners
            feeds = feeds_for(info, seed)
            want, got = oracle.run(dict(feeds)), interp.run(feeds)
            for name, array in want.items():
                np.testing.assert_array_equal(got[name], array, err_msg=f"seed {seed}: {name}")
    gated = [cache for node, cache in interp._main.caches.items() if node.op == "MUL" and cache.get("gated")]
    assert gated, "the model's swish MULs read one table of their input"
    assert any("compiled" in cache for cache in gated)
