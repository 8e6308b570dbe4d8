"""Changes inside control-flow bodies: an ONNX Loop whose body holds an If (simplify fuses and
removes nodes in both, checked on onnxruntime), and TFLite WHILE/IF subgraphs (the converter's
Keras LSTM/GRU and a tf.cond): each change is reported with the body's path, with and without a
provenance sidecar, and bodies stay paired when their calling node is renamed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from graphwright import formats
from graphwright.diff import diff_models
from graphwright.diff.changes import nested, nodes_by_key
from graphwright.diff.html import render_html
from graphwright.diff.provenance import provenance_json
from graphwright.simplify import simplify
from graphwright.transforms import run_pipeline
from tests.models import get_model

F = TensorProto.FLOAT


def _dense(prefix: str, value: str, out: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """out = Relu(Identity(value) @ w + b): simplify removes the Identity and fuses MatMul+Add into a Gemm."""
    rng = np.random.default_rng(len(prefix))
    w = helper.make_tensor(f"{prefix}w", F, [4, 4], rng.standard_normal(16).astype(np.float32) * 0.5)
    b = helper.make_tensor(f"{prefix}b", F, [4], rng.standard_normal(4).astype(np.float32))
    nodes = [helper.make_node("Identity", [value], [f"{prefix}id"], name=f"{prefix}id"),
             helper.make_node("MatMul", [f"{prefix}id", f"{prefix}w"], [f"{prefix}mm"], name=f"{prefix}mm"),
             helper.make_node("Add", [f"{prefix}mm", f"{prefix}b"], [f"{prefix}add"], name=f"{prefix}add"),
             helper.make_node("Relu", [f"{prefix}add"], [out], name=f"{prefix}relu")]
    return nodes, [w, b]


def loop_with_if(path: Path) -> Path:
    """y = Loop x3 { v = dense(v); v = If(sum(v) > 0, then: dense(v), else: -v) }(Identity(x))."""
    then_nodes, then_inits = _dense("t_", "v1", "then_out")
    then_branch = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("then_out", F, [1, 4])],
                                    then_inits)
    else_branch = helper.make_graph([helper.make_node("Neg", ["v1"], ["else_out"], name="neg")], "else", [],
                                    [helper.make_tensor_value_info("else_out", F, [1, 4])])
    body_nodes, body_inits = _dense("b_", "v", "v1")
    body_nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
                   helper.make_node("ReduceSum", ["v1"], ["total"], name="total", keepdims=0),
                   helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"),
                   helper.make_node("If", ["positive"], ["v_out"], name="if_1", then_branch=then_branch,
                                    else_branch=else_branch)]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), helper.make_tensor_value_info("v", F, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [1, 4])],
        [*body_inits, helper.make_tensor("zero", F, [], [0.0])])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x1"], name="pre"),
         helper.make_node("Loop", ["trip", "", "x1"], ["y"], name="loop_1", body=body)],
        "g", [helper.make_tensor_value_info("x", F, [1, 4])], [helper.make_tensor_value_info("y", F, [1, 4])],
        [helper.make_tensor("trip", TensorProto.INT64, [], [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _proto_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of a graph and every graph in its nodes' attributes, counted on the protobuf."""
    return sum(1 + sum(_proto_nodes(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
               for n in graph.node)


def test_onnx_loop_and_nested_if_changes_carry_their_body_paths(tmp_path: Path) -> None:
    source = loop_with_if(tmp_path / "a.onnx")
    a, b = formats.load(source), formats.load(source)
    simplify(b)
    formats.save(b, tmp_path / "b.onnx")
    x = {"x": np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)}
    runs = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, x)[0]
            for p in (source, tmp_path / "b.onnx")]
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)  # the simplified model still works
    after = formats.load(tmp_path / "b.onnx")
    assert [body.path for body in nested(a)] == ["loop_1/body", "loop_1/body/if_1/else_branch",  # outer first
                                                 "loop_1/body/if_1/then_branch"]
    exact = diff_models(a, after, provenance=provenance_json(b))
    guessed = diff_models(a, after)
    assert exact.matched_by == "provenance" and guessed.matched_by == "structure"
    for diff in (exact, guessed):
        fused = {c.graph: c for c in diff.changes if c.kind == "fused"}
        assert set(fused) == {"loop_1/body", "loop_1/body/if_1/then_branch"}
        assert fused["loop_1/body/if_1/then_branch"].title().startswith(
            "loop_1/body/if_1/then_branch: fused ") and fused["loop_1/body"].ops_after == ["Gemm"]
        assert not [n for n in diff.notes if "only in" in n]
        assert (diff.a.nodes, diff.b.nodes, diff.a.graphs) == (
            _proto_nodes(onnx.load(source).graph), _proto_nodes(onnx.load(tmp_path / "b.onnx").graph), 4)
    titles = sorted(c.title() for c in exact.changes)
    assert titles == [
        "loop_1/body/if_1/then_branch: fused 2 nodes (MatMul, Add) into 1 Gemm",
        "loop_1/body/if_1/then_branch: removed 1 node (Identity)",
        "loop_1/body: fused 2 nodes (MatMul, Add) into 1 Gemm",
        "loop_1/body: removed 1 node (Identity)",  # b_id; keep_going (a body output) stays
        "removed 1 node (Identity)",
    ]
    page = render_html(exact, nodes_by_key(a.graph), nodes_by_key(after.graph))
    data = json.loads(re.search(r'id="gw-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    i = next(k for k, c in enumerate(exact.changes) if c.graph.endswith("then_branch") and c.kind == "fused")
    drawn = {name for name, _op, _changed in data["changes"][i]["a"]["nodes"]}
    assert {"t_mm", "t_add", "t_relu"} <= drawn  # drawn in the then-branch, where the change is


def _keras_rnn() -> Path:
    return get_model("tflite_control", "keras_rnn_float").path


def test_tflite_while_bodies_by_their_calling_operator_and_role(tmp_path: Path) -> None:
    model = formats.load(_keras_rnn())
    bodies = {body.path: body.graph.name for body in nested(model)}
    assert bodies == {  # the converter's own subgraph names say which is which
        "functional_1/lstm_1/while/cond": "functional_1/lstm_1/while_cond",
        "functional_1/lstm_1/while/body": "functional_1/lstm_1/while_body",
        "functional_1/gru_1/while/cond": "functional_1/gru_1/while_cond",
        "functional_1/gru_1/while/body": "functional_1/gru_1/while_body",
    }
    stateful = formats.load(get_model("tflite_control", "stateful_float").path)
    # TensorFlow numbers the branch functions with a process-wide counter: only the stem is stable
    names = {body.path: re.sub(r"_\d+$", "", body.graph.name) for body in nested(stateful)}
    assert names == {"CALL_ONCE/init": "NoOp", "cond/then": "cond_true", "cond/else": "cond_false"}


def test_tflite_changes_inside_while_bodies(tmp_path: Path) -> None:
    source = _keras_rnn()
    tanh_in = {g.name: sum(n.op == "TANH" for n in g) for g in formats.load(source).graphs}
    a, b = formats.load(source), formats.load(source)
    run_pipeline(b, "rename_op(old_op_name=TANH, new_op_name=RELU)")
    formats.save(b, tmp_path / "b.tflite")
    for prov in (provenance_json(b), None):
        diff = diff_models(a, formats.load(tmp_path / "b.tflite"), provenance=prov)
        retyped = [c for c in diff.changes if c.kind == "retyped"]
        assert all(c.detail == "TANH -> RELU" for c in retyped)
        assert {c.graph: sum(x.graph == c.graph for x in retyped) for c in retyped} == {
            "functional_1/lstm_1/while/body": tanh_in["functional_1/lstm_1/while_body"],
            "functional_1/gru_1/while/body": tanh_in["functional_1/gru_1/while_body"]}
        assert retyped[0].title().startswith(retyped[0].graph + ": retyped ")
        assert diff.op_deltas() == [("RELU", 0, 3), ("TANH", 3, 0)]
    # obfuscation renames the WHILE operators too: their bodies stay paired through the rename
    c = formats.load(source)
    run_pipeline(c, "obfuscate_names")
    formats.save(c, tmp_path / "c.tflite")
    exact = diff_models(a, formats.load(tmp_path / "c.tflite"), provenance=provenance_json(c))
    guessed = diff_models(a, formats.load(tmp_path / "c.tflite"))  # names tell nothing: paired in calling order
    became = {old: new for new, entry in provenance_json(c)["nodes"].items() for old in entry["from"]}
    expected = {f"{w}/{role}": f"{became[w]}/{role}" for w in ("functional_1/lstm_1/while", "functional_1/gru_1/while")
                for role in ("cond", "body")}
    assert expected["functional_1/lstm_1/while/body"] != "functional_1/lstm_1/while/body"
    for diff in (exact, guessed):
        assert not [n for n in diff.notes if "only in" in n]
        assert diff.paired == expected
    renamed = {c.graph for c in exact.changes if c.kind == "renamed"}
    assert renamed == {"", *exact.paired}


def test_a_body_only_one_model_has_is_a_note(tmp_path: Path) -> None:
    source = loop_with_if(tmp_path / "a.onnx")
    a, b = formats.load(source), formats.load(source)
    loop = next(n for n in b.graph if n.op == "Loop")
    body = loop.attrs["body"].value
    branch = next(n for n in body if n.op == "If")
    branch.attrs["then_branch"], branch.attrs["else_branch"] = branch.attrs["else_branch"], branch.attrs["then_branch"]
    del branch.attrs["then_branch"]
    diff = diff_models(a, b)
    assert "loop_1/body/if_1/then_branch is only in A (B has no such graph: its insides are not compared)" in diff.notes
