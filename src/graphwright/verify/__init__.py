"""Numeric verification: comparison of two models, reports (and the model inputs of
:mod:`graphwright.runtime.feeds`, re-exported).

``compare(model_a, model_b)`` runs both on the same seeded (or user) inputs
and reports per-output errors; ``render_compare`` prints the report with rich.
``compare_samples`` does it over many samples, as statistics that merge exactly
(:class:`SampleComparison`; ``graphwright.batch.compare_sharded`` splits the samples
over processes or Ray tasks).
"""

from ..runtime.feeds import load_feeds, random_array, random_feeds
from .compare import (
    DEFAULT_TOLERANCES,
    compare,
    compare_arrays,
    compare_outputs,
    looks_like_scores,
)
from .report import HISTOGRAM_EDGES, CompareReport, OutputComparison, compare_table, histogram_text, render_compare
from .samples import ErrorStats, ExactSum, SampleComparison, compare_samples, seeded_samples

__all__ = [
    "DEFAULT_TOLERANCES",
    "HISTOGRAM_EDGES",
    "ErrorStats",
    "ExactSum",
    "SampleComparison",
    "compare_samples",
    "seeded_samples",
    "CompareReport",
    "OutputComparison",
    "compare",
    "compare_arrays",
    "compare_outputs",
    "compare_table",
    "histogram_text",
    "load_feeds",
    "looks_like_scores",
    "random_array",
    "random_feeds",
    "render_compare",
]
