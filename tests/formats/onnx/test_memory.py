"""Peak memory: a save adds at most about one tensor; loading external data reads nothing.

Measured with Linux's resettable peak RSS (``/proc/self/clear_refs``); skipped elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphwright import formats
from graphwright.formats.onnx import save

TENSOR_MB = 40
COUNT = 4


def _peak_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _peak_supported() -> bool:
    try:
        _reset_peak()
        return _peak_kb() > 0
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _peak_supported(), reason="needs Linux /proc/self/clear_refs")


def _model(n: int) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.full(n, i + 1, np.float32), f"w{i}") for i in range(COUNT)]
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"a{i - 1}", f"w{i}"], [f"a{i}"], name=f"add{i}")
             for i in range(COUNT)]
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", 1, [n])],
                              [helper.make_tensor_value_info(f"a{COUNT - 1}", 1, [n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def weights_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("memory") / "weights.onnx"
    proto = _model(TENSOR_MB * 1024 * 1024 // 4)
    path.write_bytes(proto.SerializeToString())
    return path


def test_save_adds_about_one_tensor(weights_model: Path, tmp_path: Path) -> None:
    model = formats.load(weights_model)
    _reset_peak()
    before = _peak_kb()
    save(model, tmp_path / "out.onnx")
    growth_mb = (_peak_kb() - before) / 1024
    assert growth_mb < 2 * TENSOR_MB  # one tensor in flight (plus slack), not a copy of all weights
    assert (tmp_path / "out.onnx").read_bytes() == weights_model.read_bytes()


def test_external_load_reads_no_weights(weights_model: Path, tmp_path: Path) -> None:
    external = tmp_path / "ext.onnx"
    save(formats.load(weights_model), external, external_data=True)
    _reset_peak()
    before = _peak_kb()
    model = formats.load(external)
    assert (_peak_kb() - before) / 1024 < TENSOR_MB / 2
    # saving it again copies from the maps one tensor at a time
    _reset_peak()
    before = _peak_kb()
    save(model, tmp_path / "again.onnx")
    assert (_peak_kb() - before) / 1024 < 2 * TENSOR_MB
    assert (tmp_path / "again.onnx.data").read_bytes() == (tmp_path / "ext.onnx.data").read_bytes()
