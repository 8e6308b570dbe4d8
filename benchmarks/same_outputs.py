"""Prove that a refactor changed no output: every benchmark model through every public entry point, hashed.

Usage (from the repository root)::

    python benchmarks/same_outputs.py --json out.json          # run everything, write the record
    python benchmarks/same_outputs.py --compare old.json new.json   # print every difference; exit 1 if any
    python benchmarks/same_outputs.py --list                   # the plan: models x pipelines
    python benchmarks/same_outputs.py --json out.json --models 'tests:keras*,example:*' --pipelines 'deploy*'

To record another checkout's code with this script, put that checkout first on the path::

    cd /path/to/old && PYTHONPATH=/path/to/old/src:/path/to/old python /path/to/new/benchmarks/same_outputs.py --json old.json

(``PYTHONPATH`` entries come before the editable install's path entry; the script prints
and records where ``graphwright`` and ``tests.models`` were imported from.)

Models (inputs; their bytes' sha256 is recorded too, so a rebuilt input shows as such):

* ``tests:<family>:<name>``: every model of ``tests.models`` (``python -m tests.models list``),
  built on first use into ``tests/models/_cache`` by its own builders: the frozen Keras GraphDefs of
  ``deploy_tf.py``/``quantize_tf.py``/``fold_constants_tf.py``, the torch ONNX models ``cnn`` and
  ``bert`` of ``simplify_onnx.py``, the TFLite models (``tflite_ops`` has the int8 classifiers of
  ``tflite_reference.py``);
* ``bench:<name>``: ``resnet50``, ``bert-base`` and ``gpt2`` of ``simplify_onnx.py``, built by its
  ``model_path`` (into ``benchmarks/_models``, next to this script); the models over 1 GB are left out;
* ``example:<file>``: the README's bundled examples ``examples/small_cnn.{pb,onnx,tflite}``.

Pipelines, in process through the public API only (``graphwright.formats.load/save``,
``graphwright.transforms.run_pipeline``, ``graphwright.simplify.simplify``; the ``graphwright``
facade if those modules move), each output saved into a temporary directory of its own; a pipeline
with a source (``<-`` in ``--list``) starts from that pipeline's saved file:

* GraphDef (inputs/outputs as the benchmarks pass them; the example: outputs ``Identity``):
  load+save; ``deploy_tf.py``'s recipe, then ``fuse_remapper``; the README's
  ``optimize_for_deployment fuse_remapper``; ``fold_constants(ignore_errors=true)``;
  ``quantize_tf.py``'s preparation, then each of its three pipelines; the ``eight_bit`` preset;
  after the recipe, ``fuse_pad_and_conv fuse_resize_and_conv fuse_resize_pad_and_conv`` and
  ``merge_duplicate_nodes sort_by_execution_order obfuscate_names``;
* ONNX: load+save; ``simplify()`` with defaults and with ``target="onnxruntime"``;
  ``fold_batch_norms fold_old_batch_norms quantize_weights``; ``round_weights(num_steps=256)``;
  ``fold_constants``; ``strip_unused_nodes merge_duplicate_nodes sort_by_execution_order obfuscate_names``;
  the ``eight_bit`` preset (its GraphDef-only steps skipped with a note);
* TFLite: load+save; ``round_weights(num_steps=256)``; ``obfuscate_names``;
  ``strip_unused_nodes merge_duplicate_nodes sort_by_execution_order``; the ``optimize_for_deployment``
  preset (its folds skipped with a note).

Recorded per model and pipeline: sha256 and size of every file the save wrote (external data
included), the node count of the saved model, and the report: per step the call, changed, nodes
before/after, stats, notes, skipped errors, and the warnings (``simplify``: before/after model
statistics, iterations, convergence, every pass run with its stats, warnings).  Wall times are
recorded under ``timing``/``meta`` and never compared.  Temporary, model and checkout paths inside
messages are replaced by placeholders, so two checkouts give the same record.  A model that fails
to build and a pipeline that raises are recorded (the error text) and the run goes on.

``--compare`` prints every difference in three groups: outputs (bytes, node counts, errors,
a model/pipeline/file on one side only; inputs first, prefixed ``INPUT``), report values (stats,
notes, pass records), and report keys present on one side only (those with an empty value are
counted per key; ``--verbose`` lists them).  Any difference exits 1; ``--ignore-field KEY`` leaves a
key out wherever it occurs, for a report field a refactor added on purpose.

Measured (2026-11-25, 2 cores, all models cached): 23 models, 161 pipeline runs, ~1 minute,
~1 GB peak memory.  Building every model from nothing adds ~2.5 minutes; the builds are
reproducible (a rebuild gives the same bytes), and the caches can be copied between checkouts.

BLAS/OpenMP threads default to 1 (set before numpy is imported; the machine is 2 shared cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import gc
import hashlib
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
SCRIPT_REPO = HERE.parent
SCHEMA = 1

# -- the pipelines -----------------------------------------------------------------------------
# Written out here (not imported from the benchmark modules, which import graphwright's internals):
# these strings are what is under test and must be the same for both checkouts.
DEPLOY = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true) "
          "fold_batch_norms fold_old_batch_norms")                       # deploy_tf.py PREFIX + BN_STEPS
PREPARE = ("remove_control_dependencies strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
           "fold_constants(ignore_errors=true) fold_batch_norms fold_old_batch_norms")  # quantize_tf.py PREPARE


@dataclasses.dataclass(frozen=True)
class Step:
    id: str
    kind: str  # "load_save" | "pipeline" | "simplify"
    spec: Any = None  # pipeline text, or simplify keyword arguments
    source: str | None = None  # id of the step whose saved output is the input (None: the model)


PIPELINES: dict[str, tuple[Step, ...]] = {
    "graphdef": (
        Step("load_save", "load_save"),
        Step("deploy", "pipeline", DEPLOY),
        Step("deploy+fuse_remapper", "pipeline", "fuse_remapper", source="deploy"),
        Step("preset:optimize_for_deployment fuse_remapper", "pipeline", "optimize_for_deployment fuse_remapper"),
        Step("fold_constants", "pipeline", "fold_constants(ignore_errors=true)"),
        Step("quantize:prepare", "pipeline", PREPARE),
        Step("quantize:round_weights", "pipeline", "round_weights(num_steps=256)", source="quantize:prepare"),
        Step("quantize:quantize_weights", "pipeline", "quantize_weights", source="quantize:prepare"),
        Step("quantize:eight_bit", "pipeline",
             "quantize_weights quantize_nodes strip_unused_nodes sort_by_execution_order", source="quantize:prepare"),
        Step("preset:eight_bit", "pipeline", "eight_bit"),
        Step("deploy+fuse_convolutions", "pipeline", "fuse_pad_and_conv fuse_resize_and_conv fuse_resize_pad_and_conv",
             source="deploy"),
        Step("deploy+cleanup", "pipeline", "merge_duplicate_nodes sort_by_execution_order obfuscate_names",
             source="deploy"),
    ),
    "onnx": (
        Step("load_save", "load_save"),
        Step("simplify", "simplify", {}),
        Step("simplify:onnxruntime", "simplify", {"target": "onnxruntime"}),
        Step("fold_bn+quantize_weights", "pipeline", "fold_batch_norms fold_old_batch_norms quantize_weights"),
        Step("round_weights", "pipeline", "round_weights(num_steps=256)"),
        Step("fold_constants", "pipeline", "fold_constants"),
        Step("cleanup", "pipeline", "strip_unused_nodes merge_duplicate_nodes sort_by_execution_order obfuscate_names"),
        Step("preset:eight_bit", "pipeline", "eight_bit"),  # its GraphDef-only steps are skipped with a note
    ),
    "tflite": (
        Step("load_save", "load_save"),
        Step("round_weights", "pipeline", "round_weights(num_steps=256)"),
        Step("obfuscate_names", "pipeline", "obfuscate_names"),
        Step("cleanup", "pipeline", "strip_unused_nodes merge_duplicate_nodes sort_by_execution_order"),
        Step("preset:optimize_for_deployment", "pipeline", "optimize_for_deployment"),  # folds skipped with a note
    ),
}
EXTENSIONS = {"graphdef": ".pb", "onnx": ".onnx", "tflite": ".tflite"}
#: simplify_onnx.py's own models (its tiny ``cnn``/``bert`` are tests.models' torch_onnx ones); > 1 GB left out
BENCH_ONNX = ("resnet50", "bert-base", "gpt2")
#: (file, inputs, outputs) of the README's bundled examples
EXAMPLES = (("small_cnn.pb", [], ["Identity"]), ("small_cnn.onnx", [], []), ("small_cnn.tflite", [], []))


@dataclasses.dataclass
class Source:
    """One input model: how to get it, and its interface."""

    id: str
    format: str
    get: Callable[[], tuple[Path, list[str], list[str]]]  # -> (path, inputs, outputs); builds on first use


# -- the public API, wherever it lives ---------------------------------------------------------
class Api:
    """graphwright's public entry points, looked up by their documented names only."""

    def __init__(self) -> None:
        import graphwright

        self.module = graphwright
        try:
            from graphwright import formats

            self.load, self.save = formats.load, formats.save
        except (ImportError, AttributeError):
            self.load, self.save = graphwright.load, graphwright.save
        try:
            from graphwright.transforms import run_pipeline
        except ImportError:
            run_pipeline = graphwright.run_pipeline
        try:
            from graphwright.simplify import simplify
        except ImportError:
            simplify = graphwright.simplify
        self.run_pipeline, self.simplify = run_pipeline, simplify


# -- models ------------------------------------------------------------------------------------
def _tests_models() -> Any:
    """``tests.models`` from the path as given (the checkout under test), else this script's repository."""
    try:
        import tests.models as models
    except ImportError:
        for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
            del sys.modules[name]  # some other "tests" package shadowed ours
        sys.path.insert(0, str(SCRIPT_REPO))
        import tests.models as models
    return models


def _simplify_onnx() -> Any:
    """This script's sibling ``simplify_onnx.py`` (its builders; its models go to ``benchmarks/_models``)."""
    if str(HERE) not in sys.path:
        sys.path.append(str(HERE))
    import simplify_onnx

    return simplify_onnx


def sources(bench_onnx: tuple[str, ...] = BENCH_ONNX) -> list[Source]:
    out: list[Source] = []
    try:
        models = _tests_models()
        families = {fam: tuple(names) for fam, names in models.MODEL_NAMES.items()}
        formats = {fam: {".pb": "graphdef", ".onnx": "onnx", ".tflite": "tflite"}.get(f.ext, "?")
                   for fam, f in models.FAMILIES.items()}
    except Exception as exc:  # recorded, the rest still runs
        out.append(Source("tests:*", "?", _failing(f"tests.models unavailable: {exc!r}")))
        families, formats = {}, {}
    for family, names in families.items():
        for name in names:
            out.append(Source(f"tests:{family}:{name}", formats[family], _tests_getter(family, name)))
    for name in bench_onnx:
        out.append(Source(f"bench:{name}", "onnx", _bench_getter(name)))
    for file, inputs, outputs in EXAMPLES:
        fmt = {".pb": "graphdef", ".onnx": "onnx", ".tflite": "tflite"}[Path(file).suffix]
        out.append(Source(f"example:{file}", fmt, _example_getter(file, inputs, outputs)))
    return out


def _failing(message: str) -> Callable[[], tuple[Path, list[str], list[str]]]:
    def get() -> tuple[Path, list[str], list[str]]:
        raise RuntimeError(message)

    return get


def _tests_getter(family: str, name: str) -> Callable[[], tuple[Path, list[str], list[str]]]:
    def get() -> tuple[Path, list[str], list[str]]:
        info = _tests_models().get_model(family, name)
        if info.format == "graphdef":  # as the GraphDef benchmarks call the tools
            return info.path, list(info.inputs), list(info.outputs)
        return info.path, [], []

    return get


def _bench_getter(name: str) -> Callable[[], tuple[Path, list[str], list[str]]]:
    def get() -> tuple[Path, list[str], list[str]]:
        return Path(_simplify_onnx().model_path(name)), [], []

    return get


def _example_getter(file: str, inputs: list[str], outputs: list[str]) -> Callable[[], tuple[Path, list[str], list[str]]]:
    def get() -> tuple[Path, list[str], list[str]]:
        path = SCRIPT_REPO / "examples" / file
        if not path.exists():
            raise FileNotFoundError(path)
        return path, inputs, outputs

    return get


# -- recording ---------------------------------------------------------------------------------
def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def model_files(path: Path) -> dict[str, dict[str, Any]]:
    """The model file and any external-data file beside it named after it (``x.onnx.data``)."""
    files = [path] + sorted(p for p in path.parent.glob(glob_escape(path.name) + "?*") if p.is_file())
    return {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size} for p in files}


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def saved_files(directory: Path) -> dict[str, dict[str, Any]]:
    """Every file a save wrote into its own directory (the model and its external data)."""
    return {str(p.relative_to(directory)): {"sha256": sha256(p), "bytes": p.stat().st_size}
            for p in sorted(directory.rglob("*")) if p.is_file()}


class Normalizer:
    """Makes a record independent of where things were: paths become placeholders."""

    def __init__(self) -> None:
        self.replacements: list[tuple[str, str]] = []

    def add(self, path: Path | str, label: str) -> None:
        for text in {str(path), str(Path(path).resolve())}:
            if text and text != "/" and (text, label) not in self.replacements:
                self.replacements.append((text, label))
        self.replacements.sort(key=lambda r: -len(r[0]))  # longest first

    def text(self, s: str) -> str:
        for old, new in self.replacements:
            s = s.replace(old, new)
        return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x?", s)

    def plain(self, x: Any, depth: int = 0) -> Any:
        """JSON-able, normalized copy of a report value; wall times dropped."""
        if depth > 20:
            return self.text(repr(x))
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, str):
            return self.text(x)
        if isinstance(x, int):
            return int(x)
        if isinstance(x, float):
            return x if math.isfinite(x) else repr(x)
        if isinstance(x, Path):
            return self.text(str(x))
        if isinstance(x, dict):
            return {self.text(str(k)): self.plain(v, depth + 1) for k, v in x.items() if not _is_time_key(k)}
        if isinstance(x, (list, tuple)):
            return [self.plain(v, depth + 1) for v in x]
        if isinstance(x, (set, frozenset)):
            return sorted((self.plain(v, depth + 1) for v in x), key=repr)
        if hasattr(x, "dtype") and hasattr(x, "tolist"):  # numpy scalar or array
            if getattr(x, "size", 1) <= 64:
                return self.plain(x.tolist(), depth + 1)
            return {"array": str(x.dtype), "shape": list(x.shape),
                    "sha256": hashlib.sha256(x.tobytes()).hexdigest()}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return self.plain({f.name: getattr(x, f.name) for f in dataclasses.fields(x)}, depth + 1)
        if hasattr(x, "__dict__"):
            return self.plain(dict(vars(x)), depth + 1)
        return self.text(repr(x))


def _is_time_key(key: object) -> bool:
    return isinstance(key, str) and (key == "seconds" or key.endswith("_seconds") or key.endswith("_time_s"))


def source_file_root() -> str:
    """The checkout whose ``graphwright`` is imported (``<root>/src/graphwright/__init__.py``)."""
    import graphwright

    return str(Path(graphwright.__file__).resolve().parents[2])


def repo_roots() -> list[Path]:
    """This script's checkout, the one whose code is under test, and the working directory if it is one."""
    roots = [SCRIPT_REPO, Path(source_file_root())]
    if (Path.cwd() / "src" / "graphwright").is_dir() or (Path.cwd() / "tests" / "models").is_dir():
        roots.append(Path.cwd())
    return roots


def node_count(model: Any) -> int | None:
    graph = getattr(model, "graph", None)
    try:
        return len(graph) if graph is not None else None
    except TypeError:
        return None


def pipeline_report(report: Any, norm: Normalizer) -> dict[str, Any]:
    steps = []
    for step in getattr(report, "steps", []):
        entry = norm.plain(step)
        steps.append(entry if isinstance(entry, dict) else {"step": entry})
    return {"steps": steps, "warnings": norm.plain(list(getattr(report, "warnings", [])))}


def simplify_report(report: Any, norm: Normalizer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("before", "after", "iterations", "converged", "warnings"):
        if hasattr(report, key):
            out[key] = norm.plain(getattr(report, key))
    out["passes"] = [norm.plain(p) for p in getattr(report, "passes", [])]
    return out


def _error(exc: BaseException, norm: Normalizer) -> str:
    return norm.text(f"{type(exc).__name__}: {exc}")


# -- running -----------------------------------------------------------------------------------
def run_step(api: Api, step: Step, src: Path, inputs: list[str], outputs: list[str], out_dir: Path,
             ext: str, norm: Normalizer) -> tuple[dict[str, Any], Path | None]:
    out_dir.mkdir(parents=True)
    dst = out_dir / f"out{ext}"
    entry: dict[str, Any] = {"kind": step.kind, "source": step.source or "model"}
    if step.kind == "pipeline":
        entry["transforms"] = step.spec
    elif step.kind == "simplify":
        entry["options"] = dict(step.spec)
    start = time.perf_counter()
    try:
        if step.kind == "simplify":
            model, report = api.simplify(str(src), **step.spec)
            entry["report"] = simplify_report(report, norm)
        else:
            model = api.load(src)
            if step.kind == "pipeline":
                report = api.run_pipeline(model, step.spec, inputs=inputs, outputs=outputs)
                entry["report"] = pipeline_report(report, norm)
        api.save(model, dst)
        entry["nodes"] = node_count(model)
        del model
    except Exception as exc:  # recorded and compared like any result
        entry["error"] = _error(exc, norm)
        entry["traceback_tail"] = norm.text("".join(traceback.format_exc().splitlines(True)[-6:]))
        dst = None
    if dst is not None:
        entry["files"] = saved_files(out_dir)
    entry["timing"] = {"seconds": round(time.perf_counter() - start, 3)}
    gc.collect()
    return entry, dst


def run_model(api: Api, source: Source, steps: tuple[Step, ...], work: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"format": source.format}
    start = time.perf_counter()
    norm = Normalizer()
    try:
        path, inputs, outputs = source.get()
    except BaseException as exc:  # a failed build is recorded and skipped
        if isinstance(exc, KeyboardInterrupt):
            raise
        for root in repo_roots():
            norm.add(root, "<repo>")
        record["error"] = norm.text(f"build failed: {type(exc).__name__}: {str(exc)[-2000:]}")
        record["timing"] = {"build_seconds": round(time.perf_counter() - start, 2)}
        print(f"  BUILD FAILED: {record['error'].splitlines()[0][:300]}", flush=True)
        return record
    build_seconds = time.perf_counter() - start
    norm.add(path, "<model>")
    norm.add(path.parent, "<model-dir>")
    tmp = Path(tempfile.mkdtemp(prefix="gw-same-", dir=work))
    norm.add(tmp, "<tmp>")
    # this script's checkout, the one under test and the working directory are all "<repo>": the same
    # message must read the same whichever checkout ran it
    for root in repo_roots():
        norm.add(root, "<repo>")
    norm.add(Path(tempfile.gettempdir()), "<tmpdir>")
    record["input"] = {"files": model_files(path), "inputs": inputs, "outputs": outputs}
    record["pipelines"] = {}
    saved: dict[str, Path | None] = {}
    try:
        for i, step in enumerate(steps):
            src = path if step.source is None else saved.get(step.source)
            if src is None:
                entry = {"kind": step.kind, "source": step.source, "error": f"source step {step.source!r} has no output"}
            else:
                entry, dst = run_step(api, step, src, inputs, outputs, tmp / f"{i:02d}", EXTENSIONS[source.format], norm)
                saved[step.id] = dst
            record["pipelines"][step.id] = entry
            status = entry.get("error", "").splitlines()[0][:200] if "error" in entry else (
                f"{entry.get('nodes')} nodes, {next(iter(entry.get('files', {}).values()), {}).get('sha256', '')[:12]}")
            print(f"  {step.id:<46} {status}  ({entry.get('timing', {}).get('seconds', 0):.2f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record["timing"] = {"build_seconds": round(build_seconds, 2), "seconds": round(time.perf_counter() - start, 2)}
    return record


def plan(args: argparse.Namespace) -> list[tuple[Source, tuple[Step, ...]]]:
    model_patterns, pipeline_patterns = args.models.split(","), args.pipelines.split(",")
    chosen = []
    for source in sources(tuple(n for n in args.bench_onnx.split(",") if n)):
        if not any(fnmatch.fnmatchcase(source.id, p) for p in model_patterns):
            continue
        steps = PIPELINES.get(source.format, ())
        wanted = {s.id for s in steps if any(fnmatch.fnmatchcase(s.id, p) for p in pipeline_patterns)}
        for s in steps:  # a chained step needs its source
            if s.id in wanted and s.source:
                wanted.add(s.source)
        chosen.append((source, tuple(s for s in steps if s.id in wanted)))
    return chosen


def record_run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    api = Api()
    models_mod_file = None
    try:
        models_mod_file = _tests_models().__file__
    except Exception:
        pass
    print(f"graphwright: {api.module.__file__}\ntests.models: {models_mod_file}", flush=True)
    meta: dict[str, Any] = {
        "graphwright_file": api.module.__file__,
        "graphwright_version": getattr(api.module, "__version__", None),
        "tests_models_file": models_mod_file,
        "python": sys.version.split()[0], "platform": platform.platform(), "argv": sys.argv,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "libraries": _versions(("numpy", "onnx", "onnxruntime", "protobuf", "tensorflow", "torch", "ai-edge-litert")),
    }
    models: dict[str, Any] = {}
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.gettempdir())
    for source, steps in plan(args):
        print(f"{source.id} ({source.format})", flush=True)
        models[source.id] = run_model(api, source, steps, work)
        gc.collect()
    meta["total_seconds"] = round(time.perf_counter() - start, 1)
    result = {"schema": SCHEMA, "meta": meta, "models": models}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    failed_builds = [m for m, r in models.items() if "error" in r]
    failed_steps = [f"{m} / {p}" for m, r in models.items() for p, e in r.get("pipelines", {}).items() if "error" in e]
    n_steps = sum(len(r.get("pipelines", {})) for r in models.values())
    print(f"\n{len(models)} models, {n_steps} pipeline runs, {len(failed_builds)} failed builds, "
          f"{len(failed_steps)} pipelines raised; {meta['total_seconds']} s"
          + (f"; written to {args.json}" if args.json else ""))
    for item in failed_builds:
        print(f"  build failed: {item}")
    for item in failed_steps:
        print(f"  raised: {item}")
    return 0


def _versions(dists: tuple[str, ...]) -> dict[str, str | None]:
    import importlib.metadata

    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


# -- comparing ---------------------------------------------------------------------------------
IGNORED = {"timing", "traceback_tail"}
EMPTY: tuple[Any, ...] = (None, [], {}, "")


@dataclasses.dataclass
class Difference:
    where: str  # "model [pipeline]" or "model"
    path: str  # inside the entry, e.g. "files.out.pb.sha256"
    kind: str  # "changed" | "only_old" | "only_new" | "length"
    old: Any = None
    new: Any = None

    @property
    def category(self) -> str:
        """``output`` (bytes, node count, error, a missing model/pipeline/file), ``report`` (a value of
        the report changed) or ``field`` (a report key present on one side only)."""
        head = self.path.split(".", 1)[0].split("[", 1)[0]
        if head in ("", "files", "nodes", "error", "INPUT", "source", "kind", "transforms", "options", "format"):
            return "output"
        if self.kind in ("only_old", "only_new"):
            return "field"
        return "report"

    @property
    def field_name(self) -> str:
        return re.sub(r"\[\d+\]", "[]", self.path.rsplit(".", 1)[-1])

    def line(self) -> str:
        at = f"{self.where} {self.path}".rstrip()
        if self.kind == "changed":
            return f"{at}: {_short(self.old)} -> {_short(self.new)}"
        if self.kind == "length":
            return f"{at}: {self.old} items -> {self.new} items"
        side, value = ("old", self.old) if self.kind == "only_old" else ("new", self.new)
        return f"{at}: only in {side}" + ("" if value is None else f" ({_short(value)})")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit - 3] + "..."


def diff(old: Any, new: Any, path: str, where: str, out: list[Difference], ignored: set[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key in ignored:
                continue
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(Difference(where, sub, "only_old", old=old[key]))
            elif key not in old:
                out.append(Difference(where, sub, "only_new", new=new[key]))
            else:
                diff(old[key], new[key], sub, where, out, ignored)
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            out.append(Difference(where, path, "length", len(old), len(new)))
        for i, (a, b) in enumerate(zip(old, new)):
            diff(a, b, f"{path}[{i}]", where, out, ignored)
        for i in range(len(new), len(old)):
            out.append(Difference(where, f"{path}[{i}]", "only_old", old=old[i]))
        for i in range(len(old), len(new)):
            out.append(Difference(where, f"{path}[{i}]", "only_new", new=new[i]))
    elif old != new or type(old) is not type(new):
        out.append(Difference(where, path, "changed", old, new))


def differences(old: dict[str, Any], new: dict[str, Any], ignored: set[str]) -> list[Difference]:
    found: list[Difference] = []
    old_models, new_models = old.get("models", {}), new.get("models", {})
    for model in list(old_models) + [m for m in new_models if m not in old_models]:
        if model not in new_models:
            found.append(Difference(model, "", "only_old"))
            continue
        if model not in old_models:
            found.append(Difference(model, "", "only_new"))
            continue
        a, b = old_models[model], new_models[model]
        # the input first: a different input explains (and invalidates) every output difference after it
        diff(a.get("input"), b.get("input"), "INPUT", model, found, ignored)
        rest = ("input", "pipelines")
        diff({k: v for k, v in a.items() if k not in rest}, {k: v for k, v in b.items() if k not in rest},
             "", model, found, ignored)
        pa, pb = a.get("pipelines", {}), b.get("pipelines", {})
        for step in list(pa) + [s for s in pb if s not in pa]:
            where = f"{model} [{step}]"
            if step not in pb:
                found.append(Difference(where, "", "only_old"))
            elif step not in pa:
                found.append(Difference(where, "", "only_new"))
            else:
                diff(pa[step], pb[step], "", where, found, ignored)
    return found


def compare(old_path: str, new_path: str, ignored_fields: list[str], verbose: bool) -> int:
    old, new = (json.loads(Path(p).read_text()) for p in (old_path, new_path))
    for label, data in (("old", old), ("new", new)):
        meta = data.get("meta", {})
        print(f"{label}: {meta.get('graphwright_file')} ({meta.get('started')}, {meta.get('total_seconds')} s)")
    found = differences(old, new, IGNORED | set(ignored_fields))
    titles = {"output": "outputs (saved bytes, node counts, errors, models/pipelines/files present)",
              "report": "report values (stats, notes, warnings, pass records)",
              "field": "report fields present on one side only"}
    for category, title in titles.items():
        items = [d for d in found if d.category == category]
        if not items:
            continue
        print(f"\n{len(items)} difference(s) in {title}:")
        # one-sided fields whose value is empty ([] / {} / None / "") are grouped: they carry no data
        empty = [d for d in items if category == "field" and not verbose and (d.old if d.kind == "only_old" else d.new) in EMPTY]
        for d in items:
            if d not in empty:
                print(f"  {d.line()}")
        groups: dict[tuple[str, str, str], list[Difference]] = {}
        for d in empty:
            value = d.old if d.kind == "only_old" else d.new
            groups.setdefault((d.field_name, d.kind[5:], json.dumps(value)), []).append(d)
        for (name, side, value), group in groups.items():
            print(f"  field {name!r} only in {side}, empty ({value}), in {len(group)} place(s), e.g. "
                  f"{group[0].where} {group[0].path}  (--verbose lists them all)")
    n_models = len(old.get("models", {}))
    n_runs = sum(len(m.get("pipelines", {})) for m in old.get("models", {}).values())
    counts = {c: sum(d.category == c for d in found) for c in titles}
    if found:
        print(f"\nDIFFERENT: {counts['output']} output, {counts['report']} report value and {counts['field']} "
              f"one-sided field difference(s)" + (f" (ignored fields: {', '.join(ignored_fields)})" if ignored_fields else ""))
        return 1
    print(f"\nno differences: {n_models} models, {n_runs} pipeline runs (hashes, node counts, reports) are the same"
          + (f" (ignored fields: {', '.join(ignored_fields)})" if ignored_fields else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="run everything and write the record here")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two records; exit 1 on any difference")
    parser.add_argument("--ignore-field", action="append", default=[], metavar="KEY",
                        help="with --compare: leave this report key out wherever it occurs (repeatable), "
                             "e.g. a field a refactor added on purpose")
    parser.add_argument("--verbose", action="store_true", help="with --compare: list grouped differences one by one")
    parser.add_argument("--list", action="store_true", help="print the models and pipelines that would run")
    parser.add_argument("--models", default="*", help="comma-separated fnmatch patterns of model ids (default: all)")
    parser.add_argument("--pipelines", default="*", help="comma-separated fnmatch patterns of pipeline ids (default: all)")
    parser.add_argument("--bench-onnx", default=",".join(BENCH_ONNX),
                        help="simplify_onnx.py models to include (default: %(default)s; also bert-base-dynamo, "
                             "which needs onnxscript, and the > 1 GB bert-large, gpt2-large)")
    parser.add_argument("--work-dir", help="where the temporary outputs go (default: the system temp dir)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare, args.ignore_field, args.verbose)
    if args.list:
        for source, steps in plan(args):
            print(f"{source.id} ({source.format}): " + ", ".join(
                s.id + (f" <- {s.source}" if s.source else "") for s in steps))
        return 0
    return record_run(args)


if __name__ == "__main__":
    sys.exit(main())
