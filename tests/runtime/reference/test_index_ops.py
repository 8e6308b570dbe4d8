"""Index and layout operators (family ``tflite_index``) against LiteRT's reference kernels: every
operator output of every model identical (integers) or within 1e-5 (floats) on all-min, all-max
and seeded inputs; each model holds the operators it was made for; indices out of range and
shapes the kernels cannot take are refused with one line, as LiteRT refuses them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from graphwright.errors import VerificationError
from graphwright.formats import load
from graphwright.ir import Attr, Model, Node, QuantParams, Tensor, Value
from graphwright.runtime.reference import Interpreter
from tests.models import get_model
from tests.models.build_tflite_index import EXPECTED_OPS, FAMILY, NAMES

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", NAMES)
def test_every_operator_output_matches_litert_reference(name: str) -> None:
    info = get_model(FAMILY, name)
    ops = {node.op for node in load(info.path).graph}
    missing = sorted(set(EXPECTED_OPS[name]) - ops)
    assert not missing, f"{name} lacks {missing}"
    assert assert_matches_reference(info) >= 6 * len(EXPECTED_OPS[name])


_NOT_INT8_BY_CONVERTER = {"GATHER", "GATHER_ND", "UNPACK", "WHERE"}  # left float (int8 in direct_float); WHERE: int64


@pytest.mark.parametrize(("name", "dtype", "ops"), [
    ("index_int8", "int8", set(EXPECTED_OPS["index_int8"]) - _NOT_INT8_BY_CONVERTER),
    ("direct_float", "int8", {"DEPTH_TO_SPACE", "TILE", "UNPACK", "GATHER", "GATHER_ND"}),
    ("direct_float", "uint8", {"GATHER", "SLICE", "MIRROR_PAD", "CONCATENATION"}),
    ("index_int16x8", "int16", set(EXPECTED_OPS["index_int16x8"])),
    ("direct_int16x8", "int16", set(EXPECTED_OPS["direct_int16x8"])),
])
def test_quantized_models_run_the_operators_on_quantized_tensors(name: str, dtype: str, ops: set[str]) -> None:
    """The int8, uint8 and 16x8 kernels really run: those operators write quantized tensors of the type."""
    graph = load(get_model(FAMILY, name).path).graph
    quantized = {node.op for node in graph
                 if node.outputs[0].dtype.value == dtype and node.outputs[0].quant is not None}
    assert ops <= quantized, f"{name}: {sorted(ops - quantized)} not on {dtype} tensors"


def _run_with(name: str, input_name: str, value: int) -> None:
    info = get_model(FAMILY, name)
    feeds = feeds_for(info, 2)
    feeds[input_name] = np.full_like(feeds[input_name], value)
    Interpreter(info.path).run(feeds)


@pytest.mark.parametrize(("name", "input_name", "value", "what"), [
    ("index_int8", "x3", 6, "index 6 is out of range [0, 6)"),     # GATHER axis 1
    ("index_float", "x3", -1, "index -1 is out of range [0, 6)"),  # GATHER, negative
    ("index_float", "x5", 8, "index 8 is out of range [0, 8)"),    # GATHER batch_dims 1
    ("index_int16x8", "x6", 2, "out of range [0, 2)"),            # GATHER_ND
    ("direct_float", "ids", 6, "id 6 is out of range [0, 6)"),     # EMBEDDING_LOOKUP
    ("direct_int16x8", "lengths", 6, "exceed axis 1"),             # REVERSE_SEQUENCE
])
def test_indices_out_of_range_are_refused_in_one_line(name: str, input_name: str, value: int, what: str) -> None:
    with pytest.raises(VerificationError, match="cannot run operator") as err:
        _run_with(name, input_name, value)
    assert what in str(err.value) and "\n" not in str(err.value)


def test_litert_refuses_the_same_gather_index() -> None:
    """The refusal mirrors LiteRT: its reference GATHER fails on the same index."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    from ai_edge_litert.interpreter import OpResolverType

    info = get_model(FAMILY, "index_float")
    feeds = feeds_for(info, 2)
    feeds["x3"] = np.full_like(feeds["x3"], 6)
    litert = LiteRT(model_path=str(info.path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    litert.allocate_tensors()
    for detail in litert.get_input_details():
        litert.set_tensor(detail["index"], feeds[detail["name"]])
    with pytest.raises(RuntimeError, match="gather index out of bounds"):
        litert.invoke()


def _first(model: Model, op: str) -> Node:
    return next(n for n in model.graph if n.op == op)


def _set_const(value: Value, array: list[int] | list[list[int]]) -> None:
    assert value.const is not None
    value.const = Tensor.from_numpy(np.asarray(array, value.const.numpy().dtype), value.const.dtype)


@pytest.mark.parametrize(("op", "edit", "what"), [
    ("SLICE", lambda n: _set_const(n.inputs[2], [2, 7, -1, 2]), "lie outside input [2, 6, 8, 4]"),
    ("MIRROR_PAD", lambda n: _set_const(n.inputs[1], [[0, 0], [6, 0], [0, 0], [0, 0]]),
     "exceed what input [2, 6, 8, 4] can mirror (REFLECT)"),
    ("REVERSE_V2", lambda n: _set_const(n.inputs[1], [0, 2]), "not contiguous"),
    ("SPLIT_V", lambda n: _set_const(n.inputs[1], [1, 2, 2]), "do not add up to the 6 elements"),
    ("GATHER", lambda n: n.attrs.__setitem__("batch_dims", Attr.int(2)), "batch_dims 2 does not fit axis 1"),
])
def test_shapes_the_kernels_cannot_take_are_refused_when_built(op: str, edit: Callable[[Node], None],
                                                               what: str) -> None:
    model = load(get_model(FAMILY, "index_float").path)
    edit(_first(model, op))
    with pytest.raises(VerificationError, match=f"cannot run operator {op}") as err:
        Interpreter(model)
    assert what in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("op", ["CONCATENATION", "PACK"])
def test_int8_inputs_of_other_scales_are_refused_as_litert_does(op: str) -> None:
    """LiteRT's int8 CONCATENATION and PACK copy values and refuse inputs quantized unlike their
    output (the converter gives them one scale); only uint8 CONCATENATION requantizes."""
    info = get_model(FAMILY, "index_int8")
    model = load(info.path)
    value = _first(model, op).outputs[0]
    q = value.quant
    value.quant = QuantParams(q.scale * 2, q.zero_point, q.axis)
    with pytest.raises(VerificationError, match=f"{op} .*input is quantized differently from the output"):
        Interpreter(model).run(feeds_for(info, 2))
