"""Real TFLite models made by the TFLiteConverter, shared by the tflite test modules.

``float`` and ``int8`` come from ``tests.models`` (a Keras CNN, the int8 one
full-integer with a representative dataset).  The others are built here, in
a subprocess running TensorFlow (so the test process never imports it), once
per session:

* ``control_flow``: ``tf.while_loop`` + ``tf.cond`` -> WHILE / IF and 5 subgraphs,
  a dynamic batch dimension (``shape_signature``).
* ``custom``: ``AudioSpectrogram`` + ``Mfcc`` as custom ops (``allow_custom_ops``)
  with flexbuffer custom options; LiteRT runs both.
* ``lstm``: a Keras LSTM (a WHILE loop with six loop variables).
* ``variable``: a resource variable -> CALL_ONCE, VAR_HANDLE (string options),
  READ/ASSIGN_VARIABLE (op codes > 127), stateful across invocations.

Run ``python -m tests.formats.tflite.test_models OUT_DIR`` to build them by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILT = ("control_flow", "custom", "lstm", "variable")
ALL = ("float", "int8", *BUILT)
REPO = Path(__file__).resolve().parents[3]


def _build_all(out: Path) -> None:  # pragma: no cover - runs in the build subprocess
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    def convert(module: tf.Module, fn: object, **flags: bool) -> bytes:
        converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], module)
        for flag, value in flags.items():
            setattr(converter, flag, value)
        return converter.convert()

    class ControlFlow(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def f(self, x: tf.Tensor) -> tf.Tensor:
            def body(i: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                return i + 1, v * 1.5 + 1.0

            _, v = tf.while_loop(lambda i, v: i < 3, body, (tf.constant(0), x))
            return tf.cond(tf.reduce_sum(v) > 0, lambda: v * 2.0, lambda: v - 1.0)

    class Custom(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([400, 1], tf.float32)])
        def f(self, x: tf.Tensor) -> tf.Tensor:
            spectrogram = tf.raw_ops.AudioSpectrogram(input=x, window_size=64, stride=32, magnitude_squared=True)
            mfcc = tf.raw_ops.Mfcc(spectrogram=spectrogram, sample_rate=16000, upper_frequency_limit=4000.0,
                                   lower_frequency_limit=20.0, filterbank_channel_count=20,
                                   dct_coefficient_count=8)
            return mfcc * 2.0

    class Variable(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v = tf.Variable(tf.constant([1.0, 2.0, 3.0]))

        @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
        def f(self, x: tf.Tensor) -> tf.Tensor:
            self.v.assign_add(x)
            return self.v * 2.0

    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((5, 4), batch_size=1)
    lstm = tf.keras.Model(inputs, tf.keras.layers.Dense(2)(tf.keras.layers.LSTM(6)(inputs)))

    cf, custom, variable = ControlFlow(), Custom(), Variable()
    models = {
        "control_flow": convert(cf, cf.f),
        "custom": convert(custom, custom.f, allow_custom_ops=True),
        "lstm": tf.lite.TFLiteConverter.from_keras_model(lstm).convert(),
        "variable": convert(variable, variable.f, experimental_enable_resource_variables=True),
    }
    for name, data in models.items():
        (out / f"{name}.tflite").write_bytes(data)


def build_models(out: Path) -> dict[str, Path]:
    """Build the converter models into ``out`` (skipped when already there)."""
    paths = {name: out / f"{name}.tflite" for name in BUILT}
    if not all(p.exists() for p in paths.values()):
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "tests.formats.tflite.test_models", str(out)],
            cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
        )
        if done.returncode != 0 or not all(p.exists() for p in paths.values()):
            raise RuntimeError(f"building TFLite test models failed:\n{done.stderr[-4000:]}")
    return paths


def real_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> path of every real TFLite model (see module docstring), built once per session."""
    from tests.models import tflite_model

    paths = build_models(tmp_path_factory.getbasetemp() / "tflite_real_models")
    for name in ("float", "int8"):
        paths[name] = tflite_model(name).path
    return paths


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)


def test_every_model_is_a_tflite_file(tflite_models: dict[str, Path]) -> None:
    assert set(tflite_models) == set(ALL)
    for path in tflite_models.values():
        assert path.read_bytes()[4:8] == b"TFL3"


if __name__ == "__main__":  # pragma: no cover
    _build_all(Path(sys.argv[1]))
