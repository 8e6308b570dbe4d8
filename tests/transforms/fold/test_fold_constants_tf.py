"""fold_constants checked by TensorFlow: folded graphs compute what the originals compute, control
edges behave as in the original tool, loops and conds keep working, and the TensorFlow backend."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import graphwright as gw
import graphwright.transforms.fold.fold_constants  # registers the transform
from graphwright.ir import Attr, DType, Model, check

from ._graphs import TfBuilder, by_name, f32, ops_of
from .test_fold_constants import batch_norm_graph

pytestmark = pytest.mark.tf
oracle = pytest.importorskip("tests.tf_oracle")
tf = oracle.tf


def _tf_graph(build: Callable[[], None], *, v1_control_flow: bool = False) -> bytes:
    from tensorflow.python.ops import control_flow_util

    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = not v1_control_flow and saved
    try:
        graph = tf.Graph()
        with graph.as_default():
            build()
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved
    return graph.as_graph_def().SerializeToString()


def _fold_and_compare(data: bytes, inputs: dict[str, np.ndarray], outputs: list[str], params: str = "",
                      *, rtol: float = 0.0) -> Model:
    """Fold in graphwright; TensorFlow must compute the same outputs from the folded graph."""
    from pathlib import Path

    from graphwright.formats.graphdef import load

    model = load(Path("<test graph>"), data)
    gw.transform(model, f"fold_constants({params})" if params else "fold_constants",
                 inputs=list(inputs), outputs=outputs)
    check(model.graph)
    expected = oracle.run_graphdef(data, inputs, outputs)
    got = oracle.run_graphdef(gw.serialize(model), inputs, outputs)
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and e.shape == g.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=0)
    return model


def test_batch_norm_graph_computes_the_same_in_tensorflow() -> None:
    b, _ = batch_norm_graph()
    data = gw.serialize(b.model())
    model = _fold_and_compare(data, {"x": np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)},
                              ["y"], rtol=1e-6)
    assert "Rsqrt" not in ops_of(model) and "Sub" not in ops_of(model)


def test_keras_style_flatten_and_shape_arithmetic() -> None:
    """Shape -> StridedSlice -> Prod/Pack -> Reshape, Range/Fill/Cast/Gather/Concat: all folded, same result."""

    def build() -> None:
        x = tf.compat.v1.placeholder(tf.float32, [2, 3, 4], name="x")
        flat = tf.reshape(x, tf.stack([tf.shape(x)[0], tf.reduce_prod(tf.shape(x)[1:])]))
        idx = tf.cast(tf.range(0, 12, 3), tf.int64)
        picked = tf.gather(flat, idx, axis=1)
        pad = tf.fill(tf.stack([2, tf.size(x) // 12]), 0.5)
        table = tf.concat([tf.ones([2, 1]), pad, tf.one_hot([1, 0], 3)], axis=1)
        tf.identity(tf.concat([picked, table], axis=1) * tf.math.floormod(tf.constant(-7.0), 3.0), name="y")

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    model = _fold_and_compare(_tf_graph(build), {"x": x}, ["y"])
    assert ops_of(model).count("Const") >= 2
    assert not {"Shape", "StridedSlice", "Pack", "Prod", "Range", "Fill", "OneHot", "Size"} & set(ops_of(model))


def test_control_edges_match_the_original_tool() -> None:
    def build() -> None:
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        noop = tf.compat.v1.no_op(name="noop")
        with tf.control_dependencies([noop]):
            c1 = tf.constant([1.0, 2.0, 3.0], name="c1")
        with tf.control_dependencies([x.op]):
            a = tf.add(c1, tf.constant([4.0, 5.0, 6.0]), name="a")
        tf.multiply(x, tf.math.rsqrt(a, name="r"), name="y")

    data = _tf_graph(build)
    ours = _fold_and_compare(data, {"x": f32(1, 2, 3)}, ["y"], rtol=1e-6)
    theirs = tf.compat.v1.GraphDef.FromString(oracle.original_tool(data, ["x"], ["y"], "fold_constants"))
    mul = next(n for n in theirs.node if n.name == "y")
    folded = next(n for n in theirs.node if n.name == mul.input[1])
    assert folded.op == "Const" and list(folded.input) == ["^x"]       # the original: inherits ^x
    ours_r = by_name(ours, "r")
    assert ours_r.op == "Const" and [n.name for n in ours_r.control_inputs] == ["x"]
    assert "noop" not in {n.name for n in theirs.node} and ours.graph.find_node("noop") is None


def test_constants_inside_while_loops_and_conds_stay_in_their_frames() -> None:
    def build() -> None:
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")

        def body(i: tf.Tensor, acc: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            step = tf.constant([1.0, 2.0, 3.0]) * tf.constant(2.0)
            return i + 1, acc + tf.math.rsqrt(step) * x

        _, out = tf.compat.v1.while_loop(lambda i, a: i < 4, body, [tf.constant(0), tf.zeros([3])])
        tf.identity(out, name="out")
        branch = tf.compat.v1.cond(tf.reduce_sum(x) > 0, lambda: tf.constant(2.0) * tf.constant(3.0) + x,
                                   lambda: x - tf.constant(1.0) * tf.constant(4.0))
        tf.identity(branch, name="cout")

    data = _tf_graph(build, v1_control_flow=True)
    for feed in (f32(1, 2, 3), f32(-1, -2, -3)):  # both branches of the cond
        model = _fold_and_compare(data, {"x": feed}, ["out", "cout"], rtol=1e-6)
    rsqrt = by_name(model, "while/Rsqrt")
    assert rsqrt.op == "Const" and [n.op for n in rsqrt.control_inputs] == ["Identity"]  # the loop pivot
    assert [n.op for n in by_name(model, "cond/mul").control_inputs] == ["Identity"]      # switch_t


def test_multi_output_and_static_shape_folds_run_in_tensorflow() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,))
    unpack = b.node("Unpack", "u", [b.const("m", np.arange(6, dtype=np.float32).reshape(3, 2))],
                    {"num": Attr.int(3), "axis": Attr.int(0)})
    y = b.op("AddV2", "y", x, unpack.outputs[0])
    b.op("Mul", "z", y, unpack.outputs[2])
    b.op("Reshape", "r", x, b.op("Shape", "s", x))
    split = b.node("SplitV", "sp", [b.const("v", f32(1, 2, 3, 4)), b.const("sizes", np.array([2, 2], np.int32)),
                                    b.const("dim", np.int32(0))], {"num_split": Attr.int(2)})
    b.op("Sub", "w", b.op("Mul", "w0", x, split.outputs[1]), split.outputs[0])
    data = gw.serialize(b.model())
    model = _fold_and_compare(data, {"x": f32(3, 5)}, ["z", "r", "w"])
    assert {"Unpack", "Shape", "SplitV"}.isdisjoint(ops_of(model))


def test_tensorflow_backend_agrees_and_folds_ops_without_numpy_kernels() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,))
    erf = b.op("Erf", "erf", b.const("e", f32(0.5, 1.0)))
    b.op("Mul", "m", x, b.op("Rsqrt", "r", erf))
    b.op("AddV2", "n", x, b.op("FloorDiv", "bad", b.const("one", f32(1, 1)), b.const("zero", f32(0, 1))))
    data = gw.serialize(b.model())
    feeds = {"x": f32(2, 3)}
    numpy_model = _fold_and_compare(data, feeds, ["m", "n"])
    assert by_name(numpy_model, "erf").op == "Erf" and by_name(numpy_model, "r").op == "Rsqrt"
    tf_model = _fold_and_compare(data, feeds, ["m", "n"], "backend=tensorflow")
    assert by_name(tf_model, "r").op == "Const" and tf_model.graph.find_node("erf") is None
    assert by_name(tf_model, "bad").op == "Const"  # float FloorDiv by zero is -inf/inf, not an error

    b2, _ = batch_norm_graph()
    numpy_bn, tf_bn = b2.model(), None
    data_bn = gw.serialize(numpy_bn)
    tf_bn = _fold_and_compare(data_bn, {"x": f32(1, 2, 3, 4).reshape(1, 4)}, ["y"], "backend=tensorflow")
    gw.transform(numpy_bn, "fold_constants", outputs=["y"])
    assert ops_of(tf_bn) == ops_of(numpy_bn)
    np.testing.assert_allclose(gw.ir.constant_value(by_name(tf_bn, "scale").output).numpy(),
                               gw.ir.constant_value(by_name(numpy_bn, "scale").output).numpy(), rtol=1e-6)


def test_tensorflow_backend_leaves_failing_nodes_and_says_so() -> None:
    b = TfBuilder()
    x = b.placeholder("x", (2,), DType.INT32)
    b.op("AddV2", "a", x, b.op("FloorDiv", "div0", b.const("n", np.array([4, 5], np.int32)),
                                b.const("zero", np.array([1, 0], np.int32))))
    model = b.model()
    report = gw.transform(model, "fold_constants(backend=tensorflow)", outputs=["a"])
    assert by_name(model, "div0").op == "FloorDiv"
    assert any("'div0' (FloorDiv)" in n for n in report.steps[0].notes)


def _dead_sqrt_and_relu() -> None:
    x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
    c = tf.constant([1.0, 4.0, 9.0], name="c")
    tf.sqrt(c, name="dead_sqrt")
    tf.nn.relu(x, name="dead_relu")
    tf.identity(x * tf.sqrt(c, name="s"), name="out")


def _dead_chain_and_control_only_dependency() -> None:
    x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
    unused = tf.compat.v1.placeholder(tf.float32, [3], name="unused_input")
    tf.nn.relu(tf.exp(unused) + tf.constant(1.0), name="dead_chain")
    waited = tf.math.log(x, name="waited")               # read by nobody, but "out" waits on it
    with tf.control_dependencies([waited.op]):
        out = tf.identity(x * tf.constant(2.0) * tf.constant(3.0), name="out")
    tf.identity(out + tf.constant(1.0), name="dead_after_out")


def _dead_loop_next_to_a_live_one() -> None:
    x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
    for name in ("live", "dead"):
        _, acc = tf.compat.v1.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + tf.constant(2.0) * x),
                                          [tf.constant(0), tf.zeros([3])], name=name)
        if name == "live":
            tf.identity(acc, name="out")


@pytest.mark.parametrize("build, inputs", [
    (_dead_sqrt_and_relu, ["x"]),
    (_dead_chain_and_control_only_dependency, ["x"]),
    (_dead_chain_and_control_only_dependency, ["x", "unused_input"]),
    (_dead_loop_next_to_a_live_one, ["x"]),
])
def test_what_the_outputs_do_not_need_goes_as_in_the_original_tool(build: Callable[[], None],
                                                                    inputs: list[str]) -> None:
    data = _tf_graph(build, v1_control_flow=True)
    feeds = {name: f32(1, 2, 3) for name in inputs}
    ours = gw.serialize(_fold_and_compare(data, feeds, ["out"], rtol=1e-6))
    theirs = oracle.original_tool(data, inputs, ["out"], "fold_constants")
    mine, its = (tf.compat.v1.GraphDef.FromString(d).node for d in (ours, theirs))
    assert len(mine) == len(its)
    # the original renames what it folds (<name>/_<k>__cf__<k>); everything else has the same name
    assert {n.name for n in mine if n.op != "Const"} == {n.name for n in its if n.op != "Const"}
    assert sorted(n.op for n in mine) == sorted(n.op for n in its)
