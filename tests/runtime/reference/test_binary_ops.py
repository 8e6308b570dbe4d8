"""Binary, comparison, logical, select and cast operators, and the 16x8 mode of the basic
element-wise ones (corpus ``tflite_binary``, made by the real converter), against LiteRT's
reference kernels: every operator output identical (integers, bools) or within 1e-5 (floats)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright import formats
from graphwright.errors import VerificationError
from graphwright.ir import Model, QuantParams
from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter
from tests.models import get_model

from ._oracle import assert_matches_reference

pytestmark = pytest.mark.slow

FAMILY = "tflite_binary"
_COMPARISONS = ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER_EQUAL")
_LOGICAL = ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT")


def _of(dtype: str, *ops: str) -> set[tuple[str, str]]:
    return {(op, dtype) for op in ops}


#: model -> the (operator, type of its first input) pairs it must contain, so the corpus cannot
#: silently lose an operator nor have the converter stop quantizing one
EXPECTED: dict[str, set[tuple[str, str]]] = {
    "binary_float": _of("float32", "DIV", "FLOOR_DIV", "FLOOR_MOD", "POW", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE",
                        *_COMPARISONS, "CAST") | _of("bool", *_LOGICAL, "SELECT", "SELECT_V2"),
    "binary_int8": _of("int8", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "EQUAL", "LESS", "LESS_EQUAL",
                       "GREATER_EQUAL") | _of("bool", *_LOGICAL, "SELECT_V2"),
    "integers_float": _of("int32", "DIV", "FLOOR_DIV", "FLOOR_MOD", "POW", "MAXIMUM", "MINIMUM",
                          "SQUARED_DIFFERENCE", "EQUAL", "LESS", "GREATER", "GREATER_EQUAL")
    | _of("int64", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "NOT_EQUAL", "LESS_EQUAL")
    | {("FLOOR_DIV", "int16"), ("FLOOR_MOD", "int8"), ("LESS", "int16"), ("SELECT_V2", "bool"), ("CAST", "float32")},
    "activations_int16x8": _of("int16", "ADD", "SUB", "MUL", "LOGISTIC", "TANH", "SOFTMAX", "RELU", "RELU6",
                               "MAXIMUM", "MINIMUM", "DEQUANTIZE") | {("QUANTIZE", "float32")},
    "pot_int16x8": _of("int16", "ADD", "SUB", "MUL", "DIV", "NOT_EQUAL", "LESS", "LOGISTIC", "TANH", "QUANTIZE",
                       "DEQUANTIZE")
    | {("SELECT_V2", "bool"), ("QUANTIZE", "int8"), ("CAST", "bool")},
}
#: CAST pairs the integer model must convert (input type, output type)
CASTS = {("float32", "int32"), ("float32", "int64"), ("int32", "bool"), ("bool", "float32"), ("int32", "int8"),
         ("int8", "int16"), ("int16", "int32"), ("int64", "int16"), ("int16", "int8"), ("int64", "float32"),
         ("bool", "int32"), ("int32", "int64")}


def _ops(interp: Interpreter) -> set[tuple[str, str]]:
    return {(n.op, n.inputs[0].dtype.value) for n in interp.graph if n.inputs and n.inputs[0] is not None}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_matches_litert_reference(name: str) -> None:
    info = get_model(FAMILY, name)
    interp = Interpreter(info.path)
    present = _ops(interp)
    missing = EXPECTED[name] - present
    assert not missing, f"{name} lacks {sorted(missing)}; it has {sorted(present)}"
    assert assert_matches_reference(info) > 0


def test_casts_cover_the_converter_pairs() -> None:
    interp = Interpreter(get_model(FAMILY, "integers_float").path)
    pairs = {(n.inputs[0].dtype.value, n.outputs[0].dtype.value) for n in interp.graph if n.op == "CAST"}
    assert CASTS <= pairs, sorted(CASTS - pairs)


def test_int16_activations_have_int16_outputs() -> None:
    """The 16x8 model computes in int16 (the converter did not fall back to float)."""
    interp = Interpreter(get_model(FAMILY, "activations_int16x8").path)
    for node in interp.graph:
        if node.op not in ("QUANTIZE", "DEQUANTIZE"):
            assert node.outputs[0].dtype.value == "int16", node.op


def _model_with(name: str, op: str, index: int, source: str) -> Model:
    """Model ``name`` of the corpus with input ``index`` of its first ``op`` replaced by the graph input ``source``."""
    model = formats.load(get_model(FAMILY, name).path)
    node = next(n for n in model.graph if n.op == op)
    node.replace_input(index, next(v for v in model.graph.inputs if v.name == source))
    return model


@pytest.mark.parametrize(("op", "source", "value", "message"), [
    ("FLOOR_DIV", "x0", 0, r"FLOOR_DIV .*: its divisor holds a zero"),
    ("FLOOR_MOD", "x0", 0, r"FLOOR_MOD .*: its divisor holds a zero"),
    ("DIV", "x0", 0, r"DIV .*: its divisor holds a zero"),
    ("POW", "x1", -1, r"POW .*: a negative int32 exponent"),
])
def test_integer_operands_litert_refuses_are_refused(op: str, source: str, value: int, message: str) -> None:
    model = _model_with("integers_float", op, 1, source)
    info = get_model(FAMILY, "integers_float")
    feeds = {name: np.ones(shape, info.input_dtypes.get(name, info.input_dtype)) for name, shape in info.inputs.items()}
    feeds[source] = np.full_like(feeds[source], value)
    with pytest.raises(VerificationError, match=message) as caught:
        Interpreter(model).run(feeds)
    assert "\n" not in str(caught.value)


def test_select_condition_of_another_shape_is_refused_when_built() -> None:
    model = formats.load(get_model(FAMILY, "binary_float").path)
    select = next(n for n in model.graph if n.op == "SELECT")
    select.replace_input(0, next(n for n in model.graph if n.op == "LOGICAL_AND").outputs[0])
    with pytest.raises(VerificationError, match=r"SELECT .*: condition \[.*\] is neither of the operands' shape"):
        Interpreter(model)


def test_power_of_two_int16_add_needs_one_unshifted_input() -> None:
    """LiteRT's power-of-two int16 ADD shifts one input only: two shifted inputs are refused."""
    model = formats.load(get_model(FAMILY, "pot_int16x8").path)
    add = next(n for n in model.graph if n.op == "ADD")
    add.outputs[0].quant = QuantParams(np.array([2.0**-14], np.float32), np.zeros(1, np.int64), 0)
    info = get_model(FAMILY, "pot_int16x8")
    feeds = {name: np.zeros(shape, info.input_dtypes.get(name, info.input_dtype)) for name, shape in info.inputs.items()}
    with pytest.raises(VerificationError, match=r"ADD .*: power-of-two int16 scales with input shifts -1 and -2"):
        Interpreter(model).run(feeds)


def test_float_to_integer_casts_saturate_as_litert_does() -> None:
    """Out-of-range, infinite and NaN floats cast to integers exactly as litert-ref casts them."""
    info = get_model(FAMILY, "integers_float")
    interp = Interpreter(info.path)
    extremes = np.array([1e12, -1e12, np.nan, np.inf, -np.inf, 3.7, -3.7, 2.2e7, -2.2e7, 1e30, 0.5, -0.5], np.float32)
    feeds = {"x0": np.ones((2, 3, 1, 4), np.int32), "x1": np.ones((1, 3, 5, 1), np.int32),
             "x2": np.tile(extremes, 2).reshape(2, 1, 3, 1, 4)}
    casts = [n.outputs[0].name for n in interp.graph if n.op == "CAST" and n.inputs[0].dtype.value == "float32"]
    assert len(casts) >= 3
    mine = interp.trace(feeds)
    theirs = execute(info.path, dict(feeds), Job(backend="litert-ref", outputs=casts)).outputs
    for name in casts:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_float_division_by_zero_clamps_as_litert_does(tmp_path: Path) -> None:
    """LiteRT clamps a float DIV to its activation range, ±FLT_MAX without one: x/0 is never inf."""
    model = _model_with("binary_float", "DIV", 1, "x1")  # x0 / x1, both rank 5
    path = tmp_path / "div_by_zero.tflite"
    formats.save(model, path)
    info = get_model(FAMILY, "binary_float")
    feeds = {name: np.zeros(shape, np.float32) for name, shape in info.inputs.items() if name != "x4"}
    feeds["x0"] = np.linspace(-2, 2, feeds["x0"].size, dtype=np.float32).reshape(feeds["x0"].shape)
    feeds["x4"] = np.zeros(info.inputs["x4"], np.bool_)
    div = next(n for n in Interpreter(model).graph if n.op == "DIV" and n.inputs[1].name == "x1").outputs[0].name
    mine = Interpreter(path).run(feeds, [div])[div]
    theirs = execute(path, dict(feeds), Job(backend="litert-ref", outputs=[div])).outputs[div]
    assert np.abs(mine).max() == np.finfo(np.float32).max
    np.testing.assert_array_equal(mine, theirs)
