"""Build-on-first-use cache of test models.

Layout of ``tests/models/_cache/`` (git-ignored)::

    <family>-<name>-<key>.<ext>   the model file (.pb / .onnx / .tflite)
    <family>-<name>-<key>.json    sidecar: ModelInfo, written last (= complete)
    <family>-<name>-<key>.npz     reference inputs/outputs
    <family>-<name>-<key>.log     output of the build subprocess

``key`` hashes the family, name, the builder module's ``BUILDER_VERSION`` and
the versions of the libraries that produce the file, so changing any of them
rebuilds.  Builds always run in a fresh ``python -m tests.models _build``
subprocess: the pytest process never imports TensorFlow/torch just to get a
path, Keras' global layer-name counters start from zero (so node names are
reproducible), and memory is returned when the build ends.  Concurrent
callers (pytest-xdist) serialise on a per-model ``fcntl`` lock.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ._info import ModelInfo

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
CACHE_DIR = PACKAGE_DIR / "_cache"
BUILD_TIMEOUT_S = 1800


class ModelBuildError(RuntimeError):
    """A model could not be built (missing dependency or builder failure)."""


@dataclass(frozen=True)
class Family:
    module: str  # builder module (imported only in the build subprocess)
    names: tuple[str, ...]
    ext: str
    # (import name, distribution names to try) of libraries that shape the file
    libraries: tuple[tuple[str, tuple[str, ...]], ...]
    # build every missing model of the family in the one subprocess a first request starts
    # (small models: the interpreter start-up, not the build, is what costs)
    batch: bool = False


def names_of(module: str) -> tuple[str, ...]:
    """The ``NAMES`` tuple a builder module declares, read without importing it (so a
    builder that owns its corpus lists its models in one place)."""
    path = PACKAGE_DIR / f"{module}.py"
    if not path.exists():
        return ()
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NAMES" for t in stmt.targets):
            return tuple(ast.literal_eval(stmt.value))
    raise ModelBuildError(f"{module}.py defines no NAMES")


def _tflite_family(module: str) -> Family:
    """A TFLite corpus made by the converter in ``module`` (its models listed in its ``NAMES``)."""
    return Family(module, names_of(module), ".tflite", (_TF, _KERAS, ("ai_edge_litert", ("ai-edge-litert",))),
                  batch=module not in ("build_tflite_real", "build_tflite_zoo"))


_TF = ("tensorflow", ("tensorflow-cpu", "tensorflow"))
_KERAS = ("keras", ("keras",))

FAMILIES: dict[str, Family] = {
    "keras_graphdef": Family(
        "build_keras", names_of("build_keras"), ".pb", (_TF, _KERAS)
    ),
    "torch_onnx": Family(
        "build_torch",
        ("cnn", "bert"),
        ".onnx",
        (
            ("torch", ("torch",)),
            ("transformers", ("transformers",)),
            ("onnx", ("onnx",)),
            ("onnxruntime", ("onnxruntime",)),
        ),
    ),
    "tflite_model": Family(
        "build_tflite",
        ("float", "int8", "mobilenet_v2_float"),
        ".tflite",
        (_TF, _KERAS, ("ai_edge_litert", ("ai-edge-litert",))),
    ),
    "tflite_ops": Family(
        "build_tflite_ops",
        ("convs_int8", "convs_float", "acts_int8", "acts_float", "mobilenet_v2_int8", "misc_int8", "misc_float",
         "mobilenet_v3_small_int8", "efficientnet_b0_int8"),
        ".tflite",
        (_TF, _KERAS, ("ai_edge_litert", ("ai-edge-litert",))),
        batch=True,
    ),
    # frozen tf-keras/Keras 3 LSTM, GRU, LayerNorm and encoder graphs for the composite-op fusions (issue 13)
    "keras_composite": Family("build_keras_composite", names_of("build_keras_composite"), ".pb",
                              (_TF, _KERAS, ("tf_keras", ("tf-keras",))), batch=True),
    # per-operator corpora of the reference interpreter (issue 11): one builder module each
    **{f"tflite_{part}": _tflite_family(f"build_tflite_{part}")
       for part in ("math", "binary", "index", "reduce", "conv", "sequence", "control", "sparse", "real", "misc", "zoo")},
}


def _family(family: str, name: str) -> Family:
    try:
        fam = FAMILIES[family]
    except KeyError:
        raise ValueError(
            f"unknown model family {family!r}; choose from {sorted(FAMILIES)}"
        ) from None
    if name not in fam.names:
        raise ValueError(f"unknown {family} model {name!r}; choose from {fam.names}")
    return fam


def builder_version(fam: Family) -> int:
    """``BUILDER_VERSION`` of the builder module, read without importing it."""
    source = (PACKAGE_DIR / f"{fam.module}.py").read_text()
    match = re.search(r"^BUILDER_VERSION\s*=\s*(\d+)", source, re.MULTILINE)
    if match is None:
        raise ModelBuildError(f"{fam.module}.py defines no BUILDER_VERSION")
    return int(match.group(1))


def missing_dependencies(family: str) -> list[str]:
    """Import names of the libraries ``family`` needs that are not installed."""
    return [mod for mod, _ in FAMILIES[family].libraries if importlib.util.find_spec(mod) is None]


def library_versions(fam: Family) -> dict[str, str]:
    versions: dict[str, str] = {}
    for module, dists in fam.libraries:
        for dist in dists:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                versions[module] = importlib.metadata.version(dist)
                break
        else:
            versions[module] = "missing"
    return versions


def cache_key(family: str, name: str) -> str:
    fam = _family(family, name)
    payload = {
        "family": family,
        "name": name,
        "builder_version": builder_version(fam),
        "libraries": library_versions(fam),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return digest[:12]


def _stem(family: str, name: str) -> str:
    return f"{family}-{name}-{cache_key(family, name)}"


def _ensure_cache_dir() -> None:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    gitignore = CACHE_DIR / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# built test models: never commit\n*\n!.gitignore\n")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached(family: str, name: str) -> ModelInfo | None:
    """The cached, complete build of (family, name) for the current key, if any."""
    sidecar = CACHE_DIR / f"{_stem(family, name)}.json"
    if not sidecar.exists():
        return None
    info = ModelInfo.read_sidecar(sidecar)
    return info if info.path.exists() else None


def _remove_builds(family: str, name: str) -> None:
    """Delete all cached files of (family, name): stale keys, half-written builds."""
    for path in CACHE_DIR.glob(f"{family}-{name}-*"):
        path.unlink(missing_ok=True)


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(
        PYTHONHASHSEED="0",
        CUDA_VISIBLE_DEVICES="",
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_ENABLE_ONEDNN_OPTS="0",  # reproducible float results
        TF_DETERMINISTIC_OPS="1",
    )
    return env


def ensure_built(family: str, name: str, force: bool = False) -> ModelInfo:
    """Return the cached model, building it in a subprocess first if needed."""
    fam = _family(family, name)
    if not force and (info := cached(family, name)) is not None:
        return info
    missing = missing_dependencies(family)
    if missing:
        raise ModelBuildError(f"{family}:{name} needs missing packages: {', '.join(missing)}")

    _ensure_cache_dir()
    # a batch family builds all its missing models at once, under one lock for the family
    lock = CACHE_DIR / (f".{family}.lock" if fam.batch else f".{family}-{name}.lock")
    with _locked(lock):
        if not force and (info := cached(family, name)) is not None:
            return info  # another process built it while we waited
        names = [name]
        if fam.batch and not force:
            names += [n for n in fam.names if n != name and cached(family, n) is None]
        _build_in_subprocess(family, names)
    result = cached(family, name)
    if result is None:
        raise ModelBuildError(f"building {family}:{name} failed; log: {CACHE_DIR / _stem(family, name)}.log")
    assert fam.ext == result.path.suffix
    return result


def _build_in_subprocess(family: str, names: list[str]) -> None:
    """Build ``names`` of ``family`` in one fresh subprocess; move each complete build into the
    cache (payload first, sidecar last: its presence marks a complete build).  Raises if the
    first name failed; the others are simply left unbuilt when they fail (their log says why)."""
    stems = [_stem(family, n) for n in names]
    for n in names:
        _remove_builds(family, n)
    log_path = CACHE_DIR / f"{stems[0]}.log"
    with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=".build-") as tmp:
        cmd = [sys.executable, "-m", "tests.models", "_build", family, *names, "--out-dir", tmp,
               "--stem", *stems]
        start = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_build_env(), stdout=log, stderr=subprocess.STDOUT,
                                  timeout=BUILD_TIMEOUT_S * len(names), check=False)
        wall = time.perf_counter() - start
        for stem in stems[1:]:
            shutil.copyfile(log_path, CACHE_DIR / f"{stem}.log")
        for stem in stems:
            sidecar = Path(tmp) / f"{stem}.json"
            if not sidecar.exists():
                continue
            info = ModelInfo.read_sidecar(sidecar)
            info = replace(info, metadata={**info.metadata, "wall_time_s": round(wall, 2),
                                           **({"built_with": len(names)} if len(names) > 1 else {})})
            info.write_sidecar()
            for path in Path(tmp).glob(f"{stem}.*"):
                if path.suffix != ".json":
                    os.replace(path, CACHE_DIR / path.name)
            os.replace(sidecar, CACHE_DIR / sidecar.name)
        if not (CACHE_DIR / f"{stems[0]}.json").exists():
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
            raise ModelBuildError(f"building {family}:{names[0]} failed (exit {proc.returncode}); "
                                  f"log: {log_path}\n{tail}")


def build_with_others(family: str, module: str, name: str, others: Iterable[str]) -> ModelInfo:
    """The cached model ``name`` of a batch family; a build runs ``python -m tests.models.<module>
    TMP name=stem...`` once for ``name`` and those of ``others`` not yet cached, then moves each
    complete build into the cache (payload first, sidecar last: its presence marks a complete build)."""
    if (info := cached(family, name)) is not None:
        return info
    _ensure_cache_dir()
    with _locked(CACHE_DIR / f".{family}.lock"):
        if (info := cached(family, name)) is not None:
            return info
        names = [name, *(n for n in others if n != name and cached(family, n) is None)]
        for n in names:
            _remove_builds(family, n)
        stems = {n: _stem(family, n) for n in names}
        log_path = CACHE_DIR / f"{stems[name]}.log"
        with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=".build-") as tmp, open(log_path, "w") as log:
            subprocess.run([sys.executable, "-m", f"tests.models.{module}", tmp,
                            *(f"{n}={s}" for n, s in stems.items())], cwd=REPO_ROOT, env=_build_env(),
                           stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False)
            for stem in stems.values():
                sidecar = Path(tmp) / f"{stem}.json"
                if not sidecar.exists():
                    continue
                for path in Path(tmp).glob(f"{stem}.*"):
                    if path.suffix != ".json":
                        os.replace(path, CACHE_DIR / path.name)
                os.replace(sidecar, CACHE_DIR / sidecar.name)
    info = cached(family, name)
    if info is None:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise ModelBuildError(f"building {family}:{name} failed; log: {log_path}\n{tail}")
    return info


def build_here(family: str, name: str, out_dir: Path, stem: str) -> ModelInfo:
    """Build in *this* process (the ``_build`` subprocess entry point)."""
    fam = _family(family, name)
    builder = importlib.import_module(f"{__package__}.{fam.module}")
    model_path = out_dir / f"{stem}{fam.ext}"
    start = time.perf_counter()
    info: ModelInfo = builder.build(name, model_path, out_dir / f"{stem}.npz")
    elapsed = time.perf_counter() - start
    info = replace(
        info,
        metadata={
            **info.metadata,
            "build_time_s": round(elapsed, 2),
            "size_bytes": model_path.stat().st_size,
            "sha256": hashlib.sha256(model_path.read_bytes()).hexdigest(),
            "cache_key": stem.rsplit("-", 1)[1],
            "builder_version": builder_version(fam),
            "library_versions": library_versions(fam),
        },
    )
    info.write_sidecar()
    return info


def clean(all_files: bool = True) -> int:
    """Delete cached builds (all, or only those whose key is stale)."""
    if not CACHE_DIR.exists():
        return 0
    current = {_stem(f, n) for f, fam in FAMILIES.items() for n in fam.names}
    removed = 0
    for path in CACHE_DIR.iterdir():
        if path.name == ".gitignore":
            continue
        if not all_files and path.name.split(".", 1)[0] in current:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed += 1
    return removed
