"""TFLite -> IR mapping, checked against what LiteRT itself reports about the same files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from graphwright.formats import detect_format, tflite
from graphwright.formats.tflite import QuantDetails, SignatureDef, TFLiteBuffer
from graphwright.formats.tflite import _schema as S
from graphwright.ir import AttrKind, DType, check

from .test_helpers import run_tflite, same_outputs
from .test_models import ALL, real_models


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)


def _load(path: Path) -> tuple[bytes, object]:
    data = path.read_bytes()
    return data, tflite.load(path, data)


def _interpreter(data: bytes) -> Interpreter:
    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    return interpreter


@pytest.mark.parametrize("name", ALL)
def test_every_graph_passes_the_ir_structural_check(tflite_models: dict[str, Path], name: str) -> None:
    data, model = _load(tflite_models[name])
    assert detect_format(data) == "tflite"
    for graph in model.graphs:
        assert graph.dialect == "tflite"
        check(graph)
        assert all(node.dialect == "tflite" for node in graph)


def test_tensors_match_litert_names_dtypes_shapes_and_quantization(tflite_models: dict[str, Path]) -> None:
    data, model = _load(tflite_models["int8"])
    details = {d["index"]: d for d in _interpreter(data).get_tensor_details()}
    values = {v.meta["tflite.tensor_index"]: v for v in model.graph.initializers}
    values.update({v.meta["tflite.tensor_index"]: v for n in model.graph for v in n.outputs})
    values.update({v.meta["tflite.tensor_index"]: v for v in model.graph.inputs})
    assert len(values) == len(details)
    per_channel = 0
    for index, d in details.items():
        value = values[index]
        assert value.name == d["name"]
        assert value.dtype.numpy == np.dtype(d["dtype"])
        assert tuple(value.shape) == tuple(d["shape"])
        q = d["quantization_parameters"]
        if len(q["scales"]):
            assert value.quant is not None
            np.testing.assert_array_equal(value.quant.scale, q["scales"])
            np.testing.assert_array_equal(value.quant.zero_point, q["zero_points"])
            assert value.quant.axis == q["quantized_dimension"]
            per_channel += value.quant.per_channel
        else:
            assert value.quant is None
    assert per_channel >= 3  # conv / depthwise / FC weights and biases


def test_constants_are_lazy_zero_copy_views_equal_to_litert(tflite_models: dict[str, Path]) -> None:
    data, model = _load(tflite_models["float"])
    interpreter = _interpreter(data)
    file_bytes = np.frombuffer(data, dtype=np.uint8)
    consts = model.graph.initializers
    assert consts and not any(v.const.is_loaded for v in consts)
    for value in consts:
        assert isinstance(value.const.source, TFLiteBuffer)
        array = value.const.numpy()
        assert np.shares_memory(array, file_bytes) and not array.flags.writeable
        expected = interpreter.get_tensor(value.meta["tflite.tensor_index"])
        np.testing.assert_array_equal(array, expected)


def test_operators_and_their_options(tflite_models: dict[str, Path]) -> None:
    _, model = _load(tflite_models["float"])
    ops = [n.op for n in model.graph]
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX", "MEAN"} <= set(ops)
    conv = next(n for n in model.graph if n.op == "CONV_2D")
    for name in ("padding", "stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor",
                 "fused_activation_function"):
        assert conv.attrs[name].kind is AttrKind.INT
    assert conv.meta["tflite.options"] == "Conv2DOptions"
    assert conv.meta["tflite.version"] >= 1
    fc = next(n for n in model.graph if n.op == "FULLY_CONNECTED")
    assert fc.attrs["keep_num_dims"].kind is AttrKind.BOOL
    softmax = next(n for n in model.graph if n.op == "SOFTMAX")
    assert softmax.attrs["beta"].kind is AttrKind.FLOAT and softmax.attrs["beta"].value == 1.0
    assert softmax.output in model.graph.outputs
    mean = next(n for n in model.graph if n.op == "MEAN")
    assert mean.meta["tflite.options"] == "ReducerOptions" and mean.attrs["keep_dims"].value is False


def test_omitted_inputs_are_none(tflite_models: dict[str, Path]) -> None:
    _, model = _load(tflite_models["lstm"])
    fcs = [n for g in model.graphs for n in g if n.op == "FULLY_CONNECTED"]
    assert fcs and all(len(n.inputs) == 3 and n.inputs[2] is None for n in fcs)


def test_signature_entries_follow_graph_inputs_and_outputs(tflite_models: dict[str, Path]) -> None:
    data, model = _load(tflite_models["float"])
    (sig,) = model.meta["tflite.signature_defs"]
    assert isinstance(sig, SignatureDef) and sig.key == "serving_default" and sig.graph is model.graph
    runner = _interpreter(data).get_signature_list()["serving_default"]
    assert [n for n, _ in sig.inputs] == runner["inputs"]
    assert [n for n, _ in sig.outputs] == runner["outputs"]
    assert sig.inputs[0][1] == ("input", 0) and sig.resolve(sig.inputs[0][1]) is model.graph.inputs[0]
    assert sig.resolve(sig.outputs[0][1]) is model.graph.outputs[0]


def test_metadata_and_model_fields_are_carried(tflite_models: dict[str, Path]) -> None:
    _, model = _load(tflite_models["float"])
    meta = dict(model.meta["tflite.metadata"])
    assert bytes(meta["min_runtime_version"].data).rstrip(b"\0").decode().count(".") == 2
    assert "CONVERSION_METADATA" in meta
    assert model.meta["tflite.version"] == 3
    assert model.meta["tflite.description"] == "MLIR Converted."
    assert model.meta["tflite.operator_codes"]


def test_control_flow_subgraphs_and_dynamic_dims(tflite_models: dict[str, Path]) -> None:
    _, model = _load(tflite_models["control_flow"])
    assert len(model.subgraphs) == 4 and model.graph.name == "main"
    while_op = next(n for n in model.graph if n.op == "WHILE")
    cond, body = while_op.attr("cond_subgraph_index"), while_op.attr("body_subgraph_index")
    assert model.graphs[cond].name.endswith("cond") and model.graphs[body].name.endswith("body")
    if_op = next(n for n in model.graph if n.op == "IF")
    assert {if_op.attr("then_subgraph_index"), if_op.attr("else_subgraph_index")} == {1, 2}
    x = model.graph.inputs[0]
    assert x.shape == (None, 4) and x.meta["tflite.shape"] == (1, 4)


def test_custom_ops_keep_code_and_options(tflite_models: dict[str, Path]) -> None:
    data, model = _load(tflite_models["custom"])
    custom = [n for n in model.graph if n.domain == "custom"]
    assert [n.op for n in custom] == ["AudioSpectrogram", "Mfcc"]
    from ai_edge_litert import schema_py_generated as fb

    raw = fb.ModelT.InitFromPackedBuf(data, 0).subgraphs[0].operators
    for node, op in zip(custom, raw):
        assert node.attrs["custom_options"].kind is AttrKind.STRING
        assert node.attrs["custom_options"].value == bytes(op.customOptions)
    assert b"magnitude_squared" in custom[0].attrs["custom_options"].value


def test_extended_op_codes_resources_and_string_options(tflite_models: dict[str, Path]) -> None:
    _, model = _load(tflite_models["variable"])
    ops = [n.op for n in model.graph]
    assert ops[:2] == ["CALL_ONCE", "VAR_HANDLE"] and "ASSIGN_VARIABLE" in ops and "READ_VARIABLE" in ops
    handle = model.graph.find_node(next(n.name for n in model.graph if n.op == "VAR_HANDLE"))
    assert handle.output.dtype is DType.RESOURCE
    assert handle.attrs["container"].value == b"" and handle.attrs["shared_name"].value == b"Variable"
    assign = next(n for n in model.graph if n.op == "ASSIGN_VARIABLE")
    assert assign.outputs == ()
    call_once = next(n for n in model.graph if n.op == "CALL_ONCE")
    init = model.graphs[call_once.attr("init_subgraph_index")]
    assert init.inputs == () and [n.op for n in init] == ["VAR_HANDLE", "ASSIGN_VARIABLE"]


def test_tensor_type_mapping_is_complete_and_reversible() -> None:
    for name, code in S.TENSOR_TYPES.items():
        dtype = S.dtype_of(code)
        if dtype is not DType.UNDEFINED:
            assert S.type_of(dtype) == code, name
    assert S.dtype_of(S.TENSOR_TYPES["INT8"]) is DType.INT8
    assert S.type_of(DType.QINT8) == S.TENSOR_TYPES["INT8"]


def test_op_names_and_options_tables_the_converter_uses() -> None:
    assert S.op_name(3) == "CONV_2D" and S.op_code("CONV_2D") == 3
    assert S.op_name(10_000) == "BUILTIN_10000" and S.op_code("BUILTIN_10000") == 10_000
    assert S.op_code("Conv2D") is None
    assert S.options_for_op("CONV_2D") == (1, "Conv2DOptions")
    assert S.options_for_op("MAX_POOL_2D") == (1, "Pool2DOptions")
    assert S.options_for_op("SUM") == (1, "ReducerOptions")
    assert S.options_for_op("STABLEHLO_COMPOSITE") == (2, "StableHLOCompositeOptions")
    assert S.options_for_op("RELU") is None


def test_blockwise_quantization_details_keep_tensor_references() -> None:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    model = fb.ModelT()
    model.version = 3
    model.buffers = [fb.BufferT(), fb.BufferT(data=np.arange(8, dtype=np.uint8))]
    scales, weights = fb.TensorT(), fb.TensorT()
    scales.name, scales.type, scales.shape, scales.buffer = b"scales", 0, np.array([2], np.int32), 1
    weights.name, weights.type, weights.shape = b"w", 0, np.array([2], np.int32)
    weights.quantization = fb.QuantizationParametersT()
    weights.quantization.detailsType = S.QUANT_DETAILS["BlockwiseQuantization"]
    weights.quantization.details = fb.BlockwiseQuantizationT(scales=1, zeroPoints=0, blockSize=32)
    graph = fb.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs, graph.operators = [weights, scales], [0], [0], []
    model.subgraphs, model.operatorCodes = [graph], []
    builder = flatbuffers.Builder(256)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    loaded = tflite.read_model(bytes(builder.Output()))
    details = loaded.graph.inputs[0].quant.extra
    assert isinstance(details, QuantDetails) and details.kind == "BlockwiseQuantization"
    assert details.refs["scales"] is loaded.graph.initializers[0]
    assert details.refs["zeroPoints"] is loaded.graph.inputs[0]
    written = fb.ModelT.InitFromPackedBuf(tflite.serialize(loaded), 0)
    w = written.subgraphs[0].tensors[0]
    assert (w.quantization.details.scales, w.quantization.details.blockSize) == (1, 32)


def test_old_style_operator_codes_load_by_deprecated_code_and_are_kept(tflite_models: dict[str, Path]) -> None:
    """Files from before ``builtin_code`` existed only set ``deprecated_builtin_code``."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    original = tflite_models["float"].read_bytes()
    model_t = fb.ModelT.InitFromPackedBuf(original, 0)
    for oc in model_t.operatorCodes:
        oc.builtinCode = 0
    builder = flatbuffers.Builder(1024)
    builder.Finish(model_t.Pack(builder), file_identifier=b"TFL3")
    old = bytes(builder.Output())
    assert [n.op for n in tflite.read_model(old).graph] == [n.op for n in tflite.read_model(original).graph]
    written = tflite.serialize(tflite.read_model(old))
    assert [oc.builtinCode for oc in fb.ModelT.InitFromPackedBuf(written, 0).operatorCodes] == [0] * len(
        model_t.operatorCodes)
    assert same_outputs(run_tflite(old), run_tflite(written))
