"""What one job gave (:class:`BatchResult`) and the summary of a batch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: ``ok``: written (and verified when asked); ``failed``: verification beyond tolerance, nothing
#: written; ``error``: the job raised (bad model, unknown transform…); ``crashed``: the worker
#: process died (signal or exit) before reporting; ``timeout``: the worker was stopped.
STATUSES = ("ok", "failed", "error", "crashed", "timeout")


@dataclass
class BatchResult:
    """One model of a batch, as reported by its worker (or by the runner when the worker died)."""

    name: str
    model: str
    output: str
    status: str
    nodes_before: int | None = None
    nodes_after: int | None = None
    error: str = ""
    seconds: float = 0.0
    attempts: int = 1
    #: Verification: the largest |original - result| over every output and run (None: not verified).
    max_abs_error: float | None = None
    checks: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchResult:
        return cls(**data)


def summary_dict(results: Iterable[BatchResult]) -> dict[str, Any]:
    """The JSON summary: every model (in the order given) and the count per status."""
    rows = list(results)
    counts = Counter(r.status for r in rows)
    return {
        "models": [r.to_dict() for r in rows],
        "totals": {"models": len(rows), **{s: counts.get(s, 0) for s in STATUSES}},
    }
