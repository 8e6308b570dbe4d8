"""Quantization calibration statistics over many samples, split across processes or Ray tasks.

Before: a float ONNX or TFLite model file and samples — feeds in memory, a folder or file of
``.npy``/``.npz`` samples, or :class:`SyntheticSamples` (seeded, made where they are used).
After: the :class:`~graphwright.quantize.calibration.Statistics` that
:func:`~graphwright.quantize.calibration.collect_statistics` gives over all of them in one pass,
field for field: the samples are cut into contiguous chunks whose boundaries fall on whole
batches of ``batch_size`` (so every run sees the same batch as in one pass), each chunk is
collected by a worker (one of ``shards`` local processes, or a Ray task), and the parts are merged
with :meth:`Statistics.merge`, which is exact and order-independent.  So the ranges any method
derives (minmax, percentile, entropy, mse) are the single-process ones.

Only indices travel for synthetic samples and folders (a worker skips the samples of the folder
before its chunk: reading is cheap next to inference); feeds in memory travel with their chunk.
On a cluster of several machines the model and the folder must be on a filesystem every node sees.
Cost: one inference per batch, plus one model load per chunk.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GraphwrightError
from ..quantize.calibration import DEFAULT_BINS, Statistics, collect_statistics, load_samples, synthetic_samples
from .local import _context
from .ray_session import gather, ray_session
from .shards import shard_bounds

__all__ = ["CHUNKS_PER_SHARD", "SyntheticSamples", "collect_chunk", "collect_statistics_sharded"]

#: Chunks of samples per shard (progress and balance; the statistics do not depend on it).
CHUNKS_PER_SHARD = 4

Feed = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class SyntheticSamples:
    """``count`` seeded samples of :func:`~graphwright.quantize.calibration.synthetic_samples`."""

    count: int
    seed: int = 0
    image_norm: str = "imagenet"
    dims: tuple[tuple[str, int], ...] = ()


Source = Sequence[Feed] | str | os.PathLike[str] | SyntheticSamples


def collect_chunk(model: str, source: Source, start: int, stop: int, options: Mapping[str, Any]) -> Statistics:
    """Statistics of samples ``start..stop-1`` of ``source``, collected in this process."""
    return collect_statistics(model, _samples(model, source, start, stop), **options)


def _samples(model: str, source: Source, start: int, stop: int) -> Iterable[Feed]:
    if isinstance(source, SyntheticSamples):
        return synthetic_samples(model, stop - start, source.seed, image_norm=source.image_norm,
                                 dims=dict(source.dims), offset=start)
    if isinstance(source, (str, os.PathLike)):
        return list(itertools.islice(load_samples(model, source), start, stop))
    return list(source[start:stop])


def _count(model: str, source: Source) -> int:
    if isinstance(source, SyntheticSamples):
        return source.count
    if isinstance(source, (str, os.PathLike)):
        total = load_samples(model, source).total
        if total is None:
            raise GraphwrightError(f"calibration: cannot count the samples in {os.fspath(source)} to shard them")
        return total
    return len(source)


def collect_statistics_sharded(
    model_path: str | os.PathLike[str],
    samples: Source,
    *,
    shards: int = 2,
    use_ray: bool = False,
    address: str | None = None,
    values: Sequence[str] | None = None,
    engine: str = "auto",
    batch_size: int = 1,
    bins: int = DEFAULT_BINS,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> Statistics:
    """:func:`~graphwright.quantize.calibration.collect_statistics` over ``samples`` in ``shards``
    local processes, or as Ray tasks with ``use_ray`` (the running session, the cluster at
    ``address``, or a local one); the same Statistics as one pass.  ``on_progress(done, total,
    what)`` counts samples as chunks finish."""
    if shards < 1:
        raise GraphwrightError(f"calibration: shards must be at least 1, got {shards}")
    if batch_size < 1:
        raise GraphwrightError(f"calibration: batch_size must be at least 1, got {batch_size}")
    model = str(Path(model_path).resolve())
    total = _count(model, samples)
    if total < 1:
        raise GraphwrightError("calibration: no samples to collect statistics on")
    batches = -(-total // batch_size)
    chunks = [(a * batch_size, min(b * batch_size, total))
              for a, b in shard_bounds(batches, shards * CHUNKS_PER_SHARD)]
    options = {"values": None if values is None else list(values), "engine": engine, "batch_size": batch_size,
               "bins": bins}
    work = [(model, samples, a, b, options) if isinstance(samples, (SyntheticSamples, str, os.PathLike))
            else (model, list(samples[a:b]), 0, b - a, options) for a, b in chunks]  # feeds travel cut
    done = [0]

    def finished(i: int, _: Any = None) -> None:
        done[0] += chunks[i][1] - chunks[i][0]
        if on_progress is not None:
            on_progress(done[0], total, f"sample {done[0]} of {total}")

    if use_ray:
        with ray_session(address) as ray:
            task = ray.remote(num_cpus=1)(collect_chunk)
            parts = gather(ray, [task.remote(*args) for args in work], finished)
    else:
        parts = _local(work, shards, finished)
    return Statistics.merge_all(parts)


def _local(work: list[tuple[Any, ...]], shards: int, finished: Callable[[int], None]) -> list[Statistics]:
    parts: list[Statistics | None] = [None] * len(work)
    with ProcessPoolExecutor(max_workers=shards, mp_context=_context()) as pool:
        futures = {pool.submit(collect_chunk, *args): i for i, args in enumerate(work)}
        for future in as_completed(futures):
            i = futures[future]
            parts[i] = future.result()
            finished(i)
    return [p for p in parts if p is not None]
