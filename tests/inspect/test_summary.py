"""summarize on GraphDefs with variables: VariableV2 and VarHandleOp shapes come from their ``shape`` attribute,
checked against the shapes TensorFlow gives the variables (TF's pip package ships no summarize_graph binary)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphwright.cli.main import main
from graphwright.formats.graphdef import model_from_proto, parse_bytes
from graphwright.inspect.summary import summarize

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")
tf = oracle.tf


def _variables_graph() -> tuple[bytes, dict[str, tf.TensorShape]]:
    """Ref (VariableV2) and resource (VarHandleOp) variables: matrices, a scalar, int32, one of unknown shape."""
    graph = tf.Graph()
    with graph.as_default():
        made = [
            tf.compat.v1.Variable(tf.zeros([3, 4]), use_resource=False, name="ref_matrix"),
            tf.compat.v1.Variable(3.0, use_resource=False, name="ref_scalar"),
            tf.compat.v1.Variable(tf.compat.v1.placeholder_with_default(tf.zeros([2, 3]), [None, 3]),
                                  validate_shape=False, use_resource=False, name="ref_unknown"),
            tf.compat.v1.Variable(tf.zeros([5, 2, 2], tf.int32), use_resource=True, name="res_int"),
            tf.compat.v1.get_variable("res_vector", shape=[7], use_resource=True),
        ]
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.identity(tf.matmul(x, tf.zeros([3, 4])) + made[0], name="out")
    shapes = {v.op.name: v.shape for v in made}
    return graph.as_graph_def().SerializeToString(), shapes


def _tf_shape(shape: tf.TensorShape) -> list[int | None] | None:
    return None if shape.rank is None else shape.as_list()


def test_variable_shapes_and_parameter_count_are_tensorflows() -> None:
    data, shapes = _variables_graph()
    ops = {n.name: n.op for n in tf.compat.v1.GraphDef.FromString(data).node}
    assert {ops[name] for name in shapes} == {"VariableV2", "VarHandleOp"}
    summary = summarize(model_from_proto(parse_bytes(data)[0]))
    got = {spec.name: spec for spec in summary.variables}
    assert set(got) == set(shapes)
    for name, shape in shapes.items():
        assert got[name].shape == _tf_shape(shape), name
    assert got["res_int"].dtype == "int32" and got["res_vector"].dtype == "float32"  # the variable's, not resource
    known = [int(np.prod(s.as_list())) for s in shapes.values() if s.is_fully_defined()]
    assert summary.variable_parameters == sum(known) == 12 + 1 + 20 + 7


def test_cli_shows_the_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _ = _variables_graph()
    path = tmp_path / "vars.pb"
    path.write_bytes(data)
    assert main(["summarize", str(path), "--json"]) == 0
    variables = {v["name"]: v["shape"] for v in json.loads(capsys.readouterr().out)["variables"]}
    assert variables == {"ref_matrix": [3, 4], "ref_scalar": [], "ref_unknown": None, "res_int": [5, 2, 2],
                         "res_vector": [7]}
    assert main(["summarize", str(path)]) == 0
    rows = {line.split()[1]: line.split()[5] for line in capsys.readouterr().out.splitlines()
            if len(line.split()) > 5 and line.split()[1] in variables}
    assert rows == {"ref_matrix": "[3,4]", "ref_scalar": "[]", "ref_unknown": "unknown", "res_int": "[5,2,2]",
                    "res_vector": "[7]"}
