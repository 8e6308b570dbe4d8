"""Small ONNX models and onnxruntime's own quantizer, for the static QDQ tests.

``op_zoo(opset)`` is one graph holding every operator type the QDQ quantizer has a rule for
(Conv, ConvTranspose, Relu, Clip, MaxPool, AveragePool, Resize, Split, LeakyRelu, Sigmoid,
Mul, Pad, Slice, Concat, InstanceNormalization, Where, GlobalAveragePool, Flatten, Reshape,
Transpose, MatMul with a constant and with two activations, Add, LayerNormalization, Softmax,
Gemm with and without ``transB``, Gather of a constant table, Unsqueeze, Squeeze) plus one it
has none for (ReduceMean); two graph outputs, one of them also read inside the graph.
Weights are seeded random, biases and norms non-trivial.

``ort_ranges`` runs onnxruntime's MinMax calibrator; ``ort_quantize`` runs
``onnxruntime.quantization.quantize_static`` on exactly those ranges (through its calibration
cache), so both quantizers see the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ZOO_INPUTS = {"x": (1, 3, 16, 16), "idx": (1,)}


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def op_zoo(opset: int = 17) -> onnx.ModelProto:
    """The operator zoo (see the module docstring) at ``opset`` (17 or later)."""
    rng = np.random.default_rng(3)

    def w(*shape: int, s: float = 0.3) -> np.ndarray:
        return rng.normal(0, s, shape).astype(np.float32)

    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = [
        _init("W1", w(8, 3, 3, 3)), _init("B1", w(8, s=0.1)), _init("Wt", w(8, 4, 2, 2)), _init("Bt", w(4, s=0.1)),
        _init("clip_lo", np.float32(0.0)), _init("clip_hi", np.float32(6.0)),
        _init("resize_scales", np.array([1, 1, 2, 2], np.float32)), _init("split", i64(2, 2)),
        _init("pads", i64(0, 0, 1, 1, 0, 0, 1, 1)), _init("starts", i64(1, 1)), _init("ends", i64(17, 17)),
        _init("axes23", i64(2, 3)), _init("in_scale", 1 + w(6, s=0.2)), _init("in_bias", w(6, s=0.2)),
        _init("cond", rng.random((1, 1, 16, 16)) > 0.5), _init("shape3", i64(1, 6, 256)),
        _init("Wm", w(6, 8)), _init("bm", w(8, s=0.2)), _init("ln_gamma", 1 + w(8, s=0.2)),
        _init("ln_beta", w(8, s=0.2)), _init("Wg", w(5, 6)), _init("Bg", w(5, s=0.1)), _init("Wg2", w(8, 5)),
        _init("Bg2", w(5, s=0.1)), _init("table", w(10, 5, s=1.0)), _init("axis0", i64(0)),
    ]
    mean_axes = {"axes": [1]} if opset < 18 else {}
    mean_inputs = ["att"] if opset < 18 else ["att", "axes1"]
    if opset >= 18:
        inits.append(_init("axes1", i64(1)))
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], "relu1"),
        n("MaxPool", ["r1"], ["mp"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        n("ConvTranspose", ["mp", "Wt", "Bt"], ["ct"], "deconv", strides=[2, 2]),
        n("Clip", ["ct", "clip_lo", "clip_hi"], ["cl"], "clip"),
        n("AveragePool", ["cl"], ["ap"], "avgpool", kernel_shape=[2, 2], strides=[2, 2]),
        n("Resize", ["ap", "", "resize_scales"], ["rs"], "resize", mode="nearest"),
        n("Split", ["rs", "split"], ["sa", "sb"], "split", axis=1),
        n("LeakyRelu", ["sa"], ["la"], "leaky", alpha=0.1),
        n("Sigmoid", ["sb"], ["sg"], "sigmoid"),
        n("Mul", ["la", "sg"], ["mu"], "mul"),
        n("Pad", ["mu", "pads"], ["pd"], "pad"),
        n("Slice", ["pd", "starts", "ends", "axes23"], ["sl"], "slice"),
        n("Concat", ["sl", "cl"], ["cc"], "concat", axis=1),
        n("InstanceNormalization", ["cc", "in_scale", "in_bias"], ["inn"], "inorm"),
        n("Where", ["cond", "inn", "cc"], ["wh"], "where"),
        n("GlobalAveragePool", ["wh"], ["gp"], "gap"),
        n("Flatten", ["gp"], ["fl"], "flatten"),
        n("Reshape", ["wh", "shape3"], ["rsh"], "reshape"),
        n("Transpose", ["rsh"], ["tp"], "transpose", perm=[0, 2, 1]),
        n("MatMul", ["tp", "Wm"], ["mm"], "matmul"),
        n("Add", ["mm", "bm"], ["ad"], "add_bias"),
        n("LayerNormalization", ["ad", "ln_gamma", "ln_beta"], ["ln"], "lnorm", axis=-1),
        n("Transpose", ["ln"], ["lnt"], "transpose_k", perm=[0, 2, 1]),
        n("MatMul", ["ln", "lnt"], ["scores"], "matmul_qk"),
        n("Softmax", ["scores"], ["probs"], "softmax", axis=-1),
        n("MatMul", ["probs", "ln"], ["att"], "matmul_v"),
        n("ReduceMean", mean_inputs, ["rm"], "mean", keepdims=0, **mean_axes),
        n("Gemm", ["fl", "Wg", "Bg"], ["g1"], "gemm_t", transB=1),
        n("Gemm", ["rm", "Wg2", "Bg2"], ["g2"], "gemm", beta=0.5),
        n("Gather", ["table", "idx"], ["emb"], "embed", axis=0),
        n("Unsqueeze", ["emb", "axis0"], ["emb3"], "unsqueeze"),
        n("Squeeze", ["emb3", "axis0"], ["emb2"], "squeeze"),
        n("Add", ["g1", "g2"], ["g12"], "add_heads"),
        n("Add", ["g12", "emb2"], ["logits"], "add_embed"),
    ]
    graph = helper.make_graph(
        nodes, "zoo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(ZOO_INPUTS["x"])),
         helper.make_tensor_value_info("idx", TensorProto.INT64, list(ZOO_INPUTS["idx"]))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5]),
         helper.make_tensor_value_info("ln", TensorProto.FLOAT, [1, 256, 8])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def branch_capture(opset: int = 17) -> onnx.ModelProto:
    """Conv -> c, then ``If(flag)`` whose branches read ``c`` from the outer graph (Relu / Sigmoid)
    and a Mul in the main graph reading ``c`` and the If's output."""
    rng = np.random.default_rng(4)
    inits = [_init("W", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)),
             _init("B", rng.normal(0, 0.1, (4,)).astype(np.float32))]
    then = helper.make_graph([helper.make_node("Relu", ["c"], ["t"], "then_relu")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4, 6, 6])])
    other = helper.make_graph([helper.make_node("Sigmoid", ["c"], ["e"], "else_sigmoid")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4, 6, 6])])
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], "conv"),
             helper.make_node("If", ["flag"], ["branch"], "if", then_branch=then, else_branch=other),
             helper.make_node("Mul", ["c", "branch"], ["y"], "mul")]
    graph = helper.make_graph(
        nodes, "branch_capture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def smooth_images(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    """Natural-image-like NCHW tensors: upsampled coarse noise plus a little fine noise."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    out = []
    for _ in range(count):
        coarse = rng.normal(0, 1, (n, c, (h + 7) // 8, (w + 7) // 8)).astype(np.float32)
        image = np.kron(coarse, np.ones((1, 1, 8, 8), np.float32))[:, :, :h, :w]
        out.append(image + 0.1 * rng.normal(0, 1, shape).astype(np.float32))
    return out


def zoo_feeds(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed + 100)
    return [{"x": x, "idx": rng.integers(0, 10, ZOO_INPUTS["idx"]).astype(np.int64)}
            for x in smooth_images(ZOO_INPUTS["x"], count, seed)]


def all_ort_op_types() -> list[str]:
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


class _Reader:
    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def ort_ranges(path: Path, feeds: list[dict[str, np.ndarray]], tmp: Path):
    """onnxruntime's MinMax ranges: ``({name: (min, max)}, TensorsData)``."""
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator

    class Reader(_Reader, CalibrationDataReader):
        pass

    calibrator = create_calibrator(Path(path), all_ort_op_types(), augmented_model_path=str(tmp / "augmented.onnx"),
                                   calibrate_method=CalibrationMethod.MinMax)
    calibrator.collect_data(Reader(feeds))
    data = calibrator.compute_data()
    table = {name: (float(np.ravel(td.range_value[0])[0]), float(np.ravel(td.range_value[1])[0]))
             for name, td in data.data.items()}
    return table, data


def ort_quantize(path: Path, out: Path, tensors_data, tmp: Path, *, activation_type: str = "int8",
                 per_channel: bool = True, symmetric: bool = False, nodes_to_exclude: list[str] | None = None,
                 op_types: list[str] | None = None) -> onnx.ModelProto:
    """``quantize_static(QDQ)`` on the ranges in ``tensors_data`` (handed over as its calibration cache)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    cache = tmp / f"{out.stem}.calibration.json"
    save_tensors_data(tensors_data, cache)
    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8, "int16": QuantType.QInt16}
    quantize_static(str(path), str(out), None, quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=types[activation_type], weight_type=QuantType.QInt8,
                    nodes_to_exclude=nodes_to_exclude, op_types_to_quantize=op_types,
                    calibration_cache_path=str(cache), extra_options={"ActivationSymmetric": symmetric})
    return onnx.load(str(out))
