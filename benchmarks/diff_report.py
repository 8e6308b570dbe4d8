"""``graphwright diff --html`` on a BERT-base simplify: report size, time to write it, time for a
browser to load it, and time to draw every change.

Usage (from the repo root)::

    python benchmarks/diff_report.py [--models bert-base[,bert-large]] [--seed 0] [--overhead 3] [--json out.json]

The model is built by ``benchmarks/simplify_onnx.py``'s builder into ``benchmarks/_models/``
(random-weight transformers BERT, TorchScript exporter, dynamic batch/sequence), in a child
process with torchvision blocked (transformers imports it when installed, and a torchvision
built for another torch breaks the import; BERT does not need it).  Then, each in its own
child process:

1. ``graphwright.simplify`` the model, save it and its provenance sidecar (``_models/diff/``);
2. ``graphwright diff A B --html report.html --quiet`` (with ``--seed``: also both models run
   on onnxruntime for the per-output errors), wall time of the command;
3. Debian's chromium, headless, loads the report: the page records ``performance.now()`` when
   its script has drawn the changes open by default (``data-ready-ms``); a second load clicks
   "draw all shown" and records how long laying out and drawing every change took.

There is no peer tool that writes such a report, so there are no ratios for it: the numbers are
graphwright's alone.  ``--overhead N`` measures what recording provenance costs: ``simplify`` of
the same model with the step runner's provenance on and switched off (patched out in the child),
alternating, N runs each, medians and their ratio.  Results are in ``benchmarks/diff_report.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "benchmarks" / "_models"
OUT = MODELS / "diff"

_BUILD = """
import sys
sys.modules.setdefault("torchvision", None)
sys.path.insert(0, {repo!r}); sys.path.insert(0, {bench!r})
import simplify_onnx as b
b._build({name!r}, {path!r})
"""

_SIMPLIFY = """
import json, sys, time
from graphwright import formats
from graphwright.diff import write_provenance
from graphwright.simplify import simplify
start = time.perf_counter()
model, report = simplify(sys.argv[1])
formats.save(model, sys.argv[2])
write_provenance(model, sys.argv[2], source=sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "nodes_before": report.before.nodes,
                  "nodes_after": report.after.nodes}))
"""

_OVERHEAD = """
import contextlib, json, sys, time
import graphwright.transforms.runner as runner
from graphwright.simplify import simplify
if sys.argv[2] == "off":  # the step runner without provenance: no recorder, no per-step bookkeeping
    runner.recording = lambda callback: contextlib.nullcontext()
    runner.Provenance.begin = lambda self, model: None
    runner.Provenance.end = lambda self, model, label: None
spent = [0.0]
if sys.argv[2] == "on":  # time spent inside the provenance bookkeeping itself
    for name in ("begin", "end", "rewrite"):
        def timed(original=getattr(runner.Provenance, name)):
            def call(*args, **kwargs):
                t = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    spent[0] += time.perf_counter() - t
            return call
        setattr(runner.Provenance, name, timed())
start = time.perf_counter()
simplify(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "inside": spent[0]}))
"""

_CLICK = """<script>
(function(){var t0=performance.now();document.getElementById("open-all").click();
var t1=performance.now();document.body.setAttribute("data-all-ms",String(Math.round(t1-t0)));
document.body.setAttribute("data-all-drawn",String(document.querySelectorAll(".pic[data-drawn]").length));
document.body.setAttribute("data-all-nodes",String(document.querySelectorAll("g.node").length));})();
</script></body>"""


def model_path(name: str) -> Path:
    path = MODELS / f"{name}.onnx"
    if not path.exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        (MODELS / ".gitignore").write_text("*\n")
        code = _BUILD.format(repo=str(REPO), bench=str(REPO / "benchmarks"), name=name, path=str(path))
        subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    return path


def browser(page: Path, profile: Path) -> tuple[str, float]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium: apt-get install -y chromium")
    start = time.perf_counter()
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=60000", "--window-size=1400,2200", f"--user-data-dir={profile}",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    if done.returncode != 0 or console:
        raise SystemExit(f"chromium failed on {page}: {console or done.stderr[-1000:]}")
    return done.stdout, wall


def attr(dom: str, name: str) -> int:
    m = re.search(rf'{name}="(\d+)"', dom)
    return int(m.group(1)) if m else -1


def run(name: str, seed: int | None) -> dict[str, object]:
    a = model_path(name)
    OUT.mkdir(parents=True, exist_ok=True)
    b = OUT / f"{name}_sim.onnx"
    simp = json.loads(subprocess.run([sys.executable, "-c", _SIMPLIFY, str(a), str(b)], check=True,
                                     capture_output=True, text=True, cwd=REPO).stdout.strip().splitlines()[-1])
    report = OUT / f"{name}_diff.html"
    argv = [sys.executable, "-m", "graphwright.cli.main", "diff", str(a), str(b), "--html", str(report), "--quiet"]
    if seed is not None:
        argv += ["--seed", str(seed)]
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=REPO)
    diff_seconds = time.perf_counter() - start
    data = json.loads(subprocess.run([sys.executable, "-m", "graphwright.cli.main", "diff", str(a), str(b), "--json"],
                                     check=True, capture_output=True, text=True, cwd=REPO).stdout)
    with tempfile.TemporaryDirectory() as tmp:
        dom, wall = browser(report, Path(tmp) / "p1")
        probe = Path(tmp) / "all.html"
        probe.write_text(report.read_text(encoding="utf-8").replace("</body>", _CLICK, 1), encoding="utf-8")
        dom_all, wall_all = browser(probe, Path(tmp) / "p2")
    return {
        "model": name, "file_mb": round(a.stat().st_size / 2**20, 1),
        "nodes": f"{simp['nodes_before']} -> {simp['nodes_after']}", "simplify_s": round(simp["seconds"], 2),
        "changes": len(data["changes"]), "counts": data["counts"], "matched_by": data["matched_by"],
        "diff_s": round(diff_seconds, 2), "report_kb": round(report.stat().st_size / 1024, 1),
        "ready_ms": attr(dom, "data-ready-ms"), "drawn_at_load": attr(dom, "data-drawn-changes"),
        "chromium_wall_s": round(wall, 2), "draw_all_ms": attr(dom_all, "data-all-ms"),
        "drawn_all": attr(dom_all, "data-all-drawn"), "nodes_drawn_all": attr(dom_all, "data-all-nodes"),
        "chromium_wall_all_s": round(wall_all, 2), "error_histograms": len(re.findall(r'id="hist-\d+"', dom)),
    }


def overhead(name: str, runs: int) -> dict[str, object]:
    """simplify with and without provenance, alternating, each in a fresh child; medians."""
    a = model_path(name)
    times: dict[str, list[float]] = {"on": [], "off": [], "inside": []}
    for _ in range(runs):
        for mode in ("on", "off"):
            out = subprocess.run([sys.executable, "-c", _OVERHEAD, str(a), mode], check=True, capture_output=True,
                                 text=True, cwd=REPO).stdout.strip().splitlines()[-1]
            result = json.loads(out)
            times[mode].append(result["seconds"])
            if mode == "on":
                times["inside"].append(result["inside"])
    on, off = sorted(times["on"])[runs // 2], sorted(times["off"])[runs // 2]
    inside = sorted(times["inside"])[runs // 2]
    return {"model": name, "simplify_s_provenance": round(on, 2), "simplify_s_without": round(off, 2),
            "ratio": round(on / off, 3), "provenance_bookkeeping_s": round(inside, 3),
            "bookkeeping_share": round(inside / on, 3), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base")
    parser.add_argument("--seed", type=int, default=None, help="also run both models for per-output errors")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--overhead", type=int, default=0, metavar="RUNS",
                        help="also time simplify with and without provenance, RUNS times each (medians)")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    if args.overhead:
        for name in names:
            print(json.dumps(overhead(name, args.overhead)), flush=True)
    rows = [run(name, args.seed) for name in names]
    for row in rows:
        print(json.dumps(row))
    print()
    print("| model (file MB) | nodes | simplify s | changes | diff --html s | report KB | browser ready ms | "
          "draw all ms (pictures, nodes) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} ({r['file_mb']}) | {r['nodes']} | {r['simplify_s']} | {r['changes']} | {r['diff_s']} | "
              f"{r['report_kb']} | {r['ready_ms']} | {r['draw_all_ms']} ({r['drawn_all']}, {r['nodes_drawn_all']}) |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
