"""The fused recurrent operators (LSTMs, RNN, SVDF; float32, hybrid, full-integer) against
LiteRT's reference kernels: every operator output of the ``tflite_sequence`` corpus, the recurrent
state, which the operator keeps in variable tensors from one run to the next as LiteRT does, and
the refusal of what LiteRT leaves undefined."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from graphwright.errors import VerificationError
from graphwright.formats import load, tflite
from graphwright.ir import Attr
from graphwright.runtime.reference import Interpreter
from tests.models import get_model
from tests.models.build_tflite_sequence import NAMES

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow

INTENDED = {"lstm": {"UNIDIRECTIONAL_SEQUENCE_LSTM"}, "hybrid_lstm": {"UNIDIRECTIONAL_SEQUENCE_LSTM"}, "recurrent": {"UNIDIRECTIONAL_SEQUENCE_RNN", "SVDF", "BIDIRECTIONAL_SEQUENCE_LSTM"},
            "svdf": {"SVDF"}, "rnn": {"RNN", "UNIDIRECTIONAL_SEQUENCE_RNN"},
            "integer_lstm": {"UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM"},
            "hybrid_recurrent": {"UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM",
                                 "SVDF"}}


@pytest.mark.parametrize("name", NAMES)
def test_matches_litert(name: str) -> None:
    info = get_model("tflite_sequence", name)
    missing = INTENDED[name.rsplit("_", 1)[0]] - {node.op for node in load(info.path).graph}
    assert not missing, f"{name} lacks {sorted(missing)}"
    # six runs in a row on one interpreter each side: the state carried from run to run is compared too
    assert assert_matches_reference(info, seeds=range(6)) > 0


@pytest.mark.parametrize("name", NAMES)
def test_state_carries_over_runs_and_resets(name: str) -> None:
    """Runs continue from the last run's output and cell states; reset_variables zeroes them,
    as LiteRT's reset_all_variables."""
    info = get_model("tflite_sequence", name)
    mine = Interpreter(info.path)
    theirs = LiteRT(model_path=str(info.path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    theirs.allocate_tensors()
    inputs = {d["name"]: d["index"] for d in theirs.get_input_details()}
    outputs = [d["index"] for d in theirs.get_output_details()]
    results = []
    for seed in (2, 3, 3, "reset", 3):
        if seed == "reset":
            mine.reset_variables()
            theirs.reset_all_variables()
            continue
        feeds = feeds_for(info, int(seed))
        for input_name, array in feeds.items():
            theirs.set_tensor(inputs[input_name], array)
        theirs.invoke()
        got = mine.run(feeds)
        for index, output_name in zip(outputs, mine.outputs, strict=True):
            expected = theirs.get_tensor(index)
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(got[output_name], expected, rtol=0, atol=1e-5 * np.abs(expected).max())
            else:
                np.testing.assert_array_equal(got[output_name], expected)
        results.append(got[mine.outputs[0]])
    assert not np.array_equal(results[1], results[2]), "the second run of the same input did not see the state"


def test_hybrid_lstm_with_symmetric_input_quantization(tmp_path: Path) -> None:
    """The hybrid model with ``asymmetric_quantize_inputs`` off: rows quantized symmetrically."""
    info = get_model("tflite_sequence", "hybrid_lstm_float")
    model = load(info.path)
    lstm = next(n for n in model.graph if n.op == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert lstm.attr("asymmetric_quantize_inputs") and lstm.inputs[1] is not None
    assert lstm.inputs[1].dtype is not None and lstm.inputs[1].dtype.value == "int8"
    lstm.attrs["asymmetric_quantize_inputs"] = Attr.bool(False)
    path = tmp_path / "symmetric.tflite"
    path.write_bytes(tflite.serialize(model))
    for seed in range(2, 5):
        assert assert_matches_reference(replace(info, path=path), seeds=range(seed, seed + 1)) > 0


def test_a_cell_scale_litert_leaves_undefined_is_refused_in_one_line() -> None:
    """Below 2^-15 LiteRT's integer LSTM leaves tanh(cell) unwritten: refused when the interpreter is built."""
    model = load(get_model("tflite_sequence", "lstm_int8").path)
    cell = next(n for n in model.graph if n.op == "UNIDIRECTIONAL_SEQUENCE_LSTM").inputs[19]
    assert cell is not None and cell.quant is not None
    cell.quant.scale = np.asarray([2.0 ** -17], np.float32)
    with pytest.raises(VerificationError, match=r"cell state's scale .* not a power of two from 2\^-15 to 2\^-9") \
            as caught:
        Interpreter(model)
    assert "\n" not in str(caught.value)
