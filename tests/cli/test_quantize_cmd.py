"""``graphwright quantize``: the command as a user runs it — data directory, ranges files, JSON, HTML,
the loud warning without data, a progress bar on a terminal only, one-line errors with exit 2."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ai_edge_litert.interpreter import Interpreter
from tensorboard.compat.proto import graph_pb2

from graphwright.cli.main import main
from tests.cli.test_diff_cmd import _run_in_pty
from tests.models import get_model
from tests.quantize.test_driver import held_out, mlp, samples


def _main(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def _data_dir(path: Path, feeds: list[dict[str, np.ndarray]]) -> Path:
    path.mkdir()
    for i, feed in enumerate(feeds):
        np.save(path / f"{i:04d}.npy", feed["x"])
    return path


def _ort(path: Path, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    session = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, f)[0] for f in feeds]).astype(np.float64)


def test_static_with_data_ranges_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    before = src.read_bytes()
    feeds = samples(60)
    data = _data_dir(tmp_path / "data", feeds)
    out, ranges, page = tmp_path / "q.onnx", tmp_path / "ranges.json", tmp_path / "report.html"
    rc, stdout, stderr = _main(capsys, "quantize", src, out, "--mode", "static", "--data", data, "--samples", 40,
                               "--save-ranges", ranges, "--html", page, "--json")
    assert rc == 0, stderr
    assert "WARNING" not in stderr and src.read_bytes() == before
    report = json.loads(stdout)
    assert report["mode"] == "static" and report["calibration_samples"] == 40 and report["eval_samples"] == 12
    assert report["data_source"] == f"directory {data}"
    # the report's SQNR is onnxruntime's on the held-out files (every fifth, in name order)
    evaluated = held_out(feeds)[:12]
    a, b = _ort(src, evaluated), _ort(out, evaluated)
    expected = 10 * math.log10(np.sum(a ** 2) / np.sum((a - b) ** 2))
    assert report["outputs"][0]["sqnr_db"] == pytest.approx(expected, abs=1e-6)
    assert 20 < expected < 60
    saved = json.loads(ranges.read_text())
    assert saved["format"] == "graphwright.ranges/1" and saved["method"] == "minmax"
    assert {"x", "y"} <= set(saved["ranges"])
    assert page.read_text().count("<svg") == 1 and "<script" not in page.read_text()
    # the saved ranges give the same model without calibrating
    again = tmp_path / "again.onnx"
    rc, stdout, stderr = _main(capsys, "quantize", src, again, "--mode", "static", "--ranges", ranges, "--no-report")
    assert rc == 0, stderr
    assert again.read_bytes() == out.read_bytes()
    assert "NO CALIBRATION DATA" not in stderr


def test_table_and_loud_warning_without_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = mlp(tmp_path / "mlp.onnx", outlier=True)
    rc, stdout, stderr = _main(capsys, "quantize", src, tmp_path / "q.onnx", "--mode", "dynamic", "--per-tensor",
                               "--keep-float", "auto:1", "--eval-samples", 8)
    assert rc == 0, stderr
    assert stderr.count("WARNING: NO EVALUATION DATA") == 1 and "CALIBRATION" not in stderr  # dynamic: none needed
    assert "outputs vs float on 8 held-out sample(s)" in stdout and "lowest per-layer SQNR" in stdout
    assert re.search(r"sensitivity: 2 layers ranked; kept float: fc2 \(\+[0-9.]+ dB\)", stdout), stdout
    assert "latency on onnxruntime" in stdout


def test_tflite_int8_runs_on_litert_with_the_kept_layer_float(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    info = get_model("tflite_real", "landmarks_float")
    out = tmp_path / "q.tflite"
    rc, stdout, stderr = _main(capsys, "quantize", info.path, out, "--mode", "int8", "--samples", 20,
                               "--eval-samples", 4, "--keep-float", "auto:1", "--json")
    assert rc == 0, stderr
    report = json.loads(stdout)
    (kept,) = report["kept_float"]
    assert report["sensitivity"][0]["node"] == kept and report["sensitivity"][0]["kept_float"]
    assert len(report["sensitivity"]) == 16 and report["runtime"] == "litert"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interp = Interpreter(model_path=str(out))
    interp.allocate_tensors()
    (inp,) = interp.get_input_details()
    interp.set_tensor(inp["index"], np.zeros(inp["shape"], inp["dtype"]))
    interp.invoke()
    # LiteRT's own view of the operators: the kept layer reads float weights, the other layers int8
    tensors = interp.get_tensor_details()
    filters = {tensors[op["outputs"][0]]["name"]: tensors[op["inputs"][1]]["dtype"]
               for op in interp._get_ops_details() if op["op_name"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")}
    assert filters.pop(kept) == np.float32
    assert set(filters.values()) == {np.int8} and len(filters) == 15
    assert report["size_after"] < report["size_before"]


def _graphdef(path: Path) -> Path:
    gd = graph_pb2.GraphDef()
    gd.node.add(name="input", op="Placeholder").attr["dtype"].type = 1
    gd.node.add(name="Identity", op="Identity", input=["input"]).attr["T"].type = 1
    path.write_bytes(gd.SerializeToString())
    return path


@pytest.mark.parametrize(("case", "needle"), [
    ("graphdef", "quantize_nodes"),
    ("mode", "use one of static, dynamic, weights"),
    ("same file", "refusing to overwrite the input"),
    ("bad ranges", "is not a graphwright ranges file"),
    ("save ranges of dynamic", "computes no ranges"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                      needle: str) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "q.onnx"
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    argv: list[object] = {
        "graphdef": ["quantize", _graphdef(tmp_path / "m.pb"), tmp_path / "q.pb", "--mode", "static"],
        "mode": ["quantize", src, out, "--mode", "16x8"],
        "same file": ["quantize", src, src, "--mode", "dynamic"],
        "bad ranges": ["quantize", src, out, "--mode", "static", "--ranges", bad],
        "save ranges of dynamic": ["quantize", src, out, "--mode", "dynamic", "--no-report", "--save-ranges", bad],
    }[case]
    rc, _, stderr = _main(capsys, *argv)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in stderr, stderr
    if case != "save ranges of dynamic":
        assert not out.exists() and not (tmp_path / "q.pb").exists()
    assert bad.read_text() == "[1, 2]"


def test_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    src = mlp(tmp_path / "mlp.onnx")
    argv = [sys.executable, "-m", "graphwright.cli.main", "quantize", str(src), str(tmp_path / "q.onnx"),
            "--mode", "static", "--samples", "200"]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", _run_in_pty(argv[3:], tmp_path))
    assert re.search(r"quantize: (calibrating|evaluating)", plain), plain[-1500:]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout + piped.stderr
    assert "calibrating" not in piped.stderr and "NO CALIBRATION DATA" in piped.stderr


def test_sharded_calibration_gives_the_one_process_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--shards 2 (processes) and --ray (a local cluster) collect the calibration statistics over
    workers; the merged statistics are exact, so the ranges file and the model are byte for byte
    those of one process, for a histogram method too."""
    src = mlp(tmp_path / "mlp.onnx")
    data = _data_dir(tmp_path / "data", samples(40))
    outputs = {}
    for label, extra in (("one", []), ("shards", ["--shards", 2]), ("ray", ["--shards", 2, "--ray"])):
        out, ranges = tmp_path / f"{label}.onnx", tmp_path / f"{label}.json"
        rc, _, stderr = _main(capsys, "quantize", src, out, "--mode", "static", "--method", "percentile", "--data",
                              data, "--samples", 30, "--save-ranges", ranges, "--no-report", *extra)
        assert rc == 0, stderr
        outputs[label] = (out.read_bytes(), ranges.read_text())
    assert outputs["shards"] == outputs["one"] and outputs["ray"] == outputs["one"]
    assert json.loads(outputs["one"][1])["method"] == "percentile"
    rc, _, stderr = _main(capsys, "quantize", src, tmp_path / "x.onnx", "--mode", "static", "--shards", 0)
    assert rc == 2 and "--shards needs a count of at least 1" in stderr


def test_minmax_batches_calibration_runs_by_default_with_the_same_result(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Without --batch-size, min-max calibration of an ONNX model with a dynamic batch axis runs 8
    samples per onnxruntime call; the ranges and model are byte for byte those of one sample per
    run, and of two shards."""
    proto = onnx.load(mlp(tmp_path / "fixed.onnx"))
    for value in (*proto.graph.input, *proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"  # a dynamic batch axis: runs can batch
    src = tmp_path / "mlp.onnx"
    onnx.save(proto, src)
    data = _data_dir(tmp_path / "data", samples(40))
    outputs = {}
    for label, extra in (("auto", []), ("one", ["--batch-size", 1]), ("shards", ["--shards", 2])):
        out, ranges = tmp_path / f"{label}.onnx", tmp_path / f"{label}.json"
        rc, _, stderr = _main(capsys, "quantize", src, out, "--mode", "static", "--data", data, "--samples", 30,
                              "--save-ranges", ranges, "--no-report", *extra)
        assert rc == 0, stderr
        outputs[label] = (out.read_bytes(), ranges.read_text())
    assert outputs["auto"] == outputs["one"] == outputs["shards"]
    assert json.loads(outputs["auto"][1])["method"] == "minmax"


def test_calibration_engine_reference_gives_litert_ranges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--engine reference calibrates on graphwright's interpreter: the ranges are LiteRT's (float noise apart)."""
    src = Path(__file__).resolve().parents[2] / "examples" / "small_cnn_float.tflite"
    tables = {}
    for engine in ("auto", "reference"):
        ranges = tmp_path / f"{engine}.json"
        rc, _, stderr = _main(capsys, "quantize", src, tmp_path / f"{engine}.tflite", "--mode", "int8", "--engine",
                              engine, "--samples", 20, "--save-ranges", ranges, "--no-report", "--quiet")
        assert rc == 0, stderr
        tables[engine] = json.loads(ranges.read_text())["ranges"]
    assert tables["auto"].keys() == tables["reference"].keys() and len(tables["auto"]) > 5
    for name, (lo, hi) in tables["auto"].items():
        assert tables["reference"][name] == pytest.approx([lo, hi], rel=1e-5, abs=1e-6), name
    rc, _, stderr = _main(capsys, "quantize", src, tmp_path / "b.tflite", "--mode", "int8", "--batch-size", 4)
    assert rc == 2 and "needs a dynamic batch axis" in stderr


def test_an_already_quantized_tflite_is_refused_before_calibrating(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.tflite"  # the converter's int8 model
    rc, _, stderr = _main(capsys, "quantize", src, tmp_path / "q.tflite", "--mode", "int8")
    assert rc == 2 and "already quantized" in stderr and "quantize its float original" in stderr
    assert "NO CALIBRATION DATA" not in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "q.tflite").exists()
