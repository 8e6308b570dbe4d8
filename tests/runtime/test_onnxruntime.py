from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from graphwright.errors import ModelLoadError, VerificationError
from graphwright.ir import DType
from graphwright.runtime import InputSpec, ModelSource, prepare, run
from graphwright.verify import random_feeds

from . import builders


def test_matmul_add_matches_numpy(onnx_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    w, b = wb
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    out = run(onnx_path, {"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], x @ w + b, rtol=1e-6, atol=1e-6)


def test_bytes_and_source_inputs_give_the_same_result(onnx_path: Path) -> None:
    x = np.ones((2, 4), np.float32)
    from_path = run(onnx_path, {"x": x})["y"]
    from_bytes = run(onnx_path.read_bytes(), {"x": x})["y"]
    from_source = run(ModelSource.from_path(onnx_path), {"x": x}, backend="onnxruntime")["y"]
    assert np.array_equal(from_path, from_bytes) and np.array_equal(from_path, from_source)


def test_session_reports_the_runtime_view(onnx_path: Path) -> None:
    with prepare(onnx_path) as session:
        assert session.inputs == [InputSpec("x", DType.FLOAT32, ("N", 4))]
        assert session.outputs == ["y"]
        a = session.run({"x": np.zeros((1, 4), np.float32)})["y"]
        c = session.run({"x": np.zeros((5, 4), np.float32)})["y"]
    assert a.shape == (1, 3) and c.shape == (5, 3)


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_optimization_levels_agree(onnx_path: Path, wb: tuple[np.ndarray, np.ndarray], level: str) -> None:
    x = np.full((1, 4), 0.5, np.float32)
    out = run(onnx_path, {"x": x}, options={"graph_optimization_level": level})["y"]
    np.testing.assert_allclose(out, x @ wb[0] + wb[1], rtol=1e-6)


def test_bad_options_are_refused(onnx_path: Path) -> None:
    with pytest.raises(VerificationError, match="graph_optimization_level must be one of"):
        run(onnx_path, {"x": np.ones((1, 4), np.float32)}, options={"graph_optimization_level": "max"})
    with pytest.raises(VerificationError, match="has no option"):
        run(onnx_path, {"x": np.ones((1, 4), np.float32)}, options={"threads": 2})


def test_missing_inputs_get_seeded_random_values(onnx_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    out1 = run(onnx_path)["y"]
    out2 = run(onnx_path)["y"]
    x = random_feeds([InputSpec("x", DType.FLOAT32, ("N", 4))])["x"]
    assert x.shape == (1, 4)
    assert np.array_equal(out1, out2)
    np.testing.assert_allclose(out1, x @ wb[0] + wb[1], rtol=1e-6)
    assert not np.array_equal(run(onnx_path, seed=1)["y"], out1)


def test_feed_errors_are_one_line_verification_errors(onnx_path: Path) -> None:
    with pytest.raises(VerificationError, match=r"input 'x' expects float32 \[N, 4\] but was given float64 \[1, 4\]"):
        run(onnx_path, {"x": np.ones((1, 4))})
    with pytest.raises(VerificationError, match=r"expects float32 \[N, 4\] but was given float32 \[1, 5\]"):
        run(onnx_path, {"x": np.ones((1, 5), np.float32)})
    with pytest.raises(VerificationError, match="no output named 'z'"):
        run(onnx_path, {"x": np.ones((1, 4), np.float32)}, outputs=["z"])


def test_unknown_feed_name_is_refused(onnx_path: Path) -> None:
    with pytest.raises(VerificationError, match="no input named 'q'; its inputs are 'x'"):
        prepare(onnx_path).run({"x": np.ones((1, 4), np.float32), "q": np.ones(1)})


def test_runtime_failure_is_a_verification_error(tmp_path: Path) -> None:
    path = builders.onnx_single_op(
        tmp_path / "reshape.onnx", "Reshape",
        [("data", TensorProto.FLOAT, ["A"]), ("shape", TensorProto.INT64, [2])],
        [("out", TensorProto.FLOAT, None)],
    )
    ok = run(path, {"data": np.arange(6, dtype=np.float32), "shape": np.array([2, 3])})["out"]
    assert ok.shape == (2, 3)
    with pytest.raises(VerificationError, match=r"onnxruntime failed running .*reshape\.onnx") as info:
        run(path, {"data": np.arange(6, dtype=np.float32), "shape": np.array([4, 4])})
    assert "\n" not in str(info.value)


def test_corrupt_and_missing_files(tmp_path: Path, onnx_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(onnx_path.read_bytes()[:40])
    with pytest.raises(ModelLoadError, match=r"broken\.onnx: not a readable ONNX model"):  # graphwright's reader first
        run(broken, {"x": np.ones((1, 4), np.float32)})
    with pytest.raises(ModelLoadError, match="no such file"):
        run(tmp_path / "absent.onnx")


def test_other_dtypes_round_trip(tmp_path: Path) -> None:
    path = builders.onnx_single_op(
        tmp_path / "where.onnx", "Where",
        [("c", TensorProto.BOOL, [3]), ("a", TensorProto.INT64, [3]), ("b", TensorProto.INT64, [3])],
        [("o", TensorProto.INT64, [3])],
    )
    c = np.array([True, False, True])
    a, b = np.array([1, 2, 3]), np.array([10, 20, 30])
    assert run(path, {"c": c, "a": a, "b": b})["o"].tolist() == [1, 20, 3]
    random = run(path)["o"]
    assert random.dtype == np.int64 and ((random >= 0) & (random < 10)).all()


def _external_model(directory: Path, wb: tuple[np.ndarray, np.ndarray]) -> Path:
    import onnx

    path = builders.onnx_matmul_add(directory / "inline.onnx", *wb)
    model = onnx.load(path)
    onnx.save(model, directory / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    return directory / "ext.onnx"


def _has_onnx_reader() -> bool:
    import graphwright.formats.onnx as fmt

    return hasattr(fmt, "load")


@pytest.mark.skipif(not _has_onnx_reader(), reason="the ONNX reader is not written yet")
def test_external_data_is_read_from_the_model_directory(tmp_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    path = _external_model(tmp_path, wb)
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(run(path, {"x": x})["y"], x @ wb[0] + wb[1], rtol=1e-6)


@pytest.mark.skipif(not _has_onnx_reader(), reason="the ONNX reader is not written yet")
def test_escaping_external_data_is_refused(tmp_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    import onnx

    inner = tmp_path / "inner"
    inner.mkdir()
    path = _external_model(tmp_path, wb)
    model = onnx.load(path, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../ext.bin"
    hostile = inner / "hostile.onnx"
    onnx.save(model, hostile)
    with pytest.raises(ModelLoadError, match=r"\.\./ext\.bin"):
        run(hostile, {"x": np.ones((1, 4), np.float32)})


def test_external_data_is_not_read_from_the_working_directory(
    tmp_path: Path, wb: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _external_model(tmp_path, wb)
    monkeypatch.chdir(tmp_path)  # ext.bin is in the cwd: bytes alone must still not reach it
    with pytest.raises(VerificationError, match=r"(?i)external data"):
        run(path.read_bytes(), {"x": np.ones((1, 4), np.float32)})


def test_ir_model_is_serialized_for_the_runtime(onnx_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    from graphwright import formats
    from graphwright.ir import Tensor

    model = formats.load(onnx_path)
    (w_value,) = [v for v in model.graph.initializers if v.name == "w"]
    w_value.const = Tensor.from_numpy(wb[0] * 2)  # a transform rewrote the weight
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(run(model, {"x": x})["y"], x @ (wb[0] * 2) + wb[1], rtol=1e-6)


def test_model_too_large_for_memory_runs_from_a_saved_copy(
    onnx_path: Path, wb: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphwright import formats
    from graphwright.errors import ModelSaveError

    model = formats.load(onnx_path)

    def refuse(_: object) -> bytes:
        raise ModelSaveError("the model needs 3000000000 bytes, over the 2 GB limit")

    monkeypatch.setattr(formats, "serialize", refuse)
    source = ModelSource.from_model(model)
    assert source.path is not None and source.external_dir == source.path.parent
    x = np.ones((2, 4), np.float32)
    for isolate in (False, True):
        np.testing.assert_allclose(run(source, {"x": x}, isolate=isolate)["y"], x @ wb[0] + wb[1], rtol=1e-6)
