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
#: What a quantize job adds to its result.
QUANTIZE_FIELDS = ("quantize_mode", "sqnr_db", "top1_agreement", "size_before", "size_after")


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
    #: Quantize jobs (None otherwise): the mode, the worst output's SQNR in dB (None when every
    #: output is exact) and the lowest top-1 agreement of the classifier-like outputs (None: none
    #: is), over the report's held-out samples and the check inputs; ``max_abs_error`` is over both
    #: too.  File sizes in bytes, before and after.
    quantize_mode: str | None = None
    sqnr_db: float | None = None
    top1_agreement: float | None = None
    size_before: int | None = None
    size_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields; a job that is not a quantization leaves out the quantize ones (all None)."""
        data = asdict(self)
        if self.quantize_mode is None:
            for key in QUANTIZE_FIELDS:
                del data[key]
        return data

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
