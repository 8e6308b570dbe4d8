"""Numeric verification: comparison of two models, reports (and the model inputs of
:mod:`graphwright.runtime.feeds`, re-exported).

``compare(model_a, model_b)`` runs both on the same seeded (or user) inputs
and reports per-output errors; ``render_compare`` prints the report with rich.
"""

from ..runtime.feeds import load_feeds, random_array, random_feeds
from .compare import (
    DEFAULT_TOLERANCES,
    compare,
    compare_arrays,
    compare_outputs,
    looks_like_scores,
)
from .report import CompareReport, OutputComparison, compare_table, render_compare

__all__ = [
    "DEFAULT_TOLERANCES",
    "CompareReport",
    "OutputComparison",
    "compare",
    "compare_arrays",
    "compare_outputs",
    "compare_table",
    "load_feeds",
    "looks_like_scores",
    "random_array",
    "random_feeds",
    "render_compare",
]
