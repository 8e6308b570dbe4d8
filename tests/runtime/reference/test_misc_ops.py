"""The remaining BUILTIN_REF operators (tflite_misc corpus) against LiteRT's reference kernels,
and the operators the interpreter refuses on purpose."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from graphwright.errors import VerificationError
from graphwright.formats import load
from graphwright.ir import Attr
from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter
from tests.models import get_model
from tests.models.build_tflite_misc import EXPECTED_OPS, NAMES

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", NAMES)
def test_matches_litert_reference_kernels(name: str) -> None:
    """Every operator output on 6 seeds, each from fresh states (LiteRT's run starts from zero
    recurrent states: recurrent_float's LSTMs and RNNs)."""
    info = get_model("tflite_misc", name)
    ops = {node.op for node in load(info.path).graph}
    assert set(EXPECTED_OPS[name]) <= ops, f"{name} lacks {set(EXPECTED_OPS[name]) - ops}"
    for seed in range(6):
        assert assert_matches_reference(info, seeds=range(seed, seed + 1)) > 0


@pytest.mark.parametrize("name", ["detection_float", "detection_uint8"])
def test_fast_nms_fills_every_slot_of_the_corpus_runs(name: str) -> None:
    """LiteRT leaves fast-NMS slots after the last detection unwritten (arena contents), so the
    corpus compares only runs that fill all six: each seed must detect six boxes."""
    info = get_model("tflite_misc", name)
    interp = Interpreter(info.path)
    for seed in range(6):
        assert interp.run(feeds_for(info, seed))["fast_count"].tolist() == [6.0]


def test_complex_parts_of_complex_values() -> None:
    """REAL, IMAG, COMPLEX_ABS on complex64 values with imaginary parts (the corpus feeds real ones)."""
    info = get_model("tflite_misc", "direct_float")
    rng = np.random.default_rng(7)
    feeds = feeds_for(info, 2)
    feeds["z"] = (rng.uniform(-3, 3, (2, 3, 4)) + 1j * rng.uniform(-3, 3, (2, 3, 4))).astype(np.complex64)
    names = ["real", "imag", "complex_abs"]
    mine = Interpreter(info.path).trace(feeds)
    theirs = execute(info.path, dict(feeds), Job(backend="litert-ref", outputs=names)).outputs
    for name in names:
        assert mine[name].dtype == np.float32
        np.testing.assert_allclose(mine[name], theirs[name], rtol=0, atol=1e-5 * np.abs(theirs[name]).max())
    assert np.abs(mine["imag"]).max() > 1


@pytest.mark.parametrize("name", ["random_float", "recurrent_float"])
def test_state_goes_on_from_run_to_run_as_litert(name: str) -> None:
    """Three runs in a row on one interpreter each: every output as LiteRT's (the Philox generators
    keep their state across invocations, MULTINOMIAL skipping ahead; the LSTM and RNN states
    carry over)."""
    info = get_model("tflite_misc", name)
    mine = Interpreter(info.path)
    theirs = LiteRT(model_path=str(info.path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    theirs.allocate_tensors()
    outputs = {d["name"]: d["index"] for d in theirs.get_output_details()}
    for seed in (2, 3, 3):
        feeds = feeds_for(info, seed)
        for detail in theirs.get_input_details():
            theirs.resize_tensor_input(detail["index"], feeds[detail["name"]].shape)
        theirs.allocate_tensors()
        for detail in theirs.get_input_details():
            theirs.set_tensor(detail["index"], feeds[detail["name"]])
        theirs.invoke()
        got = mine.run(feeds)
        for name, index in outputs.items():
            expected = theirs.get_tensor(index)
            if expected.dtype.kind == "f":
                scale = np.abs(expected[np.isfinite(expected)]).max()  # the logits hold -inf
                np.testing.assert_allclose(got[name], expected, rtol=0, atol=1e-5 * scale, err_msg=name)
            else:
                np.testing.assert_array_equal(got[name], expected, err_msg=name)


@pytest.mark.parametrize("op", ["RANDOM_UNIFORM", "MULTINOMIAL"])
def test_unseeded_random_operators_refused_in_one_line(op: str) -> None:
    model = load(get_model("tflite_misc", "random_float").path)
    node = next(n for n in model.graph if n.op == op)
    node.attrs["seed"], node.attrs["seed2"] = Attr.int(0), Attr.int(2**32)  # LiteRT's C int seeds: both 0
    with pytest.raises(VerificationError, match=rf"{op} .*non-deterministic op.*/dev/urandom") as err:
        Interpreter(model)
    assert "\n" not in str(err.value)


def test_skip_gram_refused_in_one_line() -> None:
    model = load(get_model("tflite_misc", "direct_float").path)
    next(iter(model.graph)).op = "SKIP_GRAM"
    with pytest.raises(VerificationError, match=r"SKIP_GRAM .*string tensors") as err:
        Interpreter(model)
    assert "\n" not in str(err.value)


def test_other_custom_operators_refused_by_name() -> None:
    model = load(get_model("tflite_misc", "detection_float").path)
    next(iter(model.graph)).op = "TFLite_Other_PostProcess"
    with pytest.raises(VerificationError, match=r"operator TFLite_Other_PostProcess .* is not implemented"):
        Interpreter(model)


def test_fake_quant_narrow_range_refused_as_litert_does() -> None:
    model = load(get_model("tflite_misc", "direct_float").path)
    node = next(n for n in model.graph if n.op == "FAKE_QUANT")
    node.attrs["narrow_range"] = Attr.bool(True)
    with pytest.raises(VerificationError, match=r"FAKE_QUANT .*narrow_range"):
        Interpreter(model)
