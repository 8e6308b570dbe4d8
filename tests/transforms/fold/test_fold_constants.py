"""fold_constants on small hand-built TF graphs: structure, names, control edges, limits, exclusions, notes.

The numeric checks against TensorFlow are in test_fold_constants_tf.py; these run without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
import graphwright.transforms.fold.fold_constants  # registers the transform
from graphwright.ir import Attr, DType, Model, check, constant_value
from graphwright.transforms.registry import TransformResult

from ._bombs import CAP_SECONDS, graphdef_bomb, node_names, run_capped
from ._graphs import TfBuilder, by_name, f32, ops_of

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.pb"


def fold(model: Model, params: str = "", **io: list[str]) -> TransformResult:
    report = gw.transform(model, f"fold_constants({params})" if params else "fold_constants", **io)
    check(model.graph)
    step = report.steps[0]
    return TransformResult(step.changed, step.stats, step.notes)


def value_of(model: Model, name: str) -> np.ndarray:
    tensor = constant_value(by_name(model, name).output)
    assert tensor is not None, f"{name} is not a Const"
    return tensor.numpy()


def batch_norm_graph() -> tuple[TfBuilder, dict[str, np.ndarray]]:
    """x * scale + shift with scale = rsqrt(var + eps) * gamma, shift = beta - mean * scale (Keras 3 style)."""
    rng = np.random.default_rng(0)
    p = {k: rng.uniform(0.5, 2.0, 4).astype(np.float32) for k in ("var", "gamma", "beta", "mean")}
    b = TfBuilder()
    x = b.placeholder("x", (1, 4))
    var, eps = b.op("Identity", "var/read", b.const("var", p["var"])), b.const("eps", np.float32(1e-3))
    gamma = b.op("Identity", "gamma/read", b.const("gamma", p["gamma"]))
    scale = b.op("Mul", "scale", b.op("Rsqrt", "rsqrt", b.op("AddV2", "add", var, eps)), gamma)
    shift = b.op("Sub", "shift", b.const("beta", p["beta"]), b.op("Mul", "mean_scale", b.const("mean", p["mean"]), scale))
    b.op("AddV2", "y", b.op("Mul", "x_scale", x, scale), shift)
    return b, p


def test_batch_norm_arithmetic_folds_into_two_constants_that_keep_their_names() -> None:
    b, p = batch_norm_graph()
    model = b.model(outputs=[by_name(Model(b.graph, "graphdef"), "y").output])
    result = fold(model)
    assert result.changed
    assert ops_of(model) == ["AddV2", "Const", "Const", "Mul", "Placeholder"]
    scale = np.reciprocal(np.sqrt(p["var"] + np.float32(1e-3))) * p["gamma"]
    np.testing.assert_array_equal(value_of(model, "scale"), scale)  # float32 throughout, same rounding
    np.testing.assert_array_equal(value_of(model, "shift"), p["beta"] - p["mean"] * scale)
    assert value_of(model, "scale").dtype == np.float32
    assert by_name(model, "x_scale").inputs[1].producer is by_name(model, "scale")
    assert result.stats["nodes_folded"] == 7 and result.stats["constants_created"] == 2
    assert result.stats["constants_removed"] == 5 and result.stats["bytes_created"] == 32
    assert not result.notes
    assert not fold(model).changed  # a fixed point


def test_a_graph_output_computed_from_constants_becomes_a_const_of_that_name() -> None:
    b = TfBuilder()
    b.op("Identity", "out", b.op("Mul", "twice", b.const("c", f32(1, 2)), b.const("two", np.float32(2))))
    model = b.model()
    fold(model, outputs=["out"])
    assert ops_of(model) == ["Const"]
    np.testing.assert_array_equal(value_of(model, "out"), f32(2, 4))
    assert model.graph.outputs[0].producer is by_name(model, "out")


def test_control_inputs_are_inherited_like_tensorflow_does() -> None:
    """TF's ConstantFold: the folded constant waits on the non-constant nodes the sub-graph waited on."""
    b = TfBuilder()
    x = b.placeholder("x", (3,))
    noop = b.node("NoOp", "noop", [])
    c1 = b.const("c1", f32(1, 2, 3), control=[noop])            # waits on a NoOp that waits on nothing
    a = b.node("AddV2", "a", [c1, b.const("c2", f32(4, 5, 6))], control=[x.producer])  # waits on x
    b.op("Mul", "y", x, b.op("Rsqrt", "r", a.output))
    model = b.model()
    result = fold(model, outputs=["y"])
    r = by_name(model, "r")
    assert r.op == "Const" and [n.name for n in r.control_inputs] == ["x"]
    assert model.graph.find_node("noop") is None and model.graph.find_node("c1") is None
    assert result.stats["control_edges_moved"] == 1


def test_a_noop_waiting_only_on_constants_goes_and_frees_its_readers() -> None:
    """Keras 3 frozen graphs: output Identity(^NoOp), NoOp(^w/read) for every weight."""
    b = TfBuilder()
    x = b.placeholder("x", (2, 2))
    w_read = b.op("Identity", "w/read", b.const("w", np.eye(2, dtype=np.float32)))
    noop = b.node("NoOp", "NoOp", [], control=[w_read.producer])
    mm = b.op("MatMul", "mm", x, w_read)
    b.node("Identity", "Identity", [mm], control=[noop])
    model = b.model()
    fold(model, outputs=["Identity"])
    assert ops_of(model) == ["Const", "Identity", "MatMul", "Placeholder"]
    assert not by_name(model, "Identity").control_inputs
    assert by_name(model, "w/read").op == "Const" and model.graph.find_node("w") is None
    np.testing.assert_array_equal(value_of(model, "w/read"), np.eye(2, dtype=np.float32))


def test_identity_of_a_const_forwards_the_same_tensor_without_decoding_it() -> None:
    model = gw.load(EXAMPLE)
    before = {n.name: constant_value(n.output) for n in model.graph if n.op == "Const"}
    fold(model, inputs=["input"], outputs=["Identity"])
    forwarded = [constant_value(n.output) for n in model.graph if n.op == "Const"]
    assert any(t is original for t in forwarded for original in before.values())
    assert all(not t.is_loaded for t in forwarded if any(t is o for o in before.values()))


def test_exclude_op_and_exclude_node_keep_those_nodes_and_what_reads_them() -> None:
    b, _ = batch_norm_graph()
    model = b.model()
    fold(model, "exclude_op=Rsqrt, exclude_node=mean_scale", outputs=["y"])
    names = {n.name: n.op for n in model.graph}
    assert names["rsqrt"] == "Rsqrt" and names["mean_scale"] == "Mul"
    assert names["add"] == "Const"            # the Rsqrt's input is folded
    assert names["scale"] == "Mul" and names["shift"] == "Sub"  # readers of excluded nodes stay
    assert names["gamma/read"] == "Const" and names["mean"] == "Const"


def test_size_limit_leaves_large_results_in_place_and_says_so() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (1000,))
    filled = b.op("Fill", "fill", b.const("dims", np.array([1000], np.int32)), b.const("v", np.float32(2)))
    b.op("Mul", "y", x, filled)
    total = b.op("Sum", "total", b.op("Fill", "big", b.const("dims2", np.array([5000], np.int32)),
                                      b.const("one", np.float32(1))), b.const("axis", np.array([0], np.int32)))
    b.op("AddV2", "z", x, total)
    b.op("Mul", "v", b.placeholder("x2", (2000,)), b.op("Identity", "wide", b.const("w", np.ones(2000, np.float32))))
    model = b.model()
    result = fold(model, "max_constant_size_in_bytes=4000", outputs=["y", "z", "v"])
    assert by_name(model, "fill").op == "Const"        # 4000 bytes: at the limit
    assert by_name(model, "big").op == "Fill" and by_name(model, "total").op == "Sum"
    assert by_name(model, "wide").op == "Identity"     # forwarding 8000 bytes is over the limit too
    assert any("max_constant_size_in_bytes=4000" in n and "'big'" in n for n in result.notes)
    fold(model, outputs=["y", "z", "v"])
    assert by_name(model, "total").op == "Const" and value_of(model, "total") == np.float32(5000)
    assert by_name(model, "wide").op == "Const"


def test_ops_without_kernels_and_failed_evaluations_are_notes_not_errors() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,), DType.INT32)
    b.op("AddV2", "a", x, b.op("FloorDiv", "div0", b.const("n", np.array([4, 5], np.int32)),
                                b.const("zero", np.array([1, 0], np.int32))))
    xf = b.placeholder("xf", (2,))
    b.op("Mul", "m", xf, b.op("Erf", "erf", b.const("e", f32(0.5, 1.0))))
    model = b.model()
    result = fold(model, outputs=["a", "m"])
    assert not result.changed
    assert by_name(model, "div0").op == "FloorDiv" and by_name(model, "erf").op == "Erf"
    assert any("Erf ×1" in n for n in result.notes)
    assert any("'div0' (FloorDiv)" in n and "division by zero" in n for n in result.notes)
    assert result.stats["not_evaluated"] == 2


def test_never_folds_through_graph_inputs_placeholders_or_random_ops() -> None:
    b = TfBuilder()
    k = b.const("k", f32(1, 2))
    fed = b.op("Mul", "fed", k, b.const("c", f32(3, 4)))
    default = b.op("PlaceholderWithDefault", "pwd", b.const("d", f32(1, 1)), shape=Attr.shape((2,)))
    b.op("AddV2", "y", fed, b.op("Neg", "neg", default))
    noise = b.op("RandomUniform", "noise", b.const("shape", np.array([2], np.int32)), dtype=Attr.dtype(DType.FLOAT32))
    b.op("AddV2", "z", b.op("Abs", "abs", noise), b.const("one", f32(1, 1)))
    model = b.model()
    fold(model, inputs=["k"], outputs=["y", "z"])
    ops = {n.name: n.op for n in model.graph}
    assert ops["fed"] == "Mul" and ops["neg"] == "Neg" and ops["pwd"] == "PlaceholderWithDefault"
    assert ops["noise"] == "RandomUniform" and ops["abs"] == "Abs"


def test_shape_of_a_placeholder_with_a_static_shape_is_folded_as_tensorflow_does() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2, 3))
    y = b.placeholder("y", (None, 3))
    b.op("Reshape", "rx", x, b.op("Shape", "sx", x))
    b.op("Reshape", "ry", y, b.op("Shape", "sy", y))
    b.op("AddV2", "r", b.op("Rank", "rank_y", y), b.op("Size", "size_x", x))
    model = b.model()
    fold(model, outputs=["rx", "ry", "r"])
    assert by_name(model, "sx").op == "Const" and value_of(model, "sx").tolist() == [2, 3]
    assert by_name(model, "sy").op == "Shape"
    assert by_name(model, "r").op == "Const" and int(value_of(model, "r")) == 2 + 6
    assert not by_name(model, "sx").control_inputs


def _unread_graph() -> Model:
    b = TfBuilder()
    x = b.placeholder("x", (2,))
    b.op("Mul", "unread", b.op("Neg", "neg", b.const("c", f32(1, 2))), b.const("d", f32(3, 4)))
    b.node("NoOp", "init", [], control=[b.op("Neg", "neg2", b.const("e", f32(1))).producer])
    b.op("Identity", "y", x)
    return b.model()


def test_without_outputs_nodes_nobody_reads_keep_their_value_and_name_and_lone_noops_stay() -> None:
    model = _unread_graph()
    fold(model)
    assert ops_of(model) == ["Const", "Identity", "NoOp", "Placeholder"]
    assert value_of(model, "unread").tolist() == [-3, -8]
    assert not by_name(model, "init").control_inputs  # it waited on a constant: on nothing


def test_with_outputs_what_they_do_not_need_goes() -> None:
    model = _unread_graph()
    result = fold(model, inputs=["x"], outputs=["y"])
    assert ops_of(model) == ["Identity", "Placeholder"]
    assert result.stats["unused_nodes_removed"] == 2  # the folded "unread" and the NoOp


def test_multi_output_nodes_fold_each_read_output() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,))
    unpack = b.node("Unpack", "u", [b.const("m", np.arange(6, dtype=np.float32).reshape(3, 2))],
                    {"num": Attr.int(3), "axis": Attr.int(0)})
    b.op("AddV2", "y", x, unpack.outputs[0])
    b.op("Mul", "z", x, unpack.outputs[2])
    b.op("Sub", "w", x, b.op("Neg", "neg", unpack.outputs[1]))  # output 1 is only read by a folded node
    model = b.model()
    fold(model, outputs=["y", "z", "w"])
    assert by_name(model, "u").op == "Const" and value_of(model, "u").tolist() == [0, 1]
    assert by_name(model, "u/output_2").op == "Const" and value_of(model, "u/output_2").tolist() == [4, 5]
    assert by_name(model, "z").inputs[1].producer is by_name(model, "u/output_2")
    assert value_of(model, "neg").tolist() == [-2, -3] and model.graph.find_node("u/output_1") is None
    assert ops_of(model).count("Const") == 3


def test_a_kernel_result_of_another_type_than_declared_is_not_folded() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,), DType.INT64)
    ident = b.node("Identity", "i", [b.const("c", np.array([1, 2], np.int32))])
    neg = b.node("Neg", "n", [ident.output])
    neg.output.dtype = DType.INT64  # what a mistyped graph declares
    b.op("AddV2", "y", x, neg.output)
    model = b.model()
    result = fold(model, outputs=["y"])
    assert by_name(model, "n").op == "Neg" and by_name(model, "i").op == "Const"
    assert any("declares int64" in n for n in result.notes)


def test_clear_output_shapes() -> None:
    for flag, expected in (("true", False), ("false", True)):
        b = TfBuilder()
        x = b.placeholder("x", (2,))
        y = b.node("Neg", "y", [x])
        y.attrs["_output_shapes"] = Attr(gw.ir.AttrKind.SHAPES, ((2,),))
        model = b.model()
        result = fold(model, f"clear_output_shapes={flag}", outputs=["y"])
        assert ("_output_shapes" in by_name(model, "y").attrs) is expected
        assert result.changed is not expected


@pytest.mark.parametrize(("params", "message", "skippable"), [
    ("backend=onnxruntime", "expected one of: numpy, tensorflow", True),
    ("max_constant_size_in_bytes=-1", "at least 0", True),
    ("max_constant_size_in_bytes=ten", "expected an integer", False),
    ("exclude_ops=Rsqrt", "unknown parameter 'exclude_ops'", False),
])
def test_bad_parameters_are_one_line_errors(params: str, message: str, skippable: bool) -> None:
    b, _ = batch_norm_graph()
    model = b.model()
    with pytest.raises(gw.TransformError, match=message) as info:
        gw.transform(model, f"fold_constants({params})", outputs=["y"])
    assert "\n" not in str(info.value)
    if skippable:  # a malformed pipeline fails before anything runs, whatever ignore_errors says
        report = gw.transform(model, f"fold_constants({params}, ignore_errors=true)", outputs=["y"])
        assert report.steps[0].skipped_error and len(model.graph) == 15


def test_a_deep_constant_chain_folds_without_recursion() -> None:
    b = TfBuilder()
    x = b.placeholder("x", ())
    value = b.const("c0", np.float32(0))
    one = b.const("one", np.float32(1))
    for i in range(30000):
        value = b.op("AddV2", f"a{i}", value, one)
    b.op("Mul", "y", x, value)
    model = b.model()
    result = fold(model, outputs=["y"])
    assert result.stats["nodes_folded"] == 30000
    assert value_of(model, "a29999") == np.float32(30000)
    assert len(model.graph) == 3


def test_the_numpy_backend_never_imports_tensorflow() -> None:
    code = (
        "import sys, graphwright as gw\n"
        "import graphwright.transforms.fold.fold_constants\n"
        f"m = gw.load({str(EXAMPLE)!r})\n"
        "r = gw.transform(m, 'fold_constants', inputs=['input'], outputs=['Identity'])\n"
        "assert r.steps[0].changed, r.steps[0]\n"
        "gw.serialize(m)\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_tensorflow_backend_names_the_extra_when_tensorflow_is_missing() -> None:
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "import graphwright as gw\n"
        "import graphwright.transforms.fold.fold_constants\n"
        f"m = gw.load({str(EXAMPLE)!r})\n"
        "try:\n"
        "    gw.transform(m, 'fold_constants(backend=tensorflow)', inputs=['input'], outputs=['Identity'])\n"
        "except gw.BackendUnavailableError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'graphwright[tf]'" in out.stdout


# -- bounded memory: a per-tensor limit and a budget of results held at once ------------------
@pytest.mark.parametrize(("kind", "left", "first"), [
    ("fill_chain", 42, "'bomb_fill33' (Fill, 7.6 MB)"),
    ("tile_chain", 27, "'bomb_tile33' (Tile, 7.8 MB)"),
])
def test_graphdef_bomb_stops_at_the_budget_under_2_gib(kind: str, left: int, first: str, tmp_path: Path) -> None:
    """Each result is under max_constant_size_in_bytes, together 480-600 MB (600 MB written before the budget)."""
    src, dst = tmp_path / "bomb.pb", tmp_path / "out.pb"
    gw.formats.save(graphdef_bomb(kind), src)
    result, seconds = run_capped("transform", src, dst, "--transforms", "fold_constants")
    assert result.returncode == 0, result.stderr[-2000:]
    assert seconds < CAP_SECONDS
    (line,) = [line for line in result.stdout.splitlines() if "fold_constants: left" in line]
    assert f"left {left} node(s) in place, results over fold_budget=" in line and first in line
    assert dst.stat().st_size < 300 << 20
    names = node_names(dst)
    prefix = first.split("'")[1].rstrip("0123456789")
    assert sum(name.startswith(prefix) and not name.endswith("/folded") for name in names) >= left


def test_graphdef_fill_over_the_per_tensor_limit_is_named(tmp_path: Path) -> None:
    src, dst = tmp_path / "bomb.pb", tmp_path / "out.pb"
    gw.formats.save(graphdef_bomb("fill_huge"), src)
    result, seconds = run_capped("transform", src, dst, "--transforms", "fold_constants")
    assert result.returncode == 0, result.stderr[-2000:]
    assert seconds < CAP_SECONDS
    assert ("fold_constants: left 1 node(s) in place, results larger than max_constant_size_in_bytes=10485760: "
            "'bomb_fill' (Fill)") in result.stdout
    assert "bomb_fill" in node_names(dst)


def test_budget_counts_arrays_held_at_once_and_frees_intermediates() -> None:
    """A chain whose intermediates are released folds whole under a budget that its sum would exceed."""
    b = TfBuilder()
    x = b.placeholder("x", (None,))
    value = b.op("Fill", "fill", b.const("dims", np.array([1000], np.int32)), b.const("v", np.float32(1)))
    for i in range(10):
        value = b.op("AddV2", f"step{i}", value, b.const(f"c{i}", np.float32(i)))
    y = b.op("AddV2", "y", x, value)
    result = fold(b.model([x], [y]), "fold_budget=10000")  # 4000 B held at a time; 44 KB computed in all
    assert result.stats["nodes_folded"] == 11 and result.stats["peak_bytes"] <= 8000
    b2 = TfBuilder()
    x2 = b2.placeholder("x", (None,))
    fills = [b2.op("Fill", f"fill{i}", b2.const(f"d{i}", np.array([1000], np.int32)), b2.const(f"v{i}", np.float32(i)))
             for i in range(3)]
    outs = [b2.op("AddV2", f"y{i}", x2, f) for i, f in enumerate(fills)]
    result = fold(b2.model([x2], outs), "fold_budget=10000")  # all three are kept: 12 KB held
    assert result.stats["nodes_folded"] == 2 and result.stats["not_evaluated"] == 1
    assert "over fold_budget=10000: 'fill2' (Fill, 3.9 KB)" in " ".join(result.notes)

