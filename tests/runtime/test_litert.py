from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright.errors import ModelLoadError, VerificationError
from graphwright.ir import DType
from graphwright.runtime import prepare, run

from . import builders
from .conftest import EXAMPLES


def _image(seed: int = 5, batch: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 8, 8, 3)).astype(np.float32)


@pytest.mark.parametrize("backend", ["litert", "litert-ref"])
def test_float_model_matches_keras(tflite_float: Path, keras_model, backend: str) -> None:  # type: ignore[no-untyped-def]
    x = _image()
    with prepare(tflite_float, backend=backend) as session:
        (spec,) = session.inputs
        assert spec.dtype is DType.FLOAT32 and spec.shape == (1, 8, 8, 3)
        out = session.run({spec.name: x})
    assert list(out) == session.outputs
    np.testing.assert_allclose(out[session.outputs[0]], keras_model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_int8_model_reference_and_optimized_kernels_agree_within_one_lsb(tflite_int8: Path) -> None:
    opt = run(tflite_int8, seed=4)
    ref = run(tflite_int8, seed=4, backend="litert-ref")
    (name,) = opt
    assert opt[name].dtype == np.int8
    assert np.abs(opt[name].astype(int) - ref[name].astype(int)).max() <= 1


def test_int8_model_dequantizes_close_to_keras(tflite_int8: Path, keras_model) -> None:  # type: ignore[no-untyped-def]
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(tflite_int8))
    (inp,), (outp,) = interp.get_input_details(), interp.get_output_details()
    in_scale, in_zp = inp["quantization"]
    out_scale, out_zp = outp["quantization"]
    x = np.clip(_image(7), -2, 2)
    q = np.clip(np.round(x / in_scale + in_zp), -128, 127).astype(np.int8)
    got = run(tflite_int8, {inp["name"]: q}, backend="litert-ref")[outp["name"]]
    real = (got.astype(np.float32) - out_zp) * out_scale
    expected = keras_model((q.astype(np.float32) - in_zp) * in_scale).numpy()
    assert np.abs(real - expected).max() <= 4 * out_scale


def test_intermediate_tensor_is_available(tflite_float: Path, keras_model) -> None:  # type: ignore[no-untyped-def]
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(tflite_float)).get_tensor_details()
    pooled = [d["name"] for d in details if tuple(d["shape"]) == (1, 4) and "pool" in d["name"]]
    assert pooled, [d["name"] for d in details]
    x = _image(9)
    with prepare(tflite_float) as session:
        out = session.run({session.inputs[0].name: x}, outputs=[pooled[0], session.outputs[0]])
    sub = tf.keras.Model(keras_model.input, keras_model.get_layer("pool").output)
    np.testing.assert_allclose(out[pooled[0]], sub(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[session.outputs[0]], keras_model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_dynamic_batch_is_resized(tmp_path: Path) -> None:
    model = builders.keras_dense_model(1, batch=None)
    path = builders.tflite_from_keras(tmp_path / "dyn.tflite", model)
    with prepare(path) as session:
        assert session.inputs[0].shape == (None, 8, 8, 3)
        x = _image(3, batch=3)
        out = session.run({session.inputs[0].name: x})
    np.testing.assert_allclose(out[session.outputs[0]], model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_errors(tflite_float: Path, tmp_path: Path) -> None:
    with prepare(tflite_float) as session:
        name = session.inputs[0].name
        with pytest.raises(VerificationError, match=r"expects float32 \[1, 8, 8, 3\] but was given int32"):
            session.run({name: np.zeros((1, 8, 8, 3), np.int32)})
        with pytest.raises(VerificationError, match="no tensor named 'nope'"):
            session.run({name: _image()}, outputs=["nope"])
    with pytest.raises(VerificationError, match="has no option"):
        prepare(tflite_float, options={"delegate": "gpu"})
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(tflite_float.read_bytes()[:200])
    with pytest.raises(ModelLoadError, match=r"truncated\.tflite"):
        run(truncated)
    with pytest.raises(VerificationError, match=r"litert cannot load .*truncated\.tflite"):
        run(truncated, options={"verify_file": False})
    with pytest.raises(VerificationError, match="cannot run tflite models"):
        run(tflite_float, backend="onnxruntime")


def test_example_int8_model_on_ir_and_file_agree() -> None:
    from graphwright import formats
    from graphwright.runtime import input_specs, output_names

    path = EXAMPLES / "small_cnn.tflite"
    model = formats.load(path)
    with prepare(path, backend="litert-ref") as session:
        assert [(s.name, s.dtype) for s in input_specs(model)] == [(s.name, s.dtype) for s in session.inputs]
        assert output_names(model) == session.outputs
    a = run(path, backend="litert-ref")
    b = run(model, backend="litert-ref")
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_real_tflite_model_reproduces_reference() -> None:
    from tests.models import tflite_model

    info = tflite_model("int8")
    feeds, expected = info.reference_data()
    out = run(info.path, feeds)
    for name in info.outputs:
        assert np.abs(out[name].astype(int) - expected[name].astype(int)).max() <= 1
