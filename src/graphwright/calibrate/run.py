"""Run an ``insert_logging``'ed GraphDef over samples and keep its min/max log.

The eight-bit workflow::

    quantize_nodes -> insert_logging(op=RequantizationRange, show_name=true,
                                     message="__requant_min_max:")
    -> calibrate (this module) -> freeze_requantization_ranges(min_max_log_file=LOG)

TensorFlow's ``Print`` op writes ``<prefix>] ;<node>__print__;__requant_min_max:[min][max]``
to stderr from C++, at INFO level.  So the graph runs in a child Python
(TensorFlow v1 Session, ``TF_CPP_MIN_LOG_LEVEL=0``) whose stderr goes to a
file; the lines written by ``Print`` nodes (those holding ``__print__;``) are
then kept, in order, in the log file (written atomically).  O(samples x graph).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..formats import load
from ..formats.files import atomic_write_bytes
from ..runtime import input_specs

__all__ = ["PRINT_MARKER", "CalibrationReport", "calibrate"]

#: What every line written by an insert_logging(show_name=true) Print node holds.
PRINT_MARKER = "__print__;"
#: Seconds a calibration run may take before it is stopped.
DEFAULT_TIMEOUT = 3600.0


@dataclass
class CalibrationReport:
    samples: int
    log_lines: int
    nodes_logged: list[str] = field(default_factory=list)
    log_path: str = ""


def calibrate(
    logged_graph: str | os.PathLike[str],
    log_out: str | os.PathLike[str],
    samples: Sequence[Mapping[str, np.ndarray]],
    *,
    outputs: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> CalibrationReport:
    """Run ``logged_graph`` in TensorFlow once per sample; write the Print lines to ``log_out``.

    ``on_progress(done, total, what)`` is called as samples finish (polled a few times a second)."""
    graph_path = Path(logged_graph)
    model = load(graph_path)
    if model.format != "graphdef":
        raise VerificationError(f"calibrate: {graph_path} is a {model.format} model; calibration needs a GraphDef")
    if not any(node.op == "Print" for node in model.graph):
        raise VerificationError(
            f"calibrate: {graph_path} has no Print nodes; run insert_logging(op=RequantizationRange, "
            'show_name=true, message="__requant_min_max:") on it first'
        )
    if not samples:
        raise VerificationError("calibrate: no samples to run")
    names = list(samples[0])
    known = {spec.name for spec in input_specs(model)}
    for i, sample in enumerate(samples):
        if list(sample) != names:
            raise VerificationError(f"calibrate: sample {i} feeds {sorted(sample)}, sample 0 feeds {sorted(names)}")
    unknown = [n for n in names if n.partition(":")[0] not in known]
    if unknown:
        raise VerificationError(f"calibrate: the graph has no input {unknown[0]!r}; its inputs are {sorted(known)}")
    with tempfile.TemporaryDirectory(prefix="graphwright-calibrate-") as tmp:
        folder = Path(tmp)
        job = {"model": str(graph_path.resolve()), "inputs": names, "outputs": list(outputs or []),
               "samples": len(samples)}
        (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")
        for i, sample in enumerate(samples):
            arrays: dict[str, Any] = {f"f{k}": np.asarray(sample[n]) for k, n in enumerate(names)}
            np.savez(folder / f"sample_{i}.npz", **arrays)
        stderr_path = folder / "stderr.txt"
        _run_child(folder, stderr_path, timeout, len(samples), on_progress)
        lines = [ln for ln in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines()
                 if PRINT_MARKER in ln]
    if not lines:
        raise VerificationError(
            f"calibrate: running {graph_path} printed no '{PRINT_MARKER}' lines; "
            "were the Print nodes added with show_name=true, and do the outputs depend on them?"
        )
    atomic_write_bytes(log_out, ("\n".join(lines) + "\n").encode("utf-8"))
    logged = sorted({_logged_node(ln) for ln in lines} - {""})
    return CalibrationReport(len(samples), len(lines), logged, os.fspath(log_out))


def _run_child(folder: Path, stderr_path: Path, timeout: float, total: int,
               on_progress: Callable[[int, int, str], None] | None) -> None:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # Print logs at INFO level
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    code = "import sys; from graphwright.calibrate._child import main; sys.exit(main(sys.argv[1]))"
    progress, shown = folder / "progress", -1
    deadline = time.monotonic() + timeout
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.DEVNULL,
                                stderr=err, env=env)
        try:
            while True:
                try:
                    proc.wait(timeout=0.25)
                    finished = True
                except subprocess.TimeoutExpired:
                    finished = False
                if on_progress is not None:
                    done = int(progress.read_text(encoding="utf-8") or 0) if progress.exists() else 0
                    if done != shown:
                        shown = done
                        on_progress(done, total, f"sample {done} of {total}")
                if finished:
                    break
                if time.monotonic() > deadline:
                    raise VerificationError(f"calibrate: TensorFlow did not finish within {timeout:g} s")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    done = folder / "done.json"
    if done.exists():
        error = json.loads(done.read_text(encoding="utf-8"))["error"]
        if error:
            raise VerificationError(f"calibrate: {error}")
        return
    tail = [ln for ln in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines()
            if ln.strip() and PRINT_MARKER not in ln][-1:]
    raise VerificationError(
        f"calibrate: TensorFlow exited with code {proc.returncode} before finishing"
        + (f": {tail[0].strip()[:300]}" if tail else "")
    )


def _logged_node(line: str) -> str:
    for part in line.split(";"):
        if part.endswith("__print__"):
            return part[: -len("__print__")].split()[-1] if part.split() else ""
    return ""
