"""insert_logging wires a Print between a node and its readers."""

from __future__ import annotations

from graphwright.ir import AttrKind
from graphwright.transforms import run_pipeline

from .._generic import tf_graph


def test_insert_logging_wires_print_between_node_and_readers() -> None:
    model, n = tf_graph()
    run_pipeline(model, 'insert_logging(op=AddV2, show_name=true, message="__m:")', outputs=["out"])
    printer = model.graph.find_node("a1__print__")
    assert printer is not None and printer.op == "Print"
    assert printer.inputs[0] is n["a1"].output
    assert n["a2"].input(0) is printer.output
    assert printer.attr("message") == b";a1__print__;__m:"
    assert printer.attrs["U"].kind is AttrKind.DTYPES
