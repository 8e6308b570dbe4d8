"""merge_duplicate_nodes: equal constants merge, then the readers they make equal."""

from __future__ import annotations

import pytest

import graphwright as gw
from graphwright.ir import Node
from graphwright.transforms import run_pipeline

from .._generic import _apply, _model, tf_graph


def test_merge_duplicate_nodes_merges_constants_then_their_readers() -> None:
    model, n = tf_graph()
    n["a2"].replace_input(0, n["id2"].output)  # a2 = id2 + k2 == a1 = id2 + k1 once k1/k2 merge
    n["out"].replace_input(0, n["a2"].output)
    n["k2"].add_control_input(n["init"])  # same control inputs as k1, else they are not duplicates
    extra = model.graph.append(Node("AddV2", [n["a1"].output, n["a2"].output], dialect="tf", name="sum"))
    model.graph.append(Node("Identity", [extra.output], dialect="tf", name="out2"))
    report = run_pipeline(model, "merge_duplicate_nodes", outputs=["out", "out2"])
    names = [node.name for node in model.graph]
    assert "k2" not in names and "a2" not in names
    assert extra.inputs == (n["a1"].output, n["a1"].output)
    assert report.steps[0].stats["nodes_merged"] == 2


def test_merge_duplicate_nodes_shrinks_bert() -> None:
    path = _model("onnx_bert")
    before = len(gw.load(path).graph)
    model = _apply(path, "merge_duplicate_nodes")
    assert len(model.graph) < before - 10  # dozens of identical Constant nodes in the export


def _weights_model(path, *, external: bool):
    """y = sum_i x @ W_i over 8 same-shape 4 MiB weights, W_5 a copy of W_2 (a duplicate)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(8)]
    weights[5] = weights[2].copy()
    nodes = [helper.make_node("MatMul", ["x", f"W{i}"], [f"h{i}"]) for i in range(8)]
    nodes.append(helper.make_node("Sum", [f"h{i}" for i in range(8)], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1024])],
                              [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save(proto, str(path), save_as_external_data=True, location="w.data", size_threshold=0)
    else:
        onnx.save(proto, str(path))


@pytest.mark.parametrize("external", [False, True])
def test_weights_still_in_their_file_are_fingerprinted_without_being_read(tmp_path, external: bool) -> None:
    """The windows of a memory-mapped or external weight are read by os.pread: the digest is
    Tensor.fingerprint's, no weight is loaded but the two that could be equal, and the peak grows
    by far less than the 32 MiB of weights (through a map, each window paged in 64 KiB)."""
    import numpy as np
    import onnxruntime as ort

    from graphwright.formats import onnx as onnx_format
    from graphwright.transforms.cleanup.merge_duplicate_nodes import _fingerprint

    path = tmp_path / "w.onnx"
    _weights_model(path, external=external)
    fresh = gw.load(path)
    loaded = gw.load(path)
    for a, b in zip(fresh.graph.initializers, loaded.graph.initializers, strict=True):
        b.const.numpy()  # the other path: through the array
        assert not a.const.is_loaded and _fingerprint(a.const) == b.const.fingerprint() == _fingerprint(b.const)
        assert not a.const.is_loaded

    model = gw.load(path)
    peak = _hwm_growth_mb(lambda: run_pipeline(model, "merge_duplicate_nodes"))
    names = [v.name for v in model.graph.initializers]
    assert len(names) == 7 and "W5" not in names
    assert [v.name for v in model.graph.initializers if v.const.is_loaded] == ["W2"]  # compared in full with W5
    if peak is not None:
        assert peak < 12, f"fingerprinting paged in {peak:.0f} MiB"
    out = tmp_path / "out.onnx"
    onnx_format.save(model, out)
    x = np.random.default_rng(1).standard_normal((3, 1024)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def _hwm_growth_mb(fn) -> float | None:
    """VmHWM growth while ``fn`` runs (MiB), or None without Linux's resettable peak."""
    from pathlib import Path

    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        fn()
        return None

    def hwm() -> float:
        return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024

    before = hwm()
    fn()
    return hwm() - before
