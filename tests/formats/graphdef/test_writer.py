"""Writing edited IR graphs as GraphDefs: names, encoders, materialized inputs, refusals, scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import attr_value_pb2, graph_pb2, types_pb2, versions_pb2

from graphwright import formats
from graphwright.errors import ModelSaveError
from graphwright.formats import graphdef
from graphwright.formats.graphdef.attrs import SourcedAttr, attr_to_proto
from graphwright.ir import Attr, AttrKind, DType, FuncRef, Graph, Model, Node, Tensor, Value
from tests.formats.graphdef.test_roundtrip import (
    every_attr_graphdef,
    executable_graphdef,
    expected_executable,
    run_tf,
)

D = types_pb2


def load_proto(tmp_path: Path, gd: graph_pb2.GraphDef, name: str = "in.pb") -> Model:
    path = tmp_path / name
    path.write_bytes(gd.SerializeToString(deterministic=True))
    return formats.load(path)


def written(model: Model) -> graph_pb2.GraphDef:
    return graph_pb2.GraphDef.FromString(graphdef.serialize(model, text=False))


def by_name(gd: graph_pb2.GraphDef) -> dict[str, object]:
    return {n.name: n for n in gd.node}


def tf_model(*nodes: Node) -> Model:
    graph = Graph("tf")
    for node in nodes:
        graph.append(node)
    return Model(graph, "graphdef")


def const(name: str, array: np.ndarray) -> Node:
    t = Tensor.from_numpy(array)
    node = Node("Const", dialect="tf", name=name,
                attrs={"dtype": Attr.dtype(t.dtype), "value": Attr.tensor(t)})
    return node


# ---------------------------------------------------------------------------------------------
@pytest.mark.tf
def test_edited_graph_runs_in_tensorflow(tmp_path: Path) -> None:
    model = load_proto(tmp_path, executable_graphdef())
    nodes = {n.name: n for n in model.graph}
    out = nodes["out"]
    two = const("two", np.array(2.0, np.float32))
    double = Node("Mul", [out.input(0), two.output], dialect="tf", name="double",
                  attrs={"T": Attr.dtype(DType.FLOAT32)})
    model.graph.insert_before(out, [two, double])
    out.replace_input(0, double.output)
    path = tmp_path / "edited.pb"
    formats.save(model, path)
    x = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)
    (got,) = run_tf(path.read_bytes(), {"x": x}, ["out"])
    np.testing.assert_allclose(got, 2 * expected_executable(x), rtol=1e-6)
    gd = graph_pb2.GraphDef.FromString(path.read_bytes())
    order = [n.name for n in gd.node]
    assert order.index("two") < order.index("double") < order.index("out")  # IR order kept
    assert list(by_name(gd)["out"].input) == ["double", "^noop"]  # data first, then control


def test_duplicate_and_invalid_names_are_made_unique(tmp_path: Path) -> None:
    a1 = const("a", np.float32(1))
    a2 = Node("Neg", [a1.output], dialect="tf", name="a", attrs={"T": Attr.dtype(DType.FLOAT32)})
    a3 = Node("Neg", [a2.output], dialect="tf", name="a_1")
    anon = Node("Relu", [a3.output], dialect="tf", name="")
    colon = Node("Relu", [anon.output], dialect="tf", name="bad:name", control_inputs=[a2])
    model = tf_model(a1, a2, a3, anon, colon)
    gd = written(model)
    assert [n.name for n in gd.node] == ["a", "a_1", "a_1_1", "Relu", "bad_name"]
    assert [list(n.input) for n in gd.node] == [[], ["a"], ["a_1"], ["a_1_1"], ["Relu", "^a_1"]]
    assert [n.name for n in model.graph] == ["a", "a", "a_1", "", "bad:name"]  # IR untouched
    reread = load_proto(tmp_path, gd)
    assert len(reread.graph) == 5


@pytest.mark.tf
def test_producerless_inputs_and_initializers_become_nodes() -> None:
    graph = Graph("tf")
    x = Value("x:0", DType.FLOAT32, (None, 3))
    w = Value("w", const=Tensor.from_numpy(np.array([1.0, -2.0, 0.5], np.float32)))
    graph.set_inputs([x])
    graph.add_initializer(w)
    mul = graph.append(Node("Mul", [x, w], dialect="tf", name="y", attrs={"T": Attr.dtype(DType.FLOAT32)}))
    graph.set_outputs([mul.output])
    gd = written(Model(graph, "graphdef"))
    nodes = by_name(gd)
    assert [n.name for n in gd.node] == ["x", "w", "y"]
    assert nodes["x"].op == "Placeholder" and nodes["w"].op == "Const"
    assert [d.size for d in nodes["x"].attr["shape"].shape.dim] == [-1, 3]
    other = Value("y:0", DType.INT32, ())  # its name is taken by node 'y': the real node keeps it
    graph.set_inputs([x, other])
    assert [n.name for n in written(Model(graph, "graphdef")).node] == ["x", "y_1", "w", "y"]
    graph.set_inputs([x])
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = run_tf(gd.SerializeToString(), {"x": feed}, ["y"])
    np.testing.assert_array_equal(got, feed * np.array([1.0, -2.0, 0.5], np.float32))


@pytest.mark.tf
def test_new_constants_of_many_dtypes_run_in_tensorflow() -> None:
    arrays = [
        np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5, -2.0], np.float64),
        np.array([1, -2, 3], np.int8), np.array([200, 3], np.uint8), np.array([1 << 40], np.int64),
        np.array([True, False]), np.array([0.5, 2.0], np.float16), np.array([7], np.uint32),
        np.array(3, np.int32), np.zeros((0, 2), np.float32), np.array([1 + 2j], np.complex64),
    ]
    nodes, fetches = [], []
    for i, array in enumerate(arrays):
        c = const(f"c{i}", array)
        ident = Node("Identity", [c.output], dialect="tf", name=f"id{i}",
                     attrs={"T": Attr.dtype(DType.from_numpy(array.dtype))})
        nodes += [c, ident]
        fetches.append(f"id{i}")
    strings = Tensor.from_numpy(np.array([b"ab", b""], dtype=object), dtype=DType.STRING)
    nodes.append(Node("Const", dialect="tf", name="s", attrs={"dtype": Attr.dtype(DType.STRING),
                                                               "value": Attr.tensor(strings)}))
    results = run_tf(graphdef.serialize(tf_model(*nodes)), {}, fetches + ["s"])
    for array, got in zip(arrays, results):
        assert got.dtype == array.dtype
        np.testing.assert_array_equal(got, array)
    assert results[-1].tolist() == [b"ab", b""]


def test_plain_attrs_encode_like_the_originals(tmp_path: Path) -> None:
    """Re-encoding every non-tensor attr from its IR value gives back the file's AttrValue."""
    model = load_proto(tmp_path, every_attr_graphdef())
    checked = 0
    for node in model.graph:
        refs = node.meta.get("graphdef.ref_dtypes", {})
        for key, attr in node.attrs.items():
            if attr.kind in (AttrKind.TENSOR, AttrKind.TENSORS) or key == "named_dim":
                continue  # tensors re-encode as tensor_content; dim names are not in the IR
            assert isinstance(attr, SourcedAttr)
            fresh = attr_to_proto(Attr(attr.kind, attr.value), refs.get(key))
            assert fresh == attr.source, (node.name, key)
            checked += 1
    assert checked > 25


def test_new_attrs_of_every_kind_encode() -> None:
    t = Tensor.from_numpy(np.array([1, 2], np.int32))
    attrs = {
        "s": Attr.string("txt"), "ss": Attr.strings(["a", b"b"]), "f": Attr.float(0.25),
        "shape": Attr.shape((None, "batch", 3)), "unknown": Attr.shape(None),
        "shapes": Attr(AttrKind.SHAPES, ((1,), None)), "fn": Attr.func(FuncRef("F", {"n": Attr.int(2)})),
        "fns": Attr(AttrKind.FUNCS, (FuncRef("G"),)), "empty": Attr(AttrKind.STRINGS, ()),
        "types": Attr(AttrKind.DTYPES, (DType.QINT8, DType.FLOAT16)), "ts": Attr(AttrKind.TENSORS, (t,)),
        "bools": Attr(AttrKind.BOOLS, (True,)), "opaque": Attr(AttrKind.OPAQUE, attr_value_pb2.AttrValue(placeholder="T")),
    }
    gd = written(tf_model(Node("Custom", dialect="tf", name="n", attrs=attrs)))
    a = gd.node[0].attr
    assert a["s"].s == b"txt" and list(a["ss"].list.s) == [b"a", b"b"] and a["f"].f == 0.25
    assert [(d.size, d.name) for d in a["shape"].shape.dim] == [(-1, ""), (-1, "batch"), (3, "")]
    assert a["unknown"].shape.unknown_rank
    assert a["shapes"].list.shape[1].unknown_rank and a["shapes"].list.shape[0].dim[0].size == 1
    assert a["fn"].func.name == "F" and a["fn"].func.attr["n"].i == 2 and a["fns"].list.func[0].name == "G"
    assert a["empty"].HasField("list") and not a["empty"].list.s
    assert list(a["types"].list.type) == [D.DT_QINT8, D.DT_HALF]
    assert a["ts"].list.tensor[0].tensor_content == np.array([1, 2], np.int32).tobytes()
    assert list(a["bools"].list.b) == [True] and a["opaque"].placeholder == "T"


def test_ref_types_survive_reencoding(tmp_path: Path) -> None:
    model = load_proto(tmp_path, every_attr_graphdef())
    node = next(n for n in model.graph if n.name == "all")
    node.attrs["type_ref"] = Attr.dtype(DType.INT32)  # a transform retypes it: still a ref
    out = by_name(written(model))["all"]
    assert out.attr["type_ref"].type == D.DT_INT32_REF


def test_stale_input_text_is_not_reused(tmp_path: Path) -> None:
    model = load_proto(tmp_path, every_attr_graphdef())
    nodes = {n.name: n for n in model.graph}
    a = nodes["all"]
    assert by_name(written(model))["all"].input[0] == "c:0"  # unchanged: spelled as in the file
    a.remove_control_input(nodes["x"])
    assert list(by_name(written(model))["all"].input) == ["c", "x", "split:1", "^p"]
    model2 = load_proto(tmp_path, every_attr_graphdef())
    c2 = next(n for n in model2.graph if n.name == "c")
    c2.name = "renamed"
    assert by_name(written(model2))["all"].input[0] == "renamed"


def test_model_meta_is_written_back_and_can_change(tmp_path: Path) -> None:
    model = load_proto(tmp_path, every_attr_graphdef())
    del model.meta["graphdef.library"]
    model.meta["graphdef.versions"] = versions_pb2.VersionDef(producer=27)
    gd = written(model)
    assert not gd.HasField("library") and gd.versions.producer == 27 and gd.version == 17
    model.meta["graphdef.versions"] = "not a proto"
    with pytest.raises(ModelSaveError, match=r"graphdef\.versions"):
        graphdef.serialize(model)


@pytest.mark.tf
def test_versions_from_tensorflow_protos_are_accepted(tmp_path: Path) -> None:
    tf_versions = pytest.importorskip("tensorflow.core.framework.versions_pb2")
    model = load_proto(tmp_path, every_attr_graphdef())
    model.meta["graphdef.versions"] = tf_versions.VersionDef(producer=99, min_consumer=1)
    assert written(model).versions.producer == 99


def test_unwritable_graphs_raise_model_save_error(tmp_path: Path) -> None:
    c = const("c", np.float32(1))
    onnx_node = Node("Relu", [c.output], dialect="onnx", name="r")
    with pytest.raises(ModelSaveError, match="'onnx'-dialect"):
        graphdef.serialize(tf_model(c, onnx_node))
    with pytest.raises(ModelSaveError, match="omitted"):
        graphdef.serialize(tf_model(Node("AddV2", [None], dialect="tf", name="n")))
    c2 = const("c2", np.float32(1))
    user = Node("Neg", [c2.output], dialect="tf", name="neg")
    model = tf_model(c2, user)
    model.graph.remove(c2, force=True)
    with pytest.raises(ModelSaveError, match=r"'neg'.*not in the graph"):
        graphdef.serialize(model)
    loose = Node("Neg", [Value("nowhere")], dialect="tf", name="loose")
    with pytest.raises(ModelSaveError, match=r"nothing|no node"):
        graphdef.serialize(tf_model(loose))
    bad_attrs = [Attr(AttrKind.GRAPH, Graph("tf")), Attr(AttrKind.OPAQUE, object()),
                 Attr.tensor(Tensor(DType.BFLOAT16, (1,), loader=lambda: np.zeros(1))),
                 Attr(AttrKind.INT, 1 << 70)]
    for attr in bad_attrs:
        with pytest.raises(ModelSaveError, match="attribute 'a'"):
            graphdef.serialize(tf_model(Node("X", dialect="tf", name="x", attrs={"a": attr})))
    with pytest.raises(ModelSaveError, match="dialect"):
        graphdef.serialize(Model(Graph("onnx"), "graphdef"))
    extra = tf_model(const("k", np.float32(0)))
    extra.subgraphs.append(Graph("tf"))
    with pytest.raises(ModelSaveError, match="single graph"):
        graphdef.serialize(extra)


def test_failed_save_leaves_the_destination_untouched(tmp_path: Path) -> None:
    dest = tmp_path / "model.pb"
    dest.write_bytes(b"previous content")
    model = tf_model(const("a", np.float32(1)), Node("Relu", [None], dialect="tf", name="broken"))
    with pytest.raises(ModelSaveError):
        formats.save(model, dest)
    assert dest.read_bytes() == b"previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pb"]  # no temp file left
    with pytest.raises(ModelSaveError, match="does not exist"):
        formats.save(tf_model(const("a", np.float32(1))), tmp_path / "missing" / "m.pb")


def test_graphs_over_the_protobuf_limit_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphwright.formats.graphdef import writer

    monkeypatch.setattr(writer, "MAX_PROTO_BYTES", 1000)  # stands in for 2 GiB
    model = tf_model(const("big", np.zeros(300, np.float32)))
    with pytest.raises(ModelSaveError, match="exceed 1000 bytes"):
        formats.save(model, tmp_path / "big.pb")
    assert not list(tmp_path.iterdir())


def test_200k_node_graph_round_trips_without_recursion(tmp_path: Path) -> None:
    gd = graph_pb2.GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = D.DT_FLOAT
    prev = "x"
    for i in range(200_000):
        node = gd.node.add(name=f"n{i}", op="Relu", input=[prev])
        node.attr["T"].type = D.DT_FLOAT
        prev = node.name
    gd.node.add(name="done", op="NoOp", input=[f"^n{i}" for i in range(0, 200_000, 1000)])
    data = gd.SerializeToString(deterministic=True)
    path = tmp_path / "big.pb"
    path.write_bytes(data)
    model = formats.load(path)
    assert len(model.graph) == 200_002
    last = next(reversed(model.graph))
    assert len(last.control_inputs) == 200
    out = tmp_path / "big_out.pb"
    formats.save(model, out)
    assert out.read_bytes() == data
