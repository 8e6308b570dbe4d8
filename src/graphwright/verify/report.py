"""The result of a comparison: per-output statistics, JSON and a rich table.

``CompareReport.to_json()`` is stable (keys sorted as declared, non-finite
numbers written as the strings ``"inf"``/``"nan"`` so the JSON is strict);
``render_compare(report, console)`` prints the table the CLI shows.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["HISTOGRAM_EDGES", "CompareReport", "OutputComparison", "compare_table", "histogram_text",
           "render_compare"]

#: Absolute-error bin edges of a sample set's histogram, 1-2-5 steps from 1e-12 to 1e4 (parsed from
#: text: the same on every machine).  Bin 0 counts exact zeros, bin 1 errors below the first edge,
#: the last bin errors from 1e4 up (inf too).
HISTOGRAM_EDGES = np.array([float(f"{m}e{k}") for k in range(-12, 4) for m in (1, 2, 5)] + [1e4])


@dataclass(slots=True)
class OutputComparison:
    """One output of model A (reference) against the matching output of model B."""

    name: str
    name_b: str
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    dtype_a: str
    dtype_b: str
    ok: bool
    reason: str = ""
    rtol: float = 0.0
    atol: float = 0.0
    elements: int = 0
    #: Largest ``|a - b|`` and ``|a - b| / max(|a|, tiny)`` (None when shapes differ).
    max_abs: float | None = None
    max_rel: float | None = None
    #: Share of exactly equal elements, in [0, 1].
    exact: float | None = None
    #: Elements outside the tolerance.
    mismatched: int | None = None
    #: Share of rows whose argmax agrees, for classifier-like outputs; else None.
    top1: float | None = None
    #: Over a sample set (``compare --num/--data``): samples run, mean ``|a - b|``, and the counts of
    #: ``|a - b|`` per bin of :data:`HISTOGRAM_EDGES` (None for one run).
    samples: int | None = None
    mean_abs: float | None = None
    histogram: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "name_b": self.name_b,
            "ok": self.ok,
            "reason": self.reason,
            "shape_a": None if self.shape_a is None else list(self.shape_a),
            "shape_b": None if self.shape_b is None else list(self.shape_b),
            "dtype_a": self.dtype_a,
            "dtype_b": self.dtype_b,
            "elements": self.elements,
            "max_abs_error": _number(self.max_abs),
            "max_rel_error": _number(self.max_rel),
            "exact_share": _number(self.exact),
            "mismatched": self.mismatched,
            "top1_agreement": _number(self.top1),
            "rtol": self.rtol,
            "atol": self.atol,
            **({} if self.samples is None else {
                "samples": self.samples, "mean_abs_error": _number(self.mean_abs), "abs_error_histogram":
                    self.histogram}),
        }


@dataclass(slots=True)
class CompareReport:
    """Everything ``compare`` found.  ``ok`` is true when every output passed."""

    outputs: list[OutputComparison]
    matched_by: str = "name"  # or "position"
    notes: list[str] = field(default_factory=list)
    model_a: str = ""
    model_b: str = ""
    backend_a: str = ""
    backend_b: str = ""
    seed: int = 0
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: Samples compared (a sample set) or None (one run).
    samples: int | None = None

    @property
    def ok(self) -> bool:
        return bool(self.outputs) and all(o.ok for o in self.outputs)

    @property
    def failures(self) -> list[OutputComparison]:
        return [o for o in self.outputs if not o.ok]

    def summary(self) -> str:
        """One line: pass/fail, how many outputs, the worst error."""
        worst = max((o.max_abs for o in self.outputs if o.max_abs is not None), default=None)
        worst_text = "" if worst is None else f", max abs error {worst:.3g}"
        if self.ok:
            return f"outputs match ({len(self.outputs)} compared{worst_text})"
        if not self.outputs:
            return "no outputs to compare"
        first = self.failures[0]
        return f"{len(self.failures)} of {len(self.outputs)} outputs differ{worst_text}; {first.name or first.name_b}: {first.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "summary": self.summary(),
            "model_a": self.model_a,
            "model_b": self.model_b,
            "backend_a": self.backend_a,
            "backend_b": self.backend_b,
            "seed": self.seed,
            "matched_by": self.matched_by,
            "notes": list(self.notes),
            "inputs": list(self.inputs),
            "outputs": [o.to_dict() for o in self.outputs],
            **({} if self.samples is None else {"samples": self.samples}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


def _number(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _fmt(x: float | None, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if math.isfinite(x) else str(x)


def _shape_text(o: OutputComparison) -> str:
    a = "?" if o.shape_a is None else "x".join(map(str, o.shape_a)) or "scalar"
    b = "?" if o.shape_b is None else "x".join(map(str, o.shape_b)) or "scalar"
    return a if a == b else f"{a} vs {b}"


def compare_table(report: CompareReport) -> Table:
    """The per-output table as a rich :class:`~rich.table.Table`."""
    from rich.table import Table  # lazy: rich renders only; `import graphwright` imports verify without it

    title = f"{report.model_a} [{report.backend_a}]  vs  {report.model_b} [{report.backend_b}]"
    table = Table(title=_escape(title), title_justify="left")
    table.add_column("output")
    table.add_column("shape")
    table.add_column("dtype")
    table.add_column("max abs err", justify="right")
    table.add_column("max rel err", justify="right")
    if report.samples is not None:
        table.add_column("mean abs err", justify="right")
    table.add_column("exact", justify="right")
    table.add_column("top-1", justify="right")
    table.add_column("result")
    for o in report.outputs:
        name = o.name if o.name == o.name_b or not o.name_b else f"{o.name or '-'} / {o.name_b}"
        dtype = o.dtype_a if o.dtype_a == o.dtype_b else f"{o.dtype_a or '-'} vs {o.dtype_b or '-'}"
        exact = "-" if o.exact is None else f"{100 * o.exact:.1f}%"
        top1 = "-" if o.top1 is None else f"{100 * o.top1:.1f}%"
        result = "[green]ok[/green]" if o.ok else f"[red]FAIL[/red] {_escape(o.reason)}"
        mean = [] if report.samples is None else [_fmt(o.mean_abs)]
        table.add_row(_escape(name), _shape_text(o), dtype, _fmt(o.max_abs), _fmt(o.max_rel), *mean, exact, top1,
                      result)
    return table


def render_compare(report: CompareReport, console: Console) -> None:
    """Print the comparison (inputs, per-output table, notes, verdict) on a rich console."""
    if report.inputs:
        inputs = ", ".join(f"{i['name']} {i['dtype']}{list(i['shape'])}" for i in report.inputs)
        count = "" if report.samples is None else f", {report.samples} samples"
        console.print(f"inputs (seed {report.seed}{count}): {_escape(inputs)}", highlight=False)
    console.print(compare_table(report))
    for o in report.outputs:
        if o.histogram:
            console.print(f"|a-b| of {_escape(o.name or o.name_b)}: {histogram_text(o.histogram)}", highlight=False)
    for note in report.notes:
        console.print(f"note: {_escape(note)}", highlight=False)
    style = "green" if report.ok else "red"
    console.print(f"[{style}]{'PASS' if report.ok else 'FAIL'}[/{style}]: {_escape(report.summary())}", highlight=False)


def histogram_text(counts: list[int]) -> str:
    """The non-empty bins of an absolute-error histogram: ``0: 12, [1e-06, 2e-06): 3, ...``."""
    edges = [format(e, "g") for e in HISTOGRAM_EDGES]
    inner = ["[" + lo + ", " + hi + ")" for lo, hi in itertools.pairwise(edges)]
    labels = ["0", "(0, " + edges[0] + ")", *inner, "[" + edges[-1] + ", inf]"]
    return ", ".join(f"{label}: {n}" for label, n in zip(labels, counts) if n)


def _escape(text: str) -> str:
    from rich.markup import escape  # lazy: as above, rich is for rendering only

    return escape(text)
