"""Control flow (WHILE, IF, CALL_ONCE) and resource variables (VAR_HANDLE, READ_VARIABLE,
ASSIGN_VARIABLE) against LiteRT's reference kernels: every main-graph operator output on the
``tflite_control`` corpus, state carried from run to run as LiteRT carries it, and the
one-line refusals of malformed calls."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from graphwright.errors import VerificationError
from graphwright.formats import load
from graphwright.ir import Attr
from graphwright.runtime.reference import Interpreter
from tests.models import get_model
from tests.models.build_tflite_control import NAMES

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow

#: operators each model must hold, in any of its graphs
INTENDED = {
    "keras_rnn": {"WHILE", "LESS", "LOGICAL_AND", "FULLY_CONNECTED", "GATHER", "SPLIT", "SLICE"},
    "loop": {"WHILE", "LESS", "MUL", "ADD", "TANH"},
    "stateful": {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "IF"},
}


def _ops(path: object) -> set[str]:
    return {node.op for graph in load(path).graphs for node in graph}  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_matches_litert(name: str) -> None:
    info = get_model("tflite_control", name)
    missing = INTENDED[name.rsplit("_", 1)[0]] - _ops(info.path)
    assert not missing, f"{name} lacks {sorted(missing)}"
    # six runs in a row on one interpreter each side: the state carried from run to run is compared too
    assert assert_matches_reference(info, seeds=range(6)) > 0


@pytest.mark.parametrize("name", ["stateful_float", "stateful_int8"])
def test_variables_and_call_once_persist_across_runs(name: str) -> None:
    """The variable assigned by CALL_ONCE's initializer, then by every run, as LiteRT's across invokes."""
    info = get_model("tflite_control", name)
    mine = Interpreter(info.path)
    theirs = LiteRT(model_path=str(info.path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    theirs.allocate_tensors()
    by_name = {d["name"]: d["index"] for d in theirs.get_input_details()}
    outputs = []
    for seed in range(2, 6):  # the flag alternates branches
        feeds = feeds_for(info, seed)
        for name, array in feeds.items():
            theirs.set_tensor(by_name[name], array)
        theirs.invoke()
        expected = theirs.get_tensor(theirs.get_output_details()[0]["index"])
        got = mine.run(feeds)[mine.outputs[0]]
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max(), err_msg=f"seed {seed}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"seed {seed}")
        outputs.append(got)
    assert not np.allclose(outputs[0], outputs[2]), "the state did not change the outputs"


def _model_with(name: str, op: str, **attrs: int) -> object:
    model = load(get_model("tflite_control", name).path)
    node = next(n for g in model.graphs for n in g if n.op == op)
    for key, value in attrs.items():
        node.attrs[key] = Attr.int(value)
    return model


@pytest.mark.parametrize(("name", "op", "attrs", "message"), [
    ("keras_rnn_float", "WHILE", {"body_subgraph_index": 99}, "body_subgraph_index is 99, not one of"),
    ("keras_rnn_float", "WHILE", {"body_subgraph_index": 0}, "calls itself"),
    ("keras_rnn_float", "WHILE", {"cond_subgraph_index": 3}, "condition subgraph 3 has"),
    ("keras_rnn_float", "WHILE", {"cond_subgraph_index": 2}, "condition and body are the same subgraph"),
    ("stateful_float", "IF", {"then_subgraph_index": 1}, "then subgraph 1 has 0 inputs"),
    ("stateful_float", "CALL_ONCE", {"init_subgraph_index": 2}, "initialization subgraph 2 has 1 inputs"),
])
def test_malformed_calls_are_refused_in_one_line(name: str, op: str, attrs: dict[str, int], message: str) -> None:
    with pytest.raises(VerificationError, match=message) as caught:
        Interpreter(_model_with(name, op, **attrs))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_a_variable_read_before_any_assignment_is_refused() -> None:
    model = load(get_model("tflite_control", "stateful_float").path)
    model.graph.remove(next(n for n in model.graph if n.op == "CALL_ONCE"))
    feeds = feeds_for(get_model("tflite_control", "stateful_float"), 2)
    with pytest.raises(VerificationError, match="reads a resource variable no ASSIGN_VARIABLE has set"):
        Interpreter(model).run(feeds)


def test_trace_and_profile_cover_the_main_graph() -> None:
    """trace() gives the main graph's tensors only (the loop bodies' stay inside WHILE);
    profile() times a WHILE with the subgraphs it runs."""
    info = get_model("tflite_control", "keras_rnn_float")
    interp = Interpreter(info.path)
    feeds = feeds_for(info, 2)
    main = {v.name for v in interp.graph.inputs} | {v.name for node in interp.graph for v in node.outputs}
    assert set(interp.trace(feeds)) == main
    assert "WHILE" in interp.profile(feeds, repeat=1)
