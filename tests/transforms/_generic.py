"""What the transform tests share: a hand-built TF graph (``tf_graph``), real ONNX and TFLite models
run on onnxruntime / LiteRT (``_model``, ``_apply``, ``_outputs``, ``_same``) and frozen GraphDefs
run by TensorFlow (``_case``, ``_ours``, ``_feeds``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import graphwright as gw
from graphwright.ir import Attr, DType, Graph, Model, Node, Tensor
from graphwright.runtime import input_specs, run
from graphwright.verify import random_feeds


def tf_const(name: str, array: np.ndarray) -> Node:
    t = Tensor.from_numpy(np.asarray(array, np.float32))
    return Node("Const", [], dialect="tf", name=name, attrs={"value": Attr.tensor(t), "dtype": Attr.dtype(DType.FLOAT32)})


def tf_graph() -> tuple[Model, dict[str, Node]]:
    """raw -> Decode -> Mul(x) -> Identity -> Identity -> Add(k1) -> Add(k2) -> out ; plus an unused Save."""
    g = Graph("tf")
    n: dict[str, Node] = {}

    def add(node: Node) -> Node:
        if node.op in ("Mul", "Identity", "AddV2"):
            node.attrs["T"] = Attr.dtype(DType.FLOAT32)
        n[node.name] = g.append(node)
        return node

    add(Node("Placeholder", [], dialect="tf", name="raw", attrs={"dtype": Attr.dtype(DType.STRING)}))
    add(Node("DecodeJpeg", [n["raw"].output], dialect="tf", name="decode"))
    add(Node("Mul", [n["decode"].output, n["decode"].output], dialect="tf", name="x"))
    add(Node("Identity", [n["x"].output], dialect="tf", name="id1"))
    add(Node("Identity", [n["id1"].output], dialect="tf", name="id2"))
    add(tf_const("k1", np.arange(20)))
    add(tf_const("k2", np.arange(20)))
    add(Node("AddV2", [n["id2"].output, n["k1"].output], dialect="tf", name="a1"))
    add(Node("AddV2", [n["a1"].output, n["k2"].output], dialect="tf", name="a2"))
    add(Node("NoOp", [], dialect="tf", name="init"))
    n["k1"].add_control_input(n["init"])
    add(Node("SaveV2", [n["x"].output], dialect="tf", name="save"))
    add(Node("Identity", [n["a2"].output], dialect="tf", name="out", control_inputs=[n["id2"]]))
    return Model(g, "graphdef"), n


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _model(kind: str) -> Path:
    if kind == "onnx_cnn":
        return EXAMPLES / "small_cnn.onnx"
    if kind == "tflite_int8":
        return EXAMPLES / "small_cnn.tflite"
    from tests.models import tflite_model, torch_onnx
    return {"onnx_bert": lambda: torch_onnx("bert").path,
            "tflite_float": lambda: tflite_model("float").path}[kind]()


def _apply(path: Path, transforms: str, **io: list[str]) -> gw.Model:
    model = gw.load(path)
    gw.transform(model, transforms, **io)
    return model


def _outputs(model_or_path, seed: int = 0) -> dict[str, np.ndarray]:
    feeds = random_feeds(input_specs(model_or_path), seed=seed, dim_values={"batch_size": 2, "sequence_length": 7})
    return run(model_or_path, feeds)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], **tol: float) -> None:
    assert list(a) == list(b)
    for key in a:
        if tol:
            np.testing.assert_allclose(b[key], a[key], **tol)
        else:
            np.testing.assert_array_equal(b[key], a[key])


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small_cnn.pb"


def _ours(path: Path, transforms: str, inputs: list[str], outputs: list[str]) -> bytes:
    model = gw.load(path)
    gw.transform(model, transforms, inputs=inputs, outputs=outputs)
    return gw.serialize(model)


def _feeds(inputs: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs.items()}


def _case(kind: str):
    if kind == "example":
        return EXAMPLE, {"input": (1, 32, 32, 3)}, ["Identity"]
    from tests.models import keras_graphdef
    info = keras_graphdef(kind)
    return info.path, dict(info.inputs), list(info.outputs)
