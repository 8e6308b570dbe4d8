"""A save is all-or-nothing, model and external data as a pair: a process killed at any rename,
or at a random moment, leaves the old model with its old weights or the new model with its new
weights (checked on onnxruntime), and the next save clears what the killed one left behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphwright import formats
from graphwright.formats import onnx as onnx_format

WIDTH = 256


def _mlp(seed: int, layers: int = 4) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


X = np.random.default_rng(7).standard_normal((1, WIDTH)).astype(np.float32)


def _run(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X})[0]


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(old model saved at out/, new model to save over it, the destination)."""
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(_mlp(1), src / "old.onnx")
    onnx.save(_mlp(2), src / "new.onnx")
    out = tmp_path / "out"
    out.mkdir()
    dst = out / "model.onnx"
    onnx_format.save(formats.load(src / "old.onnx"), dst, external_data=True)
    return src / "old.onnx", src / "new.onnx", dst


CHILD = textwrap.dedent("""
    import os, sys
    from graphwright import formats
    from graphwright.formats import files, onnx as onnx_format
    kill_at = sys.argv[3]
    def step(name):
        if name == kill_at:
            os.kill(os.getpid(), 9)
    files.on_step = step
    onnx_format.save(formats.load(sys.argv[1]), sys.argv[2], external_data=True)
""")


def _save_in_child(src: Path, dst: Path, kill_at: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(dst), kill_at])


def _check_consistent(dst: Path, old: Path, new: Path) -> str:
    got = _run(dst)
    if np.array_equal(got, _run(old)):
        return "old"
    assert np.array_equal(got, _run(new)), "the saved model pairs with the wrong weights"
    return "new"


def _ours(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("step", ["rename model.onnx.1.data", "rename model.onnx", "remove model.onnx.data"])
def test_a_kill_at_any_step_leaves_a_consistent_pair(pair: tuple[Path, Path, Path], step: str) -> None:
    old, new, dst = pair
    child = _save_in_child(new, dst, step)
    assert child.wait(timeout=120) == -signal.SIGKILL
    expected = "old" if step != "remove model.onnx.data" else "new"
    assert _check_consistent(dst, old, new) == expected
    # the next save clears the killed save's temporary file and the data file nobody reads
    onnx_format.save(formats.load(new), dst, external_data=True)
    assert _check_consistent(dst, old, new) == "new"
    assert len(_ours(dst.parent)) == 2 and not [n for n in _ours(dst.parent) if n.endswith(".tmp")]


def test_kills_at_random_moments_never_mix_old_and_new(pair: tuple[Path, Path, Path]) -> None:
    old, new, dst = pair
    rng = random.Random(0)
    outcomes = set()
    for _ in range(6):
        child = _save_in_child(new, dst, "never")
        time.sleep(rng.uniform(0.0, 1.5))
        child.kill()
        child.wait(timeout=60)
        outcomes.add(_check_consistent(dst, old, new))
        # put the old model back (sometimes over a half-finished save) for the next round
        onnx_format.save(formats.load(old), dst, external_data=True)
        assert _check_consistent(dst, old, new) == "old"
    assert len(_ours(dst.parent)) == 2


def test_saves_alternate_data_file_names_and_keep_one(pair: tuple[Path, Path, Path]) -> None:
    old, new, dst = pair
    assert _ours(dst.parent) == ["model.onnx", "model.onnx.data"]
    onnx_format.save(formats.load(new), dst, external_data=True)
    assert _ours(dst.parent) == ["model.onnx", "model.onnx.1.data"]
    onnx_format.save(formats.load(old), dst, external_data=True)
    assert _ours(dst.parent) == ["model.onnx", "model.onnx.data"]
    onnx_format.save(formats.load(old), dst, external_data=False)
    assert _ours(dst.parent) == ["model.onnx"]
    assert np.array_equal(_run(dst), _run(old))


def test_a_stale_temporary_file_of_a_dead_process_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".m.onnx.gw-{dead.pid}-abc123.tmp"
    live = tmp_path / f".m.onnx.gw-{os.getppid()}-def456.tmp"
    foreign = tmp_path / ".m.onnx.something.tmp"
    for p in (stale, live, foreign):
        p.write_bytes(b"x" * 10)
    onnx.save(_mlp(1, layers=1), tmp_path / "src.onnx")
    formats.save(formats.load(tmp_path / "src.onnx"), tmp_path / "m.onnx")
    assert not stale.exists() and live.exists() and foreign.exists()


def test_the_input_s_external_data_is_never_written_over(tmp_path: Path) -> None:
    onnx.save(_mlp(1), tmp_path / "a.onnx", save_as_external_data=True, location="b.onnx.data",
              size_threshold=0)
    before = (tmp_path / "b.onnx.data").read_bytes()
    model = formats.load(tmp_path / "a.onnx")
    onnx_format.save(model, tmp_path / "b.onnx", external_data=True)  # b.onnx.data is the input's
    assert (tmp_path / "b.onnx.data").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "b.onnx", "b.onnx.1.data", "b.onnx.data"]
    assert np.array_equal(_run(tmp_path / "b.onnx"), _run(tmp_path / "a.onnx"))
