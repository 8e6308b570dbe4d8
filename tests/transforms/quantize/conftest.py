"""onnxruntime's quantization tools write scratch files (``sym_shape_infer_temp.onnx``, external
``<uuid>.data``) into the working directory: every test here runs in its own temporary one."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _scratch_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
