"""The fusion safety predicates, alone and inside patterns."""

from __future__ import annotations

import numpy as np

from graphwright.ir import DType, Graph, Node, Tensor, Value
from graphwright.patterns import (
    ANY,
    CONST,
    P,
    fusable_chain,
    is_constant,
    match_pattern,
    no_control_edges,
    not_graph_io,
    same_dtype,
    single_use,
    weight_not_shared,
    why_not_fusable,
)

from ._graphs import ConvMul

CHAIN = P("Relu", P("BiasAdd", P("Conv2D", ANY, CONST), CONST))


def conv_bias_relu() -> tuple[Graph, dict[str, Node]]:
    cm = ConvMul()
    g = cm.graph
    g.remove([cm.relu, cm.mul], force=True)
    cm.s.name = "b"
    bias = g.append(Node("BiasAdd", [cm.conv.output, cm.s.output], dialect="tf", name="bias"))
    relu = g.append(Node("Relu", [bias.output], dialect="tf", name="relu"))
    g.set_outputs([relu.output])
    return g, {"x": cm.x, "w": cm.w, "conv": cm.conv, "b": cm.s, "bias": bias, "relu": relu}


def test_single_use_and_graph_io() -> None:
    g, n = conv_bias_relu()
    assert single_use(n["conv"]) and single_use(n["conv"].output)
    assert not single_use(n["relu"].output)  # graph outputs are not uses
    assert not not_graph_io(n["relu"]) and not not_graph_io(n["relu"].output)
    assert not_graph_io(n["bias"])
    g.set_inputs([n["x"].output])
    assert not not_graph_io(n["x"])
    g.append(Node("Identity", [n["conv"].output], dialect="tf", name="spy"))
    assert not single_use(n["conv"])


def test_no_control_edges_both_directions() -> None:
    g, n = conv_bias_relu()
    assert no_control_edges(n["bias"]) and no_control_edges(n["bias"].output)
    noop = g.append(Node("NoOp", (), dialect="tf", name="noop"))
    n["bias"].add_control_input(noop)
    assert not no_control_edges(n["bias"]) and not no_control_edges(noop)
    assert no_control_edges(Value("free"))  # no producer, nothing to check


def test_same_dtype_and_is_constant() -> None:
    a = Value("a", DType.FLOAT32)
    b = Value("b", DType.FLOAT32)
    c = Value("c", DType.FLOAT16)
    assert same_dtype(a, b) and not same_dtype(a, c) and not same_dtype(a, Value("unknown"))
    k = Value("k", const=Tensor.from_numpy(np.zeros(2, np.float32)))
    assert is_constant(k) and not is_constant(a) and not is_constant(None)
    assert same_dtype(a, k)


def test_weight_not_shared_checks_value_and_const_node() -> None:
    g, n = conv_bias_relu()
    w = n["w"].output
    assert weight_not_shared(w)
    conv2 = g.append(Node("Conv2D", [n["x"].output, w], dialect="tf", name="conv2"))
    assert not weight_not_shared(w)
    g.remove(conv2)
    noop = g.append(Node("NoOp", (), dialect="tf", name="noop"))
    noop.add_control_input(n["w"])  # the Const node has another (control) reader
    assert not weight_not_shared(w)
    noop.remove_control_input(n["w"])
    assert weight_not_shared(w)
    assert not weight_not_shared(n["x"].output)  # not a constant at all


def test_fusable_chain_applies_remapper_checks_to_intermediates_only() -> None:
    g, n = conv_bias_relu()
    m = match_pattern(CHAIN, n["relu"])
    assert m is not None and fusable_chain(m) and why_not_fusable(m) is None
    # The root may be a graph output and have control edges; intermediates may not.
    noop = g.append(Node("NoOp", (), dialect="tf", name="noop"))
    noop.add_control_input(n["relu"])
    assert fusable_chain(match_pattern(CHAIN, n["relu"]))  # type: ignore[arg-type]
    assert why_not_fusable(match_pattern(CHAIN, n["relu"]), check_root=True) == "root 'relu' (Relu) has control edges"  # type: ignore[arg-type]
    noop.remove_control_input(n["relu"])
    n["conv"].add_control_input(noop)
    assert why_not_fusable(match_pattern(CHAIN, n["relu"])) == "intermediate 'conv' (Conv2D) has control edges"  # type: ignore[arg-type]
    n["conv"].remove_control_input(noop)
    g.set_outputs([n["relu"].output, n["bias"].output])
    assert why_not_fusable(match_pattern(CHAIN, n["relu"])) == "intermediate 'bias' (BiasAdd) is a graph input/output"  # type: ignore[arg-type]
    g.set_outputs([n["relu"].output])
    g.append(Node("Identity", [n["conv"].output], dialect="tf", name="spy"))
    assert why_not_fusable(match_pattern(CHAIN, n["relu"])) == "intermediate 'conv' (Conv2D) has 2 readers, not 1"  # type: ignore[arg-type]


def test_predicates_plug_into_where() -> None:
    g, n = conv_bias_relu()
    guarded = P("BiasAdd", P("Conv2D", ANY, CONST(where=weight_not_shared), where=single_use), CONST)
    assert match_pattern(guarded, n["bias"]) is not None
    g.append(Node("Identity", [n["conv"].output], dialect="tf", name="spy"))
    assert match_pattern(guarded, n["bias"]) is None


# -- the predicates the ported rules share ---------------------------------------------------


def _onnx_diamond() -> tuple[Graph, dict[str, Node]]:
    """``x -> Sub -> (Mul, Div) -> Add -> y``: the centred value feeds two nodes of one pattern."""
    g = Graph("onnx")
    x = Value("x", DType.FLOAT32)
    g.set_inputs([x])
    sub = g.append(Node("Sub", [x, x], dialect="onnx", name="sub", outputs=[Value("d", DType.FLOAT32)]))
    mul = g.append(Node("Mul", [sub.output, sub.output], dialect="onnx", name="mul", outputs=[Value("m")]))
    div = g.append(Node("Div", [sub.output, mul.output], dialect="onnx", name="div", outputs=[Value("q")]))
    g.set_outputs([div.output])
    return g, {"sub": sub, "mul": mul, "div": div}


def test_why_not_closed_allows_readers_inside_the_match_only() -> None:
    from graphwright.patterns import why_not_closed

    g, n = _onnx_diamond()
    pattern = P("Div", P("Sub", ANY, ANY, name="s"), P("Mul", P("Sub", ANY, ANY), P("Sub", ANY, ANY)))
    m = match_pattern(pattern, n["div"])
    assert m is not None and why_not_closed(m) is None
    assert why_not_fusable(m) == "intermediate 'sub' (Sub) has 3 readers, not 1"
    extra = g.append(Node("Neg", [n["sub"].output], dialect="onnx", name="leak", outputs=[Value("l")]))
    m = match_pattern(pattern, n["div"])
    assert why_not_closed(m) == "intermediate 'sub' (Sub) is also read by 'leak' (Neg) outside the pattern"
    g.remove(extra)
    other = g.append(Node("Relu", [g.inputs[0]], dialect="onnx", name="other", outputs=[Value("o")]))
    n["div"].add_control_input(other)
    assert why_not_closed(match_pattern(pattern, n["div"])) == "root 'div' (Div) has control inputs"


def test_why_not_absorbed_allows_control_inputs_but_not_waiters() -> None:
    from graphwright.patterns import why_not_absorbed

    g, n = conv_bias_relu()
    assert why_not_absorbed(n["bias"]) is None
    n["bias"].add_control_input(n["x"])
    assert why_not_absorbed(n["bias"]) is None  # the fusion copies control inputs onto the fused node
    waiter = g.append(Node("NoOp", (), dialect="tf", name="wait", control_inputs=[n["bias"]]))
    assert why_not_absorbed(n["bias"]) == "intermediate 'bias' (BiasAdd) has control users"
    g.remove(waiter)
    assert why_not_absorbed(n["relu"]) == "intermediate 'relu' (Relu) has 0 readers, not 1"  # read only as the output


def test_read_only_by_same_graph_and_compatible_dtype() -> None:
    from graphwright.patterns import compatible_dtype, read_only_by, same_graph

    _g, n = _onnx_diamond()
    assert read_only_by(n["mul"], {n["div"]}) and not read_only_by(n["sub"], {n["div"]})
    assert read_only_by(n["sub"], {n["mul"], n["div"]}) and not read_only_by(n["div"], set())  # a graph output
    other = Graph("onnx")
    stray = other.append(Node("Relu", [Value("z")], dialect="onnx", name="stray", outputs=[Value("r")]))
    assert same_graph(n["sub"], n["div"]) and not same_graph(n["sub"], stray) and not same_graph(n["sub"], None)
    a, b, c = Value("a", DType.FLOAT32), Value("b", DType.FLOAT16), Value("c")
    assert not compatible_dtype(a, b) and compatible_dtype(a, c) and compatible_dtype(None, b)


def test_why_not_bypassable_protects_onnx_output_names_only() -> None:
    from graphwright.patterns import why_not_bypassable

    g, n = _onnx_diamond()
    x = g.inputs[0]
    assert why_not_bypassable(n["div"].output, n["mul"].output) is None  # 'm' can become 'q'
    assert why_not_bypassable(n["mul"].output, x) is None  # 'm' is no graph output: nothing to keep
    reason = why_not_bypassable(n["div"].output, x)
    assert reason is not None and reason.startswith("graph output 'q' would be renamed: 'x' cannot take its name")
    _tf, t = conv_bias_relu()
    assert why_not_bypassable(t["relu"].output, t["x"].output) is None  # GraphDefs fetch nodes by name


def test_why_not_editable_needs_one_private_output_in_the_root_s_graph() -> None:
    from graphwright.patterns import why_not_editable

    _g, n = _onnx_diamond()
    assert why_not_editable(n["mul"], n["div"]) is None
    assert why_not_editable(n["sub"], n["div"]) == "'d' is also read elsewhere or is a graph output"
    other = Graph("onnx")
    stray = other.append(Node("Relu", [Value("z")], dialect="onnx", name="stray", outputs=[Value("r")]))
    assert why_not_editable(stray, n["div"]) == "the Relu producing 'r' is in an enclosing graph"
