from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphwright.errors import (
    BackendUnavailableError,
    ModelLoadError,
    VerificationError,
)
from graphwright.runtime import Backend, ModelSource, Session, register_backend, run
from graphwright.runtime.base import _registered

from . import fake_backends
from .conftest import EXAMPLES


@pytest.fixture(autouse=True)
def fake_registry() -> Iterator[None]:
    before = dict(_registered)
    for cls in (fake_backends.SegfaultBackend, fake_backends.SleepyBackend,
                fake_backends.MissingBackend, fake_backends.BuggyBackend):
        register_backend(cls(), replace=True)
    yield
    _registered.clear()
    _registered.update(before)


def test_isolated_run_equals_in_process_run(onnx_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    here = run(onnx_path, {"x": x})
    there = run(onnx_path, {"x": x}, isolate=True)
    assert list(there) == ["y"] and there["y"].dtype == np.float32
    assert np.array_equal(here["y"], there["y"])
    assert np.array_equal(run(onnx_path, seed=2)["y"], run(onnx_path, seed=2, isolate=True)["y"])


def test_in_memory_model_runs_isolated(onnx_path: Path) -> None:
    data = onnx_path.read_bytes()
    assert np.array_equal(run(data, isolate=True)["y"], run(onnx_path)["y"])


def test_segfault_becomes_verification_error(onnx_path: Path) -> None:
    with pytest.raises(VerificationError) as info:
        run(onnx_path, backend="test-segfault", isolate=True)
    assert str(info.value) == (
        f"test-segfault crashed (signal 11, SIGSEGV) while running {onnx_path}; the file is probably corrupt"
    )


def _overflowing_buffer_tflite(source: Path, target: Path) -> Path:
    """The first 4-D weight buffer moved to ``offset=2**63, size=2**63``: offset + size wraps
    to 0 in uint64, passes LiteRT's range check, and the interpreter reads far outside the file."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(source.read_bytes(), 0))
    weights = next(
        t for t in model.subgraphs[0].tensors
        if len(t.shape) == 4 and model.buffers[t.buffer].data is not None and len(model.buffers[t.buffer].data)
    )
    buffer = model.buffers[weights.buffer]
    buffer.data, buffer.offset, buffer.size = None, 2**63, 2**63
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    target.write_bytes(bytes(builder.Output()))
    return target


def test_corrupt_tflite_that_crashes_litert(tmp_path: Path) -> None:
    path = _overflowing_buffer_tflite(EXAMPLES / "small_cnn.tflite", tmp_path / "overflow.tflite")
    with pytest.raises(ModelLoadError, match=r"buffer .* spans bytes 9223372036854775808"):
        run(path)  # graphwright's reader refuses the file before LiteRT sees it
    for backend in ("litert", "litert-ref"):
        with pytest.raises(VerificationError) as info:
            run(path, backend=backend, isolate=True, options={"verify_file": False})
        assert str(info.value) == (
            f"{backend} crashed (signal 11, SIGSEGV) while running {path}; the file is probably corrupt"
        )


def test_runtime_error_in_child_keeps_its_message(onnx_path: Path) -> None:
    feeds = {"x": np.ones((1, 4), np.float64)}
    with pytest.raises(VerificationError) as here:
        run(onnx_path, feeds)
    with pytest.raises(VerificationError) as there:
        run(onnx_path, feeds, isolate=True)
    assert str(there.value) == str(here.value)


def test_error_types_cross_the_process_boundary(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="pip install imaginary-runtime"):
        run(onnx_path, backend="test-missing", isolate=True)
    with pytest.raises(VerificationError, match=r"test-buggy failed on .*: KeyError: 'boom'"):
        run(onnx_path, backend="test-buggy", isolate=True)
    missing = tmp_path / "gone.onnx"
    missing.write_bytes(onnx_path.read_bytes())
    source = ModelSource.from_path(missing)
    missing.unlink()
    with pytest.raises(ModelLoadError, match="no such file"):
        run(source, isolate=True)


def test_timeout(onnx_path: Path) -> None:
    with pytest.raises(VerificationError, match=r"test-sleepy did not finish within 3 s"):
        run(onnx_path, backend="test-sleepy", isolate=True, timeout=3)


def test_backend_defined_in_a_function_cannot_be_isolated(onnx_path: Path) -> None:
    class Local(Backend):
        name = "test-local"
        formats = ("onnx",)
        install_hint = "nothing"

        def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
            raise AssertionError("unreachable")

    register_backend(Local(), replace=True)
    with pytest.raises(VerificationError, match="cannot run isolated"):
        run(onnx_path, backend="test-local", isolate=True)


def test_string_outputs_cross_without_pickle(tmp_path: Path) -> None:
    from onnx import TensorProto

    from . import builders

    path = builders.onnx_single_op(
        tmp_path / "identity.onnx", "Identity", [("s", TensorProto.STRING, [2])], [("t", TensorProto.STRING, [2])]
    )
    feeds = {"s": np.array(["ab", "c"], dtype=object)}
    out = run(path, feeds, isolate=True)["t"]
    assert [v.decode() if isinstance(v, bytes) else v for v in out.tolist()] == ["ab", "c"]
