"""What a run reads: feeds over file buffers, per-run weights, empty batches, option values —
on both the compiled (:mod:`graphwright.runtime.reference.jit`) and the numpy path."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import VerificationError
from graphwright.ir import Tensor
from graphwright.runtime import prepare
from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference._common import OpContext
from graphwright.runtime.reference.conv_fast import _DENSE_ROWS
from graphwright.runtime.reference.fully_connected import fully_connected

from .conftest import model, random_feeds

PATHS = [False, True]
IDS = ["numpy", "jit"]


@pytest.mark.parametrize("jit", PATHS, ids=IDS)
def test_fully_connected_with_weights_computed_at_run_time_uses_each_runs_weights(jit: bool) -> None:
    ir = gw.load(model("tflite_model", "int8").path)
    (node,) = [n for n in ir.graph if n.op == "FULLY_CONNECTED"]
    weights, bias = node.inputs[1], node.inputs[2]
    assert weights is not None and weights.const is not None
    w = weights.const.numpy()
    b = None if bias is None or bias.const is None else bias.const.numpy()
    weights.const = None  # as if another operator produced them
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, w.shape[1])).astype(np.int8)
    other = np.ascontiguousarray(w[::-1])
    cache: dict[str, object] = {}
    first = fully_connected(OpContext(node, [x, w, b], "double", cache, jit))[0]
    second = fully_connected(OpContext(node, [x, other, b], "double", cache, jit))[0]
    fresh = fully_connected(OpContext(node, [x, other, b], "double", {}, jit))[0]
    np.testing.assert_array_equal(second, fresh)
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("jit", PATHS, ids=IDS)
def test_a_feed_wins_over_a_buffer_the_file_gives_the_input(jit: bool) -> None:
    info = model("tflite_model", "int8")
    ir = gw.load(info.path)
    (value,) = ir.graph.inputs
    shape = tuple(d or 1 for d in value.shape)
    value.const = Tensor.from_numpy(np.zeros(shape, np.int8))
    interp = Interpreter(ir, jit=jit)
    a, b = random_feeds(info.inputs, info.input_dtypes, 1), random_feeds(info.inputs, info.input_dtypes, 2)
    plain = Interpreter(info.path, jit=jit)
    for feeds in (a, b):
        for key, got in interp.run(feeds).items():
            np.testing.assert_array_equal(got, plain.run(feeds)[key])


@pytest.mark.parametrize("name", ["mobilenet_v3_small_int8", "efficientnet_b0_int8"])
def test_an_empty_batch_gives_empty_outputs_on_both_paths(name: str) -> None:
    info = model("tflite_ops", name)
    compiled, plain = Interpreter(info.path, jit=True), Interpreter(info.path, jit=False)
    (spec,) = plain.inputs
    feeds = {spec.name: np.zeros((0, *tuple(spec.shape)[1:]), np.int8)}
    a, b = compiled.run(feeds), plain.run(feeds)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape and a[key].shape[0] == 0


@pytest.mark.parametrize("rows", [1, _DENSE_ROWS, _DENSE_ROWS + 1])
def test_fully_connected_rows_on_either_side_of_the_compiled_dot_products(rows: int) -> None:
    """Up to _DENSE_ROWS rows take the compiled int8 dot products, more take BLAS: same integers."""
    path = model("tflite_model", "int8").path
    ir = gw.load(path)
    (node,) = [n for n in ir.graph if n.op == "FULLY_CONNECTED"]
    w = node.inputs[1].const.numpy()  # type: ignore[union-attr]
    b = node.inputs[2].const.numpy()  # type: ignore[union-attr]
    x = np.random.default_rng(rows).integers(-128, 128, (rows, w.shape[1])).astype(np.int8)
    compiled = fully_connected(OpContext(node, [x, w, b], "double", {}, True))[0]
    plain = fully_connected(OpContext(node, [x, w, b], "double", {}, False))[0]
    assert compiled.shape == (rows, w.shape[0])
    np.testing.assert_array_equal(compiled, plain)


@pytest.mark.parametrize("value", [0, 1, "false", "yes"])
def test_jit_takes_only_true_false_or_none(value: object) -> None:
    with pytest.raises(VerificationError, match="jit must be True, False or None"):
        Interpreter(model("tflite_model", "int8").path, jit=value)  # type: ignore[arg-type]


def test_backend_reads_jit_given_as_text() -> None:
    path = model("tflite_model", "int8").path
    with prepare(path, backend="reference", options={"jit": "false"}) as session:
        assert session.interpreter.jit is False  # type: ignore[attr-defined]
    with prepare(path, backend="reference", options={"jit": "True"}) as session:
        assert session.interpreter.jit is True  # type: ignore[attr-defined]


@pytest.mark.parametrize("jit", PATHS, ids=IDS)
def test_changing_batch_sizes_rebuild_what_depends_on_the_shape(jit: bool) -> None:
    """Runners and buffers are kept per input shape: batches 1, 3, 1, 2 on one interpreter give
    what a fresh interpreter gives for each."""
    info = model("tflite_ops", "mobilenet_v3_small_int8")
    interp = Interpreter(info.path, jit=jit)
    (spec,) = interp.inputs
    rng = np.random.default_rng(9)
    for batch in (1, 3, 1, 2):
        feeds = {spec.name: rng.integers(-128, 128, (batch, *tuple(spec.shape)[1:])).astype(np.int8)}
        got, fresh = interp.trace(feeds), Interpreter(info.path, jit=jit).trace(feeds)
        assert got.keys() == fresh.keys()
        for key in got:
            np.testing.assert_array_equal(got[key], fresh[key], err_msg=f"batch {batch}: {key}")
