"""``graphwright simplify IN OUT``: onnx-simplifier's job, with its flags.

Shape inference, elimination/fusion passes and constant folding to a fixed
point (see :mod:`graphwright.simplify`), then a before/after table.  With
``--check N`` the result is run against the original on N seeded random
inputs first; when an output is beyond ``--rtol``/``--atol`` nothing is
written and the exit code is 1.  The input file is never modified; the output
is written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.console import Console
from rich.table import Table

from ..diff import write_provenance
from ..errors import TransformError
from ..formats.files import same_file
from ..runtime import input_specs
from ..simplify import SimplifyReport, parse_input_shapes, parse_size, simplify
from ..simplify.options import skippable_names
from ..transforms.fold.onnx_fold_constants import DEFAULT_SIZE_LIMIT
from ._console import human_bytes, print_refusals, stdout, step_progress

__all__ = ["add_parser", "run"]

#: ``--no-large-tensor`` without a size, as in onnxsim.
NO_LARGE_TENSOR_DEFAULT = "1KB"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "simplify",
        help="simplify an ONNX model: shape inference, constant folding, eliminations and fusions",
        description="Simplify an ONNX model to a fixed point; the input is never modified.",
    )
    p.add_argument("input", help="ONNX model to read")
    p.add_argument("output", help="where to write the simplified model")
    p.add_argument("--overwrite-input-shape", "--input-shape", dest="input_shapes", action="extend", nargs="+",
                   default=[], metavar="NAME:D1,D2,...",
                   help="fix input shapes before simplifying (a bare D1,D2 for a single-input model; ? keeps a dim)")
    p.add_argument("--skip-optimization", "--skip-optimizer", dest="skip", nargs="*", default=None, metavar="NAME",
                   help="skip these passes (none named: all of them); names: " + ", ".join(skippable_names()))
    p.add_argument("--skip-fuse-bn", action="store_true", help="same as --skip-optimization fuse_bn_into_conv")
    p.add_argument("--skip-constant-folding", action="store_true", help="do not fold constants")
    p.add_argument("--skip-shape-inference", action="store_true", help="do not run shape inference")
    p.add_argument("--no-large-tensor", dest="no_large_tensor", nargs="?", const=NO_LARGE_TENSOR_DEFAULT,
                   default=None, metavar="SIZE",
                   help=f"do not fold tensors larger than SIZE (default without SIZE: {NO_LARGE_TENSOR_DEFAULT})")
    p.add_argument("--size-limit", dest="size_limit", default=None, metavar="SIZE",
                   help="largest tensor constant folding may create, e.g. 100MB (default 1GB)")
    p.add_argument("--fold-budget", dest="fold_budget", default=None, metavar="SIZE",
                   help="most data constant folding may compute in all, and the memory ONNX's data propagation "
                        "may take, e.g. 512MB (default 256MB, plus the model's weights for folding)")
    p.add_argument("--max-iterations", type=int, default=15, help="bound of the fixed-point loop (default 15)")
    p.add_argument("--save-as-external-data", action="store_true",
                   help="store the weights in OUT.data beside the model")
    p.add_argument("--check", type=int, default=0, metavar="N",
                   help="compare outputs with the original on N seeded random inputs before writing")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance of --check (default: per dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance of --check (default: per dtype)")
    p.add_argument("--inline-functions", action="store_true",
                   help="replace calls of model-local functions by their bodies (kept by default)")
    p.add_argument("--target", choices=("standard", "onnxruntime"), default="standard",
                   help="fuse into standard ONNX ops only (default), or also onnxruntime's contrib fused ops")
    p.add_argument("--json", action="store_true", help="print the report as JSON (refused matches included)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="list every match a pass left alone, with its reason (default: the most common reasons)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--provenance", action="store_true",
                   help="also write OUT.provenance.json: the original nodes each node replaced (read by graphwright diff)")
    p.set_defaults(run=run)


def _size_limit(args: argparse.Namespace) -> int:
    limits = [parse_size(s) for s in (args.no_large_tensor, args.size_limit) if s is not None]
    return min(limits) if limits else DEFAULT_SIZE_LIMIT


def run(args: argparse.Namespace) -> int:
    if same_file(args.input, args.output):  # through symbolic and hard links too
        raise TransformError(f"refusing to overwrite the input {args.input} (the output {args.output} is the same "
                             "file); choose another output path")
    if args.check < 0:
        raise TransformError(f"--check needs a count of at least 0, got {args.check}")
    skip_all = args.skip is not None and len(args.skip) == 0
    skips = list(args.skip or [])
    if args.skip_fuse_bn:
        skips.append("fuse_bn_into_conv")
    shapes = None
    if args.input_shapes:
        shapes = parse_input_shapes(args.input_shapes, [s.name for s in input_specs(args.input)])
    with step_progress("simplify", quiet=args.quiet or args.json):  # drawn on a terminal only
        model, report = simplify(
            args.input,
            overwrite_input_shapes=shapes,
            skip_optimizations=skips,
            skip_all_optimizations=skip_all,
            skip_constant_folding=args.skip_constant_folding,
            skip_shape_inference=args.skip_shape_inference,
            size_limit=_size_limit(args),
            fold_budget=args.fold_budget,
            max_iterations=args.max_iterations,
            check_n=args.check,
            rtol=args.rtol,
            atol=args.atol,
            target=args.target,
            inline_functions=args.inline_functions,
            provenance=args.provenance,  # recorded only when the sidecar is wanted
        )
    console = stdout()
    if report.checks and not report.check_ok:
        failed = next(c for c in report.checks if not c.ok)
        if args.json:
            print(json.dumps(report.to_dict(), indent=2))
        else:
            from ..verify import render_compare  # lazy: verify's modules are needed only when a check failed

            render_compare(failed, console)
            console.print(f"[red]check failed[/red]: the simplified model differs from {args.input}; "
                          f"{args.output} was not written")
        return 1
    # lazy: the ONNX writer imports onnx, which every other command's start-up would pay for
    from ..formats import onnx as onnx_format

    onnx_format.save(model, args.output, external_data=True if args.save_as_external_data else None)
    report.after.file_bytes = os.path.getsize(args.output)
    if args.provenance:
        write_provenance(model, args.output, source=args.input)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif not args.quiet:
        render_report(report, console, title=f"{args.input} -> {args.output}", verbose=args.verbose)
        if report.checks:
            console.print(f"check: {len(report.checks)} random input(s), every output within tolerance")
    return 0


def render_report(report: SimplifyReport, console: Console, *, title: str = "", verbose: bool = False) -> None:
    """The before/after table: op counts that changed, nodes, initializers, file size, time."""
    table = Table(title=title or None, title_justify="left")
    for column in ("", "before", "after"):
        table.add_column(column, justify="left" if not column else "right")
    before, after = report.before, report.after
    for op in sorted(set(before.ops) | set(after.ops)):
        a, b = before.ops.get(op, 0), after.ops.get(op, 0)
        if a != b:
            table.add_row(op, str(a), str(b))
    table.add_section()
    table.add_row("nodes", str(before.nodes), str(after.nodes))
    table.add_row("initializers", str(before.initializers), str(after.initializers))
    table.add_row("initializer data", human_bytes(before.initializer_bytes), human_bytes(after.initializer_bytes))
    if before.file_bytes is not None or after.file_bytes is not None:
        table.add_row("file size", human_bytes(before.file_bytes), human_bytes(after.file_bytes))
    table.add_row("time", "", f"{report.seconds:.2f} s")
    console.print(table)
    status = "converged" if report.converged else "stopped at the iteration limit"
    console.print(f"{report.iterations} iteration(s), {status}")
    for name, refusals in report.refusals().items():
        print_refusals(console, name, refusals, verbose=verbose)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", markup=True, highlight=False)
