"""State across runs, invocation by invocation against LiteRT's ``BUILTIN_REF`` interpreter.

A deployed keyword spotter or VAD model is invoked again and again on one interpreter, its LSTM /
RNN state (variable tensors), resource variables and random generators carrying over.  What
LiteRT does (``tflite/core/subgraph.cc``, observed here with ai-edge-litert):

* ``invoke()`` after ``invoke()``: variable tensors, resource variables and each RANDOM_* /
  MULTINOMIAL generator go on from where the last invocation left them;
* a new interpreter starts from zero states, unassigned resources and freshly seeded generators;
* ``reset_all_variables()`` zeroes the variable tensors only (resources, CALL_ONCE, generators stay);
* resizing an input (``resize_tensor_input`` + ``allocate_tensors``) re-prepares every operator:
  variable tensors zeroed and generators seeded anew; an ``allocate_tensors`` with unchanged
  shapes does nothing;
* within an invocation, an operator that resizes a dynamic output (a RANDOM_UNIFORM whose shape is
  a graph input, fed a new shape) makes LiteRT re-prepare every later operator: their generators
  start over.

graphwright's reference interpreter must give the same outputs on the same sequence of calls.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

import graphwright as gw
from graphwright.runtime.reference import Interpreter
from tests.models import get_model
from tests.runtime.reference._oracle import feeds_for

#: (family, model) with state: fused LSTM / RNN variable tensors, resource variables, random generators
STATEFUL = [
    ("tflite_zoo", "lstm_kws_float"), ("tflite_zoo", "lstm_kws_int8"), ("tflite_zoo", "bilstm_kws_float"),
    ("tflite_sequence", "lstm_float"), ("tflite_sequence", "integer_lstm_int8"), ("tflite_sequence", "rnn_float"),
    ("tflite_misc", "recurrent_float"), ("tflite_misc", "random_float"),
    ("tflite_control", "stateful_float"), ("tflite_control", "stateful_int8"),
]
#: the feeds, by seed, one invocation each: repeats see the state; random_float's seeds 4-6 feed its
#: RANDOM_UNIFORM new shapes (the generators after it start over)
SEQUENCE = (2, 3, 3, 4, 5, 6, 6)


class _Pair:
    """One graphwright interpreter and one LiteRT BUILTIN_REF interpreter, driven alike."""

    def __init__(self, path: str | Path) -> None:
        self.mine = Interpreter(path)
        self.theirs = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        self.theirs.allocate_tensors()
        self.inputs = {d["name"]: d["index"] for d in self.theirs.get_input_details()}
        self.outputs = {d["name"]: d["index"] for d in self.theirs.get_output_details()}

    def invoke(self, feeds: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
        """Both on ``feeds`` (LiteRT resized first where a shape changed); LiteRT's outputs,
        after asserting graphwright's equal them (integers exactly, floats within 1e-5 of the
        largest magnitude)."""
        current = {d["name"]: tuple(d["shape"]) for d in self.theirs.get_input_details()}
        resized = [name for name, array in feeds.items() if current[name] != array.shape]
        for name in resized:
            self.theirs.resize_tensor_input(self.inputs[name], list(feeds[name].shape), strict=False)
        if resized:
            self.theirs.allocate_tensors()
        for name, array in feeds.items():
            self.theirs.set_tensor(self.inputs[name], array)
        self.theirs.invoke()
        got = self.mine.run(feeds)
        expected = {}
        for name, index in self.outputs.items():
            want = np.array(self.theirs.get_tensor(index))
            expected[name] = want
            where = f"{label}: output {name!r}"
            assert got[name].shape == want.shape and got[name].dtype == want.dtype, where
            if want.dtype.kind == "f":
                finite = np.isfinite(want)
                np.testing.assert_array_equal(np.isfinite(got[name]), finite, err_msg=where)
                scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
                np.testing.assert_allclose(got[name][finite], want[finite], rtol=0, atol=1e-5 * scale, err_msg=where)
            else:
                np.testing.assert_array_equal(got[name], want, err_msg=where)
        return expected


def _differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return any(a[k].shape != b[k].shape or not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")
               for k in a)


@pytest.mark.parametrize(("family", "name"), STATEFUL, ids=[n for _, n in STATEFUL])
def test_consecutive_invocations_match_litert(family: str, name: str) -> None:
    """Seven invocations in a row on one interpreter each; then a new interpreter starts over."""
    info = get_model(family, name)
    pair = _Pair(info.path)
    seen = [pair.invoke(feeds_for(info, seed), f"{name} invocation {k} (seed {seed})")
            for k, seed in enumerate(SEQUENCE)]
    # the same feeds twice in a row give other outputs: the state is real (else this test proves nothing)
    assert _differs(seen[1], seen[2]), f"{name}: LiteRT's second run of seed 3 equals its first"
    fresh = _Pair(info.path)
    again = fresh.invoke(feeds_for(info, SEQUENCE[0]), f"{name} new interpreter")
    assert not _differs(again, seen[0]), f"{name}: a new LiteRT interpreter does not start over"


@pytest.mark.parametrize(("family", "name", "zeroed"), [
    ("tflite_sequence", "lstm_float", True), ("tflite_zoo", "lstm_kws_int8", True),
    ("tflite_control", "stateful_float", False), ("tflite_misc", "random_float", False),
])
def test_reset_zeroes_variable_tensors_only(family: str, name: str, zeroed: bool) -> None:
    """reset_variables as LiteRT's reset_all_variables: LSTM state back to zero (the first output
    again); resource variables, CALL_ONCE and random generators untouched (not the first output)."""
    info = get_model(family, name)
    pair = _Pair(info.path)
    first = pair.invoke(feeds_for(info, 2), f"{name} first")
    pair.invoke(feeds_for(info, 3), f"{name} second")
    pair.mine.reset_variables()
    pair.theirs.reset_all_variables()
    after = pair.invoke(feeds_for(info, 2), f"{name} after reset")
    assert _differs(first, after) != zeroed, f"{name}: LiteRT's reset {'kept' if zeroed else 'cleared'} the state"


@pytest.mark.parametrize(("family", "name", "input_index"), [
    ("tflite_sequence", "lstm_float", 0), ("tflite_misc", "random_float", 1),
])
def test_a_resized_input_restarts_state_as_allocate_tensors(family: str, name: str, input_index: int,
                                                            tmp_path: Path) -> None:
    """The model with its input's dimension 1 made dynamic: feeding another length makes LiteRT
    re-allocate (LSTM state zeroed, generators re-seeded); so does going back."""
    info = get_model(family, name)
    model = gw.load(info.path)
    value = model.graph.inputs[input_index]
    value.shape = (value.shape[0], None, *value.shape[2:])
    path = tmp_path / f"{name}_dynamic.tflite"
    gw.save(model, path)
    short = feeds_for(info, 2)
    longer = dict(short)
    shape = list(short[value.name].shape)
    shape[1] += 2
    longer[value.name] = np.random.default_rng(7).uniform(-1, 1, shape).astype(np.float32)
    pair = _Pair(path)
    seen = [pair.invoke(feeds, f"{name} invocation {k}") for k, feeds in enumerate([short, short, longer, short])]
    assert _differs(seen[0], seen[1]), f"{name}: no state to reset"
    assert not _differs(seen[0], seen[3]), f"{name}: LiteRT's re-allocation did not start over"


def test_trace_given_replaces_a_tensor_for_what_reads_it() -> None:
    """``trace(feeds_b, given={T: LiteRT's T on feeds_a})``: every tensor that depends on the
    feeds only through T equals LiteRT's on feeds_a (the oracle's re-check of a QUANTIZE on LiteRT's
    float value relies on it); a name that is no operator output, or the wrong type, is refused."""
    info = get_model("tflite_zoo", "ds_cnn_int8")
    graph = gw.load(info.path).graph
    nodes = list(graph)
    target = nodes[len(nodes) // 2].outputs[0]
    reached = set(graph.inputs)  # values the feeds reach without passing through the target
    for node in nodes:
        if any(v in reached for v in node.inputs if v is not None) and target not in node.outputs:
            reached.update(node.outputs)
    after = [v.name for node in nodes for v in node.outputs if v not in reached and v is not target]
    assert after, "no tensor depends on the target alone"
    a, b = feeds_for(info, 2), feeds_for(info, 3)
    litert = LiteRT(model_path=str(info.path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                    experimental_preserve_all_tensors=True)
    litert.allocate_tensors()
    for d in litert.get_input_details():
        litert.set_tensor(d["index"], a[d["name"]])
    litert.invoke()
    index = {d["name"]: d["index"] for d in litert.get_tensor_details()}
    interp = Interpreter(info.path)
    mine = interp.trace(b, {target.name: np.array(litert.get_tensor(index[target.name]))})
    unchanged = Interpreter(info.path).trace(b)
    for name in after:
        np.testing.assert_array_equal(mine[name], litert.get_tensor(index[name]), err_msg=name)
    assert any(not np.array_equal(mine[n], unchanged[n]) for n in after), "feeds a and b give the same tensors"
    with pytest.raises(gw.errors.VerificationError, match="no operator output named"):
        interp.trace(b, {"no such tensor": np.zeros(1)})
    with pytest.raises(gw.errors.VerificationError, match="given"):
        interp.trace(b, {target.name: np.zeros(target.shape, np.float64)})


@pytest.mark.parametrize(("family", "name"), [("tflite_sequence", "lstm_float"), ("tflite_misc", "random_float")])
def test_litert_session_keeps_state_when_rebuilt_for_intermediates(family: str, name: str) -> None:
    """graphwright's LiteRT session rebuilds its interpreter the first time intermediate tensors are
    asked for; the earlier runs are replayed, so the state goes on as on one LiteRT interpreter."""
    info = get_model(family, name)
    session = gw.runtime.prepare(info.path, backend="litert-ref")
    pair = _Pair(info.path)
    model = gw.load(info.path)
    inner = model.graph.inputs[0].name  # not an output: asking for it makes the session keep every tensor
    for seed in (2, 3, 3):
        expected = pair.invoke(feeds_for(info, seed), f"{name} seed {seed}")
        names = list(expected) + ([inner] if seed == 3 else [])
        got = session.run(feeds_for(info, seed), names)
        for key, want in expected.items():
            np.testing.assert_array_equal(got[key], want, err_msg=f"{name} seed {seed}: {key}")
