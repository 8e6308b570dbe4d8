"""Unary math and parametric activations (corpus ``tflite_math``, made by the real converter)
against LiteRT: every operator output identical (integers) or within 1e-5 (floats) of
LiteRT's reference kernels — or of its default kernels for ELU, CEIL and ROUND, which the
reference resolver (BUILTIN_REF) does not register."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import VerificationError
from graphwright.ir import QuantParams
from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter
from tests.models import get_model

from ._oracle import assert_matches_reference

pytestmark = pytest.mark.slow

FAMILY = "tflite_math"
_UNARY_FLOAT = ("EXP", "LOG", "SQRT", "RSQRT", "ABS", "SQUARE", "NEG", "SIN", "COS", "FLOOR", "SIGN", "ATAN2", "ADD_N",
                "LEAKY_RELU", "GELU", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION")
#: model -> {operator: dtype of its output} that the model must contain: the corpus cannot
#: silently lose an operator, nor have the converter stop quantizing one
EXPECTED: dict[str, dict[str, str]] = {
    "unary_float": {**dict.fromkeys(_UNARY_FLOAT, "float32"), "BUCKETIZE": "int32"},
    "unary_int8": {
        **dict.fromkeys(("EXP", "LOG", "SQRT", "RSQRT", "ABS", "LEAKY_RELU", "GELU", "LOG_SOFTMAX",
                         "L2_NORMALIZATION"), "int8"),
        # the converter leaves these float between DEQUANTIZE and QUANTIZE
        **dict.fromkeys(("SQUARE", "NEG", "SIN", "COS", "FLOOR", "SIGN", "ATAN2", "ADD_N",
                         "LOCAL_RESPONSE_NORMALIZATION"), "float32"),
        "BUCKETIZE": "int32",
    },
    "unary_int16x8": dict.fromkeys(("EXP", "LOG", "RSQRT", "ABS", "LEAKY_RELU", "GELU"), "int16"),
    "extra_float": {**dict.fromkeys(("ELU", "CEIL", "ROUND"), "float32"), "ABS": "int32", "NEG": "int64",
                    "SIGN": "int32"},
    "extra_int8": dict.fromkeys(("ELU", "CEIL", "ROUND"), "float32"),
    "prelu_float": {"PRELU": "float32"},
    "prelu_int8": {"PRELU": "int8"},
    # edited from converter output (the converter does not make these)
    "elu_int8": {"ELU": "int8"},
    "relu01_float": {"RELU_0_TO_1": "float32"},
    "relu01_int8": {"RELU_0_TO_1": "int8"},
    "widened_int16x8": dict.fromkeys(("PRELU", "LEAKY_RELU", "ABS", "SQRT"), "int16"),
    "legacy_uint8": dict.fromkeys(("PRELU", "LEAKY_RELU", "GELU", "L2_NORMALIZATION", "LOG_SOFTMAX"), "uint8"),
}
#: models with operators BUILTIN_REF does not register (ELU, CEIL, ROUND; ABS on int32, op version 5):
#: checked against LiteRT's default kernels
NOT_IN_REFERENCE_RESOLVER = ("extra_float", "extra_int8", "elu_int8")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_model_contains_its_operators(name: str) -> None:
    info = get_model(FAMILY, name)
    histogram = info.metadata["op_histogram"]
    outputs: dict[str, set[str]] = {}
    for node in Interpreter(info.path).graph:
        outputs.setdefault(node.op, set()).add(str(np.dtype(node.outputs[0].dtype.numpy)))
    for op, dtype in EXPECTED[name].items():
        assert op in histogram, f"{name}: the converter no longer emits {op}"
        assert dtype in outputs[op], f"{name}: {op} computes {sorted(outputs[op])}, not {dtype}"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_tensor_matches_litert(name: str) -> None:
    info = get_model(FAMILY, name)
    other = "litert" if name in NOT_IN_REFERENCE_RESOLVER else "litert-ref"
    assert assert_matches_reference(info, other=other) >= 6 * len(EXPECTED[name])


@pytest.mark.parametrize("name", ["unary_int8", "unary_int16x8", "prelu_int8", "legacy_uint8"])
def test_numpy_path_matches_litert(name: str) -> None:
    """Without the compiled table lookups: the same integers."""
    assert_matches_reference(get_model(FAMILY, name), seeds=range(3), jit=False)


def test_gelu_both_forms_present() -> None:
    """The corpus holds the tanh approximation and the exact (erfc) GELU, in every mode."""
    for name in ("unary_float", "unary_int8", "unary_int16x8", "legacy_uint8"):
        forms = {bool(node.attr("approximate", False)) for node in Interpreter(get_model(FAMILY, name).path).graph
                 if node.op == "GELU"}
        assert forms == {True, False}, name


def test_prelu_alpha_per_channel_and_full() -> None:
    """PRELU with an alpha broadcast over the spatial axes and with a full alpha tensor,
    some alphas negative."""
    graph = Interpreter(get_model(FAMILY, "prelu_int8").path).graph
    alphas = [node.inputs[1] for node in graph if node.op == "PRELU"]
    shapes = sorted(tuple(a.const.shape) for a in alphas if a is not None and a.const is not None)
    assert shapes == [(1, 1, 3), (4, 6, 3)]
    real = [(a.const.numpy().astype(np.int64) - a.quant.zero_point.reshape(-1)[0]) for a in alphas]
    assert any((r < 0).any() for r in real) and any((r > 0).any() for r in real)


@pytest.mark.parametrize("op", ["RSQRT", "SQRT"])
def test_negative_input_refused_as_litert_does(op: str, tmp_path: Path) -> None:
    """RSQRT/SQRT fed the graph input directly (not |x|): negative values are an error in
    LiteRT; the interpreter says so in one line, on every run (no cached table skips the check)."""
    model = gw.load(get_model(FAMILY, "unary_int8").path)
    node = next(n for n in model.graph if n.op == op)
    node.replace_input(0, model.graph.inputs[0])
    path = tmp_path / f"{op.lower()}_of_x.tflite"
    gw.save(model, path)
    name = model.graph.inputs[0].name
    shape = tuple(model.graph.inputs[0].shape)
    interp = Interpreter(path)
    positive = {name: np.full(shape, 127, np.int8)}
    interp.run(positive)
    negative = {name: np.full(shape, -128, np.int8)}
    for _ in range(2):
        with pytest.raises(VerificationError, match=f"operator {op} .*only defined for") as caught:
            interp.run(negative)
        assert "\n" not in str(caught.value)
    with pytest.raises(VerificationError):
        execute(path, negative, Job(backend="litert-ref"))


@pytest.mark.parametrize(("name", "op", "quant", "message"), [
    ("unary_int16x8", "EXP", (None, 5), r"operator EXP .*zero point 5; LiteRT's 16x8 kernel requires 0"),
    ("unary_int8", "L2_NORMALIZATION", (0.01, 0), r"operator L2_NORMALIZATION .*requires 0.0078125 and 0"),
    ("unary_int8", "LOG_SOFTMAX", (0.0625, 0), r"operator LOG_SOFTMAX .*requires 0.0625 and 127"),
])
def test_output_quantization_the_kernel_cannot_take_refused(name: str, op: str, quant: tuple[float | None, int],
                                                              message: str, tmp_path: Path) -> None:
    """An output quantized otherwise than LiteRT's kernel requires: one line when the interpreter is built."""
    model = gw.load(get_model(FAMILY, name).path)
    out = next(n for n in model.graph if n.op == op).outputs[0]
    assert out.quant is not None
    scale = out.quant.scale if quant[0] is None else np.array([quant[0]], np.float32)
    out.quant = QuantParams(scale, np.array([quant[1]], np.int64))
    path = tmp_path / "edited.tflite"
    gw.save(model, path)
    with pytest.raises(VerificationError, match=message) as caught:
        Interpreter(path)
    assert "\n" not in str(caught.value)
