"""``graphwright diff A B [--html REPORT] [--json]``: what changed between two models.

Summary (nodes, parameters, file size, op counts), the changes grouped by kind — exact when a
provenance sidecar (``B.provenance.json``, written by a pipeline) is beside B, matched by name
and structure otherwise — and with ``--seed``/``--input`` the per-output error of B against A.
``--html`` writes a self-contained report with pictures of the graph around each change.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import formats
from ..diff import DiffError, diff_models, nodes_by_key, read_provenance, sidecar_path
from ..diff.html import render_html
from ..diff.layers import LayerErrors, layer_errors
from ..diff.numeric import OutputErrors, output_errors
from ..formats.files import atomic_path, same_file
from ..runtime import input_specs
from ..verify import load_feeds, render_compare
from ._console import human_bytes, progress_callback, stdout

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="what changed between two models of one format (tables, JSON, an HTML report with pictures)",
        description="Compare two models of the same format: summary, op histogram deltas and the changes by kind "
                    "(exact with a provenance sidecar beside B); with --seed/--input also the per-output error.",
    )
    p.add_argument("model_a", help="the model before (.pb/.pbtxt, .onnx or .tflite)")
    p.add_argument("model_b", help="the model after, same format")
    p.add_argument("--html", metavar="REPORT.html", help="write a self-contained HTML report (opens offline)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--provenance", metavar="FILE",
                   help="the provenance sidecar of B (default: B.provenance.json when it exists)")
    p.add_argument("--no-provenance", action="store_true", help="ignore any sidecar: match by name and structure")
    p.add_argument("--seed", type=int, default=None,
                   help="run both models on seeded random inputs and report per-output errors")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy|FILE.npz",
                   help="user data for an input (repeatable), as in compare; implies running both models")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    p.add_argument("--backend-a", dest="backend_a", help="runtime for A (default: by format)")
    p.add_argument("--backend-b", dest="backend_b", help="runtime for B (default: by format)")
    p.add_argument("--limit", type=int, default=40, help="changes listed in the table (default 40; JSON has all)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (the --html report is written)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.html and (same_file(args.html, args.model_a) or same_file(args.html, args.model_b)):
        raise DiffError(f"refusing to overwrite a model with the report {args.html}")
    running = args.seed is not None or bool(args.input)
    layered = running and Path(args.model_a).suffix.lower() == ".tflite"
    total = 3 + (3 if running else 0) + (2 if layered else 0) + (1 if args.html else 0)  # steps of the bar, for its ETA
    with progress_callback("diff", quiet=args.quiet or args.json) as tick:
        tick(0, total, f"loading {Path(args.model_a).name}")
        a = formats.load(args.model_a)
        tick(1, total, f"loading {Path(args.model_b).name}")
        b = formats.load(args.model_b)
        if a.format != b.format:
            raise DiffError(f"diff compares two models of one format: {args.model_a} is {a.format}, "
                            f"{args.model_b} is {b.format}")
        prov, prov_path = None, None
        if not args.no_provenance:
            candidate = Path(args.provenance) if args.provenance else sidecar_path(args.model_b)
            if args.provenance or candidate.is_file():
                prov, prov_path = read_provenance(candidate), str(candidate)
        tick(2, total, "matching changes")
        diff = diff_models(a, b, path_a=args.model_a, path_b=args.model_b, provenance=prov,
                           provenance_path=prov_path)
        done = 3
        errors: OutputErrors | None = None
        if running:
            feeds = load_feeds(args.input, specs=input_specs(args.model_a)) if args.input else None
            errors = output_errors(args.model_a, args.model_b, feeds=feeds, seed=args.seed or 0, rtol=args.rtol,
                                   atol=args.atol, backend_a=args.backend_a, backend_b=args.backend_b,
                                   on_progress=lambda i, _n, what: tick(done + i, total, what), models=(a, b))
            done += 3
        layers: LayerErrors | None = None
        if layered and a.format == "tflite":
            # every tensor both models name alike (a float model and its quantized version)
            layers = layer_errors(a, b, args.model_a, args.model_b, feeds=feeds,
                                  seed=args.seed or 0, backend_a=args.backend_a, backend_b=args.backend_b,
                                  on_progress=lambda i, _n, what: tick(done + i, total, what))
            done += 2
        if args.html:
            tick(done, total, "writing the report")
            page = render_html(diff, nodes_by_key(a.graph), nodes_by_key(b.graph), errors, layers=layers,
                               title=f"graphwright diff: {Path(args.model_a).name} -> {Path(args.model_b).name}")
            with atomic_path(args.html) as tmp:
                tmp.write_text(page, encoding="utf-8")
            done += 1
        tick(done, total, "done")
    if args.json:
        data = diff.to_json()
        data["outputs"] = errors.to_json() if errors is not None else None
        data["layers"] = layers.to_json() if layers is not None else None
        data["html"] = args.html
        print(json.dumps(data, indent=2))
    elif not args.quiet:
        _render(diff, errors, args, layers)
    return 0


def _render(diff: Any, errors: OutputErrors | None, args: argparse.Namespace,
            layers: LayerErrors | None = None) -> None:
    console = stdout()
    a, b = diff.a, diff.b
    console.print(f"A: {escape(a.path)}\nB: {escape(b.path)}")
    table = Table()
    for column in ("", "A", "B", "change"):
        table.add_column(column, justify="left" if not column else "right")
    def delta(x: int | None, y: int | None) -> str:
        return "" if x is None or y is None else f"{y - x:+d}"
    table.add_row("nodes", str(a.nodes), str(b.nodes), delta(a.nodes, b.nodes))
    table.add_row("parameters", f"{a.parameters:,}", f"{b.parameters:,}", delta(a.parameters, b.parameters))
    table.add_row("file size", human_bytes(a.file_bytes), human_bytes(b.file_bytes), delta(a.file_bytes, b.file_bytes))
    console.print(table)
    ops = diff.op_deltas()
    if ops:
        shown = ", ".join(f"{escape(op)} {x}->{y}" for op, x, y in ops[:12])
        more = f" (+{len(ops) - 12} more)" if len(ops) > 12 else ""
        console.print(f"ops: {shown}{more}")
    how = ("exact (provenance " + escape(str(diff.provenance)) + ")" if diff.matched_by == "provenance"
           else "matched by name and structure: no provenance sidecar, not exact")
    counts = ", ".join(f"{n} {k}" for k, n in diff.counts().items()) or "none"
    console.print(f"changes: {counts} — {how}")
    # alike changes (same kind, title, step) on one row with a count
    groups = Counter((c.kind, c.title(), c.step or "") for c in diff.changes)
    changes = Table(show_header=True)
    for column in ("kind", "n", "change", "step"):
        changes.add_column(column, justify="right" if column == "n" else "left")
    for (kind, title, step), n in list(groups.items())[: max(args.limit, 0)]:
        changes.add_row(kind, str(n), escape(title), escape(step))
    if groups:
        console.print(changes)
    if len(groups) > args.limit:
        console.print(f"... {len(groups) - args.limit} more (--limit, or --json for all)")
    for note in diff.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if errors is not None:
        render_compare(errors.report, console)
    if layers is not None and layers.layers:
        table = Table(title="per-layer error of B against A (tensors both name alike)", title_justify="left")
        for column in ("#", "tensor", "op", "SQNR dB", "max |a-b|", "max rel", "steps"):
            table.add_column(column, justify="left" if column in ("tensor", "op") else "right")
        for x in layers.layers:
            table.add_row(str(x.index), escape(x.tensor), escape(x.op_b), "exact" if x.sqnr_db == float("inf") else f"{x.sqnr_db:.1f}", f"{x.max_abs:.3g}",
                          f"{x.max_rel:.3g}", "" if x.max_steps is None else f"{x.max_steps:.1f}")
        console.print(table)
    elif layers is not None:
        for note in layers.notes:
            console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if args.html:
        console.print(f"report: {escape(args.html)}")
