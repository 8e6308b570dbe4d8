"""insert_logging: print node outputs at run time (TensorFlow ``Print`` nodes), as the Graph Transform Tool does.

Before::  conv -> RequantizationRange(rr) -> Requantize
After::   conv -> RequantizationRange(rr) -> Print(rr__print__; data: rr:0, rr:1) -> Requantize

A node is logged when something in the graph reads it (a data input, or a control
input: that counts as reading output 0), its op is listed (``op=``, repeatable; all
ops if none) and its name starts with a listed ``prefix`` (any name if none);
``Const`` and ``Placeholder`` nodes included, a graph output nothing reads not.  The
``Print`` node, named ``<node>__print__`` and placed just after the node, passes
output 0 through and logs output 0 and then every output that is read, in index
order; the readers of output 0 (not the control users) read the Print instead, so it
runs whenever they do.  The message is ``;<op>;`` if ``show_op``, then
``;<print node name>;`` if ``show_name``, then ``message`` (so ``show_op`` with
``message="M:"`` gives ``;Relu;M:``), byte for byte the original's, which
``freeze_requantization_ranges`` parses.  O(N + E).

Differences from the original tool, on purpose: ``U`` lists the types of the outputs
logged (the original lists every output's type, which TensorFlow rejects when not all
outputs are read); a node without outputs (a ``NoOp`` waited on) is not logged (the
original wires a Print to its missing output 0); a Print name already taken gets a
``_<k>`` suffix instead of a duplicate node.
"""
from __future__ import annotations

from ...errors import TransformError
from ...ir import Attr, AttrKind, DType, Model, Node
from ..context import TransformContext
from ..registry import TransformResult, transform

#: Output types of ops whose outputs are not described by a type attribute.
_FIXED_OUTPUT_TYPES: dict[str, tuple[DType, ...]] = {
    "RequantizationRange": (DType.FLOAT32, DType.FLOAT32),
    "Dequantize": (DType.FLOAT32,),
    "Rank": (DType.INT32,),
}
_QUANTIZED_OUTPUT_OPS = ("QuantizeV2", "Requantize", "QuantizedConv2D", "QuantizedMatMul",
                         "QuantizedBiasAdd", "QuantizedRelu", "QuantizedRelu6", "QuantizedAvgPool",
                         "QuantizedMaxPool", "QuantizedReshape", "QuantizedConcat")
_TYPE_ATTRS = ("out_type", "T", "dtype", "DstT", "Tout")


@transform("insert_logging", dialects={"tf"})
def insert_logging(
    model: Model,
    ctx: TransformContext,
    *,
    op: list[str] | None = None,
    prefix: list[str] | None = None,
    show_op: bool = False,
    show_name: bool = False,
    message: str = "",
    first_n: int = -1,
    summarize: int = 1024,
) -> TransformResult:
    """Insert Print nodes after matching nodes."""
    graph = model.graph
    ops, prefixes = set(op or []), tuple(prefix or [])
    targets = [
        (node, logged) for node in graph
        if (not ops or node.op in ops) and (not prefixes or node.name.startswith(prefixes))
        and (logged := _logged_outputs(node))
    ]
    for node, logged in targets:
        types = _output_types(node)
        name = graph.unique_node_name(f"{node.name}__print__")
        text = (f";{node.op};" if show_op else "") + (f";{name};" if show_name else "") + message
        readers = node.outputs[0].uses()
        printer = Node(
            "Print", [node.outputs[0], *(node.outputs[i] for i in logged)], dialect="tf", name=name,
            device=node.device,
            attrs={
                "T": Attr.dtype(types[0]),
                "U": Attr(AttrKind.DTYPES, tuple(types[i] for i in logged)),
                "message": Attr.string(text),
                "first_n": Attr.int(first_n),
                "summarize": Attr.int(summarize),
            },
        )
        for user, index in readers:
            user.replace_input(index, printer.output)
        graph.insert_after(node, printer)
    return TransformResult(bool(targets), {"print_nodes_added": len(targets)})


def _logged_outputs(node: Node) -> list[int]:
    """Indices of the outputs something in the graph reads (a control user reads output 0); [] if none."""
    if not node.outputs:
        return []
    read = {v.index for v in node.outputs if v.num_uses}
    if node.control_users:
        read.add(0)
    return sorted(read)


def _output_types(node: Node) -> list[DType]:
    n = len(node.outputs)
    known = [v.dtype for v in node.outputs]
    if all(known):
        return known  # type: ignore[return-value]
    fixed = _FIXED_OUTPUT_TYPES.get(node.op)
    if fixed is not None:
        return list(fixed[:n])
    if node.op in _QUANTIZED_OUTPUT_OPS:
        first = node.attr("out_type") or node.attr("T") or DType.QUINT8
        return [first] + [DType.FLOAT32] * (n - 1)
    for attr in _TYPE_ATTRS:
        value = node.attr(attr)
        if isinstance(value, DType):
            return [value] * n
    raise TransformError(
        f"insert_logging: cannot tell the output type of node {node.name!r} (op {node.op}); "
        "restrict the transform with op= or prefix="
    )
