"""The simplify driver on real models: outputs on onnxruntime, checker, versions, idempotence, options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphwright as gw
from graphwright.errors import ModelLoadError, TransformError
from graphwright.formats import onnx as onnx_format
from graphwright.runtime import input_specs, run
from graphwright.simplify import parse_input_shapes, parse_size, simplify
from graphwright.verify import random_feeds
from tests.transforms._onnx_build import F, init, model, same_outputs, vi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _path(name: str) -> Path:
    if name == "small_cnn":
        return EXAMPLES / "small_cnn.onnx"
    from tests.models import torch_onnx

    return torch_onnx(name).path


def _outputs(model_or_path, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    feeds = random_feeds(input_specs(model_or_path), seed=seed, dim_values=dims)
    return run(model_or_path, feeds)


def _assert_close(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-5)


REAL = ["small_cnn", pytest.param("cnn", marks=pytest.mark.slow), pytest.param("bert", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", REAL)
def test_real_models_keep_their_outputs_and_shrink(name: str) -> None:
    path = _path(name)
    original = onnx.load(str(path))
    simplified, report = simplify(path)
    proto = onnx_format.to_proto(simplified)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == original.ir_version
    assert {o.domain: o.version for o in proto.opset_import} == {o.domain: o.version for o in original.opset_import}
    assert report.converged and report.after.nodes < report.before.nodes
    assert "BatchNormalization" not in report.after.ops and "Constant" not in report.after.ops
    sizes = [{"batch": 1, "sequence": 16}, {"batch": 2, "sequence": 7}, {"batch": 3, "sequence": 1}]
    for seed, dims in enumerate(sizes):  # dynamic dims materialized at several sizes
        _assert_close(_outputs(path, dims, seed), _outputs(simplified, dims, seed))


@pytest.mark.slow
def test_bert_reaches_the_expected_size() -> None:
    _, report = simplify(_path("bert"))
    assert report.after.nodes <= 120  # onnxsim 0.8.1: 164, onnxslim 0.1.98: 124 (benchmarks/simplify_onnx.py)
    assert report.after.ops.get("Shape", 0) <= 5


@pytest.mark.parametrize("name", REAL)
def test_simplify_is_idempotent(name: str, tmp_path: Path) -> None:
    once, _ = simplify(_path(name))
    gw.save(once, tmp_path / "once.onnx")
    twice, report = simplify(tmp_path / "once.onnx")
    assert report.iterations == 1 and report.converged
    assert onnx_format.serialize(twice) == onnx_format.serialize(once)


@pytest.mark.slow
def test_overwritten_input_shapes_make_everything_static() -> None:
    path = _path("bert")
    shapes = {"input_ids": (2, 5), "attention_mask": (2, 5)}
    simplified, report = simplify(path, overwrite_input_shapes=shapes, check_n=2)
    assert report.check_ok and len(report.checks) == 2
    assert "Shape" not in report.after.ops and report.after.nodes < 100
    assert [i.shape for i in input_specs(simplified)] == [(2, 5), (2, 5)]
    assert simplified.graph.outputs[0].shape == (2, 5, 64)


def test_skips_leave_the_named_work_undone() -> None:
    path = _path("small_cnn")
    _, report = simplify(path, skip_optimizations=["fuse_bn_into_conv"])
    before_bn = report.before.ops.get("BatchNormalization", 0)
    assert report.after.ops.get("BatchNormalization", 0) == before_bn
    _, report = simplify(path, skip_all_optimizations=True, skip_constant_folding=True)
    assert report.after.ops == report.before.ops
    _, report = simplify(path, skip_shape_inference=True)
    assert not any(r.name == "infer_shapes" for r in report.passes)


def test_onnxoptimizer_names_are_accepted_for_skips() -> None:
    _, report = simplify(_path("small_cnn"), skip_optimizations=["eliminate_deadend", "fuse_matmul_add_bias_into_gemm"])
    ran = {r.name for r in report.passes}
    assert "fuse_matmul_add_into_gemm" not in ran and "onnx_fold_constants" in ran


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"skip_optimizations": ["no_such_pass"]}, "unknown optimization 'no_such_pass'"),
    ({"overwrite_input_shapes": {"nope": (1,)}}, "does not have; its inputs are: x"),
    ({"overwrite_input_shapes": {"x": (1, 2, 3)}}, "gives input 'x' 3 dims, but it has rank 2"),
    ({"size_limit": "lots"}, "cannot read size 'lots'"),
    ({"max_iterations": 0}, "max_iterations must be at least 1"),
])
def test_bad_options_are_one_line_errors(kwargs: dict, message: str) -> None:
    m, _ = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    with pytest.raises(TransformError, match=message):
        simplify(m, **kwargs)


def test_non_onnx_and_corrupt_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TransformError, match="works on ONNX models; this is a graphdef model"):
        simplify(EXAMPLES / "small_cnn.pb")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(ModelLoadError):
        simplify(bad)


def test_check_reports_a_mismatch_instead_of_raising() -> None:
    # batch-norm folding changes the last bits of the outputs: zero tolerance must report it
    _, report = simplify(_path("small_cnn"), check_n=1, rtol=0.0, atol=0.0)
    assert report.checks and not report.check_ok
    _, report = simplify(_path("small_cnn"), check_n=1)
    assert report.check_ok


def test_size_and_shape_parsing() -> None:
    assert parse_size("1KB") == 1024 and parse_size("1.5GB") == 3 * 2**29 and parse_size("100M") == 100 * 2**20
    assert parse_size("2048") == 2048 and parse_size("2GiB") == 2**31
    assert parse_input_shapes(["1,3,?,W"], ["x"]) == {"x": (1, 3, None, "W")}
    assert parse_input_shapes(["a:2,3", "b:4"], ["a", "b"]) == {"a": (2, 3), "b": (4,)}
    with pytest.raises(TransformError, match="names no input, but the model has 2 inputs"):
        parse_input_shapes(["1,2"], ["a", "b"])


def test_external_data_models_simplify_and_stay_external(tmp_path: Path) -> None:
    source = tmp_path / "ext.onnx"
    gw.save(gw.load(_path("small_cnn")), tmp_path / "plain.onnx")
    onnx_format.save(gw.load(tmp_path / "plain.onnx"), source, external_data=True, external_min_bytes=64)
    assert (tmp_path / "ext.onnx.data").exists()
    simplified, _ = simplify(source)
    out = tmp_path / "out" / "s.onnx"
    out.parent.mkdir()
    gw.save(simplified, out)
    assert (out.parent / "s.onnx.data").exists()
    _assert_close(_outputs(source, {}, 0), _outputs(out, {}, 0))


def test_external_data_escaping_the_model_directory_is_refused(tmp_path: Path) -> None:
    tensor = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [2], [0.0, 0.0])
    tensor.ClearField("float_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../outside.bin")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [vi("x", F, [2])],
                              [vi("y", F, [2])], [tensor])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, ir_version=8).SerializeToString())
    with pytest.raises(ModelLoadError):
        simplify(path)


def test_passes_run_as_a_pipeline_with_typed_parameters() -> None:
    model_ = gw.load(_path("small_cnn"))
    report = gw.transform(model_, "infer_shapes fuse_bn_into_conv onnx_fold_constants(size_limit=1024, growth_limit=512) "
                                  "eliminate_nop(skip=eliminate_nop_cast) eliminate_dead_code")
    assert [s.call.split("(")[0] for s in report.steps][:2] == ["infer_shapes", "fuse_bn_into_conv"]
    assert report.steps[1].changed and "BatchNormalization" not in {n.op for n in model_.graph}
    with pytest.raises(TransformError, match="size_limit"):
        gw.transform(model_, "onnx_fold_constants(size_limit=big)")


mk = helper.make_node


def test_passes_recurse_into_loop_bodies() -> None:
    """Loop body: acc' = acc + Identity(x) * Sqrt(k) with k constant -> acc + x * c."""
    body = helper.make_graph(
        [mk("Identity", ["x"], ["xi"]), mk("Sqrt", ["k"], ["sk"]), mk("Mul", ["xi", "sk"], ["t"]),
         mk("Add", ["acc", "t"], ["acc_out"]), mk("Identity", ["cond"], ["cond_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", F, [3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [3])],
    )
    nodes = [mk("Loop", ["n", "", "acc0"], ["y"], body=body)]
    m, p = model(nodes, [vi("x", F, [3]), vi("acc0", F, [3])], [vi("y", F, [3])],
                 [init("n", np.array(4, np.int64)), init("k", np.array([4.0], np.float32))])
    from graphwright.simplify import simplify

    simplify(m)
    inner = next(iter(m.graph)).attrs["body"].value
    assert sorted(n.op for n in inner) == ["Add", "Identity", "Mul"]  # cond passthrough keeps its output name
    same_outputs(p, m)


def _if_model(path: Path, *, constant_condition: bool) -> onnx.ModelProto:
    """y = If(c, then: x + w, else: x - w); ``c`` a constant or a graph input."""
    w = np.random.default_rng(0).standard_normal(128).astype(np.float32)
    then = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    inputs = [vi("x", F, ["N", 128])]
    inits = [init("w", w)]
    if constant_condition:
        inits.append(init("c", np.array(True)))
    else:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    proto = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                  inputs, [vi("y", F, ["N", 128])], inits)[1]
    onnx.save(proto, str(path))
    return proto


def test_an_if_left_in_place_costs_no_snapshot_and_no_onnxruntime_session(tmp_path: Path, monkeypatch) -> None:
    """The detectors' peak memory: a serialized copy of the model and an onnxruntime session of the
    result were made for every model with an If, resolved or not (3x the file on top of the run)."""
    from graphwright.runtime import ModelSource
    from graphwright.simplify import driver

    path = tmp_path / "if.onnx"
    _if_model(path, constant_condition=False)
    made: list[str] = []
    real_from_model, real_loads = ModelSource.from_model, driver._loads
    monkeypatch.setattr(ModelSource, "from_model", classmethod(lambda cls, m: made.append("snapshot")
                                                                  or real_from_model.__func__(cls, m)))
    monkeypatch.setattr(driver, "_loads", lambda m: made.append("session") or real_loads(m))
    result, _ = simplify(path)
    assert [n.op for n in result.graph] == ["If"] and made == []
    for n in (1, 3):
        _assert_close(_outputs(path, {"N": n}, n), _outputs(result, {"N": n}, n))


def test_a_resolved_if_refused_by_onnxruntime_gives_the_file_back(tmp_path: Path, monkeypatch) -> None:
    """Given a path, the original is the file itself (reloaded, not kept in memory as a copy)."""
    from graphwright.simplify import driver

    path = tmp_path / "if.onnx"
    _if_model(path, constant_condition=True)
    resolved, _ = simplify(path)
    assert [n.op for n in resolved.graph] == ["Add"]  # onnxruntime accepts the resolved branch
    real_loads = driver._loads
    # the original (a file) loads as before; the model without its If is refused
    monkeypatch.setattr(driver, "_loads", lambda m: real_loads(m) and (
        not hasattr(m, "graph") or any(n.op == "If" for n in m.graph)))
    result, report = simplify(path)
    assert any("returned unchanged" in w for w in report.warnings)
    assert onnx_format.serialize(result) == onnx_format.serialize(gw.load(path))
    for n in (2, 5):
        _assert_close(_outputs(path, {"N": n}, n), _outputs(result, {"N": n}, n))
