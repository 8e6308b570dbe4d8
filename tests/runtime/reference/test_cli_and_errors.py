"""``graphwright run`` (built on a local parser: the lead wires it into cli/main.py)
and the interpreter's refusals."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.cli import run_cmd
from graphwright.cli.main import build_parser
from graphwright.errors import VerificationError
from graphwright.runtime import run
from graphwright.runtime.reference import Interpreter, supported_operators
from graphwright.runtime.reference._common import INT16_KERNELS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TFLITE = EXAMPLES / "small_cnn.tflite"


def _parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "run" not in sub.choices:
        run_cmd.add_parser(sub)
    return parser


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return int(args.run(args))


def test_run_saves_outputs_and_traces_every_tensor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(2).integers(-128, 128, (1, 32, 32, 3)).astype(np.int8)
    name = gw.load(TFLITE).graph.inputs[0].name
    np.save(tmp_path / "x.npy", x)
    code = _main(["run", str(TFLITE), "--engine", "reference", "--input", f"{name}={tmp_path / 'x.npy'}",
                  "--save", str(tmp_path / "out.npz"), "--trace", str(tmp_path / "trace"), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "reference"
    saved = dict(np.load(tmp_path / "out.npz"))
    expected = run(TFLITE, {name: x}, backend="litert-ref")
    assert list(saved) == list(expected)
    for key in saved:
        np.testing.assert_array_equal(saved[key], expected[key])
    index = json.loads((tmp_path / "trace" / "trace.json").read_text())["tensors"]
    model = gw.load(TFLITE)
    assert [e["tensor"] for e in index] == [name] + [v.name for n in model.graph for v in n.outputs]
    first = index[1]
    traced = np.load(tmp_path / "trace" / first["file"])
    ref = run(TFLITE, {name: x}, backend="litert-ref", outputs=[first["tensor"]])[first["tensor"]]
    np.testing.assert_array_equal(traced, ref)
    np.testing.assert_array_equal(np.load(tmp_path / "trace" / index[0]["file"]), x)


def test_run_litert_engine_isolated_with_trace(tmp_path: Path) -> None:
    assert _main(["run", str(TFLITE), "--engine", "litert-ref", "--seed", "3",
                  "--trace", str(tmp_path / "t"), "--save", str(tmp_path / "o.npz")]) == 0
    index = json.loads((tmp_path / "t" / "trace.json").read_text())["tensors"]
    feeds = {index[0]["tensor"]: np.load(tmp_path / "t" / index[0]["file"])}
    mine = Interpreter(TFLITE).trace(feeds)
    for entry in index[1:]:
        np.testing.assert_array_equal(np.load(tmp_path / "t" / entry["file"]), mine[entry["tensor"]])
    assert len(index) == len(mine)  # the input, then every operator output


def test_run_compare_with_reports_agreement_and_the_first_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["run", str(TFLITE), "--compare-with", "litert-ref", "--seed", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["comparison"]["first_difference"] is None and doc["comparison"]["exact_share"] == 1.0
    # single rounding against the reference kernels: a difference, found and named
    code = _main(["run", str(TFLITE), "--compare-with", "litert-ref", "--rounding", "single", "--json"])
    first = json.loads(capsys.readouterr().out)["comparison"]["first_difference"]
    assert code == 1 and first["op"] in {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MEAN", "AVERAGE_POOL_2D"}
    assert first["mismatched"] > 0


def test_run_refuses_trace_of_other_formats() -> None:
    with pytest.raises(VerificationError, match="TFLite"):
        _main(["run", str(EXAMPLES / "small_cnn.onnx"), "--trace", "/nonexistent/never"])


def test_unsupported_operator_is_named_and_refused() -> None:
    model = gw.load(TFLITE)
    node = next(n for n in model.graph if n.op == "MEAN")
    node.op = "SKIP_GRAM"  # a builtin (string n-grams) no kernel here computes
    assert "SKIP_GRAM" not in supported_operators()
    with pytest.raises(VerificationError, match=r"cannot run this model: operator SKIP_GRAM \(.*Mean.*\) is not"):
        Interpreter(model)


def test_wrong_input_shape_and_dtype_are_one_line_errors() -> None:
    interp = Interpreter(TFLITE)
    name = interp.inputs[0].name
    with pytest.raises(VerificationError, match="expects int8 \\[1, 32, 32, 3\\]"):
        interp.run({name: np.zeros((1, 32, 32, 3), np.float32)})
    with pytest.raises(VerificationError, match="expects"):
        interp.run({name: np.zeros((1, 31, 32, 3), np.int8)})
    with pytest.raises(VerificationError, match="unknown rounding"):
        Interpreter(TFLITE, rounding="banker")


def test_refuses_other_formats_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="TFLite models only"):
        Interpreter(gw.load(EXAMPLES / "small_cnn.onnx"))
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(TFLITE.read_bytes()[:300])
    with pytest.raises(gw.GraphwrightError):
        run(bad, backend="reference")


def test_int16_quantized_activations_are_refused() -> None:
    """An int16-quantized output of an operator with no 16x8 kernel is refused by name."""
    model = gw.load(TFLITE)
    node = next(n for n in model.graph if n.op == "AVERAGE_POOL_2D")
    node.op = min(set(supported_operators()) - INT16_KERNELS)  # a kernel, but none for 16x8
    node.outputs[0].dtype = gw.DType.INT16
    with pytest.raises(VerificationError, match=f"operator {node.op} .*int16-quantized output, which is not implemented"):
        Interpreter(model)
