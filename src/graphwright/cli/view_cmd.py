"""``graphwright view MODEL [--diff B]``: open the model in Netron, graphwright's summary beside it.

Netron (the ``netron`` package, the ``[view]`` extra) serves the model on a local port and, unless
``--no-browser``, opens it in the browser; ``--diff B`` serves B on a second port and prints
what changed.  The servers run until Ctrl+C (or ``--timeout`` seconds), then stop.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from .. import formats
from ..diff import DiffError, diff_models, read_provenance, sidecar_path
from ..errors import GraphwrightError
from ..inspect import summarize
from ._console import human_bytes, stdout

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("view", help="open a model in Netron (the [view] extra) with graphwright's summary",
                       description="Serve the model with Netron on a local port and open it in the browser; "
                                   "the summary (and with --diff, what changed) is printed here.")
    p.add_argument("model", help="model to view (.pb/.pbtxt, .onnx or .tflite)")
    p.add_argument("--diff", metavar="B", help="also serve B (same format) and print what changed from MODEL to B")
    p.add_argument("--host", default="localhost", help="address to serve on (default localhost)")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one; B gets the next free one)")
    p.add_argument("--no-browser", action="store_true", help="serve only; do not open a browser")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop serving after this long (default: until Ctrl+C)")
    p.set_defaults(run=run)


def _netron() -> Any:
    try:
        import netron  # lazy: optional [view] extra, imported only by this command
    except ImportError as e:
        raise GraphwrightError("graphwright view needs Netron: pip install 'graphwright[view]' "
                               f"(or pip install netron): {e}") from e
    return netron


def run(args: argparse.Namespace) -> int:
    netron = _netron()
    model = formats.load(args.model)
    other = formats.load(args.diff) if args.diff else None
    if other is not None and other.format != model.format:
        raise DiffError(f"--diff needs a model of the same format: {args.model} is {model.format}, "
                        f"{args.diff} is {other.format}")
    console = stdout()
    _print_summary(console, args.model, model)
    if other is not None:
        sidecar = sidecar_path(args.diff)
        prov = read_provenance(sidecar) if sidecar.is_file() else None
        diff = diff_models(model, other, path_a=args.model, path_b=args.diff, provenance=prov,
                           provenance_path=str(sidecar) if prov is not None else None)
        counts = ", ".join(f"{n} {k}" for k, n in diff.counts().items()) or "no changes"
        how = "exact" if diff.matched_by == "provenance" else "matched by structure, not exact"
        console.print(f"B: {escape(args.diff)}: nodes {diff.a.nodes} -> {diff.b.nodes}; {counts} ({how}); "
                      f"graphwright diff {escape(args.model)} {escape(args.diff)} --html report.html for pictures")
    served: list[tuple[str, int]] = []
    child: subprocess.Popen[str] | None = None
    try:
        address = netron.serve(str(args.model), address=(args.host, args.port), browse=not args.no_browser)
        served.append(address)
        console.print(f"netron: {escape(str(args.model))} at http://{address[0]}:{address[1]}/")
        if args.diff:
            # Netron serves one model per process (its request handler holds the content): B in a child
            child, address = _serve_in_child(args.diff, args.host, args.port + 1 if args.port else 0,
                                             browse=not args.no_browser)
            console.print(f"netron: {escape(str(args.diff))} at http://{address[0]}:{address[1]}/")
        console.file.flush()
        deadline = None if args.timeout is None else time.monotonic() + args.timeout
        while deadline is None or time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    except OSError as e:  # a port taken, an address that is not ours
        raise GraphwrightError(f"netron could not serve on {args.host}:{args.port}: {e.strerror or e}") from e
    finally:
        for address in served:
            netron.stop(address)
        if child is not None:
            _end(child)
    return 0


_CHILD = """
import sys
import netron
address = netron.serve(sys.argv[1], address=(sys.argv[2], int(sys.argv[3])), browse=sys.argv[4] == "1")
print(address[0], address[1], flush=True)
netron.wait()
"""


def _serve_in_child(path: str, host: str, port: int, *, browse: bool) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), host, str(port), "1" if browse else "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2:
        _end(proc)
        raise GraphwrightError(f"netron could not serve {path} on {host}:{port}")
    return proc, (line[0], int(line[1]))


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _print_summary(console: Any, path: str, model: Any) -> None:
    s = summarize(model, os.path.getsize(path))
    ins = ", ".join(f"{i.name} {i.dtype}{i.shape}" for i in s.inputs) or "-"
    outs = ", ".join(o.name for o in s.outputs) or "-"
    ops = ", ".join(f"{op} {n}" for op, n in s.op_histogram[:8])
    more = f" (+{len(s.op_histogram) - 8} more)" if len(s.op_histogram) > 8 else ""
    console.print(f"{escape(Path(path).name)}: {s.format}, {s.nodes} nodes, {s.const_parameters:,} parameters, "
                  f"{human_bytes(s.file_bytes)}")
    console.print(f"  inputs: {escape(ins)}")
    console.print(f"  outputs: {escape(outs)}")
    console.print(f"  ops: {escape(ops)}{more}")
