"""``graphwright batch SOURCE``: one pipeline, simplify or quantize over a folder of models or a manifest.

``--quantize MODE`` (with ``--quantize-data DIR``, ``--method M`` and the floor ``--min-sqnr DB``)
quantizes every model; the summary then adds each quantize job's worst output SQNR, top-1
agreement and sizes.

Every model runs in a worker process of its own (``--jobs N`` at a time, or as Ray tasks with
``--ray``), so a model that crashes its worker is reported and the others finish.  A line is
printed per model as it finishes (stderr), then the summary table (or ``--json``) on stdout.
Exit code 0 when every model is ``ok``, 1 when one is not, 2 for a bad manifest or option.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..batch import BatchResult, jobs_from_folder, jobs_from_manifest, run_local, run_ray, summary_dict
from ..batch.html import render_summary_html
from ..batch.jobs import ManifestError
from ..formats.files import atomic_path, same_file
from ._console import progress_bar, stderr, stdout

__all__ = ["add_parser", "run"]

_STYLE = {"ok": "green", "failed": "red", "error": "red", "crashed": "magenta", "timeout": "yellow"}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "batch",
        help="run a pipeline, simplify or quantize over a folder of models or a manifest, in worker processes",
        description="Transform, simplify or quantize many models, each in its own worker process (locally or on Ray); "
                    "inputs are never modified.",
    )
    p.add_argument("source", help="a folder of models (.onnx, .pb, .pbtxt, .tflite) or a manifest (.json, .yaml)")
    p.add_argument("--out", "-o", dest="out", metavar="DIR",
                   help="output folder (required for a folder; for a manifest it overrides 'output_dir')")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--transforms", help="pipeline for every model (a manifest's entries may give their own)")
    what.add_argument("--simplify", action="store_true", help="simplify every model (ONNX)")
    what.add_argument("--quantize", metavar="MODE",
                      help="quantize every model (ONNX: static, dynamic, weights; TFLite: int8, 16x8, dynamic, "
                           "weights), as graphwright quantize --mode")
    p.add_argument("--quantize-data", metavar="DIR",
                   help="calibration and evaluation samples (.npy/.npz) for --quantize (default: seeded random "
                        "inputs, with a warning)")
    p.add_argument("--method", help="range method for --quantize static modes: minmax (default), percentile, "
                                    "entropy, mse")
    p.add_argument("--min-sqnr", type=float, default=None, metavar="DB",
                   help="quantize jobs: fail (and write nothing) when an output's SQNR is below DB")
    p.add_argument("--check", type=int, default=None, metavar="N",
                   help="verify each result against its original on N seeded random inputs before writing it")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="worker processes at a time (default 1)")
    p.add_argument("--retries", type=int, default=0, metavar="N",
                   help="run a model whose worker crashed or timed out up to N more times (default 0)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="stop a model's worker after this")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="a Python module imported in every worker first (one that registers transforms); repeatable")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on a Ray cluster (ADDRESS, e.g. auto or ray://host:10001; none: a local cluster "
                        "of --jobs CPUs); needs the [ray] extra")
    p.add_argument("--summary", metavar="FILE", help="also write the JSON summary to FILE")
    p.add_argument("--html", metavar="FILE", help="also write the summary as a self-contained HTML page to FILE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no per-model lines while running")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.check is not None and args.check < 0:
        raise ManifestError(f"--check needs a count of at least 0, got {args.check}")
    if args.jobs < 1:
        raise ManifestError(f"--jobs needs at least 1 worker, got {args.jobs}")
    source = Path(args.source)
    for report in (args.summary, args.html):
        if report and same_file(report, source):
            raise ManifestError(f"refusing to overwrite the manifest with the report {report}")
        if report and not Path(report).resolve().parent.is_dir():  # said before the models run, not after
            raise ManifestError(f"cannot write {report}: directory {Path(report).parent} does not exist")
    quantize = _quantize_options(args)
    defaults: dict[str, Any] = {}
    if args.transforms is not None:
        defaults["transforms"] = args.transforms
    if args.simplify:
        defaults["simplify"] = {}
    if quantize is not None:
        defaults["quantize"] = quantize
    if args.check is not None:
        defaults["check"] = args.check
    if args.min_sqnr is not None:
        defaults["min_sqnr_db"] = args.min_sqnr
    if source.is_dir():
        if not args.out:
            raise ManifestError("batch over a folder needs --out DIR for the results")
        if not (args.transforms or args.simplify or quantize):
            raise ManifestError("batch over a folder needs --transforms '...', --simplify or --quantize MODE")
        jobs = jobs_from_folder(source, args.out, transforms=args.transforms,
                                simplify={} if args.simplify else None, quantize=quantize, check=args.check or 0,
                                min_sqnr_db=args.min_sqnr)
    elif source.exists():
        jobs = jobs_from_manifest(source, output_dir=args.out, defaults=defaults)
    else:
        raise ManifestError(f"{args.source}: no such folder or manifest")
    err = stderr()
    quiet = args.quiet or args.json
    # models done / total with an ETA, on a terminal only; the per-model lines print above it
    bar = progress_bar(quiet=quiet, console=err)
    task = bar.add_task("batch", total=len(jobs))
    failed = 0
    said: set[str] = set()

    def on_result(result: BatchResult) -> None:
        nonlocal failed
        failed += result.status != "ok"
        bar.update(task, advance=1, description=f"batch ({failed} not ok)" if failed else "batch")
        if not quiet:
            style = _STYLE.get(result.status, "")
            err.print(f"[{style}]{result.status:>7}[/{style}] {escape(result.name)} ({result.seconds:.2f} s)"
                      + (f": {escape(result.error)}" if result.error else ""), highlight=False)
            for note in result.notes:  # e.g. a quantize job's calibration without data: said once
                if note.split(";")[0] not in said:
                    said.add(note.split(";")[0])
                    err.print(f"[dim]        {escape(note)}[/dim]", highlight=False, soft_wrap=True)

    # A plugin file by its absolute path: Ray workers start in other folders.
    plugins = [str(Path(p).resolve()) if p.endswith(".py") else p for p in args.plugin]
    common = {"retries": args.retries, "timeout": args.timeout, "plugins": plugins, "on_result": on_result}
    with bar:
        if args.ray is not None:
            results = run_ray(jobs, address=args.ray or None, num_cpus=args.jobs if args.jobs > 1 else None,
                              **common)
        else:
            results = run_local(jobs, workers=args.jobs, **common)
    summary = summary_dict(results)
    if args.summary:
        with atomic_path(args.summary) as tmp:
            tmp.write_text(json.dumps(summary, indent=2) + "\n")
    if args.html:
        with atomic_path(args.html) as tmp:
            tmp.write_text(render_summary_html(summary, title=f"graphwright batch: {source.name}"), encoding="utf-8")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        render_summary(results, summary["totals"])
    return 0 if all(r.status == "ok" for r in results) else 1


def _quantize_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--quantize MODE``, ``--quantize-data`` and ``--method`` as quantize options (the data folder
    absolute: a manifest's paths are read from its own folder).  Without ``--quantize``, the other
    two are defaults for a manifest's quantize entries."""
    options: dict[str, Any] = {}
    if args.quantize is not None:
        options["mode"] = args.quantize
    if args.quantize_data is not None:
        if not Path(args.quantize_data).is_dir():
            raise ManifestError(f"--quantize-data {args.quantize_data}: no such folder")
        options["data"] = str(Path(args.quantize_data).resolve())
    if args.method is not None:
        options["method"] = args.method
    if options and "mode" not in options and Path(args.source).is_dir():
        raise ManifestError("--quantize-data and --method are options of --quantize MODE; give --quantize too")
    return options or None


def render_summary(results: list[BatchResult], totals: dict[str, int]) -> None:
    """The table: one row per model (with quantize columns when a quantize job is in it), then the
    count per status."""
    console = stdout()
    table = Table(title_justify="left")
    quantized = any(r.quantize_mode is not None for r in results)
    columns = ["model", "status", "nodes", "max abs error", *(_QUANTIZE_COLUMNS if quantized else ()), "time",
               "error"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "status", "error") else "right")
    for r in results:
        style = _STYLE.get(r.status, "")
        nodes = f"{r.nodes_before} -> {r.nodes_after}" if r.nodes_before is not None else ""
        error = "" if r.max_abs_error is None else f"{r.max_abs_error:.3g}"
        attempts = f" ({r.attempts} tries)" if r.attempts > 1 else ""
        extra = _quantize_cells(r) if quantized else []
        table.add_row(escape(r.name), f"[{style}]{r.status}[/{style}]{attempts}", nodes, error, *extra,
                      f"{r.seconds:.2f} s", escape(r.error))
    console.print(table)
    counts = ", ".join(f"{n} {s}" for s, n in totals.items() if s != "models" and n)
    console.print(f"{totals['models']} model(s): {counts}", highlight=False)


_QUANTIZE_COLUMNS = ("SQNR dB", "top-1", "size")


def _quantize_cells(r: BatchResult) -> list[str]:
    """A quantize job's worst SQNR ('exact' when no output differs), top-1 agreement and sizes."""
    if r.quantize_mode is None:
        return [""] * len(_QUANTIZE_COLUMNS)
    exact = r.sqnr_db is None and r.max_abs_error == 0.0
    sqnr = "exact" if exact else "" if r.sqnr_db is None else f"{r.sqnr_db:.1f}"
    top1 = "" if r.top1_agreement is None else f"{r.top1_agreement:.0%}"
    size = "" if r.size_before is None else f"{_kb(r.size_before)} -> {_kb(r.size_after)}"
    return [sqnr, top1, size]


def _kb(size: int | None) -> str:
    return "" if size is None else f"{size / 1024:.1f} kB"
