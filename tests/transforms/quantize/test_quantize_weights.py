"""quantize_weights on GraphDefs: structure, exact bytes against the original tool, numerics in TensorFlow.

The ONNX variant is tested in test_quantize_weights_onnx.py."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright import TransformError
from graphwright.ir import Attr, DType, Graph, Model, Node, Tensor, constant_value
from graphwright.transforms.quantize.quantize_weights import (
    quantize_min_first,
    weight_range,
)

from ._helpers import EXAMPLE, EXAMPLE_INPUTS, EXAMPLE_OUTPUTS, feeds, ours


def _const_model(values: np.ndarray, name: str = "w") -> Model:
    graph = Graph("tf")
    tensor = Tensor.from_numpy(values.astype(np.float32))
    const = Node("Const", dialect="tf", name=name,
                 attrs={"dtype": Attr.dtype(DType.FLOAT32), "value": Attr.tensor(tensor)})
    reader = Node("Identity", [const.output], dialect="tf", name="read", attrs={"T": Attr.dtype(DType.FLOAT32)})
    graph.extend([const, reader])
    return Model(graph, "graphdef")


def _nodes(model: Model) -> dict[str, Node]:
    return {node.name: node for node in model.graph}


def test_large_const_becomes_quint8_with_min_first_dequantize() -> None:
    values = np.linspace(0.5, 2.0, 2048, dtype=np.float32).reshape(32, 64)  # all positive: 0 joins the range
    model = _const_model(values)
    report = gw.transform(model, "quantize_weights")
    assert report.changed
    nodes = _nodes(model)
    assert set(nodes) == {"w_quantized_const", "w_quantized_min", "w_quantized_max", "w", "read"}
    deq = nodes["w"]
    assert deq.op == "Dequantize" and deq.attr("T") is DType.QUINT8 and deq.attr("mode") == b"MIN_FIRST"
    assert [v.producer.name for v in deq.inputs] == ["w_quantized_const", "w_quantized_min", "w_quantized_max"]
    assert nodes["read"].inputs[0] is deq.output
    codes = constant_value(nodes["w_quantized_const"].output)
    assert codes.dtype is DType.QUINT8 and codes.shape == (32, 64)
    lo = float(constant_value(nodes["w_quantized_min"].output).numpy())
    hi = float(constant_value(nodes["w_quantized_max"].output).numpy())
    assert lo == 0.0 and hi == pytest.approx(2.0)
    restored = lo + codes.numpy().astype(np.float64) * (hi - lo) / 255.0
    assert np.abs(restored - values).max() <= (hi - lo) / 510.0 + 1e-6


def test_small_and_non_float_consts_are_left_alone() -> None:
    model = _const_model(np.ones(1023, np.float32))
    report = gw.transform(model, "quantize_weights")
    assert not report.changed and _nodes(model)["w"].op == "Const"
    model = _const_model(np.ones(16, np.float32))
    assert gw.transform(model, "quantize_weights(minimum_size=16)").changed


def test_all_zero_tensor_gets_a_non_empty_range() -> None:
    lo, hi = weight_range(np.zeros(8, np.float32))
    assert (lo, hi) == (0.0, 1.0)
    assert not quantize_min_first(np.zeros(4, np.float32), lo, hi).any()


def test_codes_match_the_range_ends() -> None:
    values = np.array([-1.0, 0.0, 3.0], np.float32)
    codes = quantize_min_first(values, -1.0, 3.0)
    assert codes[0] == 0 and codes[2] == 255
    assert abs(-1.0 + codes[1] * 4.0 / 255.0) <= 4.0 / 510.0


def test_bad_minimum_size_is_a_one_line_error() -> None:
    model = _const_model(np.ones(4, np.float32))
    with pytest.raises(TransformError, match="quantize_weights: minimum_size"):
        gw.transform(model, "quantize_weights(minimum_size=-1)")
    with pytest.raises(TransformError, match="minimum_size"):
        gw.transform(model, "quantize_weights(minimum_size=big)")


@pytest.mark.tf
def test_same_nodes_and_bytes_as_the_original_tool() -> None:
    oracle = pytest.importorskip("tests.tf_oracle")
    from tensorboard.compat.proto import graph_pb2

    transforms = "quantize_weights(minimum_size=16)"
    data = EXAMPLE.read_bytes()
    theirs_bytes = oracle.original_tool(data, list(EXAMPLE_INPUTS), EXAMPLE_OUTPUTS, transforms)
    ours_bytes, _ = ours(EXAMPLE, transforms, list(EXAMPLE_INPUTS), EXAMPLE_OUTPUTS)
    theirs, mine = graph_pb2.GraphDef(), graph_pb2.GraphDef()
    theirs.ParseFromString(theirs_bytes)
    mine.ParseFromString(ours_bytes)
    a = {n.name: n for n in theirs.node}
    b = {n.name: n for n in mine.node}
    assert set(a) == set(b)
    quantized = 0
    for name, node in a.items():
        other = b[name]
        assert (node.op, sorted(node.attr), [i.removesuffix(":0") for i in node.input]) == \
            (other.op, sorted(other.attr), [i.removesuffix(":0") for i in other.input]), name
        if node.op == "Const":
            x, y = node.attr["value"].tensor, other.attr["value"].tensor
            assert (x.dtype, x.tensor_content) == (y.dtype, y.tensor_content), name  # identical bytes
            quantized += name.endswith("_quantized_const")
    assert quantized == 24
    # TensorFlow runs it, within the quantization error of the original
    x = feeds(EXAMPLE_INPUTS)
    ref = oracle.run_graphdef(data, x, EXAMPLE_OUTPUTS)[0]
    got = oracle.run_graphdef(ours_bytes, x, EXAMPLE_OUTPUTS)[0]
    expected = oracle.run_graphdef(theirs_bytes, x, EXAMPLE_OUTPUTS)[0]
    np.testing.assert_array_equal(got, expected)
    assert np.abs(got - ref).max() < 0.02


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet50", "inception_v3"])
def test_keras_graphs_shrink_like_the_original(name: str) -> None:
    oracle = pytest.importorskip("tests.tf_oracle")
    from tests.models import keras_graphdef

    info = keras_graphdef(name)
    data = info.path.read_bytes()
    inputs, outputs = list(dict(info.inputs)), list(info.outputs)
    theirs = oracle.original_tool(data, inputs, outputs, "quantize_weights")
    mine, report = ours(info.path, "quantize_weights", inputs, outputs)
    assert report.steps[0].stats["consts_quantized"] > 50
    assert oracle.op_histogram(mine) == oracle.op_histogram(theirs)
    # same sizes but for the 2 bytes per scalar the original spends on an empty tensor_shape
    assert abs(len(mine) - len(theirs)) <= 4 * report.steps[0].stats["consts_quantized"]
    assert len(mine) / len(data) < 0.28  # 0.25-0.28 before batch-norm folding
    from tensorboard.compat.proto import graph_pb2

    def codes(graph: bytes) -> dict[str, bytes]:
        g = graph_pb2.GraphDef()
        g.ParseFromString(graph)
        return {n.name: n.attr["value"].tensor.tensor_content for n in g.node if n.name.endswith("_quantized_const")}

    assert codes(mine) == codes(theirs)  # byte-identical eight-bit weights
    x = feeds(dict(info.inputs))
    ref = oracle.run_graphdef(data, x, outputs)[0]
    got = oracle.run_graphdef(mine, x, outputs)[0]
    assert got.argmax() == ref.argmax()
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
