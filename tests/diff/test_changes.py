"""Changes by kind: renamed, re-typed, quantized, added, fused by structure, parameters and op deltas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper
from tensorboard.compat.proto import graph_pb2

from graphwright import formats
from graphwright.diff import diff_models, read_provenance, write_provenance
from graphwright.diff.provenance import provenance_json
from graphwright.simplify import simplify
from graphwright.transforms import run_pipeline
from tests.transforms._onnx_build import F, init, model, vi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _pair(pipeline: str, tmp_path: Path, **kwargs: object) -> tuple:
    a = formats.load(EXAMPLES / "small_cnn.pb")
    b = formats.load(EXAMPLES / "small_cnn.pb")
    run_pipeline(b, pipeline, **kwargs)
    formats.save(b, tmp_path / "b.pb")
    write_provenance(b, tmp_path / "b.pb")
    return a, formats.load(tmp_path / "b.pb"), provenance_json(b)


def test_rename_node_and_rename_op_are_renamed_and_retyped(tmp_path: Path) -> None:
    a, b, prov = _pair("rename_node(old_node_name=small_cnn_1/relu0_1/Relu, new_node_name=first_relu) "
                       "rename_op(old_op_name=Rsqrt, new_op_name=Sqrt)", tmp_path)
    gd = graph_pb2.GraphDef()
    gd.ParseFromString((EXAMPLES / "small_cnn.pb").read_bytes())
    rsqrt = sorted(n.name for n in gd.node if n.op == "Rsqrt")
    for p in (prov, None):
        diff = diff_models(a, b, provenance=p, provenance_path="b.pb.provenance.json")
        kinds = {(c.kind, tuple(c.before), tuple(c.after), c.detail) for c in diff.changes}
        assert ("renamed", ("small_cnn_1/relu0_1/Relu",), ("first_relu",), "") in kinds
        retyped = sorted(c.before[0] for c in diff.changes if c.kind == "retyped" and c.detail == "Rsqrt -> Sqrt")
        assert retyped == rsqrt
        assert len(diff.changes) == 1 + len(rsqrt)
        assert diff.a.parameters == diff.b.parameters
        assert diff.op_deltas() == [("Rsqrt", len(rsqrt), 0), ("Sqrt", 0, len(rsqrt))]


def test_structure_mode_groups_each_fusion_without_a_sidecar(tmp_path: Path) -> None:
    a, b, prov = _pair("optimize_for_deployment fuse_remapper", tmp_path, outputs=["Identity"])
    guessed = diff_models(a, b)
    exact = diff_models(a, b, provenance=prov)
    assert guessed.matched_by == "structure" and exact.matched_by == "provenance"
    for diff in (guessed, exact):
        fused = {c.after[-1] if c.ops_after[-1] != "Const" else next(n for n, op in zip(c.after, c.ops_after)
                 if op != "Const"): c for c in diff.changes if c.kind == "fused"}
        assert set(fused) == {"small_cnn_1/relu0_1/Relu", "small_cnn_1/relu1_1/Relu", "small_cnn_1/relu2_1/Relu",
                              "small_cnn_1/dw_relu_1/Relu", "small_cnn_1/fc_1/BiasAdd"}
        conv0 = fused["small_cnn_1/relu0_1/Relu"]
        assert "small_cnn_1/conv0_1/convolution" in conv0.before
        assert "small_cnn_1/conv1_1/convolution" not in conv0.before
        assert any(n.endswith("folded_weights") for n in conv0.after)
        assert diff.changes[0].exact is (diff is exact)


def test_a_float_output_made_int8_is_quantized_and_a_new_node_added() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Cast", ["r"], ["y"], name="cast", to=TensorProto.FLOAT)]
    a, _ = model(nodes, [vi("x", F, [4])], [vi("y", F, [4])])
    nodes_b = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Cast", ["r"], ["c"], name="cast", to=TensorProto.INT8),
               helper.make_node("Identity", ["c"], ["y"], name="extra")]
    b, _ = model(nodes_b, [vi("x", F, [4])], [vi("y", TensorProto.INT8, [4])],
                 inits=[init("unused", np.zeros(3, np.float32))])
    b.graph.outputs[0].producer.inputs[0].dtype = b.graph.outputs[0].dtype  # c is int8, as the Cast says
    diff = diff_models(a, b)
    kinds = {(c.kind, tuple(c.before), tuple(c.after), c.detail) for c in diff.changes}
    assert ("quantized", ("cast",), ("cast",), "float32 -> int8") in kinds
    assert ("added", (), ("extra",), "") in kinds
    assert diff.a.parameters == 0 and diff.b.parameters == 3


def test_simplify_folds_a_weight_transpose_and_merges_duplicate_constants(tmp_path: Path) -> None:
    """Both done by transforms that edit the graph directly: recorded coarsely, but by kind."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="tr", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["m0"], name="mm"),
             helper.make_node("Relu", ["m0"], ["m"], name="relu"),
             helper.make_node("Constant", [], ["c1"], name="const1", value=helper.make_tensor("v1", F, [3], [1, 2, 3])),
             helper.make_node("Constant", [], ["c2"], name="const2", value=helper.make_tensor("v2", F, [3], [1, 2, 3])),
             helper.make_node("Add", ["m", "c1"], ["a1"], name="add1"),
             helper.make_node("Mul", ["a1", "c2"], ["y"], name="mul")]
    a, _ = model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], inits=[init("w", w)])
    b, _ = model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], inits=[init("w", w)])
    b, _report = simplify(b)
    formats.save(b, tmp_path / "b.onnx")
    write_provenance(b, tmp_path / "b.onnx")
    reread = formats.load(tmp_path / "b.onnx")
    assert [n.op for n in reread.graph] == ["MatMul", "Relu", "Add", "Mul"]
    diff = diff_models(a, reread, provenance=read_provenance(tmp_path / "b.onnx.provenance.json"))
    by_kind = {c.kind: c for c in diff.changes}
    assert set(by_kind) == {"folded", "merged"}
    assert by_kind["folded"].before == ["tr"] and by_kind["folded"].constants == ["wt"]
    assert "wt" in {v.name for v in reread.graph.initializers}
    merged = by_kind["merged"]
    assert merged.before in (["const1"], ["const2"]) and merged.detail in ("const1", "const2")
    assert merged.detail != merged.before[0]


def test_tflite_operators_renamed_by_obfuscation_are_renamed(tmp_path: Path) -> None:
    """TFLite keeps no operator names: an operator is known by its first output, in the sidecar too."""
    m = formats.load(EXAMPLES / "small_cnn.tflite")
    run_pipeline(m, "obfuscate_names")
    formats.save(m, tmp_path / "obf.tflite")
    write_provenance(m, tmp_path / "obf.tflite")
    a, b = formats.load(EXAMPLES / "small_cnn.tflite"), formats.load(tmp_path / "obf.tflite")
    pairs = [(x.outputs[0].name, y.outputs[0].name) for x, y in zip(a.graph, b.graph, strict=True)]
    expected = sorted((old, new) for old, new in pairs if old != new)
    assert len(expected) >= 5
    diff = diff_models(a, b, provenance=read_provenance(tmp_path / "obf.tflite.provenance.json"))
    assert diff.matched_by == "provenance"
    assert sorted((c.before[0], c.after[0]) for c in diff.changes if c.kind == "renamed") == expected
    assert len(diff.changes) == len(expected)
