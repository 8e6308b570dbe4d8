"""Models of a few hundred bytes that ask for gigabytes, and a capped way to run the CLI on them.

ONNX: a ``Tile``/``Range``/``ConstantOfShape``/``Expand`` making ~1e10 elements, read by an
``Add`` (ONNX's data propagation then wants tens of bytes per element); a chain whose size is
computed (``Mul``) so that only data propagation finds it; six ~1 GB ``ConstantOfShape`` results
declared in ``value_info`` (each under the per-tensor limit).  GraphDef: ``Fill`` and ``Tile``
nodes each under ``max_constant_size_in_bytes`` but hundreds of MB together, and one ``Fill`` of
40 GB.  Every bomb node is named ``bomb*``, so a test can check it is still in the output.

``run_capped`` runs ``python -m graphwright.cli.main ...`` in a child process whose address
space is limited (``RLIMIT_AS``, 2 GiB) and returns the result, the wall time and the child's
peak resident memory.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphwright import formats
from graphwright.ir import Model

from ._graphs import TfBuilder

__all__ = ["ONNX_BOMBS", "onnx_bomb", "graphdef_bomb", "GRAPHDEF_BOMBS", "run_capped", "CAP_BYTES", "CAP_SECONDS",
           "node_names"]

#: Address space the child may map (the test's "machine").
CAP_BYTES = 2 << 30
#: Wall time a bomb may take (loaded CI machines included; each finishes in about a second).
CAP_SECONDS = 60
HUGE = 10**10


def _c(name: str, array: object) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], inits: list[TensorProto],
           value_info: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bomb", [], outputs, inits, value_info=value_info or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _read_by_add(node: onnx.NodeProto, inits: list[TensorProto], dtype: int = TensorProto.FLOAT,
                 one: str = "one") -> onnx.ModelProto:
    add = helper.make_node("Add", [node.output[0], one], ["z"], name="add")
    return _model([node, add], [helper.make_tensor_value_info("z", dtype, None)], inits)


def onnx_bomb(kind: str) -> onnx.ModelProto:
    """One ONNX bomb: ``tile``, ``range``, ``constant_of_shape``, ``expand``, ``chain`` or ``value_info``."""
    one = _c("one", np.array([1.0], np.float32))
    if kind == "tile":
        return _read_by_add(helper.make_node("Tile", ["one", "r"], ["y"], name="bomb"),
                            [one, _c("r", np.array([HUGE], np.int64))])
    if kind == "range":
        inits = [_c("s", np.array(0, np.int64)), _c("l", np.array(HUGE, np.int64)), _c("d", np.array(1, np.int64))]
        return _read_by_add(helper.make_node("Range", ["s", "l", "d"], ["y"], name="bomb"), inits,
                            TensorProto.INT64, one="d")
    if kind == "constant_of_shape":
        node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb", value=_c("v", np.array([1.0], np.float32)))
        return _read_by_add(node, [one, _c("s", np.array([HUGE], np.int64))])
    if kind == "expand":
        return _read_by_add(helper.make_node("Expand", ["one", "s"], ["y"], name="bomb"),
                            [one, _c("s", np.array([HUGE], np.int64))])
    if kind == "chain":  # the size is computed: only ONNX's data propagation (or folding) finds it
        nodes = [helper.make_node("Mul", ["k", "k"], ["s"], name="square"),
                 helper.make_node("ConstantOfShape", ["s"], ["a"], name="bomb_cos",
                                  value=_c("v", np.array([1], np.int64))),
                 helper.make_node("Shape", ["a"], ["sa"], name="shape"),
                 helper.make_node("Expand", ["one", "sa"], ["y"], name="bomb_expand"),
                 helper.make_node("Add", ["y", "one"], ["z"], name="add")]
        return _model(nodes, [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                      [one, _c("k", np.array([100_000], np.int64))])
    if kind == "value_info":  # six ~1 GB results, declared, each under the 1 GB per-tensor limit
        n = 250_000_000
        nodes, outputs, info = [], [], []
        for i in range(6):
            nodes.append(helper.make_node("ConstantOfShape", ["s"], [f"z{i}"], name=f"bomb{i}",
                                          value=_c("v", np.array([float(i)], np.float32))))
            nodes.append(helper.make_node("ReduceSum", [f"z{i}"], [f"r{i}"], name=f"sum{i}", keepdims=0))
            info.append(helper.make_tensor_value_info(f"z{i}", TensorProto.FLOAT, [n]))
            outputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT, []))
        return _model(nodes, outputs, [_c("s", np.array([n], np.int64))], info)
    raise ValueError(kind)


ONNX_BOMBS = ("tile", "range", "constant_of_shape", "expand", "chain", "value_info")


def graphdef_bomb(kind: str) -> Model:
    """One GraphDef bomb: ``fill_chain`` (75 x 8 MB ``Fill``), ``tile_chain`` (a 4 KB ``Fill`` tiled
    into 60 x 8 MB), ``fill_huge`` (one 40 GB ``Fill``); every result read by an ``AddV2`` of a placeholder.
    """
    b = TfBuilder()
    x = b.placeholder("x", (None,))
    outputs = []
    if kind == "fill_chain":
        for i in range(75):
            dims = b.const(f"dims{i}", np.array([2_000_000 + i], np.int32))
            fill = b.op("Fill", f"bomb_fill{i}", dims, b.const(f"value{i}", np.float32(i)))
            outputs.append(b.op("AddV2", f"add{i}", x, fill))
    elif kind == "tile_chain":
        base = b.op("Fill", "base", b.const("dims", np.array([1000], np.int32)), b.const("value", np.float32(1)))
        for i in range(60):
            tiled = b.op("Tile", f"bomb_tile{i}", base, b.const(f"multiples{i}", np.array([2000 + i], np.int32)))
            outputs.append(b.op("AddV2", f"add{i}", x, tiled))
    elif kind == "fill_huge":
        fill = b.op("Fill", "bomb_fill", b.const("dims", np.array([HUGE], np.int64)), b.const("value", np.float32(1)))
        outputs.append(b.op("AddV2", "add", x, fill))
    else:
        raise ValueError(kind)
    return b.model([x], outputs)


GRAPHDEF_BOMBS = ("fill_chain", "tile_chain", "fill_huge")


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def run_capped(*args: object, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """``graphwright ARGS`` in a child limited to :data:`CAP_BYTES` of address space: (result, seconds)."""
    env = {**os.environ, "COLUMNS": "1000"}  # one warning, one line, whatever the terminal
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "graphwright.cli.main", *map(str, args)], capture_output=True,
                            text=True, timeout=CAP_SECONDS * 2, preexec_fn=_limit_address_space, env=env, cwd=cwd)
    return result, time.perf_counter() - start


def node_names(path: Path) -> set[str]:
    """Names of the nodes of a saved model (ONNX or GraphDef)."""
    return {node.name for graph in formats.load(path).graphs for node in graph}
