"""IR -> TFLite: hand-built graphs, edited real models, errors; outputs checked on LiteRT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as fb
from ai_edge_litert.interpreter import Interpreter

from graphwright.errors import ModelSaveError
from graphwright.formats import tflite
from graphwright.formats.tflite import writer as tflite_writer
from graphwright.ir import Attr, DType, Graph, Model, Node, QuantParams, Tensor, Value, check

from .test_helpers import model_diff, run_tflite, same_outputs, unpack
from .test_models import real_models


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)

RNG = np.random.default_rng(7)
W = RNG.standard_normal((3, 1, 1, 2)).astype(np.float32)  # OHWI, 1x1 conv 2 -> 3 channels
B = RNG.standard_normal(3).astype(np.float32)
FC = RNG.standard_normal((4, 12)).astype(np.float32)


def _const(name: str, array: np.ndarray) -> Value:
    return Value(name, const=Tensor.from_numpy(array))


def _node(op: str, inputs: list[Value | None], out: Value, **attrs: Attr) -> Node:
    return Node(op, inputs, dialect="tflite", name=out.name, attrs=attrs, outputs=[out])


def small_model() -> Model:
    """conv 1x1 + relu -> reshape -> fully connected -> softmax, made from scratch (no meta)."""
    g = Graph("tflite", "main")
    x = Value("x", DType.FLOAT32, (1, 2, 2, 2))
    g.set_inputs([x])
    w, b, fc = (g.add_initializer(_const(n, a)) for n, a in (("w", W), ("b", B), ("fc", FC)))
    shape = g.add_initializer(_const("shape", np.array([1, 12], np.int32)))
    conv = g.append(_node("CONV_2D", [x, w, b], Value("conv", DType.FLOAT32, (1, 2, 2, 3)),
                          padding=Attr.int(0), stride_w=Attr.int(1), stride_h=Attr.int(1),
                          dilation_w_factor=Attr.int(1), dilation_h_factor=Attr.int(1),
                          fused_activation_function=Attr.int(1)))
    flat = g.append(_node("RESHAPE", [conv.output, shape], Value("flat", DType.FLOAT32, (1, 12))))
    dense = g.append(_node("FULLY_CONNECTED", [flat.output, fc, None], Value("logits", DType.FLOAT32, (1, 4))))
    probs = g.append(_node("SOFTMAX", [dense.output], Value("probs", DType.FLOAT32, (1, 4)), beta=Attr.float(1.0)))
    g.set_outputs([probs.output, dense.output])
    return Model(g, "tflite")


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    conv = np.maximum(np.einsum("nhwc,oc->nhwo", x, W[:, 0, 0, :]) + B, 0)
    logits = conv.reshape(1, 12) @ FC.T
    e = np.exp(logits - logits.max())
    return e / e.sum(), logits


def _run(data: bytes, x: np.ndarray) -> list[np.ndarray]:
    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def test_a_graph_built_from_scratch_runs_and_matches_numpy() -> None:
    data = tflite.serialize(small_model())
    x = RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)
    probs, logits = _run(data, x)
    want_probs, want_logits = reference(x)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    m = unpack(data)
    assert len(m.buffers[0].data if m.buffers[0].data is not None else []) == 0  # sentinel
    ops = m.subgraphs[0].operators
    assert [m.operatorCodes[op.opcodeIndex].builtinCode for op in ops] == [3, 22, 9, 25]
    assert ops[0].builtinOptions.strideW == 1 and ops[0].builtinOptions.fusedActivationFunction == 1
    assert ops[2].inputs[-1] == -1 and ops[2].builtinOptionsType == fb.BuiltinOptions.FullyConnectedOptions
    assert ops[1].builtinOptionsType == fb.BuiltinOptions.ReshapeOptions


def test_nodes_are_written_in_dependency_order() -> None:
    model = small_model()
    nodes = list(model.graph)
    model.graph.sort(list(reversed(nodes)))  # stored out of order
    data = tflite.serialize(model)
    x = RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(data, x)[1], reference(x)[1], rtol=1e-5, atol=1e-5)


def test_edited_constant_is_written_and_unchanged_ones_are_not_copied(tflite_models: dict[str, Path]) -> None:
    original = tflite_models["float"].read_bytes()
    model = tflite.read_model(original)
    fc = next(n for n in model.graph if n.op == "FULLY_CONNECTED")
    weights = fc.inputs[1]
    weights.const = Tensor.from_numpy(np.zeros(weights.const.shape, np.float32))
    if fc.inputs[2] is not None:
        bias = fc.inputs[2]
        bias.const = Tensor.from_numpy(np.zeros(bias.const.shape, np.float32))
    edited = tflite.serialize(model)
    (probs,) = run_tflite(edited)
    np.testing.assert_allclose(probs, np.full(probs.shape, 1 / probs.shape[-1], np.float32), rtol=1e-6)
    untouched = [v for v in model.graph.initializers if v is not weights and v is not fc.inputs[2]]
    assert untouched and not any(v.const.is_loaded for v in untouched)
    problems = model_diff(original, edited)
    assert problems and all("buffer" in p for p in problems)


def test_removing_the_softmax_keeps_the_signature_on_the_new_output(tflite_models: dict[str, Path]) -> None:
    original = tflite_models["float"].read_bytes()
    model = tflite.read_model(original)
    softmax = next(n for n in model.graph if n.op == "SOFTMAX")
    model.graph.set_outputs([softmax.input(0)])
    model.graph.remove(softmax)
    data = tflite.serialize(model)
    m = unpack(data)
    assert all(m.operatorCodes[op.opcodeIndex].builtinCode != 25 for op in m.subgraphs[0].operators)
    assert all(oc.builtinCode != 25 for oc in m.operatorCodes)  # no stale SOFTMAX code
    (logits,) = run_tflite(data)
    (probs,) = run_tflite(original)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(axis=-1, keepdims=True), probs, rtol=1e-5, atol=1e-6)
    interpreter = Interpreter(model_content=data)
    runner = interpreter.get_signature_runner("serving_default")
    x = np.random.default_rng(0).standard_normal(tuple(interpreter.get_input_details()[0]["shape"]))
    (key,) = interpreter.get_signature_list()["serving_default"]["inputs"]
    out = runner(**{key: x.astype(np.float32)})
    assert next(iter(out.values())).shape == logits.shape


def test_custom_op_made_by_hand_reaches_the_runtime() -> None:
    g = Graph("tflite", "main")
    x = Value("x", DType.FLOAT32, (4,))
    g.set_inputs([x])
    node = g.append(Node("MyCustomOp", [x], dialect="tflite", domain="custom", name="y",
                         attrs={"custom_options": Attr.string(b"\x01\x02")},
                         outputs=[Value("y", DType.FLOAT32, (4,))]))
    g.set_outputs([node.output])
    data = tflite.serialize(Model(g, "tflite"))
    m = unpack(data)
    (code,) = m.operatorCodes
    assert code.builtinCode == 32 and code.customCode == b"MyCustomOp"
    assert bytes(m.subgraphs[0].operators[0].customOptions) == b"\x01\x02"
    back = tflite.read_model(data)
    (again,) = list(back.graph)
    assert (again.op, again.domain, again.attrs["custom_options"].value) == ("MyCustomOp", "custom", b"\x01\x02")
    interpreter = Interpreter(model_content=data)
    with pytest.raises(RuntimeError, match="MyCustomOp"):
        interpreter.allocate_tensors()


def test_string_constants_quantization_and_dynamic_shapes_are_written() -> None:
    g = Graph("tflite", "main")
    words = np.array([b"alpha", b"", b"gamma ray"], dtype=object)
    table = g.add_initializer(Value("words", const=Tensor(DType.STRING, (3,), array=words)))
    idx = Value("idx", DType.INT32, (None,))
    g.set_inputs([idx])
    gather = g.append(_node("GATHER", [table, idx], Value("picked", DType.STRING, (None,)), axis=Attr.int(0)))
    q = Value("q", const=Tensor.from_numpy(np.arange(6, dtype=np.int8).reshape(2, 3)),
              quant=QuantParams([0.5, 0.25], [0, 0], axis=0, min=[-1, -2], max=[1, 2]))
    g.add_initializer(q)
    g.set_outputs([gather.output])
    data = tflite.serialize(Model(g, "tflite"))
    m = unpack(data)
    tensors = {t.name: t for t in m.subgraphs[0].tensors}
    assert list(tensors[b"idx"].shape) == [1] and list(tensors[b"idx"].shapeSignature) == [-1]
    qt = tensors[b"q"].quantization
    assert list(qt.scale) == [0.5, 0.25] and list(qt.zeroPoint) == [0, 0] and list(qt.max) == [1, 2]
    interpreter = Interpreter(model_content=data)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], [2])
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.array([2, 0], np.int32))
    interpreter.invoke()
    assert list(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])) == [b"gamma ray", b"alpha"]
    back = tflite.read_model(data)
    np.testing.assert_array_equal(back.graph.initializers[0].const.numpy(), words)
    assert back.graph.initializers[1].quant.axis == 0


def test_large_constants_switch_to_the_offset_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tflite_writer, "INLINE_LIMIT", 64)
    data = tflite.serialize(small_model())
    m = unpack(data)
    assert any(b.offset > 1 and b.data is None for b in m.buffers)
    x = RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(data, x)[1], reference(x)[1], rtol=1e-5, atol=1e-5)


def test_save_is_atomic_and_refuses_bad_destinations(tmp_path: Path) -> None:
    target = tmp_path / "model.tflite"
    tflite.save(small_model(), target)
    before = target.read_bytes()
    broken = small_model()
    next(iter(broken.graph)).attrs["no_such_field"] = Attr.int(1)
    with pytest.raises(ModelSaveError, match="no_such_field"):
        tflite.save(broken, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]
    with pytest.raises(ModelSaveError, match="does not exist"):
        tflite.save(small_model(), tmp_path / "missing" / "m.tflite")


def _broken(edit: str) -> Model:
    model = small_model()
    conv = next(iter(model.graph))
    if edit == "attr_kind":
        conv.attrs["stride_w"] = Attr.floats([1.0])
    elif edit == "dialect":
        conv.dialect = "onnx"
    elif edit == "op":
        conv.op = "Conv2D"
    elif edit == "domain":
        conv.domain = "ai.onnx"
    elif edit == "dtype":
        conv.output.dtype = None
    elif edit == "complex_dtype":
        conv.output.dtype = DType.FLOAT8E4M3FNUZ
    elif edit == "format":
        model.format = "onnx"
    elif edit == "shape":
        conv.output.shape = (1, 2, 2, 1 << 40)
    elif edit == "unknown_fields":
        model.meta["tflite.unknown_fields"] = ["Tensor field #11"]
    elif edit == "signature":
        other = Graph("tflite", "gone")
        model.meta["tflite.signature_defs"] = [tflite.SignatureDef("s", other, [], [])]
    elif edit == "options_table":
        conv.meta["tflite.options"] = "NoSuchOptions"
    return model


@pytest.mark.parametrize("edit, message", [
    ("attr_kind", "stride_w"), ("dialect", "onnx node"), ("op", "not a TFLite builtin"),
    ("domain", "domain"), ("dtype", "dtype is unknown"), ("complex_dtype", "no float8e4m3fnuz type"),
    ("format", "does not convert"), ("shape", "int32"), ("unknown_fields", "upgrade ai-edge-litert"),
    ("signature", "no longer in the model"), ("options_table", "NoSuchOptions"),
])
def test_unwritable_models_raise_one_line_model_save_errors(edit: str, message: str) -> None:
    with pytest.raises(ModelSaveError, match=message) as caught:
        tflite.serialize(_broken(edit))
    assert "\n" not in str(caught.value)


def test_transform_style_edit_on_a_real_int8_model(tflite_models: dict[str, Path]) -> None:
    """Re-quantizing the input changes what LiteRT reports and computes; everything else is kept."""
    original = tflite_models["int8"].read_bytes()
    model = tflite.read_model(original)
    x = model.graph.inputs[0]
    x.quant = QuantParams(x.quant.scale * 2, x.quant.zero_point, x.quant.axis)
    data = tflite.serialize(model)
    details = Interpreter(model_content=data).get_input_details()[0]
    assert details["quantization"][0] == pytest.approx(float(x.quant.scale[0]))
    problems = model_diff(original, data)
    assert len(problems) == 1 and "scale" in problems[0]
    assert not same_outputs(run_tflite(original), run_tflite(data))


def test_variable_tensors_keep_state_across_invocations() -> None:
    """An RNN whose hidden state is a variable tensor (defined by no node, no graph input)."""
    rng = np.random.default_rng(3)
    wx, wh, bias = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (3, 3), (3,)))
    g = Graph("tflite", "main")
    x = Value("x", DType.FLOAT32, (1, 2))
    g.set_inputs([x])
    consts = [g.add_initializer(_const(n, a)) for n, a in (("wx", wx), ("wh", wh), ("b", bias))]
    state = Value("h", DType.FLOAT32, (1, 3))
    state.meta["tflite.is_variable"] = True
    rnn = g.append(_node("RNN", [x, *consts, state], Value("y", DType.FLOAT32, (1, 3)),
                         fused_activation_function=Attr.int(4)))  # TANH
    g.set_outputs([rnn.output])
    data = tflite.serialize(Model(g, "tflite"))
    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    h = np.zeros((1, 3), np.float32)
    for _ in range(3):
        xv = rng.standard_normal((1, 2)).astype(np.float32)
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], xv)
        interpreter.invoke()
        h = np.tanh(xv @ wx.T + h @ wh.T + bias)
        np.testing.assert_allclose(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), h,
                                   rtol=1e-5, atol=1e-6)
    back = tflite.read_model(data)
    (node,) = list(back.graph)
    assert node.inputs[4].meta["tflite.is_variable"] and node.inputs[4].producer is None
    assert back.graph.states == (node.inputs[4],) and node.inputs[4].is_state
    check(back.graph)  # state is defined, not dangling
    assert tflite.serialize(back) == data


def test_builtin_options_2_tables_are_written_and_read_back() -> None:
    main, decomposition = Graph("tflite", "main"), Graph("tflite", "decomposition")
    a = Value("a", DType.FLOAT32, (2,))
    decomposition.set_inputs([a])
    decomposition.set_outputs([decomposition.append(_node("ABS", [a], Value("b", DType.FLOAT32, (2,)))).output])
    x = Value("x", DType.FLOAT32, (2,))
    main.set_inputs([x])
    composite = main.append(_node("STABLEHLO_COMPOSITE", [x], Value("y", DType.FLOAT32, (2,)),
                                  name=Attr.string("odml.my_abs"), decomposition_subgraph_index=Attr.int(1),
                                  composite_attributes=Attr.string(b"\x01\x02"), version=Attr.int(2)))
    main.set_outputs([composite.output])
    data = tflite.serialize(Model(main, "tflite", subgraphs=[decomposition]))
    op = unpack(data).subgraphs[0].operators[0]
    assert op.builtinOptionsType == 0 and op.builtinOptions2Type == fb.BuiltinOptions2.StableHLOCompositeOptions
    assert op.builtinOptions2.name == b"odml.my_abs" and bytes(op.builtinOptions2.compositeAttributes) == b"\x01\x02"
    back = tflite.read_model(data)
    node = next(iter(back.graph))
    assert node.meta["tflite.options2"] == "StableHLOCompositeOptions" and node.meta["tflite.options"] is None
    assert node.attrs["name"].value == b"odml.my_abs" and node.attrs["version"].value == 2
    assert tflite.serialize(back) == data
