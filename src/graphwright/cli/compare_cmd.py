"""``graphwright compare A B``: run two models on the same inputs and report the difference.

ONNX runs on onnxruntime, TFLite on LiteRT and GraphDef on TensorFlow (the
``[tf]`` extra).  Exit code 1 when an output is beyond ``--rtol``/``--atol``.

Over a sample set (``--num N`` random samples, ``--data DIR``), the table adds the mean absolute
error and ``--json`` a histogram of absolute errors per output; ``--shards N`` splits the samples
across N worker processes, or Ray tasks with ``--ray [ADDRESS]``, and the merged report is equal to
the one process gives.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..batch.compare_shards import compare_sharded
from ..calibrate import load_samples
from ..errors import VerificationError
from ..runtime import ModelSource, input_specs
from ..runtime.execute import check_file
from ..verify import CompareReport, compare, load_feeds, random_feeds, render_compare
from ._console import progress_callback, stdout


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="run two models on the same inputs and report max abs/rel error")
    p.add_argument("model_a", help="the first model (.pb/.pbtxt, .onnx or .tflite)")
    p.add_argument("model_b", nargs="?", help="the second model (with --layers: optional, default the same file)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy|FILE.npz",
                   help="user data for an input (repeatable); .npz files give several inputs")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    p.add_argument("--backend-a", dest="backend_a", help="runtime for A (default: by format)")
    p.add_argument("--backend-b", dest="backend_b", help="runtime for B (default: by format)")
    p.add_argument("--isolate", action="store_true", help="run each runtime in a child process (survives crashes)")
    p.add_argument("--layers", action="store_true",
                   help="TFLite: compare every intermediate tensor of graphwright's reference interpreter "
                        "(model A) with --backend-b (default litert-ref; or litert, tflm) and report the first layer "
                        "that differs")
    p.add_argument("--rounding", choices=("double", "single"), default="double",
                   help="--layers: the reference interpreter's requantization rounding (single = XNNPACK's)")
    p.add_argument("--jit", action="store_true",
                   help="--layers: the reference interpreter's compiled loops (needs numba, the [fast] extra)")
    p.add_argument("--num", type=int, default=None,
                   help="compare over N samples (random, sample i seeded --seed + i; with --data: at most N)")
    p.add_argument("--data", help="compare over the samples in a directory: .npy, .npz (keyed by input name) or images")
    p.add_argument("--shards", type=int, default=1,
                   help="a sample set: split it across N worker processes (default 1); the report is the same")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="a sample set: run the shards as Ray tasks (ADDRESS, e.g. auto or ray://host:10001; none: "
                        "a local cluster); needs the [ray] extra")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.layers:
        return _run_layers(args)
    if args.model_b is None:
        raise VerificationError("compare needs two models (or --layers for one TFLite model)")
    for path in (args.model_a, args.model_b):  # both files read by graphwright before any runtime starts
        check_file(ModelSource.from_path(path))
    if args.num is not None or args.data or args.shards != 1 or args.ray is not None:
        report = _sample_set(args)
    else:
        feeds = load_feeds(args.input, specs=input_specs(args.model_a)) if args.input else None
        report = compare(
            args.model_a, args.model_b, feeds=feeds, seed=args.seed, rtol=args.rtol, atol=args.atol,
            backend_a=args.backend_a, backend_b=args.backend_b, isolate=args.isolate,
        )
    if args.json:
        print(report.to_json())
    else:
        render_compare(report, stdout())
    return 0 if report.ok else 1


def _sample_set(args: argparse.Namespace) -> CompareReport:
    """Over ``--num`` random samples or the ``--data`` samples, sharded with ``--shards``/``--ray``."""
    if args.input or args.isolate:
        flag = "--input" if args.input else "--isolate"
        raise VerificationError(f"compare: {flag} is for one run; a sample set (--num, --data, --shards, --ray) "
                                "takes its inputs from --data or random samples and runs in worker processes")
    if args.num is not None and args.num < 1:
        raise VerificationError(f"compare: --num needs at least 1 sample, got {args.num}")
    if args.shards < 1:
        raise VerificationError(f"compare: --shards needs at least 1, got {args.shards}")
    samples = load_samples(args.data, input_specs(args.model_a), num=args.num) if args.data else None
    count = None if samples is not None else (args.num or 1)
    with progress_callback("comparing") as on_progress:  # a bar with ETA on a terminal only
        return compare_sharded(args.model_a, args.model_b, samples=samples, count=count, seed=args.seed,
                               shards=args.shards, use_ray=args.ray is not None, address=args.ray or None,
                               rtol=args.rtol, atol=args.atol, backend_a=args.backend_a, backend_b=args.backend_b,
                               on_progress=on_progress)


def _run_layers(args: argparse.Namespace) -> int:
    """Layer by layer: the reference interpreter against LiteRT on the same TFLite model."""
    # lazy: the reference interpreter (and the TFLite reader) load only for --layers
    from ..runtime.reference.layers import compare_layers

    if args.model_b is not None and Path(args.model_b).resolve() != Path(args.model_a).resolve():
        raise VerificationError("--layers compares one TFLite model on two runtimes; give one model")
    source = ModelSource.from_path(args.model_a)
    if source.format != "tflite":
        raise VerificationError(f"--layers compares TFLite models; {args.model_a} is {source.format}")
    specs = input_specs(args.model_a)
    feeds = load_feeds(args.input, specs=specs) if args.input else random_feeds(specs, seed=args.seed)
    other = args.backend_b or "litert-ref"
    # against TFLM, the interpreter computes as TFLM's kernels do (see Interpreter's flavor)
    report = compare_layers(source, feeds, other=other, rounding=args.rounding,
                            tolerance=args.atol or 0.0, isolate=args.isolate, jit=args.jit,
                            flavor="tflm" if other == "tflm" else "litert")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        stdout().print(report.summary())
    return 0 if report.first_difference is None else 1
