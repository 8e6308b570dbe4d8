"""Run a backend in a child process, so that a runtime crash is an error, not a dead program.

Native runtimes can crash on hostile files (LiteRT was seen to segfault on
fuzzed ``.tflite`` files).  :func:`execute_isolated` starts a fresh Python
(``sys.executable``, the parent's ``sys.path``) in a private temporary
directory holding the job (``job.json``), the feeds (``feeds.npz``) and, for
an in-memory model, its bytes.  The child writes ``result.npz`` and
``result.json``; arrays never go through pickle.  A child killed by a signal
becomes ``VerificationError("<backend> crashed (signal 11, SIGSEGV) while
running <model>; ...")``; an error raised in the child comes back as the same
graphwright error type with the same one-line message.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import errors
from ..errors import GraphwrightError, VerificationError
from ..ir import DType
from .base import (
    InputSpec,
    ModelSource,
    _registered,
    default_backend,
    one_line,
    register_backend,
)
from .execute import Execution, Job, execute_here

__all__ = ["execute_isolated"]

_CHILD_CODE = "import sys; from graphwright.runtime.isolate import child_main; sys.exit(child_main(sys.argv[1]))"
_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}  # the child's stderr is read for diagnostics only


def execute_isolated(
    source: ModelSource,
    feeds: Mapping[str, np.ndarray] | None,
    job: Job,
    *,
    timeout: float | None = None,
) -> Execution:
    """Run ``job`` on ``source`` in a child process (see the module docstring)."""
    backend_name = job.backend or default_backend(source.format)
    with tempfile.TemporaryDirectory(prefix="graphwright-run-") as tmp:
        workdir = Path(tmp)
        model_path = source.path
        if model_path is None:
            model_path = workdir / "model.bin"
            model_path.write_bytes(source.data)
        feed_names = _save_arrays(workdir / "feeds.npz", dict(feeds or {}))
        spec = {
            "format": source.format,
            "label": source.label,
            "path": str(model_path),
            "in_memory": source.path is None,
            "external_dir": None if source.external_dir is None else str(source.external_dir),
            "written": source.written,
            "backend": backend_name,
            "backend_class": _backend_class(backend_name),
            "options": job.options,
            "outputs": job.outputs,
            "seed": job.seed,
            "dim_values": job.dim_values,
            "feed_by_position": job.feed_by_position,
            "feeds": feed_names,
            "sys_path": [p for p in sys.path if isinstance(p, str)],
        }
        try:
            (workdir / "job.json").write_text(json.dumps(spec), encoding="utf-8")
        except TypeError as e:
            raise VerificationError(f"backend options must be plain values to run isolated: {e}") from None
        env = _child_env()
        with open(workdir / "stderr.txt", "wb") as err:
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", _CHILD_CODE, str(workdir)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                    env=env, timeout=timeout, check=False,
                )
            except subprocess.TimeoutExpired:
                raise VerificationError(
                    f"{backend_name} did not finish within {timeout:g} s while running {source.label}"
                ) from None
        return _collect(workdir, proc.returncode, backend_name, source.label)


def _collect(workdir: Path, returncode: int, backend: str, label: str) -> Execution:
    if returncode < 0:
        number = -returncode
        try:
            sig = signal.Signals(number).name
        except ValueError:
            sig = "unknown signal"
        raise VerificationError(
            f"{backend} crashed (signal {number}, {sig}) while running {label}; the file is probably corrupt"
        )
    result_file = workdir / "result.json"
    if not result_file.exists():
        tail = (workdir / "stderr.txt").read_text("utf-8", "replace").strip().splitlines()
        reason = one_line(tail[-1]) if tail else "no output"
        raise VerificationError(f"{backend} child process exited with status {returncode} while running {label}: {reason}")
    result = json.loads(result_file.read_text(encoding="utf-8"))
    if result["status"] != "ok":
        error_type = getattr(errors, result["type"], None)
        if not (isinstance(error_type, type) and issubclass(error_type, GraphwrightError)):
            error_type = VerificationError
        raise error_type(result["message"])
    arrays = _load_arrays(workdir / "result.npz")
    inputs = [InputSpec(n, DType(d), None if s is None else tuple(s)) for n, d, s in result["inputs"]]
    return Execution(
        result["backend"], inputs,
        {n: arrays[f"f{i}"] for i, n in enumerate(result["feeds"])},
        {n: arrays[f"o{i}"] for i, n in enumerate(result["outputs"])},
        list(result["notes"]),
    )


def _backend_class(name: str) -> str | None:
    """``module:Class`` of a backend registered at run time, so the child can register it too."""
    backend = _registered.get(name)
    if backend is None or type(backend).__module__.startswith("graphwright."):
        return None
    cls = type(backend)
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise VerificationError(
            f"backend {name!r} cannot run isolated: define its class at the top level of an importable module"
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    for key, value in _QUIET_ENV.items():
        env.setdefault(key, value)
    return env


# -- array transport (no pickle) ------------------------------------------------
def _save_arrays(path: Path, arrays: Mapping[str, Any]) -> list[str]:
    names = list(arrays)
    stored: dict[str, Any] = {f"f{i}": _storable(arrays[n]) for i, n in enumerate(names)}
    np.savez(path, **stored)
    return names


def _storable(array: Any) -> np.ndarray:
    """Object arrays of str/bytes (string tensors) as fixed-width U/S arrays: no pickle needed."""
    a = np.asarray(array)
    if a.dtype != object:
        return a
    items = a.ravel().tolist()
    if all(isinstance(v, str) for v in items):
        return a.astype(np.str_)
    if all(isinstance(v, bytes) for v in items):
        return a.astype(np.bytes_)
    raise VerificationError("only numeric, bool and string arrays can be passed to an isolated run")


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    with np.load(path, allow_pickle=False) as npz:
        return {k: _restored(npz[k]) for k in npz.files}


def _restored(a: np.ndarray) -> np.ndarray:
    return a.astype(object) if a.dtype.kind in "SU" else a


# -- the child ------------------------------------------------------------------
def child_main(workdir_arg: str) -> int:
    """Entry point of the child process: run the job in ``workdir_arg``, write the result."""
    workdir = Path(workdir_arg)
    spec = json.loads((workdir / "job.json").read_text(encoding="utf-8"))
    for entry in reversed(spec["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        execution = _child_run(workdir, spec)
        arrays: dict[str, Any] = {f"f{i}": _storable(a) for i, a in enumerate(execution.feeds.values())}
        arrays.update({f"o{i}": _storable(a) for i, a in enumerate(execution.outputs.values())})
        np.savez(workdir / "result.npz", **arrays)
    except GraphwrightError as e:
        _write_result(workdir, {"status": "error", "type": type(e).__name__, "message": str(e)})
        return 1
    except Exception as e:  # reported to the parent as a one-line VerificationError
        message = f"{spec['backend']} failed on {spec['label']}: {type(e).__name__}: {one_line(e)}"
        _write_result(workdir, {"status": "error", "type": "VerificationError", "message": message})
        return 1
    _write_result(workdir, {
        "status": "ok",
        "backend": execution.backend,
        "inputs": [[s.name, s.dtype.value, None if s.shape is None else list(s.shape)] for s in execution.inputs],
        "feeds": list(execution.feeds),
        "outputs": list(execution.outputs),
        "notes": execution.notes,
    })
    return 0


def _child_run(workdir: Path, spec: dict[str, Any]) -> Execution:
    if spec["backend_class"]:
        module_name, _, qualname = spec["backend_class"].partition(":")
        cls: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        register_backend(cls(), replace=True)
    path = Path(spec["path"])
    source = ModelSource(
        spec["format"],
        data=path.read_bytes() if spec["in_memory"] else None,
        path=None if spec["in_memory"] else path,
        label=spec["label"],
        external_dir=None if spec["external_dir"] is None else Path(spec["external_dir"]),
        written=spec["written"],
    )
    feeds = _load_arrays(workdir / "feeds.npz")
    named = {name: feeds[f"f{i}"] for i, name in enumerate(spec["feeds"])}
    job = Job(
        backend=spec["backend"], options=spec["options"], outputs=spec["outputs"], seed=spec["seed"],
        dim_values=spec["dim_values"], feed_by_position=spec["feed_by_position"],
    )
    return execute_here(source, named, job)


def _write_result(workdir: Path, result: dict[str, Any]) -> None:
    tmp = workdir / "result.json.tmp"
    tmp.write_text(json.dumps(result), encoding="utf-8")
    tmp.replace(workdir / "result.json")
