"""Hand-built ONNX models (onnx.helper) exercising what torch exports rarely contain.

Each builder returns a checked ``onnx.ModelProto`` that onnxruntime can run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def conv_net(seed: int = 0) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> GlobalAveragePool -> Flatten -> Gemm, dynamic batch ("N")."""
    rng = _rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv.w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "conv.b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn.scale"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bn.bias"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bn.mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, 8).astype(np.float32), "bn.var"),
        numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32), "fc.w"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b"],
                         name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1, alpha=1.0, beta=1.0),
    ]
    graph = helper.make_graph(
        nodes, "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        inits,
        value_info=[
            helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 8, 8, 8]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 8, 8, 8]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, None),
        ],
        doc_string="a small conv net",
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="graphwright-tests", producer_version="1.0")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def control_flow(seed: int = 1) -> onnx.ModelProto:
    """If (both branches read outer values), Loop (carried state + scan output), a local function,
    metadata at every level, value_info with dim_params, an omitted optional input."""
    rng = _rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")
    # If: then = MatMul(x, w) (outer values x, w), else = x * 2 + bias (outer bias).
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["then_out"], name="then_mm")], "then_branch", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, ["B", 4])])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["k2"], name="k2", value=two),
         helper.make_node("Mul", ["x", "k2"], ["tmp"], name="else_mul"),
         helper.make_node("Add", ["tmp", "bias"], ["else_out"], name="else_add")], "else_branch", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, ["B", 4])])
    # Loop body: (iter, cond, acc) -> (cond, acc + x_row_sum, acc) with a scan output.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("ReduceSum", ["h", "axes1"], ["rs"], name="body_sum", keepdims=0),
         helper.make_node("Add", ["acc_in", "rs"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["acc_out"], ["scan_out"], name="body_scan")],
        "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["B"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["B"]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, ["B"])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes1")])
    scaled = helper.make_function(
        "local.fns", "Scaled", ["a"], ["out"],
        [helper.make_node("Constant", [], ["half"], value_float=0.5),
         helper.make_node("Mul", ["a", "half"], ["out"])],
        opset_imports=[helper.make_opsetid("", OPSET)])
    nodes = [
        helper.make_node("If", ["flag"], ["h"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "", "acc0"], ["acc", "scans"], name="loop", body=body,
                         doc_string="sums rows"),
        helper.make_node("Scaled", ["acc"], ["y"], name="scaled", domain="local.fns"),
        helper.make_node("Clip", ["h", "", "cap"], ["clipped"], name="clip"),
    ]
    nodes[0].metadata_props.add(key="origin", value="test")
    graph = helper.make_graph(
        nodes, "control_flow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc0", TensorProto.FLOAT, ["B"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B"]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, ["T", "B"]),
         helper.make_tensor_value_info("clipped", TensorProto.FLOAT, ["B", 4])],
        [w, bias, numpy_helper.from_array(np.array(3, np.int64), "trip"),
         numpy_helper.from_array(np.array(0.5, np.float32), "cap")],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", 4])],
    )
    graph.metadata_props.add(key="graph_key", value="graph_value")
    model = helper.make_model(
        graph, functions=[scaled],
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("local.fns", 1)],
        producer_name="graphwright-tests", doc_string="control flow model", model_version=7)
    model.ir_version = 8
    helper.set_model_props(model, {"author": "tests", "license": "none"})
    onnx.checker.check_model(model)
    return model


def unsorted(seed: int = 2) -> onnx.ModelProto:
    """A chain whose nodes appear in reverse topological order in the file."""
    rng = _rng(seed)
    nodes = [
        helper.make_node("Add", ["b", "k"], ["y"], name="last"),
        helper.make_node("Mul", ["a", "k"], ["b"], name="middle"),
        helper.make_node("Relu", ["x"], ["a"], name="first"),
    ]
    graph = helper.make_graph(
        nodes, "unsorted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def ir3_initializer_inputs(seed: int = 3) -> onnx.ModelProto:
    """IR version 3 style: initializers are also listed as graph inputs (overridable defaults)."""
    rng = _rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "ir3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def typed_tensors() -> onnx.ModelProto:
    """Initializers stored in typed fields (float_data, int32_data for float16, int64_data,
    string_data), raw bfloat16, and a sparse initializer; the graph concatenates the float ones."""
    f32 = helper.make_tensor("f32", TensorProto.FLOAT, [2, 2], [1.0, -2.0, 3.5, 0.25])
    f16 = numpy_helper.from_array(np.array([1.5, -0.5], np.float16), "f16")
    f16_typed = onnx.TensorProto(name="f16_typed", data_type=TensorProto.FLOAT16, dims=[2])
    f16_typed.int32_data.extend(np.array([0.75, 2.0], np.float16).view(np.uint16).astype(np.int32).tolist())
    i64 = helper.make_tensor("i64", TensorProto.INT64, [3], [1, -5, 1 << 40])
    strs = helper.make_tensor("strs", TensorProto.STRING, [2], [b"abc", b"\xff\x00"])
    bf16 = helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], [1.0, 2.0])
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp", TensorProto.FLOAT, [2], [5.0, 7.0]),
        helper.make_tensor("sp_idx", TensorProto.INT64, [2], [1, 6]), [2, 4])
    nodes = [
        helper.make_node("Cast", ["f16"], ["f16f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["f16_typed"], ["f16tf"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["f16f", "f16tf"], ["y"], axis=0),
        helper.make_node("Identity", ["sp"], ["dense"]),
    ]
    graph = helper.make_graph(
        nodes, "typed", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                             helper.make_tensor_value_info("dense", TensorProto.FLOAT, [2, 4])],
        [f32, f16, f16_typed, i64, strs, bf16], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def big_weights(n: int = 4096, seed: int = 4) -> onnx.ModelProto:
    """x @ w1 + b (w1 large enough to be moved to external data), plus a small constant."""
    rng = _rng(seed)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["y"], name="add")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n // 64])],
        [numpy_helper.from_array(rng.standard_normal((64, n // 64)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal(n // 64).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def save_with_external(model: onnx.ModelProto, path: Path, location: str | None = None) -> None:
    """Save with onnx's own external data writer (every tensor of 1 KiB or more moved out)."""
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location or f"{path.name}.weights", size_threshold=1024)


ALL = {
    "conv_net": conv_net,
    "control_flow": control_flow,
    "unsorted": unsorted,
    "ir3_initializer_inputs": ir3_initializer_inputs,
    "typed_tensors": typed_tensors,
    "big_weights": big_weights,
}
