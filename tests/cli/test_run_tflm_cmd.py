"""``graphwright run --engine tflm``, ``--engine reference --flavor tflm``, ``--compare-with tflm`` and
``compare --layers --backend-b tflm``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphwright.formats.tflite import serialize
from graphwright.ir import DType, Graph, Model, Node, Value
from graphwright.runtime import tflm
from tests.cli.test_cli import MODELS, assert_one_line_error, gw
from tests.models import get_model

needs_tflm = pytest.mark.skipif(not tflm.available(), reason="tflite-micro is not installed (the [tflm] extra)")


@needs_tflm
def test_run_on_tflm_gives_litert_reference_outputs(tmp_path: Path) -> None:
    outputs = {}
    for engine in ("tflm", "litert-ref"):
        result = gw("run", MODELS["tflite"], "--engine", engine, "--seed", "3", "--save", tmp_path / f"{engine}.npz",
                    "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["engine"] == engine
        with np.load(tmp_path / f"{engine}.npz") as npz:
            outputs[engine] = dict(npz)
    assert outputs["tflm"].keys() == outputs["litert-ref"].keys()
    for name, expected in outputs["litert-ref"].items():
        np.testing.assert_allclose(outputs["tflm"][name], expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@needs_tflm
@pytest.mark.slow
def test_compare_with_tflm_layer_by_layer() -> None:
    same = gw("run", get_model("tflite_model", "int8").path, "--compare-with", "tflm", "--json")
    assert same.returncode == 0, same.stderr
    comparison = json.loads(same.stdout)["comparison"]
    assert comparison["other"] == "tflm" and comparison["first_difference"] is None and comparison["exact_share"] == 1
    # TFLM's quantized RELU6 clamps in its input's quantization and ignores the output's (LiteRT requantizes):
    # --compare-with tflm runs the interpreter's tflm flavour, which agrees; the litert flavour does not
    relu6 = get_model("tflite_ops", "misc_int8").path
    micro = gw("run", relu6, "--compare-with", "tflm")
    assert micro.returncode == 0, micro.stderr
    assert "agree with tflm" in micro.stdout
    litert = gw("run", relu6, "--compare-with", "tflm", "--flavor", "litert")
    assert litert.returncode == 1, litert.stderr
    assert "first difference vs tflm at layer" in litert.stdout and "RELU6" in litert.stdout
    layers = gw("compare", get_model("tflite_model", "int8").path, "--layers", "--backend-b", "tflm")
    assert layers.returncode == 0, layers.stderr
    assert "agree with tflm" in layers.stdout
    layers = gw("compare", relu6, "--layers", "--backend-b", "tflm")  # compare computes as TFLM does too
    assert layers.returncode == 0, layers.stdout + layers.stderr
    assert "agree with tflm" in layers.stdout


@needs_tflm
@pytest.mark.slow
def test_the_reference_engine_with_the_tflm_flavor_gives_tflm_outputs(tmp_path: Path) -> None:
    """int8 and 16x8 FULLY_CONNECTED, where TFLM's requantization differs from LiteRT's reference kernel."""
    for name in ("convs_int8", "convs_int16x8"):
        path = get_model("tflite_conv", name).path
        outputs = {}
        for engine, flavor in (("tflm", ()), ("reference", ("--flavor", "tflm")), ("reference", ())):
            save = tmp_path / f"{name}-{engine}{''.join(flavor)}.npz"
            result = gw("run", path, "--engine", engine, *flavor, "--seed", "4", "--save", save)
            assert result.returncode == 0, result.stderr
            with np.load(save) as npz:
                outputs[(engine, *flavor)] = dict(npz)
        micro, litert = outputs[("reference", "--flavor", "tflm")], outputs[("reference",)]
        assert all(np.array_equal(micro[k], v) for k, v in outputs[("tflm",)].items())
        assert any(not np.array_equal(micro[k], litert[k]) for k in micro), f"{name}: the flavours agree"


def test_flavor_with_another_engine_is_one_line() -> None:
    assert_one_line_error(gw("run", MODELS["tflite"], "--engine", "litert", "--flavor", "tflm"),
                          "--flavor chooses the reference engine's kernels")


@needs_tflm
def test_an_operator_tflm_lacks_is_one_line(tmp_path: Path) -> None:
    graph = Graph("tflite", "main")
    x = Value("x", DType.FLOAT32, (1, 4))
    graph.set_inputs([x])
    node = graph.append(Node("GELU", [x], dialect="tflite", name="y", outputs=[Value("y", DType.FLOAT32, (1, 4))]))
    graph.set_outputs([node.output])
    path = tmp_path / "gelu.tflite"
    path.write_bytes(serialize(Model(graph, "tflite")))
    for isolate in ((), ("--no-isolate",)):
        assert_one_line_error(gw("run", path, "--engine", "tflm", *isolate), "TFLM has no operator GELU", str(path))


def test_without_tflite_micro_run_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hidden = tmp_path / "hide" / "tflite_micro"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('tflite_micro hidden by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden.parent))
    for isolate in ((), ("--no-isolate",)):
        result = gw("run", MODELS["tflite"], "--engine", "tflm", *isolate)
        assert_one_line_error(result, "pip install graphwright[tflm]")
