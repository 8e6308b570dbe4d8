"""insert_logging wires a Print between a node and its readers, as the original Graph Transform Tool does:
the same Print nodes (names, inputs, attributes) for every show_op/show_name/message combination and
op/prefix/first_n/summarize, and the same lines printed when TensorFlow runs the graph."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from graphwright.formats.graphdef import model_from_proto, parse_bytes, serialize
from graphwright.ir import AttrKind
from graphwright.transforms import run_pipeline

from .._generic import tf_graph

INPUTS, OUTPUTS = ["x"], ["out", "size"]
FEED = np.array([3.0, -1.0, 2.0, 5.0], np.float32)


def test_insert_logging_wires_print_between_node_and_readers() -> None:
    model, n = tf_graph()
    run_pipeline(model, 'insert_logging(op=AddV2, show_name=true, message="__m:")', outputs=["out"])
    printer = model.graph.find_node("a1__print__")
    assert printer is not None and printer.op == "Print"
    assert printer.inputs[0] is n["a1"].output
    assert n["a2"].input(0) is printer.output
    assert printer.attr("message") == b";a1__print__;__m:"
    assert printer.attrs["U"].kind is AttrKind.DTYPES


@pytest.fixture(scope="module")
def oracle() -> ModuleType:
    return pytest.importorskip("tests.tf_oracle")


@functools.cache
def _graph(oracle: ModuleType) -> bytes:
    """Every kind of node the original logs or skips: a fed Placeholder, Consts, a node only waited on (Sqrt),
    a two-output node with both outputs read (TopKV2), an int64 Shape, graph outputs nothing reads."""
    tf = oracle.tf
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        r = tf.nn.relu(x + tf.constant([1.0, 2.0, 3.0, 4.0], name="c"), name="r")
        s = tf.sqrt(x, name="s")
        top = tf.math.top_k(r, 2, name="tk")
        with tf.control_dependencies([s.op]):
            out = tf.identity(top.values * tf.cast(top.indices, tf.float32), name="out")
        tf.identity(tf.shape(out, out_type=tf.int64), name="size")
    return graph.as_graph_def().SerializeToString()


def _ours(data: bytes, pipeline: str) -> bytes:
    model = model_from_proto(parse_bytes(data)[0])
    run_pipeline(model, pipeline, inputs=INPUTS, outputs=OUTPUTS)
    return serialize(model)


def _nodes(oracle: ModuleType, data: bytes) -> list[tuple[str, str, list[str], dict[str, bytes]]]:
    """(name, op, inputs with explicit ports, serialized attributes) per node, in graph order."""
    def port(name: str) -> str:
        return name if name.startswith("^") or ":" in name else f"{name}:0"
    return [(n.name, n.op, [port(i) for i in n.input], {k: v.SerializeToString() for k, v in n.attr.items()})
            for n in oracle.tf.compat.v1.GraphDef.FromString(data).node]


def _printed(oracle: ModuleType, data: bytes, capfd: pytest.CaptureFixture[str], runs: int = 2) -> Counter[str]:
    """The lines TensorFlow's Print kernels write to stderr while the outputs are fetched ``runs`` times."""
    tf = oracle.tf
    graph_def = tf.compat.v1.GraphDef.FromString(data)
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            capfd.readouterr()
            for _ in range(runs):
                session.run([f"{o}:0" for o in OUTPUTS], {"x:0": FEED})
    return Counter(line for line in capfd.readouterr().err.splitlines() if line.endswith("]"))  # Print's data


SHOW = [(op, name, message) for op in ("false", "true") for name in ("false", "true")
        for message in ("", ', message="M:"', ', message="a;b c:"')]
FILTERS = ["insert_logging", "insert_logging(op=Relu)", "insert_logging(op=Relu, op=Sqrt, first_n=3, summarize=2)",
           "insert_logging(prefix=t)", "insert_logging(prefix=t, prefix=r, op=Relu, show_op=true)",
           "insert_logging(op=Const)", "insert_logging(op=Identity, show_name=true)", "insert_logging(op=Shape)",
           "insert_logging(prefix=nothing)", "insert_logging(op=Relu) insert_logging(op=Print, message=again)"]


@pytest.mark.tf
@pytest.mark.parametrize("pipeline", [f"insert_logging(show_op={o}, show_name={n}{m})" for o, n, m in SHOW] + FILTERS)
def test_print_nodes_are_the_original_tools(oracle: ModuleType, pipeline: str) -> None:
    data = _graph(oracle)
    theirs = _nodes(oracle, oracle.original_tool(data, INPUTS, OUTPUTS, pipeline))
    assert _nodes(oracle, _ours(data, pipeline)) == theirs


@pytest.mark.tf
def test_messages_match_the_issue_examples(oracle: ModuleType) -> None:
    data = _graph(oracle)
    messages = {}
    for pipeline in ('insert_logging(op=Relu, show_op=true, message="M:")',
                     'insert_logging(op=Relu, show_op=true, show_name=true, message="M:")',
                     "insert_logging(op=Relu)"):
        printer = next(n for n in _nodes(oracle, _ours(data, pipeline)) if n[1] == "Print")
        messages[pipeline] = oracle.tf.compat.v1.AttrValue.FromString(printer[3]["message"]).s
    assert list(messages.values()) == [b";Relu;M:", b";Relu;;r__print__;M:", b""]
    logged = {n[0] for n in _nodes(oracle, _ours(data, "insert_logging")) if n[1] == "Print"}
    assert {"x__print__", "c__print__", "s__print__"} <= logged  # fed input, Const, a node only waited on
    assert "size__print__" not in logged  # a graph output nothing reads


@pytest.mark.tf
@pytest.mark.parametrize("pipeline", ['insert_logging(show_op=true, message="M:")',
                                      'insert_logging(show_op=true, show_name=true, first_n=1, summarize=2)',
                                      "insert_logging(prefix=r, prefix=t, message=m)"])
def test_tensorflow_prints_the_same_lines(oracle: ModuleType, pipeline: str,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    data = _graph(oracle)
    ours = _printed(oracle, _ours(data, pipeline), capfd)
    theirs = _printed(oracle, oracle.original_tool(data, INPUTS, OUTPUTS, pipeline), capfd)
    assert ours == theirs and sum(ours.values()) > 0
    if "show_op=true" in pipeline and "show_name" not in pipeline:
        assert ours[";Relu;M:[4 1 5 9]"] == 2 and ours[";Const;M:[1 2 3 4]"] == 2  # relu(x + c), c, per run


@pytest.mark.tf
def test_where_the_original_writes_a_graph_tensorflow_rejects_ours_runs(oracle: ModuleType,
                                                                         capfd: pytest.CaptureFixture[str]) -> None:
    """A two-output node with only output 0 read (the original's U lists both types for one data input) and a
    NoOp waited on (the original wires a Print to its missing output 0)."""
    tf = oracle.tf
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        unique = tf.unique(x, name="uq")
        with tf.control_dependencies([tf.no_op(name="wait")]):
            out = tf.identity(unique.y, name="out")
        tf.identity(tf.shape(out, out_type=tf.int64), name="size")
    data = graph.as_graph_def().SerializeToString()
    for pipeline in ("insert_logging(op=Unique)", "insert_logging(op=NoOp)"):
        with pytest.raises(ValueError), tf.Graph().as_default():
            tf.import_graph_def(tf.compat.v1.GraphDef.FromString(
                oracle.original_tool(data, INPUTS, OUTPUTS, pipeline)), name="")
    ours = _ours(data, "insert_logging(op=Unique, op=NoOp)")
    printers = [n for n in _nodes(oracle, ours) if n[1] == "Print"]
    assert [(n[0], n[2]) for n in printers] == [("uq__print__", ["uq:0", "uq:0"])]
    assert _printed(oracle, ours, capfd, runs=1) == Counter({"[3 -1 2 5]": 1})


@pytest.mark.tf
@pytest.mark.parametrize("pipeline", ['insert_logging(show_op=true, show_name=true, message="x:")',
                                      "insert_logging(op=Conv2D, op=Relu, prefix=small_cnn_1/conv)"])
def test_frozen_keras_graph_gets_the_original_tools_print_nodes(oracle: ModuleType, pipeline: str) -> None:
    """Every node of examples/small_cnn.pb but the Print the original wires to the NoOp the output waits on."""
    data = (Path(__file__).resolve().parents[3] / "examples" / "small_cnn.pb").read_bytes()
    model = model_from_proto(parse_bytes(data)[0])
    run_pipeline(model, pipeline, inputs=["input"], outputs=["Identity"])
    ours = _nodes(oracle, serialize(model))
    theirs = _nodes(oracle, oracle.original_tool(data, ["input"], ["Identity"], pipeline))
    assert ours == [n for n in theirs if n[0] != "NoOp__print__"]
    assert sum(n[1] == "Print" for n in ours) >= (50 if "show_op" in pipeline else 3)
