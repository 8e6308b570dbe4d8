"""Generic transforms on hand-built graphs: structure, def-use and the runner's guarantees."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.errors import TransformError
from graphwright.ir import Attr, AttrKind, DType, Graph, Model, Node, Tensor, Value, check, constant_value
from graphwright.transforms import TransformResult, registry, run_pipeline, transform


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


def test_strip_unused_nodes_replaces_a_non_placeholder_input_and_cuts_above_it() -> None:
    model, n = tf_graph()
    report = run_pipeline(model, 'strip_unused_nodes(type=float, shape="1,8,8,3")', inputs=["x"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "decode" not in names and "raw" not in names and "save" not in names
    x = model.graph.find_node("x")
    assert x is not None and x.op == "Placeholder"
    assert x.attr("dtype") is DType.FLOAT32 and x.attr("shape") == (1, 8, 8, 3)
    assert n["id1"].input(0) is x.output
    assert "init" in names  # control input of a needed Const is kept
    assert report.steps[0].stats["placeholders_added"] == 1
    check(model.graph)


def test_strip_unused_nodes_per_name_types() -> None:
    model, _ = tf_graph()
    run_pipeline(model, 'strip_unused_nodes(name=x, type_for_name=int32, shape_for_name="2,-1")',
                 inputs=["x:0"], outputs=["out"])
    x = model.graph.find_node("x")
    assert x is not None and x.attr("dtype") is DType.INT32 and x.attr("shape") == (2, None)


def test_remove_nodes_moves_control_edges_to_the_input() -> None:
    model, n = tf_graph()
    run_pipeline(model, "remove_nodes(op=Identity)", inputs=["raw"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "id1" not in names and "id2" not in names and "out" in names  # outputs are never removed
    assert n["a1"].input(0) is n["x"].output
    assert n["out"].control_inputs == (n["x"],)


def test_merge_duplicate_nodes_merges_constants_then_their_readers() -> None:
    model, n = tf_graph()
    n["a2"].replace_input(0, n["id2"].output)  # a2 = id2 + k2 == a1 = id2 + k1 once k1/k2 merge
    n["out"].replace_input(0, n["a2"].output)
    n["k2"].add_control_input(n["init"])  # same control inputs as k1, else they are not duplicates
    extra = model.graph.append(Node("AddV2", [n["a1"].output, n["a2"].output], dialect="tf", name="sum"))
    model.graph.append(Node("Identity", [extra.output], dialect="tf", name="out2"))
    report = run_pipeline(model, "merge_duplicate_nodes", outputs=["out", "out2"])
    names = [node.name for node in model.graph]
    assert "k2" not in names and "a2" not in names
    assert extra.inputs == (n["a1"].output, n["a1"].output)
    assert report.steps[0].stats["nodes_merged"] == 2


def test_obfuscate_names_keeps_inputs_and_outputs() -> None:
    model, _ = tf_graph()
    run_pipeline(model, "obfuscate_names", inputs=["raw"], outputs=["out"])
    names = [node.name for node in model.graph]
    assert "raw" in names and "out" in names
    assert len(set(names)) == len(names)
    assert all(len(name) <= 2 for name in names if name not in ("raw", "out"))


def test_round_weights_levels_and_error_bound() -> None:
    model, n = tf_graph()
    rng = np.random.default_rng(0)
    original = rng.standard_normal(1000).astype(np.float32)
    big = model.graph.append(tf_const("big", original))
    model.graph.append(Node("Identity", [big.output], dialect="tf", name="big_out"))
    old_tensor = constant_value(big.output)
    run_pipeline(model, "round_weights(num_steps=16)", outputs=["out", "big_out"])
    new = constant_value(big.output).numpy()
    assert old_tensor.numpy().tolist() == original.tolist()  # shared tensors are never mutated
    assert len(np.unique(new)) <= 17
    step = (original.max() - original.min()) / 16
    assert np.abs(new - original).max() <= step / 2 + 1e-6
    small = constant_value(n["k1"].output).numpy()  # 20 elements: rounded as well (>= 16)
    assert len(np.unique(small)) <= 17


def test_insert_logging_wires_print_between_node_and_readers() -> None:
    model, n = tf_graph()
    run_pipeline(model, 'insert_logging(op=AddV2, show_name=true, message="__m:")', outputs=["out"])
    printer = model.graph.find_node("a1__print__")
    assert printer is not None and printer.op == "Print"
    assert printer.inputs[0] is n["a1"].output
    assert n["a2"].input(0) is printer.output
    assert printer.attr("message") == b";a1__print__;__m:"
    assert printer.attrs["U"].kind is AttrKind.DTYPES


def test_ignore_errors_skips_only_that_step() -> None:
    model, _ = tf_graph()
    report = run_pipeline(model, "rename_node(old_node_name=nope, new_node_name=x, ignore_errors=true) "
                                 "remove_nodes(op=Identity)", outputs=["out"])
    assert report.steps[0].skipped_error and "no node named 'nope'" in report.steps[0].skipped_error
    assert report.steps[1].changed
    with pytest.raises(TransformError, match="no node named 'nope'"):
        run_pipeline(model, "rename_node(old_node_name=nope, new_node_name=x)", outputs=["out"])


def test_structural_check_catches_a_transform_that_breaks_the_graph() -> None:
    @transform("test_breaks_graph", dialects={"tf"})
    def breaks(model: Model, ctx) -> TransformResult:
        """Point a node at a value nothing defines."""
        next(iter(model.graph)).set_inputs([Value("ghost")])
        return TransformResult(True)

    try:
        model, _ = tf_graph()
        with pytest.raises(TransformError, match=r"test_breaks_graph left the graph inconsistent.*ghost"):
            run_pipeline(model, "test_breaks_graph", outputs=["out"])
    finally:
        registry._REGISTRY.pop("test_breaks_graph", None)


def test_outputs_must_exist() -> None:
    model, _ = tf_graph()
    with pytest.raises(TransformError, match=r"--outputs names 'softmax'.*no node 'softmax'"):
        run_pipeline(model, "strip_unused_nodes", outputs=["softmax"])


def test_onnx_inputs_cut_the_graph() -> None:
    g = Graph("onnx")
    x = Value("x", DType.FLOAT32, (1, 4))
    g.set_inputs([x])
    a = g.append(Node("Relu", [x], dialect="onnx", name="relu", outputs=[Value("a", DType.FLOAT32, (1, 4))]))
    b = g.append(Node("Neg", [a.output], dialect="onnx", name="neg", outputs=[Value("b", DType.FLOAT32, (1, 4))]))
    g.set_outputs([b.output])
    model = Model(g, "onnx")
    run_pipeline(model, "strip_unused_nodes", inputs=["a"])
    assert [node.op for node in model.graph] == ["Neg"]
    assert [v.name for v in model.graph.inputs] == ["a"]
    assert b.input(0) is model.graph.inputs[0]


def test_tf_outputs_are_guessed_with_a_warning() -> None:
    model, _ = tf_graph()
    report = run_pipeline(model, "strip_unused_nodes")
    assert any("no --outputs given" in w and "(out)" in w for w in report.warnings)
    assert [v.producer.name for v in model.graph.outputs] == ["out"]  # SaveV2 is never an output
    assert model.graph.find_node("save") is None
