"""One job, in the current process: load, transform, simplify or quantize, verify, write (:func:`run_job`).

The runners (:mod:`.local`, :mod:`.on_ray`) call it in a worker process of its own.  Problems of
the job itself (a model that cannot be read, an unknown transform, a runtime that refuses the
model, a result beyond tolerance) become the result's ``status`` and ``error``; nothing raises.

A quantize job runs :func:`graphwright.quantize.quantize` (its report measures the result on
held-out samples); with ``check``/``inputs`` the written candidate is also run against the
original on those inputs (:func:`graphwright.quantize.report.compare_models`: integer inputs and
outputs of the candidate (de)quantized with its own parameters).  The worst of both — lowest
output SQNR, largest abs error, lowest top-1 agreement — is the result's; below ``min_sqnr_db``
the job has failed and nothing is written.  Cost: the quantization's, plus one inference of each
model per check input.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from pathlib import Path

from .. import formats
from ..errors import GraphwrightError
from ..formats.files import same_file
from ..ir import Model
from ..quantize import QuantReport, quantize
from ..quantize.report import OutputError, compare_models
from ..runtime import input_specs
from ..simplify import simplify
from ..transforms import run_pipeline
from ..verify import compare, load_feeds, random_feeds
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
    if job.simplify is not None:  # from the path: simplify then keeps no serialized copy of the model
        model, report = simplify(job.model, **job.simplify)
        result.nodes_before, result.nodes_after = report.before.nodes, len(model.graph)
        _write(job, model, result)
        return
    original = model = formats.load(job.model)
    result.nodes_before = len(model.graph)
    if job.quantize is not None:
        with warnings.catch_warnings():  # its data warnings are in the report, and from there in the notes
            warnings.simplefilter("ignore", UserWarning)
            model, report = quantize(model, **job.quantize)
        _quality(result, report)
    else:
        run_pipeline(model, job.transforms or "", inputs=job.input_names, outputs=job.output_names)
    result.nodes_after = len(model.graph)
    _write(job, model, result, original)


def _write(job: Job, model: Model, result: BatchResult, original: Model | None = None) -> None:
    """Write the result (after the check inputs or the quality floor, when the job has them)."""
    out = Path(job.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not (job.inputs or job.check):
        if _above_floor(job, result):
            formats.save(model, out)
        return
    # Verified: written beside the output first, compared with the original, then renamed.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=out.suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        formats.save(model, tmp)
        quality = original is not None and job.quantize is not None
        ok = _verify_quality(job, original, tmp, result) if quality else _verify(job, tmp, result)
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


def _quality(result: BatchResult, report: QuantReport) -> None:
    """The report's numbers (held-out samples) and sizes in the result; its warnings as notes."""
    result.quantize_mode = report.mode
    result.size_before, result.size_after = report.size_before, report.size_after
    result.notes.extend(report.warnings)
    _worst(result, report.outputs)


def _worst(result: BatchResult, outputs: list[OutputError]) -> None:
    """Fold ``outputs``' errors into the result's worst so far."""
    for o in outputs:
        result.max_abs_error = max(result.max_abs_error or 0.0, o.max_abs)
        if not math.isinf(o.sqnr_db):  # an exact output is no worst
            result.sqnr_db = o.sqnr_db if result.sqnr_db is None else min(result.sqnr_db, o.sqnr_db)
        if o.top1_agreement is not None:
            result.top1_agreement = (o.top1_agreement if result.top1_agreement is None
                                     else min(result.top1_agreement, o.top1_agreement))


def _verify_quality(job: Job, original: Model, candidate: Path, result: BatchResult) -> bool:
    """Run the written candidate and the original on the check inputs; then the floor."""
    specs = input_specs(original)
    if job.inputs:
        samples = [load_feeds(job.inputs, specs=specs)]
    else:
        samples = [random_feeds(specs, seed=job.seed + i) for i in range(job.check)]
    outputs, _layers, _notes = compare_models(original, formats.load(candidate), samples)
    result.checks = len(samples)
    _worst(result, outputs)
    return _above_floor(job, result)


def _above_floor(job: Job, result: BatchResult) -> bool:
    """No floor, or the worst SQNR at or above it (an exact result always is); else ``failed``."""
    if job.min_sqnr_db is None:
        return True
    if result.max_abs_error is None:
        raise GraphwrightError(f"min_sqnr_db {job.min_sqnr_db:g} needs numbers: give the job 'check' or "
                               "'inputs', or quantize eval_samples above 0")
    if result.sqnr_db is None or result.sqnr_db >= job.min_sqnr_db:
        return True
    result.status = "failed"
    result.error = (f"worst output SQNR {result.sqnr_db:.2f} dB is below min_sqnr_db {job.min_sqnr_db:g}; "
                    f"{job.output} was not written")
    return False
