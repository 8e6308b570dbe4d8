"""``graphwright summarize`` and ``graphwright list-transforms``."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.table import Table

from .. import formats
from ..errors import GraphwrightError
from ..inspect import GraphSummary, summarize
from ..inspect.tflite_detail import render_tflite_detail, tflite_detail
from ..transforms import PRESETS, all_transforms
from ..transforms.presets import missing_steps
from ._console import human_bytes, stdout


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("summarize", help="likely inputs/outputs, parameters, op histogram of a model")
    p.add_argument("model", nargs="?", help="a .pb/.pbtxt, .onnx or .tflite file")
    p.add_argument("--in_graph", dest="in_graph", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run_summarize)
    lt = sub.add_parser("list-transforms", help="the transforms and presets this installation provides")
    lt.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lt.set_defaults(run=run_list)


def run_summarize(args: argparse.Namespace) -> int:
    path = args.model or args.in_graph
    if not path:
        raise GraphwrightError("summarize needs a model file (see 'graphwright summarize --help')")
    model = formats.load(path)
    summary = summarize(model, os.path.getsize(path))
    detail = tflite_detail(model) if model.format == "tflite" else None
    if args.json:
        data = summary.to_json()
        if detail is not None:
            data["tflite"] = detail.to_json()
        print(json.dumps(data, indent=2))
    else:
        render_summary(summary)
        if detail is not None:
            render_tflite_detail(detail, stdout())
    return 0


def _io_table(title: str, specs: list[Any]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("name", "type", "shape"):
        table.add_column(column)
    for spec in specs:
        shape = "unknown" if spec.shape is None else "[" + ",".join("?" if d is None else str(d) for d in spec.shape) + "]"
        table.add_row(spec.name, spec.dtype, shape)
    return table


def render_summary(s: GraphSummary) -> None:
    console = stdout()
    console.print(f"[bold]{s.path}[/bold]  ({s.format}, {human_bytes(s.file_bytes)}, {s.nodes} nodes"
                  + (f", {s.subgraphs} more subgraphs" if s.subgraphs else "") + ")")
    console.print(_io_table(f"Found {len(s.inputs)} possible inputs", s.inputs))
    if s.variables:
        console.print(_io_table(f"Found {len(s.variables)} variables", s.variables))
    console.print(_io_table(f"Found {len(s.outputs)} possible outputs", s.outputs))
    console.print(
        f"Found {s.const_parameters:,} const parameters ({human_bytes(s.const_bytes)}), "
        f"{s.variable_parameters:,} variable parameters, and {s.control_edges:,} control edges"
    )
    for device, count in s.devices.items():
        console.print(f"{count} nodes assigned to device '{device}'")
    ops = Table(title=f"Op types used: {len(s.op_histogram)}", title_justify="left")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in s.op_histogram:
        ops.add_row(op, str(count))
    console.print(ops)
    for note in s.notes:
        console.print(f"note: {note}")
    console.print("To transform it, for example:")
    console.print(f"  {s.suggested_command()}", soft_wrap=True)


def run_list(args: argparse.Namespace) -> int:
    specs = all_transforms()
    available = {s.name for s in specs}
    if args.json:
        print(json.dumps({
            "transforms": [
                {"name": s.name, "formats": sorted(s.dialects), "summary": s.summary, "origin": s.origin,
                 "parameters": [{"name": p.name, "type": p.kind, "default": p.default, "required": p.required}
                                for p in s.params]}
                for s in specs
            ],
            "presets": [
                {"name": p.name, "pipeline": p.pipeline, "purpose": p.purpose,
                 "missing": missing_steps(p, available)}
                for p in PRESETS.values()
            ],
        }, indent=2))
        return 0
    console = stdout()
    table = Table(title="Transforms", title_justify="left")
    for column in ("name", "formats", "parameters", "what it does"):
        table.add_column(column)
    for s in specs:
        params = ", ".join(p.name + ("" if p.required else f"={p.default}") for p in s.params)
        table.add_row(s.name, ",".join(sorted(s.dialects)), params, s.summary
                      + ("" if s.origin == "builtin" else f" [dim](plugin {s.origin})[/dim]"))
    console.print(table)
    presets = Table(title="Presets (usable as a step in --transforms)", title_justify="left")
    for column in ("name", "purpose", "status"):
        presets.add_column(column)
    for p in PRESETS.values():
        missing = missing_steps(p, available)
        presets.add_row(p.name, p.purpose, "ready" if not missing else "needs " + ", ".join(missing))
    console.print(presets)
    return 0
