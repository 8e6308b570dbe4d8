"""Regenerate the small bundled example models in this folder (deterministic).

    python examples/make_examples.py

Writes ``small_cnn.pb`` (frozen TF GraphDef), ``small_cnn.onnx`` (torch
export, BatchNormalization kept), ``small_cnn.tflite`` (full-integer int8), ``small_cnn_float.tflite`` (the same
network in float32, what ``graphwright quantize`` starts from) and ``README.md``, verifying each file with its own runtime.  Needs TensorFlow,
torch, onnx, onnxruntime and ai-edge-litert; reuses the model helpers of
``tests/models`` so that examples and test models are made the same way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Reproducible numerics and quiet logs; must be set before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo root, for tests.models

import keras  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from keras import layers  # noqa: E402

from tests.models._keras_common import (  # noqa: E402
    freeze_keras_model,
    graphdef_facts,
    randomize_keras_model,
    run_frozen_graph,
    small_cnn,
    write_graphdef,
)
from tests.models._torch_common import (  # noqa: E402
    SmallCNN,
    export_onnx,
    randomize_norms_and_biases,
)
from tests.models.build_tflite import convert_keras, run_tflite  # noqa: E402

SEED = 0
Row = tuple[str, str, str, str, str, str]  # file, input, shape, dtype, outputs, notes


def make_graphdef(path: Path) -> Row:
    """Keras CNN with BN -> frozen GraphDef; BN becomes Mul/AddV2 subgraphs."""
    keras.utils.set_random_seed(SEED)
    inp = keras.Input((32, 32, 3), batch_size=1, name="image")
    x = inp
    for i, (filters, stride) in enumerate([(16, 1), (32, 2), (32, 1)]):
        x = layers.Conv2D(filters, 3, strides=stride, padding="same", name=f"conv{i}")(x)
        x = layers.BatchNormalization(name=f"bn{i}")(x)
        x = layers.ReLU(name=f"relu{i}")(x)
    x = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw")(x)
    x = layers.BatchNormalization(name="dw_bn")(x)
    x = layers.ReLU(name="dw_relu")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    x = layers.Dense(10, name="fc")(x)
    out = layers.Softmax(name="probs")(x)
    model = keras.Model(inp, out, name="small_cnn")
    randomize_keras_model(model, SEED)

    shape = (1, 32, 32, 3)
    graph_def, ins, outs = freeze_keras_model(model, shape, input_name="input")
    write_graphdef(graph_def, path)
    x_in = np.random.default_rng(SEED).random(shape, dtype=np.float32)
    (got,) = run_frozen_graph(path, {ins[0]: x_in}, outs)
    diff = float(np.abs(got - np.asarray(model(x_in, training=False))).max())
    assert diff < 1e-5, f"frozen graph differs from Keras by {diff}"
    ops = graphdef_facts(graph_def)["op_histogram"]
    n_bn = ops.get("Rsqrt", 0)
    note = f"frozen TF GraphDef, {len(graph_def.node)} nodes; {n_bn} BNs as Rsqrt/Mul/Sub/AddV2"
    return (path.name, ins[0], str(shape), "float32", ", ".join(outs), note)


def make_onnx(path: Path) -> Row:
    """torch CNN (Conv+BN+ReLU, residual add, pooling, Linear) -> ONNX opset 17."""
    torch.manual_seed(SEED)
    model = SmallCNN(width=8, num_classes=10).eval()
    randomize_norms_and_biases(model, SEED)
    x = torch.from_numpy(np.random.default_rng(SEED).random((1, 3, 32, 32), dtype=np.float32))
    export_onnx(model, (x,), path, ["input"], ["logits"])
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input": x.numpy()})
    with torch.no_grad():
        diff = float(np.abs(got - model(x).numpy()).max())
    assert diff < 1e-4, f"onnxruntime differs from torch by {diff}"
    n_bn = sum(n.op_type == "BatchNormalization" for n in proto.graph.node)
    note = (
        "torch.onnx.export (TorchScript, opset 17, no constant folding), "
        f"{n_bn} BatchNormalization nodes"
    )
    return (path.name, "input", "(1, 3, 32, 32)", "float32", "logits", note)


def make_tflite(path: Path) -> Row:
    """Keras CNN (Conv/BN/ReLU6, depthwise, add, pooling, Dense) -> int8 TFLite."""
    keras.utils.set_random_seed(SEED)
    model = small_cnn((32, 32, 3), num_classes=10)
    randomize_keras_model(model, SEED)
    path.write_bytes(convert_keras(model, int8=True))
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    (inp,), outs = interp.get_input_details(), interp.get_output_details()
    x = np.random.default_rng(SEED).integers(-128, 128, inp["shape"], dtype=np.int8)
    (got,) = run_tflite(path, {inp["name"]: x})
    assert got.dtype == np.int8 and got.shape == (1, 10)
    scale, zero_point = inp["quantization"]
    note = (
        "full-integer int8 (TFLiteConverter.from_keras_model, 20 calibration images); "
        f"input scale {scale:.6g}, zero point {zero_point}"
    )
    shape = str(tuple(int(d) for d in inp["shape"]))
    return (path.name, inp["name"], shape, "int8", ", ".join(o["name"] for o in outs), note)


def make_tflite_float(path: Path) -> Row:
    """The Keras CNN of :func:`make_tflite`, converted without quantization (float32)."""
    keras.utils.set_random_seed(SEED)
    model = small_cnn((32, 32, 3), num_classes=10)
    randomize_keras_model(model, SEED)
    path.write_bytes(convert_keras(model, int8=False))
    from ai_edge_litert.interpreter import Interpreter  # lazy: as make_tflite

    interp = Interpreter(model_path=str(path))
    (inp,), outs = interp.get_input_details(), interp.get_output_details()
    x = np.random.default_rng(SEED).random(inp["shape"], dtype=np.float32)
    (got,) = run_tflite(path, {inp["name"]: x})
    assert got.dtype == np.float32 and got.shape == (1, 10)
    shape = str(tuple(int(d) for d in inp["shape"]))
    note = "the network of `small_cnn.tflite` in float32 (TFLiteConverter.from_keras_model, no quantization)"
    return (path.name, inp["name"], shape, "float32", ", ".join(o["name"] for o in outs), note)


def write_readme(rows: list[Row]) -> None:
    lines = [
        "# Example models",
        "",
        "Small models with random weights (batch-norm statistics randomized), made by",
        "`python examples/make_examples.py` (deterministic; rerun to regenerate).",
        "",
        "| file | size | input name | input shape | input dtype | output name(s) "
        "| how it was made |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for file, name, shape, dtype, outs, note in rows:
        size = f"{(HERE / file).stat().st_size / 1024:.1f} KiB"
        lines.append(f"| `{file}` | {size} | `{name}` | {shape} | {dtype} | `{outs}` | {note} |")
    lines += [
        "",
        "Names: the `.pb` uses node names (tensors are `input:0`, `Identity:0`); the",
        "`.tflite` uses the interpreter's tensor names.",
        "",
    ]
    (HERE / "README.md").write_text("\n".join(lines))


def main() -> None:
    rows = [
        make_graphdef(HERE / "small_cnn.pb"),
        make_onnx(HERE / "small_cnn.onnx"),
        make_tflite(HERE / "small_cnn.tflite"),
        make_tflite_float(HERE / "small_cnn_float.tflite"),
    ]
    write_readme(rows)
    for file, name, shape, _, outs, _ in rows:
        size = (HERE / file).stat().st_size
        print(f"{file:18s} {size:>8d} bytes  {name} {shape} -> {outs}")


if __name__ == "__main__":
    main()
