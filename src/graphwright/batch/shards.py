"""Calibration over many samples, split into shards that run at the same time, merged exactly.

``calibrate`` writes, per sample, one ``[min][max]`` line per logged node, and
``freeze_requantization_ranges`` reads every line (its percentile trimming needs all of them,
not only the extremes).  So shards are contiguous runs of samples, each calibrated on its own
(a Ray task each, or a thread each locally: the TensorFlow work is in ``calibrate``'s own child
process), and the merged log is the shards' lines in shard order: the same ``[min][max]`` records,
in the same order, as one run over every sample, so the frozen ranges are exactly the same.
:func:`merge_records` and :func:`min_max` merge parsed logs the same way.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..calibrate import PRINT_MARKER, CalibrationReport, calibrate
from ..errors import GraphwrightError
from ..formats.files import atomic_write_bytes
from .on_ray import import_ray

__all__ = ["shard_bounds", "calibrate_shard", "calibrate_sharded", "merge_records", "min_max"]

Records = Mapping[str, tuple[Sequence[float], Sequence[float]]]


def shard_bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ``[start, stop)`` runs covering ``range(count)``, sizes differing by at most 1."""
    if shards < 1:
        raise GraphwrightError(f"calibration needs at least 1 shard, got {shards}")
    shards = min(shards, count) or 1
    size, extra = divmod(count, shards)
    bounds, start = [], 0
    for i in range(shards):
        stop = start + size + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def calibrate_shard(logged_graph: str, samples: Sequence[Mapping[str, np.ndarray]],
                    outputs: Sequence[str] | None = None, timeout: float | None = None) -> str:
    """Calibrate one shard; its log lines as text (what a Ray task or a thread returns)."""
    with tempfile.TemporaryDirectory(prefix="graphwright-shard-") as tmp:
        log = Path(tmp) / "shard.log"
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        calibrate(logged_graph, log, samples, outputs=outputs, **kwargs)
        return log.read_text(encoding="utf-8")


def calibrate_sharded(logged_graph: str | os.PathLike[str], log_out: str | os.PathLike[str],
                      samples: Sequence[Mapping[str, np.ndarray]], *, shards: int = 2,
                      outputs: Sequence[str] | None = None, use_ray: bool = False,
                      timeout: float | None = None) -> CalibrationReport:
    """``calibrate`` over ``samples`` in ``shards`` parallel runs (Ray tasks with ``use_ray``, on the
    running Ray session or a local one), the logs merged into ``log_out`` in sample order."""
    if not samples:
        raise GraphwrightError("calibrate: no samples to run")
    graph = str(Path(logged_graph).resolve())
    parts = [list(samples[a:b]) for a, b in shard_bounds(len(samples), shards)]
    names = list(outputs) if outputs else None
    if use_ray:
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            ray.init(include_dashboard=False, log_to_driver=False)
        try:
            task = ray.remote(num_cpus=1)(calibrate_shard)
            texts = ray.get([task.remote(graph, part, names, timeout) for part in parts])
        finally:
            if started:
                ray.shutdown()
    else:
        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            texts = list(pool.map(lambda part: calibrate_shard(graph, part, names, timeout), parts))
    lines = [ln for text in texts for ln in text.splitlines() if PRINT_MARKER in ln]
    atomic_write_bytes(log_out, ("\n".join(lines) + "\n").encode("utf-8"))
    logged = sorted({_node(ln) for ln in lines} - {""})
    return CalibrationReport(len(samples), len(lines), logged, os.fspath(log_out))


def merge_records(parts: Sequence[Records]) -> dict[str, tuple[list[float], list[float]]]:
    """Parsed logs of consecutive shards (``{node: (mins, maxs)}`` each) as one: lists joined in order."""
    merged: dict[str, tuple[list[float], list[float]]] = {}
    for part in parts:
        for node, (mins, maxs) in part.items():
            lows, highs = merged.setdefault(node, ([], []))
            lows.extend(mins)
            highs.extend(maxs)
    return merged


def min_max(records: Records) -> dict[str, tuple[float, float]]:
    """Each node's overall range: the least min and the greatest max (exact under any merge order)."""
    return {node: (min(mins), max(maxs)) for node, (mins, maxs) in records.items() if mins and maxs}


def _node(line: str) -> str:
    for part in line.split(";"):
        if part.endswith("__print__"):
            words = part[: -len("__print__")].split()
            return words[-1] if words else ""
    return ""
