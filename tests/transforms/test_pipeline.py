"""The --transforms grammar, typed parameters, the registry and presets."""

from __future__ import annotations

import sys
import textwrap

import onnx
import pytest

import graphwright as gw
from graphwright.errors import PipelineSyntaxError, TransformError
from graphwright.transforms import PRESETS, Params, all_transforms, format_call, parse_pipeline, plan_pipeline, registry

from ._generic import _apply, _model, _outputs, _same


def test_seed_recipe_parses() -> None:
    text = """
 strip_unused_nodes(type=float, shape="1,299,299,3")
 remove_nodes(op=Identity, op=CheckNumerics)
 fold_constants(ignore_errors=true)
 fold_batch_norms
 fold_old_batch_norms"""
    calls = parse_pipeline(text)
    assert [c.name for c in calls] == [
        "strip_unused_nodes", "remove_nodes", "fold_constants", "fold_batch_norms", "fold_old_batch_norms"]
    assert calls[0].params == {"type": ["float"], "shape": ["1,299,299,3"]}
    assert calls[1].params == {"op": ["Identity", "CheckNumerics"]}


def test_repeated_parameters_accumulate_in_order() -> None:
    (call,) = parse_pipeline('some_transform(foo=a, foo=b, bar=2, bob="1,2,3")')
    assert call.params == {"foo": ["a", "b"], "bar": ["2"], "bob": ["1,2,3"]}
    assert parse_pipeline(format_call(call))[0].params == call.params


def test_shell_line_continuations_and_odd_spacing() -> None:
    text = 'insert_logging(op=RequantizationRange, show_name=true, message="__requant_min_max:")\\\n  sort_by_execution_order'
    calls = parse_pipeline(text)
    assert [c.name for c in calls] == ["insert_logging", "sort_by_execution_order"]
    assert calls[0].params["message"] == ["__requant_min_max:"]
    assert parse_pipeline("a( x = 1 ,y=./p/q.txt )")[0].params == {"x": ["1"], "y": ["./p/q.txt"]}
    assert parse_pipeline("a()")[0].params == {}


@pytest.mark.parametrize(("text", "where"), [
    ("strip_unused_nodes(type=float", "column 30"),
    ("round_weights(num_steps 256)", "'='"),
    ('a(b="unterminated)', "closing"),
    ("a(b=1,,c=2)", "parameter name"),
    ("a(=1)", "parameter name"),
    ("fold_constants(ignore_errors=true) (x=1)", "transform name"),
    ("a(b=c d=e)", "',' or ')'"),
])
def test_syntax_errors_say_where(text: str, where: str) -> None:
    with pytest.raises(PipelineSyntaxError, match="line 1 column") as info:
        parse_pipeline(text)
    assert where in str(info.value)
    assert "\n" not in str(info.value)


def test_typed_getters_name_transform_and_parameter() -> None:
    p = Params("round_weights", {"num_steps": ["many"], "flag": ["maybe"], "twice": ["1", "2"]})
    with pytest.raises(TransformError, match=r"round_weights: parameter num_steps='many' .* expected an integer"):
        p.one_int("num_steps", 256)
    with pytest.raises(TransformError, match="true or false"):
        p.one_bool("flag")
    with pytest.raises(TransformError, match="more than once"):
        p.one_int("twice")
    assert p.one_int("absent", 7) == 7
    assert Params("t", {"s": ["1,2,3"]}).shape("s") == (1, 2, 3)


def test_unknown_transform_and_parameter_are_errors_before_anything_runs() -> None:
    with pytest.raises(TransformError, match=r"unknown transform 'strip_unused'.*strip_unused_nodes.*list-transforms"):
        plan_pipeline("sort_by_execution_order strip_unused")
    with pytest.raises(TransformError, match=r"round_weights: unknown parameter 'steps'; valid parameters: num_steps"):
        plan_pipeline("round_weights(steps=3)")
    with pytest.raises(TransformError, match="missing required parameter 'new_op_name'"):
        plan_pipeline("rename_op(old_op_name=Mul)")
    with pytest.raises(TransformError, match="parameter num_steps='x'"):
        plan_pipeline("round_weights(num_steps=x)")


def test_every_transform_accepts_ignore_errors() -> None:
    for spec in all_transforms():
        required = "".join(f", {p.name}=x" for p in spec.params if p.required)
        steps = plan_pipeline(f"{spec.name}(ignore_errors=true{required})")
        assert steps[0].ignore_errors is True


def test_dialect_mismatch_is_a_clear_error() -> None:
    with pytest.raises(TransformError, match=r"set_device does not apply to ONNX models.*TensorFlow GraphDef"):
        plan_pipeline("set_device(device=/cpu:0)", "onnx")


def test_presets_expand_and_only_implemented_transforms_are_listed() -> None:
    names = {s.name for s in all_transforms()}
    assert {"strip_unused_nodes", "round_weights", "merge_duplicate_nodes"} <= names
    assert not set(PRESETS) & names
    for spec in all_transforms():  # every listed transform is importable and has a summary line
        assert spec.summary and callable(spec.fn)


def test_plugins_register_through_entry_points(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "gw_plugin_demo.py"
    pkg.write_text(textwrap.dedent('''
        from graphwright.transforms import TransformResult, transform

        @transform("demo_plugin_rename_all", dialects={"tf"})
        def demo(model, ctx, *, suffix: str = "_p"):
            """Append a suffix to every node name."""
            for node in model.graph:
                node.name += suffix
            return TransformResult(True)
    '''))
    dist = tmp_path / "gw_plugin_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gw-plugin-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[graphwright.transforms]\ndemo = gw_plugin_demo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_LOADED", False)
    try:
        spec = registry.get("demo_plugin_rename_all")
        assert spec.origin == "gw_plugin_demo"
        assert [p.name for p in spec.params] == ["suffix"]
    finally:
        registry._REGISTRY.pop("demo_plugin_rename_all", None)
        sys.modules.pop("gw_plugin_demo", None)


def test_preset_steps_that_do_not_apply_are_skipped_not_fatal() -> None:
    steps = plan_pipeline("eight_bit", "onnx")
    by_name = {s.call.name: s for s in steps}
    assert by_name["add_default_attributes"].skip_reason
    assert "preset eight_bit" in by_name["add_default_attributes"].skip_reason
    assert by_name["quantize_nodes"].skip_reason
    assert by_name["fold_old_batch_norms"].skip_reason is None  # applies to ONNX BatchNormalization
    assert by_name["strip_unused_nodes"].skip_reason is None
    with pytest.raises(TransformError, match="does not apply to ONNX"):
        plan_pipeline("add_default_attributes", "onnx")  # written out by hand: still an error


def test_deployment_preset_on_onnx_folds_batch_norms_and_constants() -> None:
    path = _model("onnx_cnn")
    model = _apply(path, "optimize_for_deployment")
    assert "BatchNormalization" not in {n.op for n in model.graph}
    onnx.checker.check_model(gw.formats.onnx.to_proto(model))
    _same(_outputs(path), _outputs(model), rtol=1e-5, atol=1e-6)
    bert = _apply(_model("onnx_bert"), "fold_constants")
    assert len(bert.graph) < len(gw.load(_model("onnx_bert")).graph)
    _same(_outputs(_model("onnx_bert")), _outputs(bert), rtol=1e-6, atol=1e-6)
    with pytest.raises(gw.TransformError, match="exclude_op/exclude_node are not supported on ONNX"):
        _apply(path, "fold_constants(exclude_op=Shape)")
