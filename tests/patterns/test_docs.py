"""docs/patterns.md stays true: its Python blocks run, in order, with their assertions."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "patterns.md"


def test_worked_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) >= 5
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # our own documentation
    report = namespace["report"]
    assert report.applied == 0  # type: ignore[attr-defined]  # the last block's sweep
    assert len(namespace["g"]) == 4  # type: ignore[arg-type]
