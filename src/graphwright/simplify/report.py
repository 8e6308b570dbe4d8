"""What ``simplify`` did: model statistics before and after, per-iteration changes, checks.

``ModelStats.of(model)`` counts nodes by op (all graphs, If/Loop bodies
included), initializers and their bytes.  ``SimplifyReport.to_dict()`` is the JSON form
``graphwright simplify --json`` prints (the CLI renders the table).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..ir import Model, all_graphs

if TYPE_CHECKING:
    from ..verify import CompareReport

__all__ = ["ModelStats", "PassRecord", "SimplifyReport"]


@dataclass
class ModelStats:
    nodes: int
    ops: dict[str, int]
    initializers: int
    initializer_bytes: int
    file_bytes: int | None = None

    @classmethod
    def of(cls, model: Model, file_bytes: int | None = None) -> ModelStats:
        ops: Counter[str] = Counter()
        inits = size = 0
        for graph in all_graphs(model):
            for node in graph:
                ops[f"{node.domain}::{node.op}" if node.domain not in ("", "ai.onnx") else node.op] += 1
            for value in graph.initializers:
                inits += 1
                tensor = value.const
                if tensor is not None:
                    size += tensor.nbytes or 0
        return cls(sum(ops.values()), dict(sorted(ops.items())), inits, size, file_bytes)


@dataclass
class PassRecord:
    """One run of one pass inside the fixed-point loop."""

    iteration: int
    name: str
    changed: bool
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)
    #: Matches the pass's rewrites left alone: ``(rule, node, op, reason)`` each.
    refusals: list[tuple[str, str, str, str]] = field(default_factory=list)


@dataclass
class SimplifyReport:
    before: ModelStats
    after: ModelStats
    iterations: int = 0
    converged: bool = False
    seconds: float = 0.0
    passes: list[PassRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checks: list[CompareReport] = field(default_factory=list)

    @property
    def check_ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def pass_totals(self) -> dict[str, dict[str, Any]]:
        """Per pass: runs, changed runs, seconds and summed numeric stats."""
        totals: dict[str, dict[str, Any]] = {}
        for record in self.passes:
            entry = totals.setdefault(record.name, {"runs": 0, "changed": 0, "seconds": 0.0})
            entry["runs"] += 1
            entry["changed"] += int(record.changed)
            entry["seconds"] += record.seconds
            for key, value in record.stats.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    entry[key] = entry.get(key, 0) + value
        return totals

    def refusals(self) -> dict[str, list[tuple[str, str, str, str]]]:
        """Per pass, the matches its last run left alone: ``(rule, node, op, reason)`` each.

        The last run is the final word: a match refused early and applied in a later
        iteration is not listed."""
        last: dict[str, list[tuple[str, str, str, str]]] = {}
        for record in self.passes:
            last[record.name] = list(dict.fromkeys(record.refusals))
        return {name: found for name, found in last.items() if found}

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": vars(self.before),
            "after": vars(self.after),
            "iterations": self.iterations,
            "converged": self.converged,
            "seconds": round(self.seconds, 4),
            "passes": self.pass_totals(),
            "refusals": {name: [dict(zip(("rule", "node", "op", "reason"), r)) for r in found]
                         for name, found in self.refusals().items()},
            "warnings": list(self.warnings),
            "checks": [c.to_dict() if hasattr(c, "to_dict") else str(c) for c in self.checks],
        }
