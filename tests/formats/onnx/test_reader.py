"""What the ONNX reader builds: scoping across subgraphs, values, attributes, lazy tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphwright import formats
from graphwright.formats.onnx import from_proto, save, to_proto
from graphwright.ir import AttrKind, DType, check, topological_order
from tests.formats.onnx import onnx_cases as cases


def test_subgraphs_read_outer_values_as_the_same_objects() -> None:
    model = from_proto(cases.control_flow())
    g = model.graph
    x = g.inputs[0]
    w = next(v for v in g.initializers if v.name == "w")
    bias = next(v for v in g.initializers if v.name == "bias")
    branch = next(n for n in g if n.op == "If")
    then_g, else_g = branch.attrs["then_branch"].value, branch.attrs["else_branch"].value
    assert then_g.parent is branch and else_g.parent is branch
    matmul = next(iter(then_g))
    assert matmul.inputs == (x, w)  # the outer Value objects, not copies
    assert (matmul, 0) in x.uses() and (matmul, 1) in w.uses()
    assert any(user.graph is else_g for user in bias.users())
    # Loop body reads h, produced in the main graph by the If
    loop = next(n for n in g if n.op == "Loop")
    body = loop.attrs["body"].value
    reduce = next(n for n in body if n.op == "ReduceSum")
    assert reduce.inputs[0] is branch.output
    assert reduce.inputs[1].is_initializer and reduce.inputs[1].owner is body
    check(g)  # def-use across the boundary satisfies the IR's own structural check


def test_empty_names_become_omitted_inputs_and_outputs() -> None:
    model = from_proto(cases.control_flow())
    loop = next(n for n in model.graph if n.op == "Loop")
    assert loop.inputs[1] is None and loop.inputs[0].name == "trip"
    clip = next(n for n in model.graph if n.op == "Clip")
    assert clip.inputs[1] is None
    # an omitted optional output ("") stays omitted on the way back
    proto = cases.conv_net()
    bn = next(n for n in proto.graph.node if n.op_type == "BatchNormalization")
    bn.output.extend(["", "saved_var"])
    node = next(n for n in from_proto(proto).graph if n.op == "BatchNormalization")
    assert [v.name for v in node.outputs] == ["b", "", "saved_var"]
    written = to_proto(from_proto(proto))
    assert list(written.graph.node[1].output) == ["b", "", "saved_var"]


def test_values_get_dtypes_shapes_and_value_info_records() -> None:
    model = from_proto(cases.conv_net())
    g = model.graph
    assert g.inputs[0].dtype is DType.FLOAT32 and g.inputs[0].shape == ("N", 3, 8, 8)
    values = {v.name: v for n in g for v in n.outputs}
    assert values["c"].shape == ("N", 8, 8, 8)
    assert values["p"].dtype is DType.FLOAT32 and values["p"].shape is None  # unknown rank
    assert values["b"].dtype is None  # no value_info: unknown
    recorded = g.meta["onnx.value_info"]
    assert [v.name for v in recorded] == ["c", "r", "p"]
    assert recorded[values["c"]].proto.name == "c"
    w = next(v for v in g.initializers if v.name == "conv.w")
    assert w.dtype is DType.FLOAT32 and w.shape == (8, 3, 3, 3) and w.const.shape == (8, 3, 3, 3)


def test_ir3_initializers_listed_as_inputs_stay_one_value(tmp_path: Path) -> None:
    proto = cases.ir3_initializer_inputs()
    model = from_proto(proto)
    g = model.graph
    w = g.inputs[1]
    assert w.name == "w" and w.is_graph_input and w.is_initializer and w.const is not None
    assert g.initializers == (w,)
    assert next(iter(g)).inputs[1] is w
    out = tmp_path / "ir3.onnx"
    save(model, out)
    assert onnx.load(str(out)) == proto


def test_attribute_kinds() -> None:
    proto = cases.control_flow()
    g = proto.graph
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
                                       helper.make_tensor("i", TensorProto.INT64, [1], [0]), [2])
    extra = helper.make_node("Custom", ["x"], ["custom_out"], name="custom", domain="com.example",
                             alpha=0.5, count=3, mode="fast", sizes=[1, 2], scales=[0.5, 2.0],
                             tags=["a", "b"], weight=numpy_helper.from_array(np.ones(2, np.float32), "wt"))
    extra.attribute.append(helper.make_attribute("sp", sparse))
    extra.attribute.append(helper.make_attribute("tp", helper.make_tensor_type_proto(TensorProto.FLOAT, [1])))
    referring = onnx.AttributeProto(name="ref", ref_attr_name="outer", type=onnx.AttributeProto.INT)
    extra.attribute.append(referring)
    documented = helper.make_attribute("documented", 4)
    documented.doc_string = "why"
    extra.attribute.append(documented)
    g.node.append(extra)
    model = from_proto(proto)
    node = next(n for n in model.graph if n.op == "Custom")
    kinds = {k: a.kind for k, a in node.attrs.items()}
    assert kinds == {
        "alpha": AttrKind.FLOAT, "count": AttrKind.INT, "mode": AttrKind.STRING, "scales": AttrKind.FLOATS,
        "sizes": AttrKind.INTS, "tags": AttrKind.STRINGS, "weight": AttrKind.TENSOR, "sp": AttrKind.OPAQUE,
        "tp": AttrKind.OPAQUE, "ref": AttrKind.OPAQUE, "documented": AttrKind.OPAQUE,
    }
    assert node.attr("mode") == b"fast" and node.attr("sizes") == (1, 2) and node.attr("tags") == (b"a", b"b")
    np.testing.assert_array_equal(node.attr("weight").numpy(), np.ones(2, np.float32))
    assert node.attr("ref").ref_attr_name == "outer"  # the AttributeProto itself
    branch = next(n for n in model.graph if n.op == "If")
    assert branch.attrs["then_branch"].kind is AttrKind.GRAPH
    assert to_proto(model) == proto  # every kind writes back as it was


def test_ir1_untyped_attributes_round_trip() -> None:
    proto = cases.unsorted()
    node = proto.graph.node[2]
    untyped = onnx.AttributeProto(name="alpha", f=0.25)  # IR v1 files have no attribute types
    node.attribute.append(untyped)
    model = from_proto(proto)
    relu = next(n for n in model.graph if n.op == "Relu")
    assert relu.attrs["alpha"].kind is AttrKind.FLOAT and relu.attr("alpha") == 0.25
    assert relu.meta["onnx.untyped_attrs"] == ("alpha",)
    written = to_proto(model)
    assert not written.graph.node[2].attribute[0].HasField("type")
    assert written == proto


def test_unsorted_file_keeps_its_order_but_is_connected() -> None:
    model = from_proto(cases.unsorted())
    g = model.graph
    assert [n.name for n in g] == ["last", "middle", "first"]
    last, middle, first = list(g)
    assert last.inputs[0] is middle.output and middle.inputs[0] is first.output
    assert [n.name for n in topological_order(g)] == ["first", "middle", "last"]


def test_inline_tensors_decode_lazily_and_exactly() -> None:
    proto = cases.typed_tensors()
    model = from_proto(proto)
    inits = {v.name: v.const for v in model.graph.initializers}
    assert not any(t.is_loaded for t in inits.values())
    for tp in proto.graph.initializer:
        tensor = inits[tp.name]
        assert tensor.source is tp or tensor.source == tp
        if tp.data_type == TensorProto.STRING:
            assert list(tensor.numpy()) == list(tp.string_data)
        else:
            np.testing.assert_array_equal(tensor.numpy(), numpy_helper.to_array(tp))
    assert inits["f16_typed"].dtype is DType.FLOAT16 and inits["bf16"].dtype is DType.BFLOAT16
    np.testing.assert_array_equal(inits["sp"].numpy(), [[0, 5, 0, 0], [0, 0, 7, 0]])
    assert isinstance(inits["sp"].source, onnx.SparseTensorProto)


def test_unknown_fields_and_unmodeled_node_fields_survive() -> None:
    proto = cases.conv_net()
    node = proto.graph.node[0]
    node.overload = "v2"
    node.domain = ""  # present but empty: proto2 keeps that in the bytes
    data = bytearray(proto.SerializeToString())
    data += b"\xf8\x06\x2a"  # an unknown model-level varint field 111 = 42
    reread = onnx.ModelProto()
    reread.ParseFromString(bytes(data))
    model = from_proto(reread)
    first = next(iter(model.graph))
    assert first.meta["onnx.node_shell"].overload == "v2"
    written = to_proto(model)
    assert written.SerializeToString() == reread.SerializeToString()
    assert written.graph.node[0].HasField("domain")


@pytest.mark.slow
def test_large_chain_loads_without_recursion(tmp_path: Path) -> None:
    """A 200,000-node chain: iterative reading, O(N + E).  (Timing lives in benchmarks.)"""
    n = 200_000
    g = onnx.GraphProto(name="chain")
    for i in range(n):
        g.node.add(op_type="Neg" if i % 2 else "Relu", input=[f"v{i}"], output=[f"v{i + 1}"], name=f"n{i}")
    g.input.append(helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1]))
    g.output.append(helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1]))
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "chain.onnx"
    path.write_bytes(proto.SerializeToString())
    model = formats.load(path)
    assert len(model.graph) == n
    assert model.graph.outputs[0].producer.name == f"n{n - 1}"
    out = tmp_path / "chain_out.onnx"
    save(model, out)
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("dims", [[-1, 2]])
def test_negative_dims_are_refused(dims: list[int]) -> None:
    proto = cases.conv_net()
    proto.graph.initializer[0].ClearField("dims")
    proto.graph.initializer[0].dims.extend(dims)
    from graphwright.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="negative dimension"):
        from_proto(proto)


def test_quantization_annotations_and_training_info_follow_the_model() -> None:
    proto = cases.conv_net()
    annotation = proto.graph.quantization_annotation.add(tensor_name="c")
    annotation.quant_parameter_tensor_names.add(key="SCALE_TENSOR", value="bn.scale")
    training = proto.training_info.add()
    training.algorithm.name = "train_step"
    proto.graph.sparse_initializer.append(helper.make_sparse_tensor(
        helper.make_tensor("sp", TensorProto.FLOAT, [1], [3.0]),
        helper.make_tensor("sp_idx", TensorProto.INT64, [1], [2]), [4]))
    model = from_proto(proto)
    assert to_proto(model) == proto
    g = model.graph
    (_stored, refs), = g.meta["onnx.quantization_annotation"]
    assert refs["c"].producer.op == "Conv" and refs["bn.scale"].is_initializer
    refs["c"].name = "conv_out"  # renames are followed by the annotation
    refs["bn.scale"].name = "gamma"
    next(v for v in g.initializers if v.name == "sp").name = "sparse_w"
    written = to_proto(model)
    qa = written.graph.quantization_annotation[0]
    assert qa.tensor_name == "conv_out" and qa.quant_parameter_tensor_names[0].value == "gamma"
    assert written.graph.sparse_initializer[0].values.name == "sparse_w"
    assert written.training_info == proto.training_info


# -- text that is not UTF-8, sizes that do not fit (issue 10, items 5 and 6) -------------------

def _with_bytes(proto: onnx.ModelProto, marker: bytes) -> bytes:
    """``proto`` serialized with every ``marker`` text made invalid UTF-8 (same length)."""
    data = proto.SerializeToString()
    assert marker in data, marker
    return data.replace(marker, b"\xff" + marker[1:])


def _named(**changes: str) -> onnx.ModelProto:
    """conv_net with some of its text replaced (consistently where a name is referenced)."""
    proto = cases.conv_net()
    node = proto.graph.node[2]
    node.name = changes.get("node", "relu")
    node.output[0] = proto.graph.node[3].input[0] = proto.graph.value_info[1].name = changes.get("value", "r")
    proto.graph.initializer[1].name = proto.graph.node[0].input[2] = changes.get("tensor", "conv.b")
    for vi in (proto.graph.input[0], proto.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = changes.get("dim", "N")
    proto.producer_name = changes.get("producer", "graphwright-tests")
    proto.graph.node[1].attribute[0].name = changes.get("attribute", "epsilon")
    proto.graph.node[4].op_type = changes.get("op", "Flatten")
    return proto


@pytest.mark.parametrize(
    ("field", "marker", "needle"),
    [
        ("node", "BADNODE", "node 2 name b'\\xffADNODE'"),
        ("value", "BADVALUE", "node 'relu' output name b'\\xffADVALUE'"),
        ("tensor", "BADTENSOR", "tensor name b'\\xffADTENSOR'"),
        ("dim", "BADDIM", "dim_param b'\\xffADDIM'"),
        ("producer", "BADPRODUCER", "model field producer_name b'\\xffADPRODUCER'"),
        ("attribute", "BADATTR", "node 'bn' (BatchNormalization) attribute name b'\\xffADATTR'"),
        ("op", "BADOP", "node 'flatten' op_type b'\\xffADOP'"),
    ],
)
def test_text_that_is_not_utf8_is_refused_at_load(tmp_path: Path, field: str, marker: str, needle: str) -> None:
    """protobuf hands back proto2 strings that are not UTF-8 as bytes: refused in one line, naming them."""
    from graphwright.errors import ModelLoadError

    path = tmp_path / "bad.onnx"
    path.write_bytes(_with_bytes(_named(**{field: marker}), marker.encode()))
    with pytest.raises(ModelLoadError) as info:
        formats.load(path)
    message = str(info.value)
    assert "\n" not in message and "is not valid UTF-8" in message and needle in message, message
    assert message.startswith(str(path))


def test_text_that_is_not_utf8_is_refused_by_the_mapped_reader_too(tmp_path: Path) -> None:
    from graphwright.errors import ModelLoadError
    from graphwright.formats.onnx import load_mapped

    proto = cases.big_weights()
    proto.graph.node[0].name = "BADNAME"
    path = tmp_path / "big.onnx"
    path.write_bytes(_with_bytes(proto, b"BADNAME"))
    with pytest.raises(ModelLoadError, match=r"name b'\\xffADNAME' is not valid UTF-8"):
        load_mapped(path)


@pytest.mark.parametrize(
    ("tensor", "expected"),
    [
        (TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**32, 2**32]), "larger than any real tensor"),
        (TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**62, 2**62, 0]), "larger than any real tensor"),
        (TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], raw_data=b"\0" * 4),
         r"raw_data holds 4 bytes but shape \[2\] of float32 needs 8"),
        (TensorProto(name="w", data_type=TensorProto.INT64, dims=[3], raw_data=b"\0" * 32),
         "raw_data holds 32 bytes"),
        (TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3], float_data=[1.0, 2.0]),
         "stores 2 values in float_data but shape"),
        (TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20]), "stores 0 values"),
        (TensorProto(name="w", data_type=TensorProto.INT4, dims=[5], int32_data=[1, 2]), "needs 3"),
    ],
)
def test_initializer_sizes_are_checked_at_load(tmp_path: Path, tensor: TensorProto, expected: str) -> None:
    from graphwright.errors import ModelLoadError

    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", tensor.data_type, None)], [tensor])
    path = tmp_path / "bad.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    with pytest.raises(ModelLoadError, match=expected) as info:
        formats.load(path)
    assert "\n" not in str(info.value)


def test_constant_attribute_sizes_are_checked_at_load() -> None:
    from graphwright.errors import ModelLoadError

    value = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\0" * 12)
    graph = helper.make_graph([helper.make_node("Constant", [], ["y"], value=value)], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    with pytest.raises(ModelLoadError, match="raw_data holds 12 bytes"):
        from_proto(helper.make_model(graph))


def test_mapped_weights_with_wrong_sizes_are_refused(tmp_path: Path) -> None:
    from graphwright.errors import ModelLoadError
    from graphwright.formats.onnx import load_mapped

    proto = cases.big_weights()
    init = proto.graph.initializer[0]
    init.ClearField("dims")
    init.dims.extend([2**32, 2**32])
    path = tmp_path / "big.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelLoadError, match="larger than any real tensor"):
        load_mapped(path)
    init.ClearField("dims")
    init.dims.extend([3])
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelLoadError, match="raw_data holds"):
        load_mapped(path)


def test_two_negative_dimensions_are_refused_although_their_product_is_positive() -> None:
    from graphwright.errors import ModelLoadError

    proto = cases.conv_net()
    proto.graph.initializer[1].ClearField("dims")
    proto.graph.initializer[1].dims.extend([-2, -4])
    with pytest.raises(ModelLoadError, match="negative dimension"):
        from_proto(proto)
