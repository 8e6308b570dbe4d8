"""Bad GraphDef files: every one is a one-line ModelLoadError naming the problem, never another exception."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import graph_pb2, types_pb2

from graphwright import formats
from graphwright.errors import ModelLoadError
from graphwright.formats.graphdef import parse_input_name

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.pb"


def graph(*nodes: tuple[str, str, list[str]]) -> bytes:
    gd = graph_pb2.GraphDef()
    for name, op, inputs in nodes:
        gd.node.add(name=name, op=op, input=inputs)
    return gd.SerializeToString()


def load_bytes(tmp_path: Path, data: bytes, name: str = "bad.pb", **kw: str) -> object:
    path = tmp_path / name
    path.write_bytes(data)
    return formats.load(path, **kw)


def expect_error(tmp_path: Path, data: bytes, pattern: str, **kw: str) -> str:
    with pytest.raises(ModelLoadError, match=pattern) as info:
        load_bytes(tmp_path, data, **kw)
    message = str(info.value)
    assert "\n" not in message  # one line
    return message


def small_valid() -> bytes:
    return graph(("x", "Placeholder", []), ("y", "Relu", ["x"]), ("z", "AddV2", ["y", "x"]))


def test_empty_file(tmp_path: Path) -> None:
    expect_error(tmp_path, b"", "empty")
    expect_error(tmp_path, b"", "empty", format="graphdef")


def test_random_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        data = bytes([0x0A]) + rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
        with pytest.raises(ModelLoadError):
            load_bytes(tmp_path, data, format="graphdef")


def test_truncated_files(tmp_path: Path) -> None:
    data = EXAMPLE.read_bytes() if EXAMPLE.exists() else small_valid()
    for cut in (1, 2, 7, len(data) // 3, len(data) // 2, len(data) - 1):
        with pytest.raises(ModelLoadError):
            load_bytes(tmp_path, data[:cut], format="graphdef")


def test_corrupted_files_only_raise_model_load_error(tmp_path: Path) -> None:
    data = bytearray(EXAMPLE.read_bytes() if EXAMPLE.exists() else small_valid())
    rng = np.random.default_rng(42)
    failures = 0
    for _ in range(150):
        corrupt = bytearray(data)
        for pos in rng.integers(0, len(corrupt), int(rng.integers(1, 6))):
            corrupt[pos] = int(rng.integers(0, 256))
        try:
            load_bytes(tmp_path, bytes(corrupt), format="graphdef")
        except ModelLoadError:
            failures += 1  # anything else propagates and fails the test
    assert failures > 0


def test_text_that_does_not_parse(tmp_path: Path) -> None:
    message = expect_error(tmp_path, b'node {\n  name: "a"\n  op: \n}\n', "not a valid text GraphDef", name="bad.pbtxt")
    assert "4:" in message or "3:" in message  # the position of the error
    expect_error(tmp_path, b"node { name: 'a' op: 'X' bogus_field: 1 }", "bogus_field")
    expect_error(tmp_path, b"node { " * 5000, "not a valid text GraphDef")


@pytest.mark.parametrize("depth", [45, 3000])
def test_text_nested_too_deep(tmp_path: Path, depth: int) -> None:
    level = "func { name: 'f' attr { key: 'a' value { "
    text = "node { name: 'n' op: 'X' attr { key: 'a' value { " + level * depth + "i: 1" + " } } }" * depth + " } } }"
    expect_error(tmp_path, text.encode(), "deeper than protobuf allows|nesting too deep", name="deep.pbtxt")


def test_dangling_input(tmp_path: Path) -> None:
    msg = expect_error(tmp_path, graph(("a", "Relu", ["ghost"])), "does not exist")
    assert "'a'" in msg and "'ghost'" in msg
    expect_error(tmp_path, graph(("a", "NoOp", ["^ghost"])), "node 'a'.*'ghost'")


def test_duplicate_node_names(tmp_path: Path) -> None:
    expect_error(tmp_path, graph(("x", "Placeholder", []), ("x", "Relu", [])), "node 'x'.*duplicate")


@pytest.mark.parametrize("text", ["x:y", "x:", "x:-1", "x:1.5", "^x:1", ":1", "^", "", "x:99999999", "x:1:2"])
def test_bad_ports(tmp_path: Path, text: str) -> None:
    msg = expect_error(tmp_path, graph(("x", "Placeholder", []), ("use", "Relu", [text])), "node 'use'")
    assert "bad" in msg or "does not exist" in msg
    with pytest.raises(ValueError):
        parse_input_name(text)


def test_cycles(tmp_path: Path) -> None:
    expect_error(tmp_path, graph(("a", "Relu", ["b"]), ("b", "Relu", ["a"])), "on a cycle")
    expect_error(tmp_path, graph(("self", "Relu", ["self"])), "node 'self'.*cycle")
    msg = expect_error(tmp_path, graph(("a", "Relu", ["x"]), ("b", "Relu", ["a", "^c"]), ("c", "NoOp", ["^b"]),
                                       ("x", "Placeholder", [])), "cycle")
    assert "'b'" in msg or "'c'" in msg  # a node on the cycle, not the upstream 'a'


def test_while_loop_back_edge_is_not_a_cycle(tmp_path: Path) -> None:
    data = graph(
        ("init", "Placeholder", []), ("merge", "Merge", ["enter", "next"]), ("enter", "Enter", ["init"]),
        ("body", "Relu", ["merge"]), ("next", "NextIteration", ["body"]),
    )
    model = load_bytes(tmp_path, data)
    assert len(model.graph) == 5  # type: ignore[attr-defined]


def test_bad_names_and_ops(tmp_path: Path) -> None:
    expect_error(tmp_path, graph(("", "Relu", [])), "empty name")
    expect_error(tmp_path, graph(("a:1", "Relu", [])), "contains ':'")
    expect_error(tmp_path, graph(("a", "", [])), "no op")


def test_graph_without_nodes(tmp_path: Path) -> None:
    gd = graph_pb2.GraphDef()
    gd.versions.producer = 3
    expect_error(tmp_path, gd.SerializeToString(), "no nodes")


def test_malformed_tensors_name_the_node(tmp_path: Path) -> None:
    def const(**fields: object) -> bytes:
        gd = graph_pb2.GraphDef()
        nd = gd.node.add(name="w", op="Const")
        tp = nd.attr["value"].tensor
        tp.dtype = types_pb2.DT_FLOAT
        for d in fields.pop("dims", (2, 2)):  # type: ignore[attr-defined]
            tp.tensor_shape.dim.add(size=d)
        for key, value in fields.items():
            if key == "tensor_content":
                tp.tensor_content = value  # type: ignore[assignment]
            else:
                getattr(tp, key).extend(value)  # type: ignore[arg-type]
        return gd.SerializeToString()

    expect_error(tmp_path, const(tensor_content=b"\0" * 15), "node 'w' \\(Const\\): attribute 'value'.*16 bytes")
    expect_error(tmp_path, const(float_val=[1.0] * 5), "node 'w'.*stores 5 values")
    expect_error(tmp_path, const(dims=(-3, 2)), "node 'w'.*negative")
    expect_error(tmp_path, const(dims=(1 << 40, 1 << 20)), "node 'w'.*2\\*\\*40")


def test_valid_graph_still_loads(tmp_path: Path) -> None:
    model = load_bytes(tmp_path, small_valid())
    assert [n.name for n in model.graph] == ["x", "y", "z"]  # type: ignore[attr-defined]
