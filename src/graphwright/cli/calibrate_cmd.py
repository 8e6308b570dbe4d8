"""``graphwright calibrate LOGGED_GRAPH LOG_OUT``: record requantization ranges for an eight-bit GraphDef.

Runs a graph instrumented with ``insert_logging(op=RequantizationRange,
show_name=true, message="__requant_min_max:")`` in TensorFlow over the samples
in ``--data`` (``.npy``/``.npz``/images) or ``--num`` seeded random inputs, and
writes the min/max log that ``freeze_requantization_ranges(min_max_log_file=LOG_OUT)``
reads.  ``--shards N`` splits the samples into N runs at the same time (threads, or Ray tasks
with ``--ray [ADDRESS]``) and writes the same log, byte for byte, as one run: each sample's lines
in node order (TensorFlow prints independent nodes in either order).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..batch import calibrate_sharded
from ..calibrate import (
    DEFAULT_IMAGE_MEAN,
    DEFAULT_IMAGE_STD,
    load_samples,
    random_samples,
)
from ..errors import VerificationError
from ..formats.files import same_file
from ..runtime import input_specs
from ._console import progress_callback

#: Random samples run when neither --data nor --num is given.
DEFAULT_NUM_RANDOM = 10


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate",
        help="run an insert_logging'ed eight-bit GraphDef in TensorFlow and write its min/max log",
    )
    p.add_argument("logged_graph", help="GraphDef with Print nodes from insert_logging(op=RequantizationRange, ...)")
    p.add_argument("log_out", help="log file to write (input of freeze_requantization_ranges)")
    p.add_argument("--inputs", default="", help="comma-separated input names (default: every Placeholder)")
    p.add_argument("--outputs", default="", help="comma-separated outputs to fetch (default: the graph's outputs)")
    p.add_argument("--data", help="directory of samples: .npy, .npz (keyed by input name) or images")
    p.add_argument("--num", type=int, default=None,
                   help=f"number of samples (random: default {DEFAULT_NUM_RANDOM}; --data: at most this many)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random samples (default 0)")
    p.add_argument("--image-mean", dest="image_mean", type=float, default=DEFAULT_IMAGE_MEAN,
                   help=f"images: value subtracted from pixels (default {DEFAULT_IMAGE_MEAN})")
    p.add_argument("--image-std", dest="image_std", type=float, default=DEFAULT_IMAGE_STD,
                   help=f"images: divisor after the mean (default {DEFAULT_IMAGE_STD})")
    p.add_argument("--shards", type=int, default=1,
                   help="split the samples into N runs at the same time, logs merged in sample order (default 1)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the shards as Ray tasks (ADDRESS, e.g. auto or ray://host:10001; none: a local "
                        "cluster); needs the [ray] extra")
    p.set_defaults(run=run)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def run(args: argparse.Namespace) -> int:
    if args.shards < 1:
        raise VerificationError(f"calibrate: --shards needs at least 1, got {args.shards}")
    if same_file(args.logged_graph, args.log_out):  # through symbolic and hard links too
        raise VerificationError(f"refusing to overwrite the input {args.logged_graph} with the log; "
                                "choose another log path")
    specs = input_specs(args.logged_graph)
    wanted = _names(args.inputs)
    if wanted:
        by_name = {s.name: s for s in specs}
        unknown = [n for n in wanted if n.partition(":")[0] not in by_name]
        if unknown:
            known = ", ".join(sorted(by_name)) or "none"
            raise VerificationError(f"calibrate: {args.logged_graph} has no input {unknown[0]!r}; its inputs are {known}")
        specs = [by_name[n.partition(":")[0]] for n in wanted]
    if args.data:
        samples = load_samples(args.data, specs, num=args.num, image_mean=args.image_mean, image_std=args.image_std)
    else:
        samples = random_samples(specs, DEFAULT_NUM_RANDOM if args.num is None else args.num, args.seed)
    outputs = _names(args.outputs) or None
    with progress_callback("calibrating") as on_progress:  # a bar with ETA on a terminal only
        report = calibrate_sharded(args.logged_graph, args.log_out, samples, shards=args.shards, outputs=outputs,
                                   use_ray=args.ray is not None, address=args.ray or None, on_progress=on_progress)
    print(f"ran {report.samples} sample(s); wrote {report.log_lines} range line(s) for "
          f"{len(report.nodes_logged)} node(s) to {report.log_path}")
    return 0
