"""The interpreter's prepare step: models that load but that no kernel can run are refused
when the Interpreter is built, in one line naming the operator (issue 10 item 7)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright import formats
from graphwright.errors import VerificationError
from graphwright.ir import Attr, Model, Node, QuantParams, Tensor
from graphwright.runtime.feeds import random_feeds
from graphwright.runtime.reference import Interpreter
from graphwright.runtime.reference.prepare import MAX_TENSOR_BYTES

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TFLITE = EXAMPLES / "small_cnn.tflite"


def _node(model: Model, op: str, index: int = 0) -> Node:
    return [n for n in model.graph if n.op == op][index]


def _scale(value: gw.Value, scale: float) -> None:
    q = value.quant
    value.quant = QuantParams(np.full_like(q.scale, scale), q.zero_point, q.axis)


def _const(value: gw.Value, array: np.ndarray) -> None:
    value.const = Tensor.from_numpy(array, value.const.dtype)


def _swap_add_input(m: Model) -> None:
    add = _node(m, "ADD")
    add.replace_input(1, _node(m, "CONV_2D").outputs[0])  # [1, 16, 16, 16] with [1, 16, 16, 24]


def _hard_swish(m: Model) -> None:
    node = _node(m, "SOFTMAX")
    node.op = "HARD_SWISH"
    _scale(node.inputs[0], 1.0)  # 64x the output scale or more: the multiplier would need a left shift
    _scale(node.outputs[0], 1e-3)


def _resize(m: Model) -> None:
    node = _node(m, "MEAN")
    node.op = "RESIZE_BILINEAR"
    node.attrs = {}
    _const(node.inputs[1], np.array([1 << 20, 1 << 20], np.int32))


CASES: list[tuple[str, Callable[[Model], None], str]] = [
    ("stride 0", lambda m: _node(m, "CONV_2D").attrs.__setitem__("stride_h", Attr.int(0)),
     r"CONV_2D .*: attribute stride_h is 0; it must be >= 1"),
    ("negative dilation", lambda m: _node(m, "DEPTHWISE_CONV_2D").attrs.__setitem__("dilation_w_factor",
                                                                                     Attr.int(-1)),
     "attribute dilation_w_factor is -1"),
    ("pool window 0", lambda m: _node(m, "AVERAGE_POOL_2D").attrs.__setitem__("filter_width", Attr.int(0)),
     "AVERAGE_POOL_2D .*filter_width is 0"),
    ("window larger than the input", lambda m: _node(m, "AVERAGE_POOL_2D").attrs.update(
        filter_width=Attr.int(40), padding=Attr.int(1)), "does not fit the 16x16 input with VALID padding"),
    ("zero output scale", lambda m: _scale(_node(m, "CONV_2D").outputs[0], 0.0),
     r"output 0 \(.*\) has quantization scale 0.0; an activation's scale must be a positive normal float"),
    ("NaN input scale", lambda m: _scale(_node(m, "CONV_2D").inputs[0], float("nan")),
     "CONV_2D .*: input 0 .* has quantization scale nan; scales must be finite and positive"),
    ("infinite weight scale", lambda m: _scale(_node(m, "FULLY_CONNECTED").inputs[1], float("inf")),
     "input 1 .* has quantization scale .*inf"),
    ("scale ratio overflows float32", lambda m: (_scale(_node(m, "ADD").inputs[0], 3e38),
                                                 _scale(_node(m, "ADD").outputs[0], 1e-30)),
     r"input 0 scale 3.* over output scale 1.* overflows float32"),
    ("zero point out of range", lambda m: _node(m, "SOFTMAX").outputs[0].__setattr__(
        "quant", QuantParams([0.00390625], [300], 0)), "zero point 300 outside the int8 range"),
    ("operands that do not broadcast", _swap_add_input,
     r"ADD .*: inputs of shapes \[1, 16, 16, 24\] and \[1, 16, 16, 16\] do not broadcast together"),
    ("mean axis out of range", lambda m: _const(_node(m, "MEAN").inputs[1], np.array([1, 7], np.int32)),
     r"axes \[1, 7\] do not fit a rank-4 input"),
    ("fully connected depth", lambda m: _node(m, "FULLY_CONNECTED").inputs[1].__setattr__(
        "const", Tensor.from_numpy(np.zeros((10, 0), np.int8))), r"weights \[10, 0\] have no input depth"),
    ("hard swish shift", _hard_swish, "multiplier would need a left shift"),
    ("huge output", _resize, rf"output of shape \[1, 1048576, 1048576, 32\] would take 1048576.0 GiB, over the reference interpreter's limit of "
                             rf"{MAX_TENSOR_BYTES >> 30} GiB"),
]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_prepare_refuses_what_no_kernel_can_run(case: int) -> None:
    _, mutate, message = CASES[case]
    model = gw.load(TFLITE)
    mutate(model)
    for jit in (False, True):
        with pytest.raises(VerificationError, match=message) as info:
            Interpreter(model, jit=jit)  # before any run: nothing is allocated, no kernel is called
        assert "\n" not in str(info.value) and ("the model is invalid" in str(info.value) or "GiB" in str(info.value))


def test_valid_model_runs_unchanged() -> None:
    interp = Interpreter(TFLITE, jit=False)
    out = interp.run(random_feeds(interp.inputs, seed=0))
    assert next(iter(out.values())).shape == (1, 10)


def test_new_input_shapes_are_checked_before_the_run() -> None:
    """A feed shape the file did not declare: checked once for it, before any kernel runs."""
    model = gw.load(TFLITE)
    x = model.graph.inputs[0]
    x.shape = (None, 32, 32, 3)  # a dynamic batch
    interp = Interpreter(model, jit=False)
    batch = np.zeros((2, 32, 32, 3), np.int8)
    assert next(iter(interp.run({x.name: batch}).values())).shape == (2, 10)
    huge = np.broadcast_to(np.zeros((), np.int8), (1 << 22, 32, 32, 3))  # 12 GiB of int64 temporaries
    with pytest.raises(VerificationError, match="GiB, over the reference interpreter's limit"):
        interp.run({x.name: huge})


def test_runtime_values_that_do_not_fit_are_one_line_errors() -> None:
    """Sizes computed at run time (a PAD whose paddings are fed) are bounded by the kernel itself."""
    model = gw.load(TFLITE)
    pad = _node(model, "MEAN")
    pad.op = "PAD"
    pad.attrs = {}
    pads = gw.Value("pads", gw.DType.INT32, (4, 2))
    model.graph.set_inputs([*model.graph.inputs, pads])
    pad.replace_input(1, pads)
    interp = Interpreter(model, jit=False)  # the paddings are not known yet: nothing to refuse
    x = np.zeros((1, 32, 32, 3), np.int8)
    fine = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
    padded = interp.run({interp.inputs[0].name: x, "pads": fine}, outputs=[pad.outputs[0].name])
    assert padded[pad.outputs[0].name].shape == (1, 10, 10, 32)
    huge = np.array([[0, 0], [0, 1 << 30], [0, 0], [0, 0]], np.int32)
    with pytest.raises(VerificationError, match=r"PAD .*: its output of shape \[1, 1073741832, 8, 32\] would take"):
        interp.run({interp.inputs[0].name: x, "pads": huge})


def test_cli_run_exits_2_with_one_line(tmp_path: Path) -> None:
    model = gw.load(TFLITE)
    _node(model, "CONV_2D").attrs["stride_w"] = Attr.int(0)
    path = tmp_path / "stride0.tflite"
    formats.save(model, path)
    before = path.read_bytes()
    result = subprocess.run([sys.executable, "-m", "graphwright.cli.main", "run", str(path), "--engine", "reference"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "attribute stride_w is 0" in lines[0] and "Traceback" not in result.stderr
    assert path.read_bytes() == before


def test_constants_of_types_no_kernel_computes_with_are_refused() -> None:
    model = gw.load(TFLITE)
    bias = _node(model, "CONV_2D").inputs[2]
    bias.dtype = gw.DType.UNDEFINED  # a corrupt type code reads as undefined
    with pytest.raises(VerificationError, match=r"input 2 .* has type undefined, which no reference kernel computes"):
        Interpreter(model, jit=False)


def test_names_that_are_not_utf8_still_get_seeded_inputs() -> None:
    """TFLite names are read with surrogate escapes (labels, kept byte for byte); random inputs hash them."""
    model = gw.load(TFLITE)
    model.graph.inputs[0].name = "\udcff" + model.graph.inputs[0].name[1:]
    interp = Interpreter(model, jit=False)
    feeds = random_feeds(interp.inputs, seed=0)
    assert next(iter(interp.run(feeds).values())).shape == (1, 10)
