"""The fast paths of simplify: memory-mapped loading, fingerprinted duplicate merging, blocked transposes,
batch-norm folding without float64 copies of the weights."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphwright import formats
from graphwright.formats import onnx as onnx_format
from graphwright.formats.onnx import ExternalTensor
from graphwright.formats.onnx.mapped import MAP_MIN_BYTES, MappedTensor, load_mapped
from graphwright.ir import Attr, Node, Tensor
from graphwright.runtime.numpy_onnx import _blocked_transpose_2d
from graphwright.simplify import simplify
from graphwright.transforms._channels import scale_out_channels

REPO = Path(__file__).resolve().parents[2]


def _model(path: Path, *, duplicate: bool, external: bool = False) -> onnx.ModelProto:
    """x @ Transpose(W1) + x @ W2 (+ x @ W3 == W2 when ``duplicate``), with doc strings on weights."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 48)).astype(np.float32)
    w2 = rng.standard_normal((48, 64)).astype(np.float32)
    w3 = w2.copy() if duplicate else w2 + 1
    inits = [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(w3, "W3"),
             numpy_helper.from_array(np.float32([0.5]), "half")]
    inits[0].doc_string = "first weight"
    nodes = [
        helper.make_node("Transpose", ["W1"], ["W1t"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "W1t"], ["a"]),
        helper.make_node("MatMul", ["x", "W2"], ["b"]),
        helper.make_node("MatMul", ["x", "W3"], ["c"]),
        helper.make_node("Add", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["ab", "c"], ["abc"]),
        helper.make_node("Mul", ["abc", "half"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 48])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    proto.ir_version = 8
    if external:
        onnx.save(proto, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(proto, str(path))
    return proto


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_mapped_load_round_trips_bytes(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    _model(src, duplicate=False)
    model = load_mapped(src)
    assert model is not None
    sources = {v.name: v.const.source for v in model.graph.initializers}
    assert isinstance(sources["W1"], MappedTensor) and isinstance(sources["W2"], MappedTensor)
    assert not isinstance(sources["half"], MappedTensor)  # small tensors are parsed as usual
    np.testing.assert_array_equal(model.graph.initializers[1].const.numpy(),
                                  numpy_helper.to_array(onnx.load(str(src)).graph.initializer[1]))
    out = tmp_path / "out.onnx"
    onnx_format.save(model, out)
    assert out.read_bytes() == src.read_bytes()
    assert not (tmp_path / "out.onnx.data").exists()


def test_mapped_load_declines_what_it_does_not_handle(tmp_path: Path) -> None:
    small = tmp_path / "small.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])), str(small))
    assert load_mapped(small) is None  # no large inline weight
    ext = tmp_path / "ext.onnx"
    _model(ext, duplicate=False, external=True)
    assert load_mapped(ext) is None  # external data: the ordinary reader maps it already
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08" + os.urandom(MAP_MIN_BYTES))
    assert load_mapped(junk) is None
    linked = tmp_path / "linked.onnx"
    _model(tmp_path / "orig.onnx", duplicate=False)
    os.link(tmp_path / "orig.onnx", linked)
    assert load_mapped(linked) is None  # hard-linked files are refused, as for external data


def test_mapped_load_reports_corrupt_lengths(tmp_path: Path) -> None:
    from graphwright.errors import ModelLoadError

    proto = _model(tmp_path / "m.onnx", duplicate=False)
    proto.graph.initializer[0].dims[0] = 65  # raw_data now too short for the shape
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    with pytest.raises(ModelLoadError, match="raw_data holds"):
        load_mapped(bad)


def test_simplify_from_file_matches_onnxruntime_and_merges_duplicates(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    _model(src, duplicate=True)
    model, report = simplify(src)
    ops = [n.op for n in model.graph]
    assert "Transpose" not in ops
    assert report.after.initializers < report.before.initializers  # W3 merged into W2 (and W1 folded)
    out = tmp_path / "s.onnx"
    onnx_format.save(model, out)
    onnx.checker.check_model(str(out))
    x = np.random.default_rng(1).standard_normal((3, 48)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), rtol=1e-4, atol=1e-5)
    merges = [p for p in report.passes if p.name == "merge_duplicate_nodes" and p.changed]
    assert merges and merges[0].stats["initializers_merged"] >= 1


def test_fingerprint_separates_tensors_differing_outside_the_sample() -> None:
    a = np.zeros(100_000, np.float32)
    b = a.copy()
    b[12_345] = 1.0  # very likely between sampled windows: the full comparison must tell them apart
    ta, tb = Tensor.from_numpy(a), Tensor.from_numpy(b)
    assert ta.fingerprint() == Tensor.from_numpy(a.copy()).fingerprint()
    assert not ta.same_values(tb)
    assert ta.same_values(Tensor.from_numpy(a.copy()))
    assert not ta.same_values(Tensor.from_numpy(a.reshape(100, 1000)))


@pytest.mark.parametrize("shape", [(128, 128), (300, 257), (1, 40000), (513, 3)])
def test_blocked_transpose_equals_numpy(shape: tuple[int, int]) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = _blocked_transpose_2d(x)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, x.T)


def test_simplify_peak_memory_stays_near_one_copy(tmp_path: Path) -> None:
    """A model of ~96 MB of inline weights simplifies without holding them twice (VmHWM, child process)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc for VmHWM")
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32), f"W{i}") for i in range(24)]
    nodes, prev = [], "x"
    for i in range(24):
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["n", 1024])], inits)
    src = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    code = (
        "import sys\nfrom graphwright.simplify import simplify\nfrom graphwright.formats import onnx as f\n"
        "base = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        f"m, _ = simplify({str(src)!r}); f.save(m, {str(tmp_path / 'out.onnx')!r})\n"
        "peak = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print('GROWTH', (peak - base) // 1024)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    growth_mb = int(proc.stdout.split("GROWTH")[1])
    assert growth_mb < 1.5 * src.stat().st_size / 2**20, proc.stdout


def _scaled_in_float64(node: Node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The reference: every product in float64 through full float64 copies, rounded once to the weight's dtype."""
    w, s = weight.astype(np.float64), scale.astype(np.float64)
    if node.op == "Conv":
        out = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
    elif node.op == "ConvTranspose":
        group = int(node.attr("group", 1))
        grouped = w.reshape((group, w.shape[0] // group, w.shape[1]) + w.shape[2:])
        out = (grouped * s.reshape((group, 1, w.shape[1]) + (1,) * (w.ndim - 2))).reshape(w.shape)
    else:
        out = w * (s[:, None] if node.attr("transB", 0) else s[None, :])
    return out.astype(weight.dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("op", "attrs", "shape", "channels"), [
    ("Conv", {}, (16, 3, 3, 3), 16),
    ("ConvTranspose", {"group": 2}, (8, 5, 3, 3), 10),
    ("Gemm", {"transB": 1}, (7, 9), 7),
    ("Gemm", {}, (7, 9), 9),
])
def test_scale_out_channels_is_bit_identical_to_float64_arithmetic(
        op: str, attrs: dict[str, int], shape: tuple[int, ...], channels: int, dtype: type) -> None:
    node = Node(op, [], dialect="onnx", attrs={k: Attr.int(v) for k, v in attrs.items()})
    rng = np.random.default_rng(3)
    weight = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(channels) * 3
    for w in (weight, np.asfortranarray(weight)):  # a non-contiguous weight too
        got = scale_out_channels(node, w, scale)
        want = _scaled_in_float64(node, w, scale)
        assert got is not None and got.dtype == w.dtype and got.shape == w.shape
        assert got.tobytes() == want.tobytes()


def test_scale_out_channels_allocates_only_its_result() -> None:
    """No float64 copy of the weight: the traced heap peak is the result plus small ufunc buffers.

    Two float64 temporaries (4x the float32 weight) made folding ResNet-50's
    batch norms peak above 2x the model's size and fragmented the heap.
    """
    weight = np.random.default_rng(0).standard_normal((256, 256, 3, 3)).astype(np.float32)  # 2.25 MiB
    node = Node("Conv", [], dialect="onnx")
    scale = np.linspace(0.5, 2.0, 256)
    tracemalloc.start()
    try:
        result = scale_out_channels(node, weight, scale)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result is not None
    assert peak < 1.25 * weight.nbytes, f"peak {peak} bytes for a {weight.nbytes}-byte weight"


def _conv_bn_model(path: Path, layers: int, channels: int) -> None:
    """``layers`` x (Conv 3x3 with a private weight -> BatchNormalization with randomized statistics)."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), f"W{i}"))
        stats = {"g": rng.uniform(0.5, 2, channels), "b": rng.standard_normal(channels),
                 "m": rng.standard_normal(channels), "v": rng.uniform(0.5, 2, channels)}
        inits += [numpy_helper.from_array(a.astype(np.float32), f"{k}{i}") for k, a in stats.items()]
        nodes.append(helper.make_node("Conv", [prev, f"W{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}"] + [f"{k}{i}" for k in stats], [f"h{i}"]))
        prev = f"h{i}"
    shape = ["n", channels, 4, 4]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_simplify_folding_batch_norms_holds_about_one_copy(tmp_path: Path) -> None:
    """Folding every BatchNormalization of a ~54 MB model replaces all its weights: the new ones plus
    one tensor at save time may be resident, not the float64 temporaries or the mapped originals
    (VmHWM growth in a child process; was 2.1x the file before the folding stopped copying)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc for VmHWM")
    src = tmp_path / "bn.onnx"
    _conv_bn_model(src, layers=6, channels=512)
    code = (
        "import sys\nfrom graphwright.simplify import simplify\nfrom graphwright.formats import onnx as f\n"
        "base = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        f"m, r = simplify({str(src)!r}); f.save(m, {str(tmp_path / 'out.onnx')!r})\n"
        "peak = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print('OPS', sorted({n.op for n in m.graph}), 'GROWTH', (peak - base) // 1024)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert "OPS ['Conv'] " in proc.stdout, proc.stdout  # every batch norm was folded
    growth_mb = int(proc.stdout.split("GROWTH")[1])
    assert growth_mb < 1.5 * src.stat().st_size / 2**20, proc.stdout


def _clear_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        return False
    return True


def _hwm_mb() -> float:
    return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024


@pytest.mark.parametrize("external", [False, True])
def test_saving_weights_nothing_read_adds_a_chunk_not_the_tensor(tmp_path: Path, external: bool) -> None:
    """A 48 MB weight no pass read (memory-mapped inline, or external data) is copied to the new file
    in chunks of os.pread: the save raises the peak by about one chunk, not by the tensor (it was
    +49 MB on Faster R-CNN, whose fc6 weight is 49 MB), and the bytes are the original's."""
    if not _clear_peak():
        pytest.skip("needs Linux /proc/self/clear_refs")
    w = np.random.default_rng(0).standard_normal((3072, 4096)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3072])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4096])],
                              [numpy_helper.from_array(w, "W")])
    src = tmp_path / "w.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save(proto, str(src), save_as_external_data=True, location="w.data", size_threshold=0)
    else:
        onnx.save(proto, str(src))
    model = formats.load(src)
    (weight,) = model.graph.initializers
    assert isinstance(weight.const.source, ExternalTensor) and not weight.const.is_loaded  # mapped, unread
    _clear_peak()
    before = _hwm_mb()
    onnx_format.save(model, tmp_path / "out.onnx", external_data=external)
    assert _hwm_mb() - before < 12, "the save held the weight (48 MB) in memory"
    copy = onnx.load(str(tmp_path / "out.onnx"))
    np.testing.assert_array_equal(numpy_helper.to_array(copy.graph.initializer[0]), w)
    assert onnx_format.to_proto(model).graph.initializer[0].raw_data == w.tobytes()  # the in-memory path too
    x = np.random.default_rng(1).standard_normal((2, 3072)).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "out.onnx", x), _run(src, x), rtol=0, atol=0)
