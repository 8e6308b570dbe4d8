from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphwright.errors import BackendUnavailableError, ModelLoadError, VerificationError
from graphwright.ir import DType
from graphwright.runtime import InputSpec, ModelSource, get_backend, prepare, run

from . import builders
from .conftest import EXAMPLES

pytestmark = pytest.mark.tf


def _expected(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return np.maximum(x @ wb[0] + wb[1], 0.0)


def test_frozen_graph_matches_numpy(tf_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    out = run(tf_path, {"x": x, "n": np.array(21, np.int32)})
    assert list(out) == ["y", "twice"]  # the dangling Const and NoOp are not outputs
    np.testing.assert_allclose(out["y"], _expected(x, wb), rtol=1e-5, atol=1e-6)
    assert out["twice"] == 42 and out["twice"].dtype == np.int32


def test_session_inputs_are_the_placeholders(tf_path: Path) -> None:
    with prepare(tf_path) as session:
        assert session.inputs == [InputSpec("x", DType.FLOAT32, (None, 4)), InputSpec("n", DType.INT32, ())]
        assert session.outputs == ["y", "twice"]


def test_tf_names_for_feeds_and_fetches(tf_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    x = np.ones((1, 4), np.float32)
    out = run(tf_path, {"x:0": x}, outputs=["y:0", "logits"])
    assert list(out) == ["y:0", "logits"]  # keyed exactly as requested
    np.testing.assert_allclose(out["logits"], x @ wb[0] + wb[1], rtol=1e-5)
    np.testing.assert_allclose(out["y:0"], _expected(x, wb), rtol=1e-5)


def test_text_graphdef(tmp_path: Path, wb: tuple[np.ndarray, np.ndarray]) -> None:
    path = builders.tf_graph(tmp_path / "graph.pbtxt", *wb, text=True)
    x = np.full((2, 4), -0.25, np.float32)
    np.testing.assert_allclose(run(path, {"x": x}, outputs=["y"])["y"], _expected(x, wb), rtol=1e-5, atol=1e-6)


def test_errors_are_one_line(tf_path: Path, tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match=r"input 'x' expects float32 \[\?, 4\] but was given float64"):
        run(tf_path, {"x": np.ones((1, 4))})
    with pytest.raises(VerificationError, match="no output tensor 'nope'"):
        run(tf_path, {"x": np.ones((1, 4), np.float32)}, outputs=["nope"])
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        tf.reshape(x, [3, -1], name="r")
    bad = tmp_path / "bad.pb"
    bad.write_bytes(graph.as_graph_def().SerializeToString())
    with pytest.raises(VerificationError, match=r"requested shape requires a multiple of 3 \(node 'r'\)") as info:
        run(bad, {"x": np.ones(4, np.float32)})
    assert "\n" not in str(info.value)


def test_unknown_op_and_garbage(tmp_path: Path, tf_path: Path) -> None:
    from tensorflow.core.framework import graph_pb2

    graph_def = graph_pb2.GraphDef.FromString(tf_path.read_bytes())
    graph_def.node[-1].op = "NoSuchOp"
    path = tmp_path / "unknown.pb"
    path.write_bytes(graph_def.SerializeToString())
    with pytest.raises(VerificationError, match=r"TensorFlow cannot import .*NoSuchOp"):
        run(path)
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(ModelLoadError, match=r"garbage\.pb: not a valid binary TensorFlow GraphDef"):
        run(ModelSource("graphdef", path=garbage))  # graphwright's reader, before TensorFlow


def test_missing_tensorflow_names_the_extra(tf_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # makes `import tensorflow` raise ImportError
    with pytest.raises(BackendUnavailableError, match=r"pip install 'graphwright\[tf\]'"):
        run(tf_path)
    with pytest.raises(BackendUnavailableError, match="tensorflow backend needs TensorFlow"):
        get_backend("tensorflow").prepare(ModelSource.from_path(tf_path), {})


def test_importing_graphwright_does_not_import_tensorflow() -> None:
    code = (
        "import sys, graphwright.runtime, graphwright.verify;"
        "from graphwright.runtime import get_backend; get_backend('tensorflow');"
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_example_graphdef_on_ir_and_file_agree() -> None:
    from graphwright import formats
    from graphwright.runtime import input_specs, output_names

    path = EXAMPLES / "small_cnn.pb"
    model = formats.load(path)
    with prepare(path) as session:
        assert input_specs(model) == session.inputs
        assert output_names(model) == session.outputs
    from_file = run(path, seed=3)
    from_ir = run(model, seed=3)
    assert np.array_equal(from_file["Identity"], from_ir["Identity"])


@pytest.mark.slow
def test_real_keras_graph_reproduces_reference() -> None:
    from tests.models import keras_graphdef

    info = keras_graphdef("mobilenet_v2")
    feeds, expected = info.reference_data()
    out = run(info.path, feeds, outputs=info.outputs)
    for name in info.outputs:
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-4, atol=1e-5)
