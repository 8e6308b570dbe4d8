"""Command line: ``python -m tests.models {build,list,clean} ...`` (run from the repo root).

``build all`` (or family names, or ``family:name`` items) builds what is not
cached yet and prints a table of file, size and build time.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from . import MODEL_NAMES, ModelBuildError, cached
from ._cache import CACHE_DIR, build_here, clean, ensure_built
from ._info import ModelInfo


def _select(items: list[str]) -> list[tuple[str, str]]:
    """Expand "all" / "family" / "family:name" into (family, name) pairs."""
    chosen: list[tuple[str, str]] = []
    for item in items or ["all"]:
        if item == "all":
            pairs = [(f, n) for f, names in MODEL_NAMES.items() for n in names]
        elif ":" in item:
            family, name = item.split(":", 1)
            if name not in MODEL_NAMES.get(family, ()):
                raise SystemExit(f"unknown model {item!r}; try 'list'")
            pairs = [(family, name)]
        elif item in MODEL_NAMES:
            pairs = [(item, n) for n in MODEL_NAMES[item]]
        else:
            raise SystemExit(f"unknown model selector {item!r}; try 'list'")
        chosen += [p for p in pairs if p not in chosen]
    return chosen


def _fmt_size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(info: ModelInfo, status: str) -> list[str]:
    meta = info.metadata
    return [
        f"{info.family}:{info.name}",
        info.path.name,
        _fmt_size(info.size_bytes),
        f"{meta.get('build_time_s', float('nan')):.1f}",
        f"{meta.get('wall_time_s', float('nan')):.1f}",
        status,
        ", ".join(f"{n}{list(s)}" for n, s in info.inputs.items()),
        ", ".join(info.outputs),
    ]


def cmd_build(items: list[str], force: bool) -> int:
    rows: list[list[str]] = []
    failures = 0
    for family, name in _select(items):
        was_cached = not force and cached(family, name) is not None
        print(f"{'cached  ' if was_cached else 'building'} {family}:{name} ...", flush=True)
        try:
            info = ensure_built(family, name, force=force)
        except (ModelBuildError, ValueError) as exc:
            failures += 1
            print(f"FAILED {family}:{name}: {exc}", file=sys.stderr)
            rows.append([f"{family}:{name}", "-", "-", "-", "-", "FAILED", "", ""])
            continue
        rows.append(_row(info, "cached" if was_cached else "built"))
    header = ["model", "file", "size", "build s", "wall s", "status", "inputs", "outputs"]
    print()
    print(_table(rows, header))
    print(f"\ncache: {CACHE_DIR}  ('build s' = builder only; 'wall s' = incl. subprocess start)")
    return 1 if failures else 0


def cmd_list() -> int:
    rows = []
    for family, name in _select(["all"]):
        info = cached(family, name)
        rows.append([f"{family}:{name}", info.path.name if info else "(not built)"])
    print(_table(rows, ["model", "cached file"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.models", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_build = sub.add_parser("build", help="build models: all | FAMILY | FAMILY:NAME ...")
    p_build.add_argument("items", nargs="*", default=["all"])
    p_build.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("list", help="list models and their cache state")
    p_clean = sub.add_parser("clean", help="delete cached models")
    p_clean.add_argument("--stale", action="store_true", help="only builds with an old key")
    # internal: what ensure_built() runs in a subprocess
    p_int = sub.add_parser("_build", help=argparse.SUPPRESS)
    p_int.add_argument("family")
    p_int.add_argument("names", nargs="+")
    p_int.add_argument("--out-dir", type=Path, required=True)
    p_int.add_argument("--stem", nargs="+", required=True, help="one per name")

    args = parser.parse_args(argv)
    if args.cmd == "build":
        return cmd_build(args.items, args.force)
    if args.cmd == "list":
        return cmd_list()
    if args.cmd == "clean":
        print(f"removed {clean(all_files=not args.stale)} file(s) from {CACHE_DIR}")
        return 0
    failed = 0
    for i, (name, stem) in enumerate(zip(args.names, args.stem, strict=True)):
        if i:
            _fresh_session()
        start = time.perf_counter()
        try:
            info = build_here(args.family, name, args.out_dir, stem)
        except Exception:  # the others of a batch still build; this one's traceback is in the log
            if len(args.names) == 1:
                raise
            failed += 1
            traceback.print_exc()
            print(f"FAILED {args.family}:{name}", flush=True)
            continue
        print(f"built {info.path} in {time.perf_counter() - start:.1f}s", flush=True)
    return 1 if failed else 0


def _fresh_session() -> None:
    """Between the models of one batch build: Keras' global name counters and graph state back
    to a new process's, so a model gets the same tensor names built alone or in a batch."""
    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session()
    if "tf_keras" in sys.modules:
        sys.modules["tf_keras"].backend.clear_session()


if __name__ == "__main__":
    sys.exit(main())
