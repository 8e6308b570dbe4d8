"""``graphwright run MODEL``: run a model once and show, save or trace its tensors.

Engines: ``reference`` (graphwright's numpy interpreter for TFLite), ``litert``,
``litert-ref`` (LiteRT with its reference kernels), ``tflm`` (TensorFlow Lite
Micro, the ``[tflm]`` extra), ``onnxruntime``, ``tensorflow``; default by
format.  Native runtimes run in a child process (``--no-isolate`` to run them
here), so a crash on a hostile file is an error message.  ``--trace DIR`` saves every tensor of a TFLite model (one ``.npy``
each, plus ``trace.json``); ``--compare-with ENGINE`` runs the reference
interpreter and ``ENGINE`` layer by layer and reports the first layer that
differs (exit 1 if one does).  ``--flavor tflm`` makes the reference engine
compute as TFLite Micro's kernels (what runs on the microcontroller) instead of
LiteRT's reference kernels; ``--compare-with tflm`` uses it unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ..errors import VerificationError
from ..ir import Graph
from ..runtime import ModelSource, input_specs
from ..runtime.base import default_backend
from ..runtime.execute import Job, execute
from ..verify import load_feeds
from ._console import stdout

ENGINES = ("reference", "litert", "litert-ref", "tflm", "onnxruntime", "tensorflow")
NATIVE = frozenset({"litert", "litert-ref", "tflm", "onnxruntime", "tensorflow"})


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a model once (reference interpreter or a runtime); save, trace, compare")
    p.add_argument("model", help="the model to run (.tflite, .onnx or .pb/.pbtxt)")
    p.add_argument("--engine", choices=ENGINES, help="runtime (default: by format; 'reference' for TFLite only)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy|FILE.npz",
                   help="user data for an input (repeatable); missing inputs get seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--save", metavar="OUT.npz", help="write the outputs, keyed by output name")
    p.add_argument("--trace", metavar="DIR", help="save every tensor (TFLite models) as DIR/*.npy + trace.json")
    p.add_argument("--rounding", choices=("double", "single"), default="double",
                   help="reference engine requantization: double (TFLite reference kernels) or single "
                        "(LiteRT's default kernels, XNNPACK)")
    p.add_argument("--flavor", choices=("litert", "tflm"),
                   help="reference engine kernels: litert (LiteRT's reference kernels, the default) or tflm "
                        "(TFLite Micro's, bit-exact with the microcontroller; default with --compare-with tflm)")
    p.add_argument("--jit", action="store_true",
                   help="reference engine: compiled loops (needs numba, the [fast] extra); they load in ~0.7 s, "
                        "so they pay for large models or traces, not for one small run")
    p.add_argument("--compare-with", dest="compare_with", choices=("litert", "litert-ref", "tflm"),
                   help="compare the reference interpreter with this engine layer by layer")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="--compare-with: largest difference still counted as equal (default 0)")
    p.add_argument("--no-isolate", dest="isolate", action="store_false",
                   help="run native runtimes in this process (default: a child process)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    source = ModelSource.from_path(args.model)
    engine = args.engine
    if args.compare_with:
        engine = engine or "reference"
        if engine != "reference" or source.format != "tflite":
            raise VerificationError("--compare-with compares the reference engine on a TFLite model")
    if args.flavor and (engine or _default(source)) != "reference":
        raise VerificationError("--flavor chooses the reference engine's kernels (--engine reference)")
    flavor = args.flavor or ("tflm" if args.compare_with == "tflm" else "litert")
    feeds = load_feeds(args.input, specs=input_specs(args.model)) if args.input else {}
    options = {"rounding": args.rounding, "jit": args.jit, "flavor": flavor} if engine == "reference" else {}
    names = _trace_names(source) if args.trace else None
    isolate = bool(args.isolate and (engine or _default(source)) in NATIVE)
    job = Job(backend=engine, options=options, outputs=names, seed=args.seed)
    result = execute(source, feeds, job, isolate=isolate)
    outputs = _outputs_of(source, result.outputs) if names is not None else result.outputs
    if args.trace:
        _write_trace(Path(args.trace), source, result.feeds, result.outputs)
    if args.save:
        _save_npz(Path(args.save), outputs)
    status = 0
    report = None
    if args.compare_with:
        from ..runtime.reference.layers import compare_layers  # lazy: the interpreter loads only when asked

        report = compare_layers(source, result.feeds, other=args.compare_with, rounding=args.rounding,
                                tolerance=args.tolerance, isolate=args.isolate, jit=args.jit, flavor=flavor)
        status = 0 if report.first_difference is None else 1
    _print(args, result.backend, outputs, report)
    return status


def _default(source: ModelSource) -> str:
    return default_backend(source.format)


def _trace_names(source: ModelSource) -> list[str]:
    """Every operator output of a TFLite model's main graph, in execution order."""
    if source.format != "tflite":
        raise VerificationError(f"--trace saves the tensors of TFLite models; {source.label} is {source.format}")
    graph = _tflite_graph(source)
    return [v.name for node in graph for v in node.outputs]


def _outputs_of(source: ModelSource, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    graph = _tflite_graph(source)
    return {v.name: tensors[v.name] for v in graph.outputs if v.name in tensors}


def _tflite_graph(source: ModelSource) -> Graph:
    """The main graph of a TFLite model (for --trace)."""
    from ..formats.tflite import read_model  # lazy: the TFLite reader loads only for --trace

    return read_model(source.data, source.label).graph


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80].strip("._") or "tensor"


def _write_trace(folder: Path, source: ModelSource, feeds: Mapping[str, np.ndarray],
                 tensors: Mapping[str, np.ndarray]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    graph = _tflite_graph(source)
    index: list[dict[str, Any]] = []
    entries = [(-1, "INPUT", name, np.asarray(a)) for name, a in feeds.items()]
    entries += [(i, node.op, v.name, tensors[v.name]) for i, node in enumerate(graph) for v in node.outputs
                if v.name in tensors]
    for n, (op_index, op, name, array) in enumerate(entries):
        file_name = f"{n:04d}_{_safe(name)}.npy"
        np.save(folder / file_name, np.asarray(array), allow_pickle=False)
        index.append({"file": file_name, "tensor": name, "operator_index": op_index, "op": op,
                      "dtype": str(np.asarray(array).dtype), "shape": list(np.shape(array))})
    (folder / "trace.json").write_text(json.dumps({"model": source.label, "tensors": index}, indent=1))


def _save_npz(path: Path, outputs: Mapping[str, np.ndarray]) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".graphwright-", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in outputs.items()})  # type: ignore[arg-type]
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _print(args: argparse.Namespace, backend: str, outputs: Mapping[str, np.ndarray], report: Any) -> None:
    rows = []
    for name, array in outputs.items():
        a = np.asarray(array)
        row: dict[str, Any] = {"name": name, "dtype": str(a.dtype), "shape": list(a.shape)}
        if a.size and a.dtype.kind in "iuf":
            row.update(min=float(a.min()), max=float(a.max()), argmax=int(a.reshape(-1).argmax()))
        rows.append(row)
    if args.json:
        doc: dict[str, Any] = {"engine": backend, "outputs": rows}
        if report is not None:
            doc["comparison"] = report.to_json()
        print(json.dumps(doc, indent=1))
        return
    table = Table(title=f"{args.model} on {backend}")
    for col in ("output", "dtype", "shape", "min", "max", "argmax"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["dtype"], str(r["shape"]), *(f"{r[k]:g}" if k in r else "-"
                                                                for k in ("min", "max", "argmax")))
    console = stdout()
    console.print(table)
    if report is not None:
        console.print(report.summary())
