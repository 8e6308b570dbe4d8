"""``run`` and ``prepare``: execute a model on a backend, in this process or a child.

One execution is described by a :class:`Job` (backend, options, outputs, how
to make or map feeds) so that the same code runs in-process and in the
isolated child (see :mod:`graphwright.runtime.isolate`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats
from ..ir import Model
from .base import InputSpec, ModelSource, Session, resolve_backend
from .feeds import random_feeds

__all__ = ["Execution", "Job", "ModelLike", "check_file", "execute", "prepare", "run"]

#: What ``run``/``prepare``/``compare`` accept as a model.
ModelLike = Model | ModelSource | bytes | str | os.PathLike[str]


@dataclass(slots=True)
class Job:
    """What to do with a model once it is loaded on a runtime."""

    backend: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] | None = None
    #: Seed and symbolic-dim sizes for the inputs no feed was given for.
    seed: int = 0
    dim_values: dict[str, int] | None = None
    #: When the feed names are not the model's input names but their number is,
    #: feed them in order (models whose names were obfuscated).
    feed_by_position: bool = False


@dataclass(slots=True)
class Execution:
    """The result of one run: outputs, the feeds actually used, and notes."""

    backend: str
    inputs: list[InputSpec]
    feeds: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    notes: list[str] = field(default_factory=list)


def prepare(model: ModelLike, *, backend: str | None = None, options: Mapping[str, Any] | None = None) -> Session:
    """Load a model on a runtime once, to run it many times (in this process)."""
    source = ModelSource.of(model)
    return resolve_backend(source, backend).prepare(source, dict(options or {}))


def run(
    model: ModelLike,
    feeds: Mapping[str, np.ndarray] | None = None,
    *,
    backend: str | None = None,
    outputs: Sequence[str] | None = None,
    isolate: bool = False,
    options: Mapping[str, Any] | None = None,
    seed: int = 0,
    timeout: float | None = None,
) -> dict[str, np.ndarray]:
    """Run ``model`` once and return its outputs by name.

    ``model`` is an IR :class:`Model` (serialized by its format's writer) or a
    file path (its bytes go straight to the runtime).  Inputs missing from
    ``feeds`` get seeded random values (:func:`graphwright.verify.random_feeds`).
    ``backend`` defaults by format: onnxruntime, tensorflow, litert.
    ``isolate=True`` runs in a child process, so a runtime crash becomes a
    :class:`VerificationError` (``timeout`` in seconds applies there only).
    """
    job = Job(backend=backend, options=dict(options or {}), outputs=None if outputs is None else list(outputs),
              seed=seed)
    return execute(model, feeds, job, isolate=isolate, timeout=timeout).outputs


def execute(
    model: ModelLike,
    feeds: Mapping[str, np.ndarray] | None,
    job: Job,
    *,
    isolate: bool = False,
    timeout: float | None = None,
) -> Execution:
    """Run ``job`` on ``model``, here or (``isolate``) in a child process.

    A model file is read by graphwright's own reader first (:func:`check_file`), so a
    corrupt file gets the same one-line :class:`~graphwright.errors.ModelLoadError` as
    ``graphwright summarize`` gives, before any runtime is imported or sees its bytes
    (unless the job's options say ``verify_file=False``, LiteRT's option to skip that)."""
    source = ModelSource.of(model)
    if job.options.get("verify_file", True) is not False:  # LiteRT's option: hand the file over unread
        check_file(source)
    if isolate:
        from .isolate import execute_isolated  # lazy: isolate imports this module (execute_here)

        return execute_isolated(source, feeds, job, timeout=timeout)
    return execute_here(source, feeds, job)


def check_file(source: ModelSource) -> None:
    """Read a model file given by path with graphwright's reader (raises ModelLoadError).

    A runtime handed a corrupt file answers with its own raw message (onnxruntime's
    ``INVALID_PROTOBUF``), only after a slow import (TensorFlow), or not at all when it is
    missing ("needs TensorFlow" for a file that is simply broken).  Sources graphwright
    wrote itself, and bytes given in memory, are not re-read.  O(file size)."""
    if source.path is None or source.written:
        return
    try:
        st = os.stat(source.path)
        key: tuple[object, ...] | None = (str(source.path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None  # the reader reports it
    if key is not None and key in _CHECKED:
        return  # the same unchanged file, already read (compare checks both files before running either)
    formats.load(source.path, format=source.format)
    if key is not None:
        _CHECKED[key] = None
        while len(_CHECKED) > 16:
            del _CHECKED[next(iter(_CHECKED))]


#: files :func:`check_file` read successfully: (path, device, inode, size, mtime), oldest first
_CHECKED: dict[tuple[object, ...], None] = {}


def execute_here(source: ModelSource, feeds: Mapping[str, np.ndarray] | None, job: Job) -> Execution:
    backend = resolve_backend(source, job.backend)
    session = backend.prepare(source, job.options)
    try:
        notes: list[str] = []
        full = complete_feeds(session.inputs, feeds or {}, job, notes)
        outputs = session.run(full, job.outputs)
    finally:
        session.close()
    return Execution(backend.name, list(session.inputs), full, outputs, notes)


def complete_feeds(
    specs: Sequence[InputSpec],
    feeds: Mapping[str, np.ndarray],
    job: Job,
    notes: list[str],
) -> dict[str, np.ndarray]:
    """``feeds`` mapped onto ``specs`` (see :attr:`Job.feed_by_position`); missing inputs random."""
    names = [s.name for s in specs]
    given = {k: np.asarray(v) for k, v in feeds.items()}
    for key in [k for k in given if k not in names and k.endswith(":0") and k[:-2] in names]:
        given[key[:-2]] = given.pop(key)  # TF spelling "node:0" of input "node"
    if job.feed_by_position and given and not set(given) <= set(names):
        given = _match_other_model(names, given, notes)
    missing = [s for s in specs if s.name not in given]
    if missing:
        given.update(random_feeds(missing, seed=job.seed, dim_values=_dims_seen(specs, given, job.dim_values)))
    return given


def _match_other_model(names: list[str], given: dict[str, np.ndarray], notes: list[str]) -> dict[str, np.ndarray]:
    """Feeds made for another model: by name where they cover it, else by position, else partly."""
    if set(names) <= set(given):
        unused = [k for k in given if k not in names]
        notes.append(f"inputs of the first model not in the second, ignored: {', '.join(unused)}")
        return {k: given[k] for k in names}
    if len(given) == len(names):
        pairs = list(zip(given, names))
        notes.append("inputs matched by position: " + ", ".join(f"{a} -> {b}" for a, b in pairs if a != b))
        return {b: given[a] for a, b in pairs}
    kept = {k: v for k, v in given.items() if k in names}
    unused = [k for k in given if k not in names]
    fresh = [n for n in names if n not in given]
    notes.append(
        f"the models' inputs differ: ignored {', '.join(unused)}; random values for {', '.join(fresh) or 'none'}"
    )
    return kept


def _dims_seen(
    specs: Sequence[InputSpec], given: Mapping[str, np.ndarray], dim_values: Mapping[str, int] | None
) -> dict[str, int]:
    """Symbolic dim sizes fixed by the given feeds (e.g. batch ``N``), then the caller's."""
    seen: dict[str, int] = {}
    for spec in specs:
        array = given.get(spec.name)
        if array is None or spec.shape is None or len(spec.shape) != array.ndim:
            continue
        for dim, size in zip(spec.shape, array.shape):
            if isinstance(dim, str):
                seen.setdefault(dim, int(size))
    seen.update(dim_values or {})
    return seen
