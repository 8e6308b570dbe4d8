"""docs/architecture.md stays true: its worked fusion runs, fuses, matches TensorFlow and refuses with a reason."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from graphwright import formats
from graphwright.transforms import run_pipeline

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def registered() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len([line for line in block.splitlines() if line.strip()]) <= 20
    exec(compile(block, str(DOC), "exec"), {})  # our own documentation; registers the transform


def _graph(tf, second_reader: bool) -> bytes:
    rng = np.random.default_rng(0)
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 6], name="x")
        w = tf.constant(rng.standard_normal((6, 4)).astype(np.float32), name="dense/kernel")
        b = tf.constant(rng.standard_normal(4).astype(np.float32), name="dense/bias")
        biased = tf.nn.bias_add(tf.matmul(x, w, name="dense/MatMul"), b, name="dense/BiasAdd")
        y = tf.tanh(biased, name="dense/Tanh")
        if second_reader:
            tf.identity(y + biased, name="out")
        else:
            tf.identity(y, name="out")
    return graph.as_graph_def().SerializeToString()


def test_the_worked_fusion_fuses_and_matches_tensorflow(registered: None, tmp_path: Path) -> None:
    from tests.tf_oracle import run_graphdef, tf

    original = _graph(tf, second_reader=False)
    path = tmp_path / "g.pb"
    path.write_bytes(original)
    model = formats.load(path)
    report = run_pipeline(model, "example_fuse_matmul_tanh", outputs=["out"])
    assert report.steps[0].stats == {"matmul_bias_tanh": 1}
    assert [n.op for n in model.graph if n.op not in ("Const", "Placeholder", "Identity")] == ["_FusedMatMul"]
    feed = {"x": np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)}
    (want,) = run_graphdef(original, feed, ["out"])
    (got,) = run_graphdef(formats.serialize(model), feed, ["out"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_worked_fusion_refuses_a_shared_intermediate_with_its_reason(registered: None, tmp_path: Path) -> None:
    from tests.tf_oracle import tf

    path = tmp_path / "g.pb"
    path.write_bytes(_graph(tf, second_reader=True))
    model = formats.load(path)
    report = run_pipeline(model, "example_fuse_matmul_tanh", outputs=["out"])
    assert not report.steps[0].changed
    (refusal,) = report.steps[0].refusals
    assert refusal == ("matmul_bias_tanh", "dense/Tanh", "Tanh",
                       "intermediate 'dense/BiasAdd' (BiasAdd) has 2 readers, not 1")
