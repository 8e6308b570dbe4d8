"""Calibration over many samples, split into shards that run at the same time, merged exactly.

``calibrate`` writes, per sample, one ``[min][max]`` line per logged node, and
``freeze_requantization_ranges`` reads every line (its percentile trimming needs all of them,
not only the extremes).  So shards are contiguous runs of samples, each calibrated on its own
(a Ray task each, or a thread each locally: the TensorFlow work is in ``calibrate``'s own child
process; ``graphwright calibrate --shards N [--ray [ADDRESS]]``), and the merged log is the shards'
lines in shard order: the same ``[min][max]`` records, in the same order, as one run over every
sample, so the frozen ranges are exactly the same; within a sample, lines are put in node order
(:func:`sample_order`), so the log is the same bytes for any number of shards.
:func:`merge_records` and :func:`min_max` merge parsed logs the same way.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..calibrate import PRINT_MARKER, CalibrationReport, calibrate
from ..errors import GraphwrightError
from ..formats.files import atomic_write_bytes
from .ray_session import gather, ray_session

__all__ = ["shard_bounds", "calibrate_shard", "calibrate_sharded", "merge_records", "min_max", "sample_order"]

Records = Mapping[str, tuple[Sequence[float], Sequence[float]]]
OnProgress = Callable[[int, int, str], None]


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
                    outputs: Sequence[str] | None = None, timeout: float | None = None,
                    on_progress: OnProgress | None = None) -> str:
    """Calibrate one shard; its log lines as text (what a Ray task or a thread returns)."""
    with tempfile.TemporaryDirectory(prefix="graphwright-shard-") as tmp:
        log = Path(tmp) / "shard.log"
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        calibrate(logged_graph, log, samples, outputs=outputs, on_progress=on_progress, **kwargs)
        return log.read_text(encoding="utf-8")


def calibrate_sharded(logged_graph: str | os.PathLike[str], log_out: str | os.PathLike[str],
                      samples: Sequence[Mapping[str, np.ndarray]], *, shards: int = 2,
                      outputs: Sequence[str] | None = None, use_ray: bool = False, address: str | None = None,
                      timeout: float | None = None, on_progress: OnProgress | None = None) -> CalibrationReport:
    """``calibrate`` over ``samples`` in ``shards`` parallel runs (Ray tasks with ``use_ray``: on the
    running Ray session, the cluster at ``address``, or a local one), the logs merged into ``log_out``
    in sample order.  ``on_progress(done, total, what)`` counts finished samples (per shard on Ray)."""
    if not samples:
        raise GraphwrightError("calibrate: no samples to run")
    graph = str(Path(logged_graph).resolve())
    parts = [list(samples[a:b]) for a, b in shard_bounds(len(samples), shards)]
    names = list(outputs) if outputs else None
    progress = _Progress(len(parts), len(samples), on_progress)
    if use_ray:
        with ray_session(address) as ray:
            task = ray.remote(num_cpus=1)(calibrate_shard)
            refs = [task.remote(graph, part, names, timeout) for part in parts]
            texts = gather(ray, refs, lambda i, _: progress.update(i, len(parts[i])))
    else:
        def run(i: int) -> str:
            return calibrate_shard(graph, parts[i], names, timeout, lambda done, *_: progress.update(i, done))

        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            texts = list(pool.map(run, range(len(parts))))
    lines = [ln for text, part in zip(texts, parts) for ln in sample_order(text, len(part))]
    atomic_write_bytes(log_out, ("\n".join(lines) + "\n").encode("utf-8"))
    logged = sorted({_node(ln) for ln in lines} - {""})
    return CalibrationReport(len(samples), len(lines), logged, os.fspath(log_out))


class _Progress:
    """Finished samples summed over shards (threads report at once), passed on as one count."""

    def __init__(self, shards: int, total: int, on_progress: OnProgress | None) -> None:
        self.done = [0] * shards
        self.total = total
        self.on_progress = on_progress
        self.lock = threading.Lock()

    def update(self, shard: int, done: int) -> None:
        if self.on_progress is None:
            return
        with self.lock:
            self.done[shard] = done
            finished = sum(self.done)
            shards = f" ({len(self.done)} shards)" if len(self.done) > 1 else ""
            self.on_progress(finished, self.total, f"sample {finished} of {self.total}{shards}")


def sample_order(text: str, samples: int) -> list[str]:
    """A shard's log lines with each sample's lines sorted by node name.

    TensorFlow runs independent Print nodes in either order, so two runs of the same samples
    log the same lines in different orders within a sample (never across samples: samples run
    one after another).  When every sample logged each node once, each sample's block is put in
    node order, which makes the log the same bytes whatever the shards and the run; the parsed
    records (per node, in sample order) are unchanged.  Any other log is returned as it is."""
    lines = [ln for ln in text.splitlines() if PRINT_MARKER in ln]
    nodes = {_node(ln) for ln in lines}
    width = len(nodes)
    blocks = [lines[i:i + width] for i in range(0, len(lines), width)]
    if width == 0 or len(lines) != samples * width or any(len({_node(ln) for ln in b}) != width for b in blocks):
        return lines
    return [ln for block in blocks for ln in sorted(block, key=_node)]


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
