"""``graphwright quantize IN OUT --mode MODE``: post-training quantization with an accuracy report.

Argument parsing and rendering only; the work is :func:`graphwright.quantize.quantize`.  The
input is never modified; the output (and ``--save-ranges``/``--html`` files) are written
atomically.  Without ``--data`` the model is calibrated and evaluated on seeded random inputs,
with a loud warning on stderr.  A progress bar is drawn on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..batch.calibration_shards import collect_statistics_sharded
from ..errors import TransformError
from ..formats import save
from ..formats.files import same_file
from ..quantize import METHODS, QuantReport, quantize, render_html
from ..transforms.quantize.options import ranges_json
from ._console import human_bytes, progress_callback, stderr, stdout

__all__ = ["add_parser", "run"]

#: Layers listed in the table (the lowest SQNR first); --json and --html have them all.
TABLE_LAYERS = 10


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "quantize",
        help="post-training quantization of an ONNX or TFLite model, with an accuracy report",
        description="Quantize an ONNX model (static QDQ, dynamic, weight-only 8/4-bit) or a float TFLite model "
                    "(int8, 16x8, dynamic range, weight-only); the input is never modified.",
    )
    p.add_argument("input", help="ONNX or TFLite model to read")
    p.add_argument("output", help="where to write the quantized model")
    p.add_argument("--mode", required=True,
                   help="ONNX: static, dynamic, weights; TFLite: int8 (or static), 16x8, dynamic, weights")
    p.add_argument("--data", metavar="DIR", help="calibration/evaluation inputs: a directory of .npy/.npz files "
                                                 "(without it: seeded random inputs, with a warning)")
    p.add_argument("--method", choices=METHODS, default="minmax", help="calibration range method (default minmax)")
    p.add_argument("--samples", type=int, default=None, metavar="N",
                   help="calibration samples (default: every file of --data not held out; 100 random ones without)")
    p.add_argument("--eval-samples", type=int, default=16, metavar="N",
                   help="held-out samples the report is measured on (default 16; every 5th sample is held out)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--ranges", metavar="FILE", help="use these ranges (a graphwright ranges JSON) instead of calibrating")
    p.add_argument("--save-ranges", metavar="FILE", help="write the calibrated ranges to FILE")
    p.add_argument("--exclude-op", dest="exclude_ops", action="extend", nargs="+", default=[], metavar="OP",
                   help="leave every node of these ops in float")
    p.add_argument("--exclude-node", dest="exclude_nodes", action="extend", nargs="+", default=[], metavar="NAME",
                   help="leave these nodes in float")
    p.add_argument("--keep-float", metavar="auto:N|N", default=None,
                   help="rank the layers by sensitivity and keep the N most sensitive in float (auto:0 ranks only)")
    p.add_argument("--activation-type", choices=("int8", "uint8", "int16"), default=None,
                   help="activation type (default: uint8 for ONNX static, int16 for 16x8, else int8)")
    p.add_argument("--weight-type", choices=("int8", "uint8", "int4", "uint4", "float16"), default=None,
                   help="weight type (default: int8; int4 with --bits 4; float16: TFLite --mode weights, the converter's float16 model)")
    p.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor (default: per channel)")
    p.add_argument("--symmetric-activations", action="store_true", help="zero point 0 for activations")
    p.add_argument("--io-type", choices=("float32", "int8", "uint8", "int16"), default="float32",
                   help="TFLite full-integer: type of the model's inputs and outputs (default float32)")
    p.add_argument("--bits", type=int, choices=(4, 8), default=8, help="ONNX weights: 8 or 4 (blockwise) bits")
    p.add_argument("--block-size", type=int, default=128, metavar="N", help="block size of 4-bit weights (default 128)")
    p.add_argument("--int4-method", choices=("gptq", "mse", "rtn"), default=None,
                   help="4-bit codes: gptq (GPTQ on the calibration data: each layer's output error; default with "
                        "--data), mse (least squared weight error; default without data) or rtn (onnxruntime's "
                        "MatMulNBitsQuantizer round-to-nearest, the same bytes)")
    p.add_argument("--accuracy-level", type=int, choices=(0, 1, 2, 3, 4), default=4,
                   help="4-bit --target onnxruntime: MatMulNBits' accuracy_level (4, default: int8 activations at run "
                        "time, fastest on CPU; 0: unset, float32 compute as MatMulNBitsQuantizer writes it)")
    p.add_argument("--target", choices=("generic", "onnxruntime"), default="generic",
                   help="ONNX: standard ops only, or also onnxruntime's contrib ops (MatMulNBits)")
    p.add_argument("--minimum-size", type=int, default=1024, metavar="N", help="ONNX weights-only: smallest initializer quantized, in elements (default 1024)")
    p.add_argument("--engine", choices=("auto", "litert", "litert-ref", "reference"), default="auto",
                   help="runtime that runs the float model to calibrate (auto: onnxruntime for ONNX, LiteRT for "
                        "TFLite; TFLite also litert-ref or reference, graphwright's interpreter)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="calibration samples per run (default: 8 for ONNX min-max with a dynamic batch axis, else 1)")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="collect calibration statistics in N processes (or Ray tasks with --ray); same ranges")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the calibration shards as Ray tasks (ADDRESS, e.g. auto or ray://host:10001; none: "
                        "a local cluster); needs the [ray] extra")
    p.add_argument("--html", metavar="FILE", help="also write the report as a self-contained HTML file")
    p.add_argument("--no-report", action="store_true", help="skip the accuracy and latency report")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors and warnings")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if same_file(args.input, args.output):
        raise TransformError(f"refusing to overwrite the input {args.input} (the output {args.output} is the same "
                             "file); choose another output path")
    for flag, count, least in (("--samples", args.samples, 1), ("--eval-samples", args.eval_samples, 0)):
        if count is not None and count < least:
            raise TransformError(f"{flag} needs a count of at least {least}, got {count}")
    err = stderr()
    shown: set[str] = set()

    def loud(message: Warning | str, *_: object, **__: object) -> None:
        shown.add(str(message))
        err.print(f"[bold yellow]WARNING:[/bold yellow] {escape(str(message))}", highlight=False, soft_wrap=True)

    with warnings.catch_warnings(), progress_callback("quantize", quiet=args.quiet or args.json) as on_progress:
        warnings.simplefilter("ignore")  # runtimes' own warnings (LiteRT's debugging notice) are not for users
        warnings.filterwarnings("always", message="NO (CALIBRATION|EVALUATION) DATA")
        warnings.showwarning = loud  # type: ignore[assignment]
        model, report = quantize(
            args.input, mode=args.mode, data=args.data, calibration_samples=args.samples,
            eval_samples=args.eval_samples, seed=args.seed, method=args.method, ranges=args.ranges,
            activation_type=args.activation_type, weight_type=args.weight_type, per_channel=not args.per_tensor,
            symmetric_activations=args.symmetric_activations, io_type=args.io_type, bits=args.bits,
            block_size=args.block_size, target=args.target, exclude_ops=args.exclude_ops,
            exclude_nodes=args.exclude_nodes, keep_float=args.keep_float, minimum_size=args.minimum_size,
            report=not args.no_report, on_progress=on_progress, collect=_sharded_collector(args),
            engine=args.engine, batch_size=args.batch_size, int4_method=args.int4_method,
            accuracy_level=args.accuracy_level)
    save(model, args.output)
    if args.save_ranges:
        if not report.ranges:
            raise TransformError(f"--save-ranges: --mode {args.mode} computes no ranges (static modes only)")
        _write_atomic(args.save_ranges, ranges_json(report.ranges, method=report.method or ""))
    if args.html:
        _write_atomic(args.html, render_html(report, title=f"graphwright quantize {args.input} -> {args.output}"))
    for warning in report.warnings:
        if warning not in shown:
            err.print(f"[bold yellow]WARNING:[/bold yellow] {escape(warning)}", highlight=False, soft_wrap=True)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not args.quiet:
        render_report(report, stdout(), title=f"{args.input} -> {args.output}")
    return 0


def _sharded_collector(args: argparse.Namespace) -> Any:
    """With ``--shards N`` (N > 1) or ``--ray``: the calibration samples' statistics collected
    over processes or Ray tasks from the input file, merged exactly (the one-process result)."""
    if args.shards < 1:
        raise TransformError(f"--shards needs a count of at least 1, got {args.shards}")
    if args.shards == 1 and args.ray is None:
        return None

    def collect(model: Any, samples: Any, on_progress: Any) -> Any:
        return collect_statistics_sharded(args.input, list(samples), shards=args.shards,
                                          use_ray=args.ray is not None, address=args.ray or None,
                                          engine=args.engine, batch_size=args.batch_size or 1,
                                          on_progress=on_progress)

    return collect


def _write_atomic(path: str, text: str) -> None:
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _db(x: float) -> str:
    return "exact" if math.isinf(x) and x > 0 else f"{x:.1f}"


def render_report(report: QuantReport, console: Console, *, title: str = "") -> None:
    """Summary lines, the per-output table, the lowest-SQNR layers and the kept-float ones."""
    r = report
    head = f"{r.format} {r.mode}" + (f", {r.method} ranges from {r.calibration_samples} sample(s)" if r.method else "")
    console.print(escape(f"{title}: {head}" if title else head), highlight=False)
    stats = ", ".join(f"{k} {v}" for k, v in r.stats.items())
    if stats:
        console.print(escape(stats), highlight=False)
    parts = [f"calibration {r.calibration_seconds:.2f} s" if r.method else "",
             f"sensitivity {r.sensitivity_seconds:.2f} s" if r.sensitivity else ""]
    detail = ", ".join(p for p in parts if p)
    console.print(f"size {human_bytes(r.size_before)} -> {human_bytes(r.size_after)}; quantized in "
                  f"{r.quantize_seconds:.2f} s" + (f" ({detail})" if detail else ""), highlight=False)
    if r.latency_before_ms is not None and r.latency_after_ms is not None:
        console.print(f"latency on {r.runtime}: {r.latency_before_ms:.3f} ms -> {r.latency_after_ms:.3f} ms",
                      highlight=False)
    if r.outputs:
        table = Table(title=f"outputs vs float on {r.eval_samples} {r.eval_split} sample(s) ({escape(r.data_source)})",
                      title_justify="left")
        for column in ("output", "max |err|", "mean |err|", "relative", "SQNR dB", "top-1 agree"):
            table.add_column(column, justify="left" if column == "output" else "right")
        for o in r.outputs:
            table.add_row(escape(o.name), f"{o.max_abs:.4g}", f"{o.mean_abs:.4g}", f"{o.rel_error:.2%}", _db(o.sqnr_db),
                          "-" if o.top1_agreement is None else f"{o.top1_agreement:.1%}")
        console.print(table)
    if r.layers:
        worst = sorted(r.layers, key=lambda x: x.sqnr_db)[:TABLE_LAYERS]
        table = Table(title=f"lowest per-layer SQNR ({len(worst)} of {len(r.layers)} layers)", title_justify="left")
        for column in ("layer", "op", "SQNR dB"):
            table.add_column(column, justify="right" if column == "SQNR dB" else "left")
        for x in worst:
            table.add_row(escape(x.node), escape(x.op), _db(x.sqnr_db))
        console.print(table)
    if r.sensitivity:
        gains = {s.node: s.gain_db for s in r.sensitivity}
        kept = ", ".join(f"{name} (+{_db(gains[name])} dB)" for name in r.kept_float) or "none"
        console.print(escape(f"sensitivity: {len(r.sensitivity)} layers ranked; kept float: {kept}"),
                      highlight=False)
    for note in r.notes:
        console.print(escape(f"note: {note}"), highlight=False)
