"""The reference interpreter against LiteRT on converter-made models.

* vs LiteRT's reference kernels (``litert-ref``): every element of every
  operator output identical, on 20 seeded inputs per model (int8 and legacy uint8);
* vs the default kernels (``litert``): within ±1 LSB with single rounding,
  exact share reported — and, measured here, equal on every element of every layer;
* float models: within 1e-5 relative.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright.ir import DType
from graphwright.runtime import prepare, run
from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference.layers import compare_layers

from .conftest import FLOAT_MODELS, INT8_MODELS, SEEDS, model, random_feeds
from .uint8_models import write_uint8_model

pytestmark = pytest.mark.slow


def _assert_bit_exact(path: Path, feeds: dict[str, np.ndarray], jit: bool | None = None) -> int:
    report = compare_layers(path, feeds, other="litert-ref", jit=jit)
    assert report.missing == []
    assert report.first_difference is None, report.summary()
    assert report.exact_share == 1.0
    return len(report.layers)


@pytest.mark.parametrize(("family", "name"), INT8_MODELS, ids=[n for _, n in INT8_MODELS])
def test_int8_every_tensor_identical_to_litert_reference_kernels(family: str, name: str) -> None:
    info = model(family, name)
    assert Interpreter(info.path).jit  # the default path, compiled ([dev] installs numba)
    num_ops = len(Interpreter(info.path).graph)
    for seed in SEEDS:
        feeds = random_feeds(info.inputs, info.input_dtypes, seed)
        assert _assert_bit_exact(info.path, feeds) >= num_ops


@pytest.mark.parametrize(("family", "name"), INT8_MODELS, ids=[n for _, n in INT8_MODELS])
def test_int8_numpy_path_identical_to_litert_reference_kernels(family: str, name: str) -> None:
    """Without numba: the same contract (fewer seeds; the next test ties the two paths on all of them)."""
    info = model(family, name)
    for seed in SEEDS[:3]:
        _assert_bit_exact(info.path, random_feeds(info.inputs, info.input_dtypes, seed), jit=False)


@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize(("family", "name"), INT8_MODELS, ids=[n for _, n in INT8_MODELS])
def test_compiled_and_numpy_paths_give_identical_tensors(family: str, name: str, rounding: str, uint8_dir: Path) -> None:
    info = model(family, name)
    legacy = write_uint8_model(info.path, uint8_dir / f"{name}_uint8_paths.tflite")
    for path in (info.path, legacy):
        compiled, plain = Interpreter(path, rounding=rounding, jit=True), Interpreter(path, rounding=rounding, jit=False)
        inputs = {s.name: tuple(d or 1 for d in s.shape) for s in plain.inputs}  # type: ignore[union-attr]
        dtypes = {s.name: s.dtype.value for s in plain.inputs}
        for seed in SEEDS:
            feeds = random_feeds(inputs, dtypes, seed)
            a, b = compiled.trace(feeds), plain.trace(feeds)
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{path.name} seed {seed}: {key}")


DEFAULT_KERNEL_MODELS = INT8_MODELS


@pytest.mark.parametrize(("family", "name"), DEFAULT_KERNEL_MODELS, ids=[n for _, n in DEFAULT_KERNEL_MODELS])
def test_int8_within_one_lsb_of_default_kernels(family: str, name: str) -> None:
    info = model(family, name)
    interp = Interpreter(info.path, rounding="single")
    exact = total = 0
    with prepare(info.path, backend="litert") as session:
        for seed in range(5):
            feeds = random_feeds(info.inputs, info.input_dtypes, seed)
            mine, theirs = interp.run(feeds), session.run(feeds)
            for key, value in mine.items():
                diff = np.abs(value.astype(np.int64) - theirs[key].astype(np.int64))
                assert diff.max() <= 1, f"{name} seed {seed}: output {key} differs by {diff.max()}"
                exact += int(np.count_nonzero(diff == 0))
                total += diff.size
    report = compare_layers(info.path, random_feeds(info.inputs, info.input_dtypes, 0), other="litert",
                            rounding="single", tolerance=1)
    assert report.first_difference is None, report.summary()
    print(f"{name}: {100 * exact / total:.2f}% of output elements exact vs default kernels; {report.summary()}")


@pytest.mark.parametrize(("family", "name"), INT8_MODELS, ids=[n for _, n in INT8_MODELS])
def test_single_rounding_equals_the_default_kernels_on_every_layer(family: str, name: str, uint8_dir: Path) -> None:
    """Single rounding emulates LiteRT's default (XNNPACK) kernels: float32 requantization of
    convolutions, the 8-fractional-bit QUANTIZE — every element of every layer, int8 and legacy
    uint8 (measured on this x86 machine; the ±1 LSB contract above is what holds everywhere)."""
    info = model(family, name)
    legacy = write_uint8_model(info.path, uint8_dir / f"{name}_uint8_single.tflite")
    for path in (info.path, legacy):
        interp = Interpreter(path, rounding="single")
        inputs = {s.name: tuple(d or 1 for d in s.shape) for s in interp.inputs}  # type: ignore[union-attr]
        dtypes = {s.name: s.dtype.value for s in interp.inputs}
        for seed in range(3):
            report = compare_layers(path, random_feeds(inputs, dtypes, seed), other="litert", rounding="single")
            assert report.first_difference is None, f"{path.name}: {report.summary()}"


def test_double_rounding_differs_from_default_kernels_somewhere() -> None:
    """The two rounding modes are really different (else the ±1 test above proves little)."""
    info = model("tflite_ops", "mobilenet_v2_int8")
    feeds = random_feeds(info.inputs, info.input_dtypes, 0)
    report = compare_layers(info.path, feeds, other="litert", rounding="double")
    assert report.first_difference is not None
    assert report.first_difference.op in {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD"}


@pytest.mark.parametrize(("family", "name"), FLOAT_MODELS, ids=[n for _, n in FLOAT_MODELS])
def test_float_models_within_1e_5_relative(family: str, name: str) -> None:
    info = model(family, name)
    interp = Interpreter(info.path)
    with prepare(info.path, backend="litert-ref") as session:
        for seed in range(5):
            feeds = random_feeds(info.inputs, info.input_dtypes, seed)
            mine, theirs = interp.run(feeds), session.run(feeds)
            for key, value in mine.items():
                assert value.dtype == np.float32
                scale = max(float(np.abs(theirs[key]).max()), 1e-30)
                np.testing.assert_allclose(value, theirs[key], rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize(("family", "name"), INT8_MODELS, ids=[n for _, n in INT8_MODELS])
def test_legacy_uint8_identical_to_litert_reference_kernels(family: str, name: str, uint8_dir: Path) -> None:
    info = model(family, name)
    path = write_uint8_model(info.path, uint8_dir / f"{name}_uint8.tflite")
    interp = Interpreter(path)
    assert all(spec.dtype in (DType.UINT8, DType.FLOAT32) for spec in interp.inputs)
    weights = [n.inputs[1] for n in interp.graph if n.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w is not None and w.dtype is DType.UINT8 for w in weights)
    assert not any(v.dtype is DType.INT8 for n in interp.graph for v in n.outputs)
    inputs = {s.name: tuple(d or 1 for d in s.shape) for s in interp.inputs}  # type: ignore[union-attr]
    dtypes = {s.name: s.dtype.value for s in interp.inputs}
    for seed in SEEDS:
        _assert_bit_exact(path, random_feeds(inputs, dtypes, seed))


def test_reference_backend_through_the_runtime_interface() -> None:
    info = model("tflite_model", "int8")
    feeds = random_feeds(info.inputs, info.input_dtypes, 3)
    mine = run(info.path, feeds, backend="reference")
    theirs = run(info.path, feeds, backend="litert-ref")
    assert list(mine) == list(theirs)
    for key in mine:
        np.testing.assert_array_equal(mine[key], theirs[key])
    single = run(info.path, feeds, backend="reference", options={"rounding": "single"})
    assert list(single) == list(mine)


@pytest.mark.parametrize(("family", "name"), FLOAT_MODELS, ids=[n for _, n in FLOAT_MODELS])
def test_float_models_with_infinities_as_litert_reference_kernels(family: str, name: str) -> None:
    """Infinite inputs: fused activations clamp to ±FLT_MAX (an operator with no activation
    included), as LiteRT's float kernels do, so infinities do not travel where LiteRT's do not."""
    info = model(family, name)
    interp = Interpreter(info.path)
    names = [v.name for node in interp.graph for v in node.outputs]
    feeds = random_feeds(info.inputs, info.input_dtypes, 0)
    for key, value in feeds.items():
        value.reshape(-1)[::3] = np.inf
        value.reshape(-1)[1::5] = -np.inf
        feeds[key] = value * np.float32(1e30)
    mine = interp.trace(feeds)
    with prepare(info.path, backend="litert-ref") as session:
        theirs = session.run(feeds, names)
    for key in names:
        a, b = mine[key], theirs[key]
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=key)
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b), err_msg=key)
        finite = np.isfinite(b)
        np.testing.assert_allclose(a[finite], b[finite], rtol=1e-5, atol=1e-5 * float(np.abs(b[finite]).max(initial=1)),
                                   err_msg=key)
