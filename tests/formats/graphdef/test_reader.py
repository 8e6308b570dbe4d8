"""What the GraphDef reader refuses that TensorFlow refuses too: ports an op does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphwright.errors import ModelLoadError
from tests.formats.graphdef.test_malformed import expect_error, graph, load_bytes


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ((("x", "Placeholder", []), ("r", "Relu", ["x"]), ("y", "AddV2", ["r:7", "x"])),
         r"node 'y' \(AddV2\): input 'r:7' reads output 7 of node 'r', but Relu has 1 output;"),
        ((("x", "Placeholder", []), ("y", "Relu", ["x:1"])), "reads output 1 of node 'x', but Placeholder has 1"),
        ((("x", "Placeholder", []), ("n", "NoOp", []), ("y", "AddV2", ["x", "n"])),
         "input 'n' reads output 0 of node 'n', but NoOp has 0 outputs"),
    ],
)
def test_input_reading_an_output_the_op_does_not_have_is_refused(tmp_path: Path, nodes, message: str) -> None:  # type: ignore[no-untyped-def]
    text = expect_error(tmp_path, graph(*nodes), message)
    assert "TensorFlow refuses" in text and str(tmp_path / "bad.pb") in text


def test_ports_within_the_op_arity_still_load(tmp_path: Path) -> None:
    data = graph(("x", "Placeholder", []), ("s", "Unique", ["x"]), ("y", "AddV2", ["s:1", "s"]),
                 ("c", "Custom>Op", ["x"]), ("z", "AddV2", ["c:5", "x"]))  # unknown op: any port
    nodes = {node.name: node for node in load_bytes(tmp_path, data).graph}  # type: ignore[attr-defined]
    assert len(nodes["s"].outputs) == 2
    assert len(nodes["c"].outputs) == 6


def test_ops_whose_arity_depends_on_a_missing_attribute_are_not_judged(tmp_path: Path) -> None:
    data = graph(("x", "Placeholder", []), ("s", "Split", ["x"]), ("y", "AddV2", ["s:3", "x"]))
    try:
        load_bytes(tmp_path, data)
    except ModelLoadError as e:  # num_split is missing: the reader cannot know the arity
        pytest.fail(f"refused: {e}")
