"""Calibration shared by every format: data, streaming statistics, range methods.

Before: a float ONNX or TFLite model and data (files, a callable, an iterable, or nothing).
After: ``{value name: (min, max)}`` ranges for the quantizing transforms::

    samples = load_samples(model, "calib/")            # or synthetic_samples(model, 200, seed=0)
    stats = collect_statistics(model, samples)          # runs the float model, streaming
    ranges = compute_ranges(stats, "percentile")        # minmax | percentile | entropy | mse

:class:`Statistics` merge exactly (shards merged == one pass) and pickle, so workers can each
collect a shard.  See :mod:`.data`, :mod:`.stats`, :mod:`.methods`, :mod:`.collect`.
"""

from .collect import ENGINES, activation_names, collect_statistics
from .data import IMAGE_NORMS, Samples, batch_feeds, find_vocabulary, load_samples, synthetic_samples
from .errors import CalibrationError
from .methods import DEFAULT_PERCENTILE, DTYPE_BITS, METHODS, compute_ranges, value_range
from .stats import DEFAULT_BINS, Statistics, ValueStats

__all__ = [
    "DEFAULT_BINS", "DEFAULT_PERCENTILE", "DTYPE_BITS", "ENGINES", "IMAGE_NORMS", "METHODS", "CalibrationError",
    "Samples", "Statistics", "ValueStats", "activation_names", "batch_feeds", "collect_statistics",
    "compute_ranges", "find_vocabulary", "load_samples", "synthetic_samples", "value_range",
]
