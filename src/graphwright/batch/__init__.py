"""``batch``: one pipeline, simplify or quantization over many models, each in its own worker process.

    from graphwright.batch import jobs_from_manifest, run_local, summary_dict

    jobs = jobs_from_manifest("zoo.json")
    results = run_local(jobs, workers=2, retries=1, on_result=print)
    print(summary_dict(results)["totals"])

A job is one model: its path, where to write the result, a ``--transforms`` pipeline,
simplify options or quantize options (with an optional SQNR floor), and optionally inputs to verify the result against the original
(:mod:`.jobs`).  :func:`run_local` runs every job in a child process of its own, so a model that
crashes its worker (a segfault in a runtime, ``os._exit``) is reported with the reason and the
other jobs finish (:mod:`.local`); :func:`run_ray` runs the same isolated work as Ray tasks
(:mod:`.on_ray`, the optional ``[ray]`` extra).  :func:`calibrate_sharded` splits a calibration's
samples over Ray workers (or threads) and merges the logs exactly (:mod:`.shards`).
"""

from .jobs import Job, jobs_from_folder, jobs_from_manifest, parse_manifest
from .local import run_isolated, run_local
from .on_ray import run_ray
from .result import STATUSES, BatchResult, summary_dict
from .shards import calibrate_sharded, merge_records, min_max, shard_bounds
from .work import run_job

__all__ = [
    "Job", "jobs_from_folder", "jobs_from_manifest", "parse_manifest",
    "run_isolated", "run_local", "run_ray", "run_job",
    "BatchResult", "STATUSES", "summary_dict",
    "calibrate_sharded", "merge_records", "min_max", "shard_bounds",
]
