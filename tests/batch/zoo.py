"""Small real models for batch tests: ONNX Conv+BatchNorm+Relu+Identity chains built with onnx.helper
(each with its own channels and seeded weights), the repository's examples, and a plugin of
transforms that crash their worker on purpose."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def conv_bn_model(index: int) -> onnx.ModelProto:
    """x[1,c,8,8] -> Conv(3x3) -> BatchNormalization -> Relu -> Identity -> y: 4 nodes, 2 after simplify
    (the batch norm folded into the convolution, the identity removed)."""
    rng = np.random.default_rng(index)
    c, k = 1 + index % 3, 2 + index % 4
    inits = [
        numpy_helper.from_array(rng.normal(size=(k, c, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=k).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, size=k).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.normal(size=k).astype(np.float32), "shift"),
        numpy_helper.from_array(rng.normal(size=k).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, size=k).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["y"], name="identity"),
    ]
    graph = helper.make_graph(nodes, f"chain{index}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_zoo(folder: Path, count: int = 20) -> list[Path]:
    """``count`` models in ``folder``: the three examples (ONNX, TFLite, GraphDef) and ONNX chains."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("small_cnn.onnx", "small_cnn.tflite", "small_cnn.pb"):
        paths.append(Path(shutil.copy(EXAMPLES / name, folder / name)))
    for i in range(count - len(paths)):
        path = folder / f"chain{i:02d}.onnx"
        onnx.save(conv_bn_model(i), path)
        paths.append(path)
    return paths


PLUGIN = '''
    """Transforms that end their worker process on purpose (batch isolation tests)."""
    import os
    import signal
    import time
    from pathlib import Path

    from graphwright.transforms import TransformResult, transform


    @transform("test_segfault")
    def test_segfault(model, ctx):
        """Kill this process with SIGSEGV."""
        os.kill(os.getpid(), signal.SIGSEGV)
        return TransformResult(False)


    @transform("test_exit")
    def test_exit(model, ctx, *, code: int = 3):
        """End this process at once with an exit code, as os._exit does."""
        os._exit(code)


    @transform("test_crash_once")
    def test_crash_once(model, ctx, *, marker: str = ""):
        """Crash the first time (no marker file yet), succeed after."""
        if not Path(marker).exists():
            Path(marker).write_text("crashed once")
            os._exit(9)
        return TransformResult(False)


    @transform("test_sleep")
    def test_sleep(model, ctx, *, seconds: float = 1.0):
        """Take this long."""
        time.sleep(seconds)
        return TransformResult(False)
'''


def write_plugin(folder: Path) -> Path:
    path = folder / "gw_batch_test_plugin.py"
    path.write_text(textwrap.dedent(PLUGIN))
    return path
