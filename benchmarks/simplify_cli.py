"""``graphwright simplify IN OUT`` against ``onnxsim IN OUT``, both as a user runs them: one process
per call (import, load, simplify, save), rounds interleaved, median wall time and median CPU time
(user + system of the child) per tool, and their ratio.  Neither checks its output on onnxruntime
(onnxsim's positional ``check_n`` is given as 0).

    python benchmarks/simplify_cli.py --rounds 5 --models-glob "tv_swin_t-ts-*,hf_swin-ts-dyn"

Models are the export corpus' cached files (``tests/models/_cache/onnx_corpus-<name>-<hash>.onnx``,
built by ``python -m tests.models build_onnx_corpus``) or paths given with ``--files``.
Run it twice when Python writes bytecode caches (the first run writes them), or set
``PYTHONPYCACHEPREFIX`` to a warm directory.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "tests" / "models" / "_cache"
COMMANDS = {
    "graphwright": lambda src, dst: [sys.executable, "-m", "graphwright.cli.main", "simplify", src, dst],
    # check_n 0: onnxsim's CLI otherwise runs the model 3 times on onnxruntime, which graphwright's
    # does only with --check N
    "onnxsim": lambda src, dst: [sys.executable, "-m", "onnxsim", src, dst, "0"],
}


def _corpus(pattern: str) -> dict[str, Path]:
    found = {}
    for path in sorted(CACHE.glob("onnx_corpus-*.onnx")):
        name = path.stem[len("onnx_corpus-"):].rsplit("-", 1)[0]
        if any(fnmatch.fnmatch(name, p) for p in pattern.split(",")):
            found[name] = path
    return found


def _timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-glob", default="tv_swin_t-ts-fixed,tv_swin_t-ts-dyn,hf_swin-ts-dyn")
    ap.add_argument("--files", nargs="*", default=[], help="ONNX files instead of corpus models")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    models = {Path(f).stem: Path(f) for f in args.files} or _corpus(args.models_glob)
    if not models:
        print("no models matched (build the corpus first)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, src in models.items():
            times: dict[str, list[tuple[float, float]]] = {tool: [] for tool in COMMANDS}
            for _ in range(args.rounds):
                for tool, command in COMMANDS.items():
                    times[tool].append(_timed(command(str(src), os.path.join(tmp, f"{tool}.onnx"))))
            row = {"model": name, "rounds": args.rounds, "load": os.getloadavg()[0]}
            for tool, got in times.items():
                row[f"{tool}_wall_s"] = statistics.median(w for w, _ in got)
                row[f"{tool}_cpu_s"] = statistics.median(c for _, c in got)
            row["ratio_wall"] = row["graphwright_wall_s"] / row["onnxsim_wall_s"]
            row["ratio_cpu"] = row["graphwright_cpu_s"] / row["onnxsim_cpu_s"]
            rows.append(row)
            print(f"{name:45s} graphwright {row['graphwright_wall_s']:.2f} s ({row['graphwright_cpu_s']:.2f} CPU)  "
                  f"onnxsim {row['onnxsim_wall_s']:.2f} s ({row['onnxsim_cpu_s']:.2f} CPU)  "
                  f"ratio {row['ratio_wall']:.2f} wall, {row['ratio_cpu']:.2f} CPU  load {row['load']:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
