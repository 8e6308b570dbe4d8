"""GraphDef read -> IR -> write: structure, every attribute kind, losslessness, text form, TF execution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import (
    attr_value_pb2,
    full_type_pb2,
    function_pb2,
    graph_pb2,
    node_def_pb2,
    tensor_pb2,
    types_pb2,
)

from graphwright import formats
from graphwright.formats import graphdef
from graphwright.formats.graphdef.attrs import SourcedAttr
from graphwright.ir import Attr, AttrKind, DType, FuncRef, Tensor, check

D = types_pb2
UNKNOWN_FIELD = b"\xa0\x06\x05"  # field 100, varint 5: a field this proto version does not know


# ---------------------------------------------------------------------------------------------
# Hand-built graphs
# ---------------------------------------------------------------------------------------------
def add_node(gd: graph_pb2.GraphDef, name: str, op: str, inputs: list[str] = (), **attrs: object):  # type: ignore[assignment]
    nd = gd.node.add(name=name, op=op)
    nd.input.extend(inputs)
    for key, value in attrs.items():
        nd.attr[key].CopyFrom(value)  # type: ignore[arg-type]
    return nd


def av(**kw: object) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(**kw)  # type: ignore[arg-type]


def tensor(dtype: int, shape: tuple[int, ...], **fields: object) -> tensor_pb2.TensorProto:
    tp = tensor_pb2.TensorProto(dtype=dtype)
    for d in shape:
        tp.tensor_shape.dim.add(size=d)
    for key, value in fields.items():
        if key == "tensor_content":
            tp.tensor_content = value  # type: ignore[assignment]
        else:
            getattr(tp, key).extend(value)  # type: ignore[arg-type]
    return tp


def shape_av(dims: list[int] | None) -> attr_value_pb2.AttrValue:
    value = attr_value_pb2.AttrValue()
    value.shape.SetInParent()
    if dims is None:
        value.shape.unknown_rank = True
    for d in dims or []:
        value.shape.dim.add(size=d)
    return value


def add_one_library() -> function_pb2.FunctionDefLibrary:
    """A library with ``AddOne(x: float) -> x + 1``, callable through PartitionedCall."""
    lib = function_pb2.FunctionDefLibrary()
    fn = lib.function.add()
    fn.signature.name = "AddOne"
    fn.signature.input_arg.add(name="x", type=D.DT_FLOAT)
    fn.signature.output_arg.add(name="y", type=D.DT_FLOAT)
    one = fn.node_def.add(name="one", op="Const")
    one.attr["dtype"].type = D.DT_FLOAT
    one.attr["value"].tensor.CopyFrom(tensor(D.DT_FLOAT, (), float_val=[1.0]))
    add = fn.node_def.add(name="add", op="AddV2", input=["x", "one:output:0"])
    add.attr["T"].type = D.DT_FLOAT
    fn.ret["y"] = "add:z:0"
    lib.gradient.add(function_name="AddOne", gradient_func="AddOneGrad")
    return lib


def every_attr_graphdef(*, unknown_fields: bool = True) -> graph_pb2.GraphDef:
    """Every AttrValue kind, ports, control inputs, out-of-order nodes and every carried-through field."""
    gd = graph_pb2.GraphDef()
    # Consumer first: a GraphDef need not be sorted.
    user = add_node(gd, "user", "Custom", ["split:2", "split:1", "c", "^p", "^noop"])
    user.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    user.experimental_debug_info.original_node_names.extend(["orig_a", "orig_b"])
    user.experimental_type.type_id = full_type_pb2.TFT_PRODUCT
    add_node(gd, "c", "Const", dtype=av(type=D.DT_FLOAT),
             value=av(tensor=tensor(D.DT_FLOAT, (2, 3), float_val=[1.5, 2.5])))
    add_node(gd, "x", "Placeholder", dtype=av(type=D.DT_FLOAT), shape=shape_av(None))
    add_node(gd, "p", "Placeholder", dtype=av(type=D.DT_FLOAT), shape=shape_av([-1, 4]))
    add_node(gd, "split", "Split", ["axis", "x"], num_split=av(i=3), T=av(type=D.DT_FLOAT))
    add_node(gd, "axis", "Const", dtype=av(type=D.DT_INT32),
             value=av(tensor=tensor(D.DT_INT32, (), int_val=[1])))
    add_node(gd, "noop", "NoOp", ["^x"])
    func = attr_value_pb2.NameAttrList(name="AddOne")
    func.attr["T"].type = D.DT_FLOAT
    func.attr["inner"].func.name = "Nested"
    lists = {
        "list_s": av(list=attr_value_pb2.AttrValue.ListValue(s=[b"a", b"\xff"])),
        "list_i": av(list=attr_value_pb2.AttrValue.ListValue(i=[1, -2, 1 << 40])),
        "list_f": av(list=attr_value_pb2.AttrValue.ListValue(f=[0.5, -1.25])),
        "list_b": av(list=attr_value_pb2.AttrValue.ListValue(b=[True, False])),
        "list_type": av(list=attr_value_pb2.AttrValue.ListValue(type=[D.DT_FLOAT, D.DT_INT32_REF, D.DT_QUINT8])),
        "list_func": av(list=attr_value_pb2.AttrValue.ListValue(func=[func, attr_value_pb2.NameAttrList(name="G")])),
        "list_tensor": av(list=attr_value_pb2.AttrValue.ListValue(
            tensor=[tensor(D.DT_INT64, (3,), int64_val=[7]), tensor(D.DT_STRING, (2,), string_val=[b"s"])])),
    }
    shapes = attr_value_pb2.AttrValue()
    for dims in ([1, -1], None, []):
        s = shapes.list.shape.add()
        if dims is None:
            s.unknown_rank = True
        for d in dims or []:
            s.dim.add(size=d)
    named_dim = shape_av([2, -1])
    named_dim.shape.dim[1].name = "batch"
    empty_list = attr_value_pb2.AttrValue()
    empty_list.list.SetInParent()
    add_node(
        gd, "all", "Custom", ["c:0", "x", "split:1", "^p", "^p", "^x"],
        s=av(s=b"bytes\x00\xff"), i=av(i=-(1 << 62)), f=av(f=0.1), b=av(b=True),
        type=av(type=D.DT_BFLOAT16), type_ref=av(type=D.DT_FLOAT_REF), exotic_type=av(type=D.DT_INT2),
        shape=shape_av([1, -1, 3]), shape_unknown=shape_av(None), shape_scalar=shape_av([]),
        named_dim=named_dim, tensor=av(tensor=tensor(D.DT_HALF, (2, 2), half_val=[0x3C00])),
        func=av(func=func), list_shape=shapes, empty=empty_list, placeholder=av(placeholder="T"),
        unset=attr_value_pb2.AttrValue(),
        mixed=av(list=attr_value_pb2.AttrValue.ListValue(i=[1], s=[b"x"])), **lists,
    )
    unknown = UNKNOWN_FIELD if unknown_fields else b""
    odd = node_def_pb2.NodeDef.FromString(
        node_def_pb2.NodeDef(name="odd", op="Identity", input=["c"]).SerializeToString() + unknown
    )
    gd.node.add().CopyFrom(odd)
    gd.versions.producer = 1882
    gd.versions.min_consumer = 12
    gd.versions.bad_consumers.extend([3, 5])
    gd.version = 17
    gd.library.CopyFrom(add_one_library())
    gd.debug_info.files.append("model.py")
    return graph_pb2.GraphDef.FromString(gd.SerializeToString() + unknown)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------------------
# Structure and attributes
# ---------------------------------------------------------------------------------------------
def test_every_attr_kind_reads_into_the_ir(tmp_path: Path) -> None:
    model = formats.load(write(tmp_path, "g.pb", every_attr_graphdef().SerializeToString(deterministic=True)))
    g = model.graph
    assert model.format == "graphdef" and g.dialect == "tf"
    assert [n.name for n in g] == ["user", "c", "x", "p", "split", "axis", "noop", "all", "odd"]
    a = {n.name: n for n in g}["all"]
    kinds = {k: v.kind for k, v in a.attrs.items()}
    assert kinds == {
        "s": AttrKind.STRING, "i": AttrKind.INT, "f": AttrKind.FLOAT, "b": AttrKind.BOOL,
        "type": AttrKind.DTYPE, "type_ref": AttrKind.DTYPE, "exotic_type": AttrKind.OPAQUE,
        "shape": AttrKind.SHAPE, "shape_unknown": AttrKind.SHAPE, "shape_scalar": AttrKind.SHAPE,
        "named_dim": AttrKind.SHAPE, "tensor": AttrKind.TENSOR, "func": AttrKind.FUNC,
        "list_shape": AttrKind.SHAPES, "empty": AttrKind.INTS, "placeholder": AttrKind.OPAQUE,
        "unset": AttrKind.OPAQUE, "mixed": AttrKind.OPAQUE, "list_s": AttrKind.STRINGS,
        "list_i": AttrKind.INTS, "list_f": AttrKind.FLOATS, "list_b": AttrKind.BOOLS,
        "list_type": AttrKind.DTYPES, "list_func": AttrKind.FUNCS, "list_tensor": AttrKind.TENSORS,
    }
    assert list(a.attrs) == sorted(a.attrs)  # deterministic attribute order
    assert a.attr("s") == b"bytes\x00\xff" and a.attr("i") == -(1 << 62) and a.attr("b") is True
    assert a.attr("f") == pytest.approx(0.1, rel=1e-7)
    assert a.attr("type") is DType.BFLOAT16 and a.attr("type_ref") is DType.FLOAT32
    assert a.meta["graphdef.ref_dtypes"] == {"type_ref": (True,), "list_type": (False, True, False)}
    assert a.attr("shape") == (1, None, 3) and a.attr("shape_unknown") is None and a.attr("shape_scalar") == ()
    assert a.attr("list_shape") == ((1, None), None, ())
    assert a.attr("empty") == ()
    assert a.attr("list_type") == (DType.FLOAT32, DType.INT32, DType.QUINT8)
    assert a.attr("list_s") == (b"a", b"\xff") and a.attr("list_i") == (1, -2, 1 << 40)
    assert a.attr("list_b") == (True, False) and a.attr("list_f") == (0.5, -1.25)
    func = a.attr("func")
    assert isinstance(func, FuncRef) and func.name == "AddOne"
    assert func.attrs["T"].value is DType.FLOAT32 and func.attrs["inner"].value == FuncRef("Nested")
    assert [f.name for f in a.attr("list_func")] == ["AddOne", "G"]
    half = a.attr("tensor")
    assert isinstance(half, Tensor) and half.dtype is DType.FLOAT16 and not half.is_loaded
    np.testing.assert_array_equal(half.numpy(), np.ones((2, 2), np.float16))  # splat of 0x3C00 == 1.0
    t64, tstr = a.attr("list_tensor")
    assert t64.numpy().tolist() == [7, 7, 7] and tstr.numpy().tolist() == [b"s", b"s"]
    assert all(isinstance(v, SourcedAttr) for v in a.attrs.values())


def test_edges_ports_and_control_inputs(tmp_path: Path) -> None:
    model = formats.load(write(tmp_path, "g.pb", every_attr_graphdef().SerializeToString()))
    nodes = {n.name: n for n in model.graph}
    split, user, a, noop = nodes["split"], nodes["user"], nodes["all"], nodes["noop"]
    # Outputs are created on demand up to the highest referenced port, named node / node:N.
    assert [v.name for v in split.outputs] == ["split", "split:1", "split:2"]
    assert user.inputs == (split.outputs[2], split.outputs[1], nodes["c"].output)
    assert user.control_inputs == (nodes["p"], noop)
    assert split.outputs[1].uses() == ((user, 1), (a, 2))
    assert noop.outputs == () and noop.control_users == (user,)  # NoOp has no data output
    assert a.control_inputs == (nodes["p"], nodes["x"])  # duplicate ^p collapsed in the IR...
    assert a.meta["graphdef.input_text"][1] == ("c:0", "x", "split:1", "^p", "^p", "^x")  # ...kept for writing
    assert nodes["p"].control_users == (user, a)
    c = nodes["c"].output
    assert c.dtype is DType.FLOAT32 and c.shape == (2, 3)  # Const / Placeholder type hints
    assert nodes["p"].output.shape == (None, 4) and nodes["x"].output.shape is None
    assert user.device.endswith("CPU:0")
    assert "graphdef.extra" in user.meta and "graphdef.extra" in nodes["odd"].meta
    assert "graphdef.extra" not in nodes["split"].meta
    assert model.graph.inputs == () and model.graph.outputs == ()
    assert model.meta["graphdef.versions"].producer == 1882
    assert model.meta["graphdef.library"].function[0].signature.name == "AddOne"
    assert model.meta["graphdef.extra"].version == 17


def test_lossless_round_trip_is_byte_identical(tmp_path: Path) -> None:
    gd = every_attr_graphdef()
    data = gd.SerializeToString(deterministic=True)
    model = formats.load(write(tmp_path, "g.pb", data))
    out = formats.serialize(model)
    assert graph_pb2.GraphDef.FromString(out) == gd
    assert out == data
    formats.save(model, tmp_path / "out.pb")
    assert (tmp_path / "out.pb").read_bytes() == data
    # A file that was not written deterministically still round-trips to an equal proto.
    loose = formats.load(write(tmp_path, "loose.pb", gd.SerializeToString()))
    assert graph_pb2.GraphDef.FromString(formats.serialize(loose)) == gd


def test_text_round_trip(tmp_path: Path) -> None:
    gd = every_attr_graphdef(unknown_fields=False)  # the text format has no unknown fields
    text = "# a comment first\n" + text_format.MessageToString(gd)
    model = formats.load(write(tmp_path, "g.pbtxt", text.encode()))
    assert model.meta["graphdef.text"] is True
    assert model.meta["graphdef.extra"].version == 17
    formats.save(model, tmp_path / "same_form")  # no known suffix: written as it was read (text)
    reread = text_format.Parse((tmp_path / "same_form").read_text(), graph_pb2.GraphDef())
    assert reread == gd
    formats.save(model, tmp_path / "as_binary.pb")  # .pb: binary
    assert graph_pb2.GraphDef.FromString((tmp_path / "as_binary.pb").read_bytes()) == gd
    binary = formats.load(tmp_path / "as_binary.pb")
    assert binary.meta["graphdef.text"] is False
    formats.save(binary, tmp_path / "again.pbtxt")  # .pbtxt: text, whatever the source
    assert text_format.Parse((tmp_path / "again.pbtxt").read_text(), graph_pb2.GraphDef()) == gd
    assert graphdef.serialize(binary, text=True).startswith(b"node {")


def test_text_with_leading_newline_and_unicode(tmp_path: Path) -> None:
    gd = graph_pb2.GraphDef()
    add_node(gd, "naïve/ü", "Const", dtype=av(type=D.DT_STRING),
             value=av(tensor=tensor(D.DT_STRING, (), string_val=["héllo".encode()])))
    text = "\n\n" + text_format.MessageToString(gd, as_utf8=True)
    model = formats.load(write(tmp_path, "u.pbtxt", text.encode()))
    node = next(iter(model.graph))
    assert node.name == "naïve/ü" and node.attr("value").numpy().tolist() == "héllo".encode()
    assert text_format.Parse(graphdef.serialize(model).decode(), graph_pb2.GraphDef()) == gd


# ---------------------------------------------------------------------------------------------
# Execution in TensorFlow: original and round-tripped graphs compute the same thing
# ---------------------------------------------------------------------------------------------
def run_tf(data: bytes, feeds: dict[str, np.ndarray], fetches: list[str]) -> list[np.ndarray]:
    tf = pytest.importorskip("tensorflow")
    gd = tf.compat.v1.GraphDef.FromString(data)
    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=graph) as sess:
            return sess.run([f"{f}:0" if ":" not in f else f for f in fetches],
                            {f"{k}:0": v for k, v in feeds.items()})


def executable_graphdef() -> graph_pb2.GraphDef:
    """Runs in TF: ports, control deps, splat and half constants, a library function call."""
    gd = graph_pb2.GraphDef()
    add_node(gd, "out", "Identity", ["sum", "^noop"], T=av(type=D.DT_FLOAT))  # out of order on purpose
    add_node(gd, "x", "Placeholder", dtype=av(type=D.DT_FLOAT), shape=shape_av([2, 6]))
    add_node(gd, "scale", "Const", dtype=av(type=D.DT_FLOAT),
             value=av(tensor=tensor(D.DT_FLOAT, (2, 6), float_val=[0.5, 2.0, -3.0])))
    add_node(gd, "mul", "Mul", ["x", "scale"], T=av(type=D.DT_FLOAT))
    add_node(gd, "axis", "Const", dtype=av(type=D.DT_INT32), value=av(tensor=tensor(D.DT_INT32, (), int_val=[1])))
    add_node(gd, "split", "Split", ["axis", "mul"], num_split=av(i=3), T=av(type=D.DT_FLOAT))
    add_node(gd, "h", "Const", dtype=av(type=D.DT_HALF),
             value=av(tensor=tensor(D.DT_HALF, (2, 2), half_val=[0x3E00, 0xC000])))  # 1.5, -2.0, -2.0, -2.0
    add_node(gd, "hf", "Cast", ["h"], SrcT=av(type=D.DT_HALF), DstT=av(type=D.DT_FLOAT),
             Truncate=av(b=False))
    lists = attr_value_pb2.AttrValue.ListValue
    add_node(gd, "call", "PartitionedCall", ["split:1"], Tin=av(list=lists(type=[D.DT_FLOAT])),
             Tout=av(list=lists(type=[D.DT_FLOAT])), f=av(func=attr_value_pb2.NameAttrList(name="AddOne")))
    add_node(gd, "a", "AddV2", ["split:2", "split"], T=av(type=D.DT_FLOAT))
    add_node(gd, "b", "AddV2", ["a", "call"], T=av(type=D.DT_FLOAT))
    add_node(gd, "sum", "AddV2", ["b", "hf"], T=av(type=D.DT_FLOAT))
    add_node(gd, "noop", "NoOp", ["^b"])
    gd.library.CopyFrom(add_one_library())
    del gd.library.gradient[:]  # TF checks that gradient functions exist
    gd.versions.producer = 1882
    return gd


def expected_executable(x: np.ndarray) -> np.ndarray:
    scale = np.array([0.5, 2.0] + [-3.0] * 10, np.float32).reshape(2, 6)
    s0, s1, s2 = np.split(x * scale, 3, axis=1)
    return s2 + s0 + (s1 + 1) + np.array([[1.5, -2.0], [-2.0, -2.0]], np.float32)


@pytest.mark.tf
def test_hand_built_graph_runs_the_same_after_round_trip(tmp_path: Path) -> None:
    gd = executable_graphdef()
    data = gd.SerializeToString(deterministic=True)
    model = formats.load(write(tmp_path, "exec.pb", data))
    out = formats.serialize(model)
    assert out == data
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    (orig,) = run_tf(data, {"x": x}, ["out"])
    (again,) = run_tf(out, {"x": x}, ["out"])
    np.testing.assert_array_equal(orig, again)
    np.testing.assert_allclose(orig, expected_executable(x), rtol=1e-6)


def refresh_everything(model) -> None:  # type: ignore[no-untyped-def]
    """Drop every source proto: plain Attrs, tensors rebuilt from NumPy (forces the encoders)."""
    for node in model.graph:
        for key, attr in list(node.attrs.items()):
            value = attr.value
            if attr.kind is AttrKind.TENSOR:
                value = Tensor.from_numpy(value.numpy(), dtype=value.dtype)
            node.attrs[key] = Attr(attr.kind, value)


@pytest.mark.tf
def test_reencoded_graph_runs_the_same(tmp_path: Path) -> None:
    gd = executable_graphdef()
    model = formats.load(write(tmp_path, "exec.pb", gd.SerializeToString()))
    refresh_everything(model)
    assert not any(isinstance(a, SourcedAttr) for n in model.graph for a in n.attrs.values())
    out = formats.serialize(model)
    reread = graph_pb2.GraphDef.FromString(out)
    scale = next(n for n in reread.node if n.name == "scale")
    assert scale.attr["value"].tensor.tensor_content and not scale.attr["value"].tensor.float_val
    x = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_array_equal(run_tf(out, {"x": x}, ["out"])[0],
                                  run_tf(gd.SerializeToString(), {"x": x}, ["out"])[0])


# ---------------------------------------------------------------------------------------------
# Real frozen Keras graphs
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mobilenet():  # type: ignore[no-untyped-def]
    models = pytest.importorskip("tests.models")
    return models.keras_graphdef("mobilenet_v2")


@pytest.mark.tf
def test_mobilenet_round_trip_runs_identically(mobilenet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = mobilenet.path.read_bytes()
    model = formats.load(mobilenet.path)
    assert len(model.graph) > 500
    check(model.graph)  # the IR's structural check: inputs defined, acyclic
    ops = {n.op for n in model.graph}
    assert {"Conv2D", "DepthwiseConv2dNative", "Const", "Placeholder"} <= ops
    out_path = tmp_path / "mobilenet.pb"
    formats.save(model, out_path)
    out = out_path.read_bytes()
    assert graph_pb2.GraphDef.FromString(out) == graph_pb2.GraphDef.FromString(data)
    assert out == data
    feeds, expected = mobilenet.reference_data()
    fetches = list(mobilenet.outputs)
    orig = run_tf(data, feeds, fetches)
    again = run_tf(out, feeds, fetches)
    for a, b, name in zip(orig, again, fetches):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, expected[name], rtol=1e-4, atol=1e-5)
    # Forcing every attribute and weight through the encoders still computes the same thing.
    refresh_everything(model)
    fresh = formats.serialize(model)
    for a, b in zip(orig, run_tf(fresh, feeds, fetches)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_other_keras_graphs_round_trip_byte_identical(name: str) -> None:
    models = pytest.importorskip("tests.models")
    info = models.keras_graphdef(name)
    data = info.path.read_bytes()
    model = formats.load(info.path)
    assert formats.serialize(model) == data
    consts = [n for n in model.graph if n.op == "Const"]
    assert consts and not any(n.attr("value").is_loaded for n in consts)  # weights stay unread


def test_bundled_example_round_trips() -> None:
    path = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.pb"
    if not path.exists():
        pytest.skip("examples/small_cnn.pb not built")
    model = formats.load(path)
    assert graphdef.serialize(model) == path.read_bytes()
