"""Models that parse but are malformed, through the commands that read them (issue 10 items 5, 6, 8):
exit 2, one line on stderr saying what is wrong, no traceback, the input unchanged."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tensorboard.compat.proto import graph_pb2

from graphwright.cli.main import main


def _cli(*args: object) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, [line for line in err.getvalue().splitlines() if line.strip()]


def _onnx(initializer: TensorProto | None = None, node_name: str = "n") -> bytes:
    inits = [initializer] if initializer is not None else []
    inputs = ["x", initializer.name] if initializer is not None else ["x", "x"]
    graph = helper.make_graph([helper.make_node("Add", inputs, ["y"], name=node_name)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _graphdef_bad_port() -> bytes:
    gd = graph_pb2.GraphDef()
    gd.node.add(name="input", op="Placeholder").attr["dtype"].type = 1
    gd.node.add(name="r", op="Relu", input=["input"])
    gd.node.add(name="Identity", op="AddV2", input=["r:7", "input"])
    return gd.SerializeToString()


CASES = {
    "name not UTF-8": (".onnx", _onnx(node_name="BADNAME").replace(b"BADNAME", b"\xffADNAME"),
                       "node 0 name b'\\xffADNAME' is not valid UTF-8"),
    "int64 overflow": (".onnx", _onnx(TensorProto(name="w", data_type=1, dims=[2**32, 2**32])),
                       "tensor 'w': shape [4294967296, 4294967296] is larger than any real tensor"),
    "short raw_data": (".onnx", _onnx(TensorProto(name="w", data_type=1, dims=[2], raw_data=b"\0" * 4)),
                       "raw_data holds 4 bytes but shape [2] of float32 needs 8"),
    "graphdef port": (".pb", _graphdef_bad_port(), "input 'r:7' reads output 7 of node 'r', but Relu has 1 output"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_model_is_one_line_exit_2_everywhere(tmp_path: Path, case: str) -> None:
    suffix, data, needle = CASES[case]
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(data)
    out = tmp_path / f"out{suffix}"
    commands = [["summarize", path], ["transform", path, out, "--transforms", "round_weights"]]
    if suffix == ".onnx":
        commands.append(["simplify", path, out])
    else:
        commands[1][3:3] = ["--inputs", "input", "--outputs", "Identity"]
    for command in commands:
        rc, lines = _cli(*command)
        assert rc == 2 and len(lines) == 1, (command, lines)
        assert needle in lines[0] and str(path) in lines[0], lines[0]
        assert path.read_bytes() == data and not out.exists()
    if suffix == ".onnx":
        onnx.load_from_string(data)  # the file itself parses: it is the content that is refused
