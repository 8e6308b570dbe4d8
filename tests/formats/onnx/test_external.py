"""External data: lazy memory-mapped reads, safe locations, saving beside the model, >2 GB."""

from __future__ import annotations

import builtins
import io
import os
import resource
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from graphwright import formats
from graphwright.errors import ModelLoadError, ModelSaveError
from graphwright.formats.onnx import EXTERNAL_MIN_BYTES, ExternalTensor, save, serialize
from graphwright.formats.onnx import external as external_module
from graphwright.ir import DType, Graph, Model, Node, Tensor, Value
from tests.formats.onnx import onnx_cases as cases


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)


class _OpenSpy:
    """Records every open / os.open / np.memmap of a non-model file under ``root`` (then delegates)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.opened: list[str] = []
        real_open, real_io_open, real_memmap = os.open, io.open, np.memmap
        root_text = str(root)

        def record(path: object) -> None:
            text = str(path)
            if text.startswith(root_text) and not text.endswith(".onnx"):
                self.opened.append(text)

        def spy_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            record(path)
            return real_open(path, *args, **kwargs)

        def spy_io_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            record(path)
            return real_io_open(path, *args, **kwargs)

        def spy_memmap(source, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.opened.append(f"memmap:{getattr(source, 'name', source)}")
            return real_memmap(source, *args, **kwargs)

        monkeypatch.setattr(external_module.os, "open", spy_open)
        monkeypatch.setattr(io, "open", spy_io_open)
        monkeypatch.setattr(builtins, "open", spy_io_open)
        monkeypatch.setattr(external_module.np, "memmap", spy_memmap)


def test_external_model_round_trips_lazily(tmp_path: Path, x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir()
    out_dir.mkdir()
    path = src_dir / "m.onnx"
    cases.save_with_external(cases.big_weights(), path)
    spy = _OpenSpy(monkeypatch, src_dir)
    model = formats.load(path)
    w1 = next(v for v in model.graph.initializers if v.name == "w1")
    assert isinstance(w1.const.source, ExternalTensor) and not w1.const.is_loaded
    assert spy.opened == []  # validated with lstat only: no byte read at load
    out = out_dir / "copy.onnx"
    save(model, out)
    assert sorted(p.name for p in out_dir.iterdir()) == ["copy.onnx", "copy.onnx.data"]
    written = onnx.load(str(out), load_external_data=False)
    ext = {e.key: e.value for e in written.graph.initializer[0].external_data}
    assert ext["location"] == "copy.onnx.data" and written.graph.initializer[0].data_location == 1
    assert not w1.const.is_loaded  # the writer copied the bytes from a fresh map, not via numpy()
    np.testing.assert_array_equal(_run(path, x), _run(out, x))
    onnx.checker.check_model(str(out))
    assert _arrays(onnx.load(str(out))) == _arrays(onnx.load(str(path)))  # same bytes once loaded
    reference = onnx.numpy_helper.to_array(onnx.load(str(path)).graph.initializer[0])
    values = w1.const.numpy()
    assert any(p.startswith("memmap:") for p in spy.opened)
    np.testing.assert_array_equal(values, reference)
    assert _is_mapped(values)  # a view of the file, not a copy in memory


def test_external_model_can_be_inlined_and_serialized(tmp_path: Path, x: np.ndarray) -> None:
    path = tmp_path / "m.onnx"
    cases.save_with_external(cases.big_weights(), path)
    model = formats.load(path)
    inline = tmp_path / "inline.onnx"
    save(model, inline, external_data=False)
    assert not (tmp_path / "inline.onnx.data").exists()
    assert onnx.load(str(inline)) == cases.big_weights()
    assert serialize(model) == cases.big_weights().SerializeToString()
    np.testing.assert_array_equal(_run(path, x), _run(inline, x))


def test_size_limit_switches_to_external_data(tmp_path: Path, x: np.ndarray) -> None:
    proto = cases.big_weights()  # w1 is 16 KiB, b is 256 bytes
    model = formats.load(_write(tmp_path / "in.onnx", proto))
    small = tmp_path / "small.onnx"
    save(model, small, size_limit=8_000)
    assert small.stat().st_size < 8_000
    written = onnx.load(str(small), load_external_data=False)
    locations = {t.name: t.data_location for t in written.graph.initializer}
    assert locations == {"w1": TensorProto.EXTERNAL, "b": TensorProto.DEFAULT}  # b < EXTERNAL_MIN_BYTES
    assert (tmp_path / "small.onnx.data").stat().st_size == 64 * 64 * 4
    np.testing.assert_array_equal(_run(tmp_path / "in.onnx", x), _run(small, x))
    reloaded = formats.load(small)
    assert _arrays(onnx.load(str(small))) == _arrays(proto)
    np.testing.assert_array_equal(reloaded.graph.initializers[0].const.numpy(),
                                  model.graph.initializers[0].const.numpy())
    # under the limit nothing moves; a lower external_min_bytes moves b too
    save(model, tmp_path / "plain.onnx")
    assert not (tmp_path / "plain.onnx.data").exists()
    save(model, tmp_path / "all.onnx", external_data=True, external_min_bytes=16)
    written = onnx.load(str(tmp_path / "all.onnx"), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)
    assert EXTERNAL_MIN_BYTES == 1024


def test_size_limit_cannot_be_met_is_an_error(tmp_path: Path) -> None:
    model = formats.load(_write(tmp_path / "in.onnx", cases.big_weights()))
    with pytest.raises(ModelSaveError, match="limit"):
        save(model, tmp_path / "no.onnx", size_limit=8_000, external_data=False)
    with pytest.raises(ModelSaveError, match="lower external_min_bytes"):
        save(model, tmp_path / "no.onnx", size_limit=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


_MEMMAP = np.memmap


def _is_mapped(array: np.ndarray) -> bool:
    while array is not None:
        if isinstance(array, _MEMMAP):
            return True
        array = array.base if isinstance(array.base, np.ndarray) else None
    return False


def _arrays(proto: onnx.ModelProto) -> dict[str, bytes]:
    return {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in proto.graph.initializer}


def _write(path: Path, proto: onnx.ModelProto) -> Path:
    path.write_bytes(proto.SerializeToString())
    return path


# -- hostile locations ---------------------------------------------------------------------

def _external_model(directory: Path, location: str, *, offset: int = 0, length: int | None = None) -> Path:
    """A model whose initializer w1 (64x64 float32) lives at ``location``."""
    proto = cases.big_weights()
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(length if length is not None else 16384)}
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    return _write(directory / "m.onnx", proto)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """(model directory, a secret file outside it)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x01" * 20000)
    (model_dir / "good.bin").write_bytes(b"\x00" * 16384)
    return model_dir, secret


def _prepare(kind: str, model_dir: Path, secret: Path) -> tuple[str, dict]:
    if kind == "parent":
        return "../secret.bin", {}
    if kind == "absolute":
        return str(secret), {}
    if kind == "symlink_file":
        (model_dir / "link.bin").symlink_to(secret)
        return "link.bin", {}
    if kind == "symlink_dir":
        (model_dir / "sub").symlink_to(secret.parent)
        return "sub/secret.bin", {}
    if kind == "hard_link":
        os.link(secret, model_dir / "hard.bin")
        return "hard.bin", {}
    if kind == "past_eof":
        return "good.bin", {"offset": 4}
    if kind == "missing":
        return "nothere.bin", {}
    if kind == "length_mismatch":
        return "good.bin", {"length": 100}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink_file", "symlink_dir", "hard_link",
                                  "past_eof", "missing", "length_mismatch"])
def test_hostile_locations_are_refused_before_reading(
    kind: str, hostile: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir, secret = hostile
    location, extra = _prepare(kind, model_dir, secret)
    path = _external_model(model_dir, location, **extra)
    spy = _OpenSpy(monkeypatch, secret.parent)
    with pytest.raises(ModelLoadError) as info:
        formats.load(path)
    message = str(info.value)
    assert "'w1'" in message and "\n" not in message
    assert spy.opened == []  # not one byte of the target was read


def test_file_swapped_after_load_is_refused_at_read(hostile: tuple[Path, Path]) -> None:
    model_dir, secret = hostile
    model = formats.load(_external_model(model_dir, "good.bin"))
    (model_dir / "good.bin").unlink()
    (model_dir / "good.bin").symlink_to(secret)
    with pytest.raises(ModelLoadError, match="w1"):
        model.graph.initializers[0].const.numpy()


def test_external_data_without_a_directory_is_refused(hostile: tuple[Path, Path]) -> None:
    model_dir, _ = hostile
    proto = onnx.load(str(_external_model(model_dir, "good.bin")), load_external_data=False)
    from graphwright.formats.onnx import from_proto

    with pytest.raises(ModelLoadError, match="base_dir"):
        from_proto(proto, None)
    assert from_proto(proto, model_dir).graph.initializers[0].const.numpy().shape == (64, 64)


# -- over 2 GB -------------------------------------------------------------------------

def _zeros_with_marks(n: int, mark: float) -> np.ndarray:
    array = np.zeros(n, dtype=np.float32)  # calloc'd: untouched pages cost no memory
    array[0], array[-1] = mark, -mark
    return array


@pytest.mark.slow
def test_model_over_2gb_is_saved_with_external_data(tmp_path: Path) -> None:
    n = 300_000_000  # 1.2 GB per tensor, 2.4 GB in all
    g = Graph("onnx", "huge")
    x = Value("x", DType.FLOAT32, (n,))
    g.set_inputs([x])
    consts = []
    for i, mark in enumerate((1.5, 2.5)):
        tensor = Tensor(DType.FLOAT32, (n,), loader=lambda m=mark: _zeros_with_marks(n, m), name=f"w{i}")
        consts.append(g.add_initializer(Value(f"w{i}", const=tensor)))
    a = g.append(Node("Add", [x, consts[0]], dialect="onnx", name="a", outputs=[Value("a", DType.FLOAT32, (n,))]))
    b = g.append(Node("Add", [a.output, consts[1]], dialect="onnx", name="b",
                      outputs=[Value("y", DType.FLOAT32, (n,))]))
    g.set_outputs([b.output])
    model = Model(g, "onnx")
    path = tmp_path / "huge.onnx"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        save(model, path)
        peak_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        data = tmp_path / "huge.onnx.data"
        assert path.stat().st_size < 10_000 and data.stat().st_size >= 2 * n * 4
        assert peak_growth_mb < 512  # zero pages stay unmapped: no copy of the weights was made
        reloaded = formats.load(path)
        w = reloaded.graph.initializers[1].const
        assert isinstance(w.source, ExternalTensor) and not w.is_loaded and w.shape == (n,)
        values = w.numpy()
        assert values[0] == 2.5 and values[-1] == -2.5 and values[1] == 0
        with pytest.raises(ModelSaveError, match="2 GB"):
            serialize(model)
    finally:
        for leftover in tmp_path.iterdir():
            leftover.unlink()


def test_onnx_checker_accepts_auto_external_output(tmp_path: Path) -> None:
    proto = cases.big_weights()
    model = formats.load(_write(tmp_path / "in.onnx", proto))
    save(model, tmp_path / "ext.onnx", size_limit=4096)
    onnx.checker.check_model(str(tmp_path / "ext.onnx"), full_check=True)
    assert _arrays(onnx.load(str(tmp_path / "ext.onnx"))) == _arrays(proto)


def test_external_constant_attribute_tensors(tmp_path: Path) -> None:
    values = np.arange(1024, dtype=np.float32).reshape(16, 64)
    constant = onnx.helper.make_node("Constant", [], ["k"], name="k",
                                     value=onnx.numpy_helper.from_array(values, "k_value"))
    add = onnx.helper.make_node("Add", ["x", "k"], ["y"], name="add")
    graph = onnx.helper.make_graph([constant, add], "const",
                                   [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                                   [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "const.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, location="const.bin", size_threshold=0,
                    convert_attribute=True)
    model = formats.load(path)
    tensor = next(iter(model.graph)).attrs["value"].value
    assert isinstance(tensor.source, ExternalTensor) and not tensor.is_loaded
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    save(model, out_dir / "const.onnx")
    written = onnx.load(str(out_dir / "const.onnx"), load_external_data=False)
    attr_tensor = written.graph.node[0].attribute[0].t
    assert attr_tensor.data_location == TensorProto.EXTERNAL
    assert {e.key: e.value for e in attr_tensor.external_data}["location"] == "const.onnx.data"
    x = np.ones((16, 64), np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    got = ort.InferenceSession(str(out_dir / "const.onnx"), options,
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, values + 1)
    np.testing.assert_array_equal(tensor.numpy(), values)
