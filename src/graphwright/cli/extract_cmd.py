"""``graphwright extract MODEL OUTDIR``: every constant tensor as ``.npy`` (or a C header
with ``--format c``) plus ``manifest.json`` (operators, roles, quantization, and the
integer parameters of quantized TFLite layers: multipliers, shifts, tables; sparse
constants written dense with their sparse form beside)."""

from __future__ import annotations

import argparse
from typing import Any

from ..extract import FORMATS, extract
from ._console import stdout


def add_parser(sub: Any) -> None:
    p = sub.add_parser("extract", help="write every constant tensor (.npy or a C header) and a manifest")
    p.add_argument("model", help="a .tflite, .onnx or .pb/.pbtxt file")
    p.add_argument("outdir", help="folder to write (created; must be empty or new unless --force)")
    p.add_argument("--format", choices=FORMATS, default="npy", help="npy files (default) or one C header")
    p.add_argument("--force", action="store_true", help="replace OUTDIR if it exists and is not empty")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    manifest = extract(args.model, args.outdir, format=args.format, overwrite=args.force)
    what = "model_data.h" if args.format == "c" else f"{len(manifest.constants)} .npy files"
    stdout().print(
        f"{args.outdir}: {what} + manifest.json ({len(manifest.constants)} constants, "
        f"{len(manifest.layers)} quantized layers with their integer parameters)"
    )
    return 0
