"""Per-output error of model B against model A on the same inputs, with error histograms.

Both models run on their format's runtime (``graphwright compare``'s runtimes, through
:func:`graphwright.runtime.execute.execute`); the numbers are :func:`graphwright.verify.compare_outputs`'s,
the histograms count ``|a - b|`` per decade (exactly equal elements in a bin of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir import Model
from ..runtime.execute import Job, ModelLike, execute
from ..verify import CompareReport, compare_outputs
from .layers import dequantized_outputs, feeds_for_b

__all__ = ["ErrorHistogram", "OutputErrors", "output_errors", "error_histogram", "DECADES"]

#: Decades of |a - b| the histograms count: [1e-12, 1e-11), ... [1e1, 1e2); below and above go to
#: the first and last bin.
DECADES = tuple(range(-12, 3))


@dataclass
class ErrorHistogram:
    """``zero`` elements exactly equal; ``counts[i]`` elements with ``|a-b|`` in
    ``[10**edges[i], 10**edges[i+1])`` (the ends open)."""

    output: str
    zero: int
    edges: list[int]
    counts: list[int]
    mean_abs: float | None

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "zero": self.zero, "edges": self.edges, "counts": self.counts,
                "mean_abs_error": self.mean_abs}


@dataclass
class OutputErrors:
    report: CompareReport
    histograms: list[ErrorHistogram] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = self.report.to_dict()
        data["histograms"] = [h.to_json() for h in self.histograms]
        return data


def error_histogram(name: str, a: np.ndarray, b: np.ndarray) -> ErrorHistogram | None:
    """The histogram of ``|a - b|`` by decade, or None when the shapes differ or it is not numeric."""
    if a.shape != b.shape or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return None
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel()
    finite = diff[np.isfinite(diff)]
    zero = int(np.count_nonzero(finite == 0))
    nonzero = finite[finite > 0]
    edges = list(DECADES)
    counts = [0] * (len(edges) - 1)
    if nonzero.size:
        index = np.clip(np.floor(np.log10(nonzero)).astype(np.int64) - edges[0], 0, len(counts) - 1)
        counts = np.bincount(index, minlength=len(counts)).astype(int).tolist()
    mean = float(finite.mean()) if finite.size else None
    return ErrorHistogram(name, zero, edges, counts, mean)


def output_errors(
    model_a: ModelLike,
    model_b: ModelLike,
    *,
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    backend_a: str | None = None,
    backend_b: str | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    models: tuple[Model, Model] | None = None,
) -> OutputErrors:
    """Run A, then B on A's inputs, and compare every output (A is the reference).

    With ``models`` (A and B loaded), a quantized B (a float A's int8 TFLite version) gets A's
    float inputs quantized with its own input scale and zero point, and its quantized outputs are
    dequantized before the comparison (said in the report's notes)."""
    def tick(done: int, what: str) -> None:
        if on_progress is not None:
            on_progress(done, 3, what)

    tick(0, "running model A")
    run_a = execute(model_a, feeds, Job(backend=backend_a, seed=seed))
    tick(1, "running model B")
    feeds_b, quant_notes = dict(run_a.feeds), []
    if models is not None:
        feeds_b, quant_notes = feeds_for_b(models[1], run_a.feeds)
    run_b = execute(model_b, feeds_b, Job(backend=backend_b, seed=seed, feed_by_position=True))
    outputs_b = run_b.outputs
    if models is not None:
        outputs_b = dequantized_outputs(models[0], models[1], run_b.outputs)
        quant_notes += [f"B's output {n!r} dequantized with its scale and zero point"
                        for n in outputs_b if outputs_b[n] is not run_b.outputs[n]]
    tick(2, "comparing outputs")
    report = compare_outputs(run_a.outputs, outputs_b, rtol=rtol, atol=atol)
    report.backend_a, report.backend_b, report.seed = run_a.backend, run_b.backend, seed
    report.inputs = [{"name": n, "dtype": str(x.dtype), "shape": [int(d) for d in x.shape]}
                     for n, x in run_a.feeds.items()]
    report.notes = [*run_a.notes, *run_b.notes, *quant_notes, *report.notes]
    histograms = []
    for out in report.outputs:
        if out.name in run_a.outputs and out.name_b in run_b.outputs:
            h = error_histogram(out.name, np.asarray(run_a.outputs[out.name]), np.asarray(outputs_b[out.name_b]))
            if h is not None:
                histograms.append(h)
    tick(3, "done")
    return OutputErrors(report, histograms)
