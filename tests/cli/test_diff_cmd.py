"""``graphwright diff`` as a user runs it: JSON and tables, exact with a sidecar and by structure
without, per-output errors checked against onnxruntime run here, bad input, progress on a TTY only."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tensorboard.compat.proto import graph_pb2

from graphwright import formats
from graphwright.cli.main import main
from graphwright.diff import write_provenance
from graphwright.simplify import simplify
from graphwright.transforms import run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def tf_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff_tf") / "deploy.pb"
    m = formats.load(EXAMPLES / "small_cnn.pb")
    run_pipeline(m, "optimize_for_deployment fuse_remapper", outputs=["Identity"])
    formats.save(m, out)
    write_provenance(m, out)
    return EXAMPLES / "small_cnn.pb", out


@pytest.fixture(scope="module")
def onnx_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff_onnx") / "sim.onnx"
    m, _ = simplify(EXAMPLES / "small_cnn.onnx")
    formats.save(m, out)
    write_provenance(m, out)
    return EXAMPLES / "small_cnn.onnx", out


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["diff", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _ops(path: Path) -> list[str]:
    gd = graph_pb2.GraphDef()
    gd.ParseFromString(path.read_bytes())
    return [n.op for n in gd.node]


def test_json_with_the_sidecar_is_exact(tf_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tf_pair
    data = _json(capsys, str(a), str(b))
    ops_a, ops_b = _ops(a), _ops(b)
    assert data["a"]["nodes"] == len(ops_a) and data["b"]["nodes"] == len(ops_b)
    assert data["a"]["file_bytes"] == a.stat().st_size and data["b"]["file_bytes"] == b.stat().st_size
    assert data["matched_by"] == "provenance" and data["provenance"].endswith("deploy.pb.provenance.json")
    deltas = {d["op"]: (d["a"], d["b"]) for d in data["op_deltas"]}
    assert deltas["_FusedConv2D"] == (0, ops_b.count("_FusedConv2D")) == (0, 3)
    assert deltas["Identity"] == (ops_a.count("Identity"), ops_b.count("Identity"))
    fused = [c for c in data["changes"] if c["kind"] == "fused"]
    assert len(fused) == data["counts"]["fused"] == 5 and all(c["exact"] for c in fused)
    assert {op for c in fused for op in c["ops_after"] if op != "Const"} == {
        "_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedMatMul"}
    conv = next(c for c in fused if "small_cnn_1/relu0_1/Relu" in c["after"])
    assert {"Conv2D", "BiasAdd", "Relu", "Rsqrt"} <= set(conv["ops_before"])
    assert conv["step"] == "fold_batch_norms > fuse_remapper"
    removed = [c for c in data["changes"] if c["kind"] == "removed"]
    assert sum(c["ops_before"].count("Identity") for c in removed) == ops_a.count("Identity") - ops_b.count("Identity")


def test_without_a_sidecar_changes_are_matched_by_structure_and_said_so(
        onnx_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = onnx_pair
    exact = _json(capsys, str(a), str(b))
    guessed = _json(capsys, str(a), str(b), "--no-provenance")
    assert exact["matched_by"] == "provenance" and guessed["matched_by"] == "structure"
    assert any("not exact" in n for n in guessed["notes"])
    bn = [n.name for n in onnx.load(str(a)).graph.node if n.op_type == "BatchNormalization"]
    # with the sidecar each batch norm is folded into its convolution; by structure only removed
    assert exact["counts"] == {"fused": len(bn)}
    assert sorted(n for c in exact["changes"] for n in c["before"] if n in bn) == sorted(bn)
    assert all(c["ops_before"] == ["Conv", "BatchNormalization"] and c["ops_after"] == ["Conv"]
               for c in exact["changes"])
    assert guessed["counts"] == {"removed": len(bn)}
    assert sorted(c["before"][0] for c in guessed["changes"]) == sorted(bn)


def test_per_output_errors_match_onnxruntime(onnx_pair: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, b = onnx_pair
    x = np.random.default_rng(11).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    name = onnx.load(str(a)).graph.input[0].name
    data = _json(capsys, str(a), str(b), "--input", f"{name}={tmp_path / 'x.npy'}")
    ya = ort.InferenceSession(str(a), providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    yb = ort.InferenceSession(str(b), providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    err = np.abs(ya.astype(np.float64) - yb.astype(np.float64))
    (out,) = data["outputs"]["outputs"]
    assert out["max_abs_error"] == pytest.approx(float(err.max()), rel=1e-6, abs=1e-12)
    (hist,) = data["outputs"]["histograms"]
    assert hist["zero"] == int((err == 0).sum())
    assert hist["zero"] + sum(hist["counts"]) == err.size
    decade = int(np.floor(np.log10(err.max()))) if err.max() > 0 else None
    if decade is not None:
        assert hist["counts"][decade - hist["edges"][0]] >= 1


def test_table_output(tf_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tf_pair
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"changes: 5 fused, [1-9][0-9]* removed — exact \(provenance .*deploy.pb.provenance.json\)", out)
    assert "fused 2 nodes (MatMul, BiasAdd) into 1 _FusedMatMul" in out
    assert "_FusedConv2D 0->3" in out


@pytest.mark.parametrize("case", ["formats", "missing", "sidecar", "report_over_model"])
def test_bad_input_is_one_line_and_exit_2(case: str, onnx_pair: tuple[Path, Path], tf_pair: tuple[Path, Path],
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = onnx_pair
    before = b.read_bytes()
    argv = {
        "formats": [str(a), str(tf_pair[1])],
        "missing": [str(a), str(tmp_path / "nope.onnx")],
        "sidecar": [str(a), str(b), "--provenance", str(tmp_path / "bad.json")],
        "report_over_model": [str(a), str(b), "--html", str(b)],
    }[case]
    (tmp_path / "bad.json").write_text("{broken")
    assert main(["diff", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphwright: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert b.read_bytes() == before


def _run_in_pty(argv: list[str], cwd: Path) -> str:
    """Run the CLI with stdout/stderr on a pseudo-terminal; everything it wrote."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    env.pop("CI", None)
    proc = subprocess.Popen([sys.executable, "-m", "graphwright.cli.main", *argv], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_progress_bar_on_a_terminal_and_silence_in_a_pipe(onnx_pair: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = onnx_pair
    argv = ["diff", str(a), str(b), "--seed", "1"]
    shown = _run_in_pty(argv, tmp_path)
    # the bar (refreshed 10 times a second: which step it caught depends on the machine's speed)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert re.search(r"diff(: [a-z][^\n\r]*)? [━╸╺ ]+ [0-9]+/[0-9]+ [0-9:]+ eta", plain), plain[:1500]
    assert "\x1b[" in shown  # drawn with terminal control sequences
    piped = subprocess.run([sys.executable, "-m", "graphwright.cli.main", *argv], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
    assert piped.returncode == 0
    assert piped.stderr == ""
    assert "running model" not in piped.stdout and "\x1b[" not in piped.stdout
    quiet = _run_in_pty([*argv, "--quiet"], tmp_path)
    assert "running model" not in quiet and quiet.strip() == ""


_SIMPLIFY_WITH_STEPS = (
    "import sys\n"
    "from graphwright.cli._console import step_progress\n"
    "from graphwright.simplify import simplify\n"
    "with step_progress('simplify', quiet='--quiet' in sys.argv):\n"
    "    simplify(sys.argv[1])\n"
)


def test_step_progress_counts_simplify_steps_on_a_terminal_only(tmp_path: Path) -> None:
    """The bar simplify's command can wrap its run in: steps counted through the step runner."""
    argv = [sys.executable, "-c", _SIMPLIFY_WITH_STEPS, str(EXAMPLES / "small_cnn.onnx")]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, cwd=tmp_path,
                            env={**os.environ, "COLUMNS": "150", "TERM": "xterm-256color"})
    os.close(follower)
    chunks = []
    while select.select([leader], [], [], 120)[0]:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    shown = b"".join(chunks).decode("utf-8", "replace")
    # the bar redraws ten times a second: at least its last state, with the steps counted
    assert re.search(r"simplify: step [1-9][0-9]* [a-z_]+ \((?:1[0-9]|20) nodes\)", shown)
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout == ""


def test_transform_and_simplify_write_the_sidecar_diff_reads(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``--provenance`` on the two commands that rewrite: the sidecar lands beside the output, names
    only nodes of the input file, and makes ``diff`` exact; without the flag nothing is written."""
    deploy, plain = tmp_path / "deploy.pb", tmp_path / "plain.pb"
    pipeline = ["--outputs", "Identity", "--transforms", "optimize_for_deployment fuse_remapper", "--quiet"]
    assert main(["transform", str(EXAMPLES / "small_cnn.pb"), str(deploy), *pipeline, "--provenance"]) == 0
    assert main(["transform", str(EXAMPLES / "small_cnn.pb"), str(plain), *pipeline]) == 0
    assert (tmp_path / "deploy.pb.provenance.json").is_file()
    assert not (tmp_path / "plain.pb.provenance.json").exists()
    sidecar = json.loads((tmp_path / "deploy.pb.provenance.json").read_text())
    originals = {n.name for n in graph_pb2.GraphDef.FromString((EXAMPLES / "small_cnn.pb").read_bytes()).node}
    named = {o for entry in sidecar["nodes"].values() for o in entry["from"]} | set(sidecar["removed"])
    assert named and named <= originals and set(sidecar["original_ops"]) == originals
    capsys.readouterr()
    assert _json(capsys, str(EXAMPLES / "small_cnn.pb"), str(deploy))["matched_by"] == "provenance"
    assert _json(capsys, str(EXAMPLES / "small_cnn.pb"), str(plain))["matched_by"] == "structure"

    sim = tmp_path / "sim.onnx"
    assert main(["simplify", str(EXAMPLES / "small_cnn.onnx"), str(sim), "--quiet", "--provenance"]) == 0
    assert (tmp_path / "sim.onnx.provenance.json").is_file()
    assert _json(capsys, str(EXAMPLES / "small_cnn.onnx"), str(sim))["matched_by"] == "provenance"


def _litert_tensors(path: Path, feed: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """LiteRT (ai_edge_litert) run here keeping every tensor: each operator output, dequantized when
    quantized, and its op."""
    from ai_edge_litert.interpreter import Interpreter  # lazy: LiteRT only for this test

    with warnings.catch_warnings():  # "for debugging purposes only": that is what it is for here
        warnings.simplefilter("ignore", UserWarning)
        interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    if inp["dtype"] != np.float32:  # the quantized model takes the input as int8: real = s * (q - zp)
        scale, zero = inp["quantization"]
        info = np.iinfo(inp["dtype"])
        feed = np.clip(np.round(feed.astype(np.float64) / scale) + zero, info.min, info.max).astype(inp["dtype"])
    interp.set_tensor(inp["index"], feed)
    interp.invoke()
    details = {d["index"]: d for d in interp.get_tensor_details()}
    tensors, ops = {}, {}
    for op in interp._get_ops_details():
        for index in op["outputs"]:
            d = details[int(index)]
            x = interp.get_tensor(int(index)).astype(np.float64)
            scale, zero = d["quantization"]
            if d["dtype"] != np.float32 and scale:
                x = (x - zero) * scale
            tensors[d["name"]] = x
            ops[d["name"]] = op["op_name"]
    return tensors, ops


def test_per_layer_error_of_an_int8_tflite_against_its_float_model_matches_litert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.diff.test_html import CHROMIUM, _browser, _console
    from tests.models import tflite_model

    a, b = tflite_model("float").path, tflite_model("int8").path
    x = np.random.default_rng(3).random((1, 32, 32, 3), dtype=np.float32)  # the calibration range, [0, 1)
    np.save(tmp_path / "x.npy", x)
    report = tmp_path / "report.html"
    data = _json(capsys, str(a), str(b), "--input", f"serving_default_image:0={tmp_path / 'x.npy'}",
                 "--html", str(report))
    ref_a, _ = _litert_tensors(a, x)
    ref_b, _ = _litert_tensors(b, x)
    shared = [n for n in ref_a if n in ref_b]
    layers = data["layers"]["layers"]
    assert [row["tensor"] for row in layers] == shared and len(shared) == 10  # every activation, in order
    # the small CNN of tests/models/_keras_common.py, as the converter lays it out
    assert [row["op_b"] for row in layers] == ["CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "CONV_2D", "ADD",
                                               "AVERAGE_POOL_2D", "CONV_2D", "MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    for row in layers:
        ra, rb = ref_a[row["tensor"]], ref_b[row["tensor"]]
        sqnr = 10 * np.log10(np.sum(ra ** 2) / np.sum((ra - rb) ** 2))
        assert row["sqnr_db"] == pytest.approx(sqnr, rel=1e-9), row["tensor"]
        assert row["max_abs_error"] == pytest.approx(np.abs(ra - rb).max(), rel=1e-9)
        assert row["max_rel_error"] == pytest.approx(np.abs(ra - rb).max() / np.abs(ra).max(), rel=1e-9)
        assert row["dtype_b"] == "int8"
        assert 30 < row["sqnr_db"] < 70 and row["max_error_in_steps"] < 4  # int8 on calibration-range data
    # the per-output numbers compare the dequantized int8 output with the float one
    (out,) = data["outputs"]["outputs"]
    final = ref_a["StatefulPartitionedCall_1:0"] - ref_b["StatefulPartitionedCall_1:0"]
    assert out["max_abs_error"] == pytest.approx(np.abs(final).max(), rel=1e-6)
    assert any("dequantized" in n for n in data["outputs"]["notes"])
    page = report.read_text()
    assert page.count("<tr class='layer") == 10 and "id='layer-chart'" in page
    assert page.count("data-tensor=") == 10
    if CHROMIUM is None:
        pytest.skip("no chromium to open the report in: apt-get install -y chromium")
    dom, log = _browser(report, tmp_path, screenshot=tmp_path / "layers.png")
    assert _console(log) == [] and 'id="layer-chart"' in dom
