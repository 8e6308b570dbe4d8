"""``graphwright transform IN OUT --transforms '...'`` (also the original tool's flags)."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from rich.table import Table

from .. import formats
from ..diff import write_provenance
from ..errors import TransformError
from ..formats.files import same_file
from ..transforms import PipelineReport, run_pipeline
from ._console import human_bytes, print_refusals, progress_bar, stdout


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "transform",
        help="apply a Graph Transform Tool pipeline to a model",
        description="Apply transforms in order; the input file is never modified, the output is written atomically.",
    )
    p.add_argument("input", nargs="?", help="model to read (.pb, .pbtxt, .onnx, .tflite)")
    p.add_argument("output", nargs="?", help="where to write the result (same format)")
    p.add_argument("--in_graph", "--in-graph", dest="in_graph", help="same as INPUT (original tool's flag)")
    p.add_argument("--out_graph", "--out-graph", dest="out_graph", help="same as OUTPUT (original tool's flag)")
    p.add_argument("--inputs", action="append", default=[], help="input names, comma-separated (TF: node or node:0)")
    p.add_argument("--outputs", action="append", default=[], help="output names, comma-separated")
    p.add_argument("--transforms", required=True, help="the pipeline, e.g. 'strip_unused_nodes round_weights(num_steps=256)'")
    p.add_argument("--json", action="store_true", help="print the report as JSON (every refused match included)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="list every match a step left alone, with its reason (default: the most common reasons)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--provenance", action="store_true",
                   help="also write OUTPUT.provenance.json: the original nodes each node replaced (read by graphwright diff)")
    p.set_defaults(run=run)


def _names(values: list[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def run(args: argparse.Namespace) -> int:
    src = args.input or args.in_graph
    dst = args.output or args.out_graph
    if not src or not dst:
        raise TransformError("transform needs an input and an output file (INPUT OUTPUT or --in_graph/--out_graph)")
    if same_file(src, dst):  # through symbolic and hard links too
        raise TransformError(f"refusing to overwrite the input {src} (the output {dst} is the same file); "
                             "choose another output path")
    start = time.perf_counter()
    model = formats.load(src)
    nodes_before = len(model.graph)
    with progress_bar(quiet=args.quiet or args.json) as progress:  # drawn on a terminal only
        task = progress.add_task("transforming", total=None)

        def on_step(i: int, total: int, text: str) -> None:
            progress.update(task, total=total, completed=i, description=text[:60])

        report = run_pipeline(model, args.transforms, inputs=_names(args.inputs),
                              outputs=_names(args.outputs), on_step=on_step)
    formats.save(model, dst)
    if args.provenance:
        write_provenance(model, dst, source=src)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps(report_dict(report, src, dst, nodes_before, len(model.graph), seconds), indent=2))
    elif not args.quiet:
        render_report(report, src, dst, nodes_before, len(model.graph), seconds, verbose=args.verbose)
    return 0


def report_dict(report: PipelineReport, src: str, dst: str, before: int, after: int,
                seconds: float) -> dict[str, Any]:
    """The JSON form of a pipeline run: every step with its stats, notes and refused matches."""
    return {
        "input": src,
        "output": dst,
        "nodes_before": before,
        "nodes_after": after,
        "seconds": round(seconds, 4),
        "steps": [
            {
                "call": step.call,
                "changed": step.changed,
                "nodes_before": step.nodes_before,
                "nodes_after": step.nodes_after,
                "seconds": round(step.seconds, 4),
                "stats": step.stats,
                "notes": step.notes,
                "refusals": [dict(zip(("rule", "node", "op", "reason"), r)) for r in step.refusals],
                "skipped_error": step.skipped_error,
            }
            for step in report.steps
        ],
        "warnings": report.warnings,
    }


def render_report(report: PipelineReport, src: str, dst: str, before: int, after: int, seconds: float, *,
                  verbose: bool = False) -> None:
    console = stdout()
    table = Table(title=f"{src} -> {dst}", title_justify="left")
    for column in ("step", "changed", "nodes", "time", "details"):
        table.add_column(column, justify="right" if column in ("nodes", "time") else "left")
    for step in report.steps:
        details = ", ".join(f"{k}={v}" for k, v in step.stats.items() if v)
        if step.skipped_error:
            details = f"[yellow]skipped: {step.skipped_error}[/yellow]"
        table.add_row(step.call, "yes" if step.changed else "no",
                      f"{step.nodes_before} -> {step.nodes_after}", f"{step.seconds * 1000:.0f} ms", details)
    console.print(table)
    for step in report.steps:
        print_refusals(console, step.call, step.refusals, verbose=verbose)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(
        f"nodes {before} -> {after}; file {human_bytes(os.path.getsize(src))} -> "
        f"{human_bytes(os.path.getsize(dst))}; {seconds:.2f} s"
    )
