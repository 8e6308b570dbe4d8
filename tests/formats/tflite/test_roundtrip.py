"""load -> save gives an equivalent file, on models made by the real TFLiteConverter."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphwright import formats
from graphwright.formats import tflite

from .test_helpers import model_diff, run_tflite, same_outputs, unpack
from .test_models import ALL, real_models


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)

# The variable model keeps state: run it twice to see the second invocation too.
INVOCATIONS = {"variable": 3}


@pytest.mark.parametrize("name", ALL)
def test_load_save_is_equivalent_field_by_field_and_on_litert(
    tflite_models: dict[str, Path], name: str, tmp_path: Path,
) -> None:
    original = tflite_models[name].read_bytes()
    model = formats.load(tflite_models[name])
    assert model.format == "tflite"
    out = tmp_path / f"{name}.tflite"
    formats.save(model, out)
    written = out.read_bytes()
    # Same indices everywhere: tensors, buffers, operator codes, subgraphs.
    assert model_diff(original, written, strict=True) == []
    n = INVOCATIONS.get(name, 1)
    for seed in (0, 1):
        assert same_outputs(run_tflite(original, seed=seed, invocations=n),
                            run_tflite(written, seed=seed, invocations=n))


@pytest.mark.parametrize("name", ALL)
def test_rewriting_is_deterministic_and_idempotent(tflite_models: dict[str, Path], name: str) -> None:
    once = tflite.serialize(tflite.read_model(tflite_models[name].read_bytes()))
    assert tflite.serialize(tflite.read_model(once)) == once
    assert tflite.serialize(tflite.read_model(tflite_models[name].read_bytes())) == once


@pytest.mark.parametrize("name", ["int8", "custom", "control_flow"])
def test_large_model_layout_round_trips_and_runs(tflite_models: dict[str, Path], name: str) -> None:
    original = tflite_models[name].read_bytes()
    model = tflite.read_model(original)
    model.meta["tflite.buffer_layout"] = "offsets"
    for node in model.graph:
        if "custom_options" in node.attrs:
            node.meta["tflite.large_custom_options"] = True
    big = tflite.serialize(model)
    unpacked = unpack(big)
    constant = [b for b in unpacked.buffers if b.size]
    assert constant and all(b.data is None and b.offset % 16 == 0 and b.offset > 1 for b in constant)
    if name == "custom":
        ops = unpacked.subgraphs[0].operators
        assert any(op.largeCustomOptionsOffset > 1 and op.customOptions is None for op in ops)
    assert model_diff(original, big) == []
    assert same_outputs(run_tflite(original), run_tflite(big))
    again = tflite.read_model(big)
    assert again.meta["tflite.buffer_layout"] == "offsets"
    assert tflite.serialize(again) == big


def test_buffers_are_16_byte_aligned(tflite_models: dict[str, Path]) -> None:
    data = tflite.serialize(tflite.read_model(tflite_models["float"].read_bytes()))
    from ai_edge_litert import schema_py_generated as fb

    root = fb.Model.GetRootAs(data, 0)
    starts = []
    for i in range(root.BuffersLength()):
        buf = root.Buffers(i)
        if buf.DataLength():
            starts.append(buf._tab.Vector(buf._tab.Offset(4)))
    assert starts and all(s % 16 == 0 for s in starts)


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.tflite"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/small_cnn.tflite is not built")
def test_bundled_example_round_trips(tmp_path: Path) -> None:
    original = EXAMPLE.read_bytes()
    out = tmp_path / "small_cnn.tflite"
    tflite.save(formats.load(EXAMPLE), out)
    assert model_diff(original, out.read_bytes(), strict=True) == []
    assert same_outputs(run_tflite(original), run_tflite(out.read_bytes()))
