"""One job, in the current process: load, transform or simplify, verify, write (:func:`run_job`).

The runners (:mod:`.local`, :mod:`.on_ray`) call it in a worker process of its own.  Problems of
the job itself (a model that cannot be read, an unknown transform, a runtime that refuses the
model, a result beyond tolerance) become the result's ``status`` and ``error``; nothing raises.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from .. import formats
from ..errors import GraphwrightError
from ..formats.files import same_file
from ..runtime import input_specs
from ..simplify import simplify
from ..transforms import run_pipeline
from ..verify import compare, load_feeds
from .jobs import Job
from .result import BatchResult

__all__ = ["run_job"]


def run_job(job: Job) -> BatchResult:
    """Run ``job`` here and now; the result says what happened (never raises for the job's own problems)."""
    start = time.perf_counter()
    result = BatchResult(name=job.name, model=job.model, output=job.output, status="ok")
    try:
        _run(job, result)
    except GraphwrightError as e:
        result.status, result.error = "error", str(e)
    except Exception as e:  # a bug or a library's own error: reported per model, the batch goes on
        result.status, result.error = "error", f"{type(e).__name__}: {e}"
    result.seconds = round(time.perf_counter() - start, 4)
    return result


def _run(job: Job, result: BatchResult) -> None:
    if same_file(job.model, job.output):
        raise GraphwrightError(f"refusing to overwrite the input {job.model}; choose another output path")
    model = formats.load(job.model)
    result.nodes_before = len(model.graph)
    if job.simplify is not None:
        if model.format != "onnx":
            raise GraphwrightError(f"simplify works on ONNX models; {job.model} is {model.format} "
                                   "(give this model a 'transforms' pipeline)")
        model, _ = simplify(model, **job.simplify)
    else:
        run_pipeline(model, job.transforms or "", inputs=job.input_names, outputs=job.output_names)
    result.nodes_after = len(model.graph)
    out = Path(job.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not (job.inputs or job.check):
        formats.save(model, out)
        return
    # Verified: written beside the output first, compared with the original, then renamed.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=out.suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        formats.save(model, tmp)
        ok = _verify(job, tmp, result)
        if ok:
            os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _verify(job: Job, candidate: Path, result: BatchResult) -> bool:
    feeds = load_feeds(job.inputs, specs=input_specs(job.model)) if job.inputs else None
    seeds = [job.seed + i for i in range(max(job.check, 1))] if not feeds else [job.seed]
    worst = 0.0
    for seed in seeds:
        report = compare(job.model, str(candidate), feeds=feeds, seed=seed, rtol=job.rtol, atol=job.atol)
        result.checks += 1
        worst = max([worst, *(o.max_abs for o in report.outputs if o.max_abs is not None)])
        if not report.ok:
            result.max_abs_error = worst
            result.status = "failed"
            result.error = f"seed {seed}: {report.summary()}; {job.output} was not written"
            return False
    result.max_abs_error = worst
    return True


