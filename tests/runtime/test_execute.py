"""``execute``/``run`` read a model file with graphwright's own reader before any runtime sees it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from graphwright.errors import ModelLoadError
from graphwright.runtime import run
from graphwright.runtime.base import ModelSource
from graphwright.runtime.execute import check_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# the module (the package exports a function of the same name)
execute_module = importlib.import_module("graphwright.runtime.execute")


def _truncated(tmp_path: Path, ext: str) -> Path:
    data = (EXAMPLES / f"small_cnn.{ext}").read_bytes()
    path = tmp_path / f"trunc.{ext}"
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("ext", ["onnx", "pb", "tflite"])
def test_corrupt_file_fails_in_graphwrights_reader_before_any_backend(
    tmp_path: Path, ext: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_backend(*args: object) -> None:
        raise AssertionError("a runtime was asked to load a corrupt file")

    monkeypatch.setattr(execute_module, "resolve_backend", no_backend)
    path = _truncated(tmp_path, ext)
    for isolate in (False, True):
        with pytest.raises(ModelLoadError) as info:
            run(path, isolate=isolate)
        assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
        assert "ONNXRuntimeError" not in str(info.value)


def test_corrupt_graphdef_is_refused_without_importing_tensorflow(tmp_path: Path) -> None:
    path = _truncated(tmp_path, "pb")
    code = ("import sys\nfrom graphwright.runtime import run\nfrom graphwright.errors import ModelLoadError\n"
            f"try:\n    run({str(path)!r})\nexcept ModelLoadError as e:\n    print(e)\n"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    message, imported = out.stdout.strip().splitlines()
    assert "not a valid binary TensorFlow GraphDef" in message and "tensorboard" not in message
    assert imported == "False"


def test_check_file_reads_an_unchanged_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes((EXAMPLES / "small_cnn.onnx").read_bytes())
    calls: list[Path] = []
    real = execute_module.formats.load
    monkeypatch.setattr(execute_module.formats, "load", lambda p, **kw: calls.append(p) or real(p, **kw))
    check_file(ModelSource.from_path(path))
    check_file(ModelSource.from_path(path))
    assert len(calls) == 1
    path.write_bytes(path.read_bytes()[:100])  # changed: read again, and refused
    with pytest.raises(ModelLoadError):
        check_file(ModelSource.from_path(path))
    assert len(calls) == 2


def test_corrupt_graphdef_without_tensorflow_is_a_load_error_not_a_missing_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` raises ImportError
    with pytest.raises(ModelLoadError, match="not a valid binary TensorFlow GraphDef"):
        run(_truncated(tmp_path, "pb"))
