"""Bad input gives one-line ModelLoadError (never another exception); saves are atomic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphwright import formats
from graphwright.errors import ModelLoadError, ModelSaveError
from graphwright.formats.onnx import save
from graphwright.ir import Graph, Model, Node, Tensor, Value
from tests.formats.onnx import onnx_cases as cases


def _load_error(tmp_path: Path, data: bytes, *, fmt: str | None = None) -> str:
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as info:
        formats.load(path, format=fmt)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_empty_and_random_files(tmp_path: Path) -> None:
    assert "empty" in _load_error(tmp_path, b"")
    rng = np.random.default_rng(0)
    for _ in range(50):
        data = bytearray(rng.integers(0, 256, int(rng.integers(1, 2000)), dtype=np.uint8).tobytes())
        data[0] = 0x08  # looks like an ONNX ir_version field, so the ONNX reader gets it
        _load_error(tmp_path, bytes(data))


def test_truncated_model(tmp_path: Path) -> None:
    data = cases.control_flow().SerializeToString()
    for cut in (1, 2, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        message = _load_error(tmp_path, data[:cut])
        assert "bad.onnx" in message


def test_valid_protobuf_that_is_not_a_model(tmp_path: Path) -> None:
    tensor = helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0])  # starts with 0x08 (dims)
    assert "ONNX model" in _load_error(tmp_path, tensor.SerializeToString())
    header_only = onnx.ModelProto(ir_version=8, producer_name="x").SerializeToString()
    assert "not an ONNX model (no graph)" in _load_error(tmp_path, header_only)
    graph = cases.conv_net().graph.SerializeToString()
    assert "ONNX" in _load_error(tmp_path, graph, fmt="onnx")


def _then_branch(model: onnx.ModelProto) -> onnx.GraphProto:
    return next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")


def _mutated(mutate) -> bytes:  # type: ignore[no-untyped-def]
    proto = cases.control_flow()
    mutate(proto)
    return proto.SerializeToString()


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda m: m.graph.node[3].input.__setitem__(0, "ghost"), "'ghost', which no node"),
        (lambda m: _then_branch(m).node[0].input.__setitem__(1, "ghost"), "graph 'then_branch': node 'then_mm'"),
        (lambda m: m.graph.node[3].output.__setitem__(0, "h"), "already defined by node 'branch'"),
        (lambda m: m.graph.node[0].output.__setitem__(0, "w"), "already defined by an initializer"),
        (lambda m: m.graph.node[0].output.__setitem__(0, "x"), "already defined by a graph input"),
        (lambda m: m.graph.input.append(m.graph.input[0]), "declared twice"),
        (lambda m: m.graph.initializer.append(m.graph.initializer[0]), "initializer 'w' is defined twice"),
        (lambda m: m.graph.output[0].__setattr__("name", "nowhere"), "graph output 'nowhere'"),
        (lambda m: m.graph.node[2].attribute.extend([helper.make_attribute("domain_x", 1),
                                                     helper.make_attribute("domain_x", 2)]),
         "attribute 'domain_x' twice"),
    ],
)
def test_structural_errors(tmp_path: Path, mutate, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert expected in _load_error(tmp_path, _mutated(mutate))


def test_cycles(tmp_path: Path) -> None:
    two = cases.unsorted()
    two.graph.node[2].input[0] = "y"  # first <- last <- middle <- first
    assert "cycle" in _load_error(tmp_path, two.SerializeToString())
    self_loop = cases.unsorted()
    self_loop.graph.node[1].input[0] = "b"  # middle reads its own output
    assert "cycle" in _load_error(tmp_path, self_loop.SerializeToString())
    # a cycle through a subgraph capture: the If's branch reads a value computed from the If's output
    flow = cases.control_flow()
    _then_branch(flow).node[0].input[0] = "clipped"  # then-branch reads Clip(h), h is the If's output
    assert "cycle" in _load_error(tmp_path, flow.SerializeToString())


def test_unsafe_external_data_via_facade(tmp_path: Path) -> None:
    proto = cases.big_weights()
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../../etc/passwd")
    message = _load_error(tmp_path, proto.SerializeToString())
    assert "'w1'" in message and "'../../../etc/passwd'" in message


def test_fuzzed_models_only_raise_model_load_error(tmp_path: Path) -> None:
    data = cases.control_flow().SerializeToString()
    rng = np.random.default_rng(1)
    loaded = 0
    for _ in range(300):
        mutated = bytearray(data)
        for pos in rng.integers(1, len(data), int(rng.integers(1, 4))):
            mutated[pos] = int(rng.integers(0, 256))
        path = tmp_path / "fuzz.onnx"
        path.write_bytes(bytes(mutated))
        try:
            model = formats.load(path)
        except ModelLoadError:
            continue
        loaded += 1
        for value in model.graph.initializers:  # decoding is lazy: it must fail cleanly too
            try:
                value.const.numpy()
            except ModelLoadError:
                pass
    assert loaded > 0  # some mutations only touch names or values


def test_corrupt_raw_data_is_refused_at_load(tmp_path: Path) -> None:
    proto = cases.conv_net()
    proto.graph.initializer[0].raw_data = b"\x00" * 7
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"'conv\.w': raw_data holds 7 bytes but shape \[8, 3, 3, 3\]"):
        formats.load(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.onnx"]


# -- atomic saves ------------------------------------------------------------------------

def _failing_model() -> Model:
    g = Graph("onnx", "failing")
    x = Value("x", None, (4,))
    g.set_inputs([x])

    def explode() -> np.ndarray:
        raise RuntimeError("disk on fire")

    w = g.add_initializer(Value("w", const=Tensor.from_numpy(np.ones(4, np.float32))))
    bad = g.add_initializer(Value("bad", const=Tensor(w.const.dtype, (4,), loader=explode)))
    a = g.append(Node("Add", [x, w], dialect="onnx", name="a"))
    b = g.append(Node("Add", [a.output, bad], dialect="onnx", name="b"))
    g.set_outputs([b.output])
    return Model(g, "onnx")


@pytest.mark.parametrize("external", [False, True])
def test_failed_save_leaves_old_files_and_no_temp_file(tmp_path: Path, external: bool) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old model")
    data = tmp_path / "model.onnx.data"
    data.write_bytes(b"old data")
    with pytest.raises(ModelSaveError, match=r"'bad'.*disk on fire"):
        save(_failing_model(), target, external_data=external, external_min_bytes=1)
    assert target.read_bytes() == b"old model" and data.read_bytes() == b"old data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]


def test_save_errors_are_model_save_errors(tmp_path: Path) -> None:
    model = formats.load(_write(tmp_path / "in.onnx", cases.conv_net()))
    with pytest.raises(ModelSaveError, match="does not exist"):
        save(model, tmp_path / "missing_dir" / "out.onnx")
    g = Graph("tf")
    node = g.append(Node("Identity", [], dialect="tf", name="i"))
    g.set_outputs([node.output])
    with pytest.raises(ModelSaveError, match="dialect 'tf'"):
        save(Model(g, "onnx"), tmp_path / "tf.onnx")
    with pytest.raises(ModelSaveError, match="graphdef"):
        save(Model(g, "graphdef"), tmp_path / "tf.onnx")
    first = next(iter(model.graph))
    first.replace_input(0, Value("dangling"))
    with pytest.raises(ModelSaveError, match="'dangling'"):
        save(model, tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def _write(path: Path, proto: onnx.ModelProto) -> Path:
    path.write_bytes(proto.SerializeToString())
    return path
