"""Plumbing shared by the TFLite interpreter benchmarks: one thread for everyone, median timing."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def one_thread() -> None:
    """BLAS and OpenMP to one thread (before numpy is imported) and the repository on the path."""
    if "numpy" in sys.modules:
        raise RuntimeError("one_thread() must run before numpy is imported")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``repeat`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
