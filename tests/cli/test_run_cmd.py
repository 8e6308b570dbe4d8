"""``graphwright run`` on corrupt files: the reader's one-line error, exit 2, before any runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import MODELS, assert_one_line_error, gw


@pytest.mark.parametrize("fmt", ["graphdef", "onnx", "tflite"])
def test_run_and_compare_give_the_readers_error_for_a_corrupt_file(tmp_path: Path, fmt: str) -> None:
    data = MODELS[fmt].read_bytes()
    bad = tmp_path / f"bad{MODELS[fmt].suffix}"
    bad.write_bytes(data[: len(data) // 2])
    summarize = gw("summarize", bad)
    assert_one_line_error(summarize, str(bad))
    for result in (gw("run", bad), gw("compare", MODELS[fmt], bad), gw("compare", bad, MODELS[fmt])):
        assert_one_line_error(result, str(bad))
        assert result.stderr == summarize.stderr  # the same message as summarize
        assert "ONNXRuntimeError" not in result.stderr and "needs TensorFlow" not in result.stderr
    assert bad.read_bytes() == data[: len(data) // 2]
