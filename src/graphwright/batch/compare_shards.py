"""``compare`` over a large sample set, split across worker processes or Ray tasks, merged exactly.

The samples (given feeds, or ``count`` seeded random ones) are cut into contiguous chunks (about
:data:`CHUNKS_PER_SHARD` per shard, so progress moves and slow chunks balance out); each chunk is
compared by :func:`graphwright.verify.compare_samples` in a worker — one of ``shards`` local
processes, or a Ray task — which loads both models once and returns the chunk's
:class:`~graphwright.verify.SampleComparison`.  The chunks' statistics are merged in sample order;
every field merges exactly (counts, maxima, histograms, exact sums), so the report is equal to the
one a single process gives over the same samples (``shards=1``).  Random samples are made in the
worker from their index (seed ``seed + index``), so only indices travel; given feeds travel with
their chunk; on a cluster of several machines the model paths (and ``--data``) must be on a
filesystem every node sees.  Cost: one run of each model per sample, plus one model load per chunk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GraphwrightError
from ..verify import CompareReport, SampleComparison, compare_samples, seeded_samples
from .local import _context
from .ray_session import gather, ray_session
from .shards import shard_bounds

__all__ = ["CHUNKS_PER_SHARD", "compare_chunk", "compare_sharded"]

#: Chunks of samples per shard (progress and balance; the result does not depend on it).
CHUNKS_PER_SHARD = 4

Feeds = Mapping[str, np.ndarray]


def compare_chunk(model_a: str, model_b: str, start: int, stop: int, feeds: Sequence[Feeds] | None,
                  options: Mapping[str, Any]) -> SampleComparison:
    """Samples ``start..stop-1`` (``feeds`` theirs, or None: random) compared in this process."""
    samples = seeded_samples(start, stop) if feeds is None else zip(range(start, stop), feeds)
    return compare_samples(model_a, model_b, samples, **options)


def compare_sharded(
    model_a: str | os.PathLike[str],
    model_b: str | os.PathLike[str],
    *,
    samples: Sequence[Feeds] | None = None,
    count: int | None = None,
    seed: int = 0,
    shards: int = 1,
    use_ray: bool = False,
    address: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    backend_a: str | None = None,
    backend_b: str | None = None,
    outputs: Sequence[str] | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> CompareReport:
    """Compare A and B over ``samples`` (or ``count`` random ones) in ``shards`` processes, or as Ray
    tasks with ``use_ray`` (the running session, the cluster at ``address``, or a local one).

    ``on_progress(done, total, what)`` counts finished samples."""
    total = len(samples) if samples is not None else (count or 0)
    if total < 1:
        raise GraphwrightError("compare: no samples to compare (give data or a sample count of at least 1)")
    if shards < 1:
        raise GraphwrightError(f"compare: --shards needs at least 1, got {shards}")
    paths = [str(Path(m).resolve()) for m in (model_a, model_b)]
    options = {"seed": seed, "rtol": rtol, "atol": atol, "backend_a": backend_a, "backend_b": backend_b,
               "outputs": None if outputs is None else list(outputs)}
    done = [0]

    def progress(more: int) -> None:
        done[0] += more
        if on_progress is not None:
            on_progress(done[0], total, f"sample {done[0]} of {total}")

    if shards == 1 and not use_ray:  # one process: this one, with progress after every sample
        result = compare_chunk(*paths, 0, total, samples, {**options, "on_sample": lambda _: progress(1)})
    else:
        chunks = shard_bounds(total, shards * CHUNKS_PER_SHARD)
        work = [(*paths, a, b, None if samples is None else list(samples[a:b]), options) for a, b in chunks]
        parts = _on_ray(work, address, progress) if use_ray else _local(work, shards, progress)
        result = SampleComparison()
        for part in parts:
            result.merge(part)
    return result.report(paths[0], paths[1], seed)


def _local(work: list[tuple[Any, ...]], shards: int, progress: Callable[[int], None]) -> list[SampleComparison]:
    parts: list[SampleComparison | None] = [None] * len(work)
    with ProcessPoolExecutor(max_workers=shards, mp_context=_context()) as pool:
        futures = {pool.submit(compare_chunk, *args): i for i, args in enumerate(work)}
        for future in as_completed(futures):
            i = futures[future]
            parts[i] = future.result()
            progress(work[i][3] - work[i][2])
    return [p for p in parts if p is not None]


def _on_ray(work: list[tuple[Any, ...]], address: str | None,
            progress: Callable[[int], None]) -> list[SampleComparison]:
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=1)(compare_chunk)
        refs = [task.remote(*args) for args in work]
        return gather(ray, refs, lambda i, _: progress(work[i][3] - work[i][2]))
