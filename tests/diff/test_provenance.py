"""Provenance: the engine's rewrite records, the step runner's record (exact and coarse), the sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import helper
from tensorboard.compat.proto import graph_pb2

from graphwright import formats
from graphwright.diff import DiffError, diff_models, read_provenance, sidecar_path, write_provenance
from graphwright.ir import Node
from graphwright.patterns import ANY, P, Replacement, RuleSet
from graphwright.patterns.replace import Rewrite, recording
from graphwright.transforms import StepRunner, TransformResult, run_pipeline
from graphwright.transforms.registry import transform
from graphwright.transforms.runner import provenance_of
from tests.transforms._onnx_build import F, model, vi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = "optimize_for_deployment fuse_remapper"


def _graphdef_nodes(path: Path) -> dict[str, str]:
    """name -> op of every node, read with the protos alone (not graphwright's reader)."""
    gd = graph_pb2.GraphDef()
    gd.ParseFromString(path.read_bytes())
    return {n.name: n.op for n in gd.node}


@pytest.fixture(scope="module")
def small_cnn_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("prov") / "small_cnn_deploy.pb"
    m = formats.load(EXAMPLES / "small_cnn.pb")
    run_pipeline(m, PIPELINE, outputs=["Identity"])
    formats.save(m, out)
    written = write_provenance(m, out, source=str(EXAMPLES / "small_cnn.pb"))
    assert written == out.with_name("small_cnn_deploy.pb.provenance.json") == sidecar_path(out)
    return out, json.loads(written.read_text())


def test_fused_conv_names_the_conv_batch_norm_and_relu_it_replaced(small_cnn_run: tuple[Path, dict]) -> None:
    out, prov = small_cnn_run
    original = _graphdef_nodes(EXAMPLES / "small_cnn.pb")
    final = _graphdef_nodes(out)
    fused = prov["nodes"]["small_cnn_1/relu0_1/Relu"]
    assert final["small_cnn_1/relu0_1/Relu"] == fused["op"] == "_FusedConv2D"
    wanted = {"small_cnn_1/conv0_1/convolution": "Conv2D", "small_cnn_1/conv0_1/BiasAdd": "BiasAdd",
              "small_cnn_1/relu0_1/Relu": "Relu", "small_cnn_1/bn0_1/batchnorm/mul_1": "Mul",
              "small_cnn_1/bn0_1/batchnorm/add_1": "AddV2"}
    for name, op in wanted.items():
        assert original[name] == op
        assert name in fused["from"]
    assert fused["step"] == "fuse_remapper" and fused["rule"] and fused["coarse"] is False
    # the dense layer: MatMul + BiasAdd fused, nothing of the convolutions
    dense = [e for e in prov["nodes"].values() if e["op"] == "_FusedMatMul"]
    assert len(dense) == 1
    assert {original[n] for n in dense[0]["from"]} >= {"MatMul", "BiasAdd"}
    assert not any(original[n].startswith("Conv") for n in dense[0]["from"])


def test_every_original_node_is_accounted_for(small_cnn_run: tuple[Path, dict]) -> None:
    out, prov = small_cnn_run
    original = _graphdef_nodes(EXAMPLES / "small_cnn.pb")
    final = _graphdef_nodes(out)
    carried = {name for entry in prov["nodes"].values() for name in entry["from"]}
    unaccounted = [n for n in original if n not in carried and n not in prov["removed"]
                   and not (n in final and n not in prov["nodes"])]
    assert unaccounted == []
    assert set(prov["removed"]).isdisjoint(carried)
    # every node the sidecar lists is a node of the written model, with its op
    for name, entry in prov["nodes"].items():
        assert final[name] == entry["op"]
    # the Identity nodes remove_nodes took out, with the value read instead
    removed_ids = {n: f for n, f in prov["removed"].items() if original[n] == "Identity"}
    assert len(removed_ids) >= 20
    assert all(f["step"].startswith("remove_nodes") and f["rule"] and f["into"] for f in removed_ids.values())
    assert prov["steps"][0] == "strip_unused_nodes" and prov["steps"][-1] == "fuse_remapper"


def test_engine_hands_each_rewrite_to_the_recorder() -> None:
    m, _ = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("Identity", ["r"], ["i"], name="ident"),
                  helper.make_node("Neg", ["i"], ["y"], name="neg")],
                 [vi("x", F, [2])], [vi("y", F, [2])])
    rules = RuleSet()

    @rules.rule(P("Neg", P("Identity", ANY(name="x"), name="id")))
    def neg_of_identity(match):  # Neg(Identity(x)) -> Neg(x), one new node
        new = Node("Neg", [match["x"].value], dialect="onnx", name="neg2")
        return Replacement([new], {match.node.output: new.output})

    seen: list[Rewrite] = []
    with recording(seen.append):
        report = rules.apply(m.graph)
    assert report.applied == 1
    (rw,) = seen
    assert rw.rule == "neg_of_identity"
    assert sorted(n.name for n in rw.removed) == ["ident", "neg"]
    assert [n.name for n in rw.new] == ["neg2"] and rw.kept == ()
    # outside the block nothing is recorded
    rules2 = RuleSet()
    rules2.add(P("Relu", ANY(name="x")), lambda mm: Replacement([], {mm.node.output: mm["x"].value}))
    assert rules2.apply(m.graph).applied == 1 and len(seen) == 1


@transform("test_provenance_by_hand", dialects={"onnx"})
def _by_hand(model, ctx) -> TransformResult:  # type: ignore[no-untyped-def]
    """Edits the graph directly: Relu+Neg -> one Abs named 'merged', renames 'tail' to 'tail_renamed'."""
    g = model.graph
    relu, neg = g.find_node("relu"), g.find_node("neg")
    merged = Node("Abs", [relu.inputs[0]], dialect="onnx", name="merged")
    g.insert_before(relu, [merged])
    neg.output.replace_all_uses_with(merged.output)
    g.remove([neg, relu])
    g.find_node("tail").name = "tail_renamed"
    return TransformResult(changed=True)


def test_a_transform_that_edits_the_graph_directly_gets_a_coarse_record(tmp_path: Path) -> None:
    m, _ = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("Neg", ["r"], ["n"], name="neg"),
                  helper.make_node("Sigmoid", ["n"], ["y"], name="tail")],
                 [vi("x", F, [2])], [vi("y", F, [2])])
    StepRunner(m).run("test_provenance_by_hand")
    prov = provenance_of(m)
    assert prov is not None
    data = prov.to_json(m)
    assert data["nodes"]["merged"]["from"] == ["relu", "neg"]
    assert data["nodes"]["merged"]["coarse"] is True and data["nodes"]["merged"]["rule"] is None
    assert data["nodes"]["tail_renamed"] == {"op": "Sigmoid", "from": ["tail"]}
    assert data["removed"] == {}
    before, _ = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("Neg", ["r"], ["n"], name="neg"),
                       helper.make_node("Sigmoid", ["n"], ["y"], name="tail")],
                      [vi("x", F, [2])], [vi("y", F, [2])])
    diff = diff_models(before, m, provenance=data, provenance_path="x")
    kinds = {(c.kind, tuple(c.before), tuple(c.after), c.coarse) for c in diff.changes}
    assert kinds == {("fused", ("relu", "neg"), ("merged",), True), ("renamed", ("tail",), ("tail_renamed",), False)}


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"graphwright_provenance": 7}', "not a graphwright provenance sidecar"),
    ('{"graphwright_provenance": 1, "nodes": [], "removed": {}}', "must be objects"),
    ('{"graphwright_provenance": 1, "nodes": {"a": {}}, "removed": {}}', "has no 'from' list"),
])
def test_a_bad_sidecar_is_one_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "m.onnx.provenance.json"
    path.write_text(content)
    with pytest.raises(DiffError, match=message) as info:
        read_provenance(path)
    assert str(path) in str(info.value)


@transform("test_provenance_nested", dialects={"onnx"})
def _nested(model, ctx) -> TransformResult:  # type: ignore[no-untyped-def]
    """Runs another transform through a step runner of its own, inside its step."""
    StepRunner(model).run("test_provenance_by_hand")
    return TransformResult(changed=True)


@transform("test_provenance_failing", dialects={"onnx"})
def _failing(model, ctx) -> TransformResult:  # type: ignore[no-untyped-def]
    """Fails before changing anything."""
    raise ValueError("boom")


def _three_nodes():  # type: ignore[no-untyped-def]
    m, _ = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("Neg", ["r"], ["n"], name="neg"),
                  helper.make_node("Sigmoid", ["n"], ["y"], name="tail")],
                 [vi("x", F, [2])], [vi("y", F, [2])])
    return m


def test_a_step_inside_a_step_is_recorded_once_by_the_outer_step() -> None:
    m = _three_nodes()
    StepRunner(m).run("test_provenance_nested")
    data = provenance_of(m).to_json(m)
    assert data["steps"] == ["test_provenance_nested"]
    assert data["nodes"]["merged"]["from"] == ["relu", "neg"] and data["nodes"]["merged"]["step"] == "test_provenance_nested"


def test_a_failed_step_leaves_the_record_usable() -> None:
    m = _three_nodes()
    runner = StepRunner(m)
    with pytest.raises(Exception, match="boom"):
        runner.run("test_provenance_failing")
    runner.run("test_provenance_by_hand")  # the next step is recorded as if nothing had happened
    data = provenance_of(m).to_json(m)
    assert data["steps"] == ["test_provenance_by_hand"]
    assert data["nodes"]["merged"]["from"] == ["relu", "neg"]
