"""The backend interface: input specs, model sources, sessions and the registry.

A *backend* runs one model format on one runtime (onnxruntime, TensorFlow,
LiteRT...).  ``backend.prepare(source, options)`` builds a :class:`Session`
once; ``session.run(feeds, outputs)`` may then be called many times.  Runtime
libraries are imported inside ``prepare`` only, so importing graphwright never
imports TensorFlow.  A backend that is not installed raises
:class:`BackendUnavailableError` naming what to install.
"""

from __future__ import annotations

import abc
import importlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import formats
from ..errors import (
    BackendUnavailableError,
    ModelLoadError,
    ModelSaveError,
    VerificationError,
)
from ..formats.files import read_bytes
from ..ir import DType, Model
from ..ir.tensor import Shape

if TYPE_CHECKING:
    from typing import Self  # Python 3.11+, used in annotations only

__all__ = [
    "Backend",
    "InputSpec",
    "ModelSource",
    "Session",
    "backend_names",
    "check_feed",
    "check_feeds",
    "default_backend",
    "format_spec",
    "get_backend",
    "one_line",
    "register_backend",
]

#: Backend used for each format when the caller names none.
DEFAULT_BACKENDS: Mapping[str, str] = {
    "onnx": "onnxruntime",
    "graphdef": "tensorflow",
    "tflite": "litert",
}


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One model input: its name, element type and shape (``None`` dims are unknown,
    ``str`` dims symbolic; ``shape=None`` means even the rank is unknown)."""

    name: str
    dtype: DType
    shape: Shape

    def accepts_shape(self, shape: Sequence[int]) -> bool:
        """True if an array of ``shape`` fits this spec (unknown/symbolic dims match anything)."""
        if self.shape is None:
            return True
        if len(shape) != len(self.shape):
            return False
        return all(not isinstance(d, int) or d < 0 or d == s for d, s in zip(self.shape, shape))


def format_spec(dtype: DType | str, shape: Shape) -> str:
    """``float32 [1, 3, N, ?]``: a dtype and shape as error messages and reports show them."""
    name = dtype.value if isinstance(dtype, DType) else str(dtype)
    if shape is None:
        return f"{name} [unknown rank]"
    dims = ", ".join("?" if d is None or (isinstance(d, int) and d < 0) else str(d) for d in shape)
    return f"{name} [{dims}]"


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """The first meaningful line of a runtime's error message, bounded in length."""
    text = str(error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else type(error).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_feeds(specs: Sequence[InputSpec], feeds: Mapping[str, np.ndarray], *, label: str) -> None:
    """Refuse feeds that name unknown inputs, miss inputs, or disagree on dtype/shape.

    Raises :class:`VerificationError` naming the input and expected vs given.
    """
    by_name = {spec.name: spec for spec in specs}
    for name, array in feeds.items():
        spec = by_name.get(name)
        if spec is None:
            known = ", ".join(repr(s.name) for s in specs) or "none"
            raise VerificationError(f"{label}: no input named {name!r}; its inputs are {known}")
        check_feed(spec, np.asarray(array), label=label)
    missing = [s.name for s in specs if s.name not in feeds]
    if missing:
        raise VerificationError(f"{label}: no value given for input(s) {', '.join(map(repr, missing))}")


def check_feed(spec: InputSpec, array: np.ndarray, *, label: str) -> None:
    """Refuse an array whose dtype or shape does not fit ``spec`` (one-line VerificationError)."""
    expected = spec.dtype.numpy
    dtype_ok = expected is None or array.dtype == expected or (
        spec.dtype is DType.STRING and array.dtype.kind in "OSU"
    )
    if not dtype_ok or not spec.accepts_shape(array.shape):
        given = format_spec(str(array.dtype), array.shape)
        raise VerificationError(
            f"{label}: input {spec.name!r} expects {format_spec(spec.dtype, spec.shape)} but was given {given}"
        )


class ModelSource:
    """A model as a runtime sees it: its format and file bytes, plus where it came from.

    ``path`` is the file the bytes were read from (or a temporary copy);
    ``external_dir`` is a directory already checked for safe ONNX external data
    (``None``: not checked; a backend must not let the runtime read from a
    directory that was not checked).  ``written`` is true when the bytes come
    from graphwright's own writer (so they were valid by construction) rather
    than from a file or a caller.
    """

    __slots__ = ("_data", "_tmp", "external_dir", "format", "label", "path", "written")

    def __init__(
        self,
        format: str,
        *,
        data: bytes | None = None,
        path: Path | None = None,
        label: str = "",
        external_dir: Path | None = None,
        written: bool = False,
    ) -> None:
        if data is None and path is None:
            raise ValueError("a ModelSource needs data or a path")
        self.format = format
        self._data = data
        self.path = path
        self.label = label or (str(path) if path is not None else f"<in-memory {format} model>")
        self.external_dir = external_dir
        self.written = written
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def data(self) -> bytes:
        """The model file's bytes (read on first use)."""
        if self._data is None:
            assert self.path is not None
            self._data = read_bytes(self.path)
        return self._data

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, format: str | None = None) -> ModelSource:
        """A model file, format detected from its content (no IR is built)."""
        p = Path(path)
        if format is None:
            format = formats.detect_format(_read_head(p), p)
        return cls(format, path=p)

    @classmethod
    def from_model(cls, model: Model) -> ModelSource:
        """An IR model, serialized by its format's writer.

        An ONNX model too large to serialize in memory (protobuf's 2 GB limit)
        is saved with external data into a private temporary directory, which
        lives as long as this source.
        """
        label = str(model.source_path) if model.source_path is not None else f"<in-memory {model.format} model>"
        try:
            return cls(model.format, data=formats.serialize(model), label=label, written=True)
        except ModelSaveError:
            if model.format != "onnx":
                raise
        tmp = tempfile.TemporaryDirectory(prefix="graphwright-model-")
        path = Path(tmp.name) / "model.onnx"
        formats.save(model, path)
        source = cls(model.format, path=path, label=label, external_dir=Path(tmp.name), written=True)
        source._tmp = tmp
        return source

    @classmethod
    def of(cls, model: Model | ModelSource | bytes | str | os.PathLike[str]) -> ModelSource:
        """Whatever the caller passed (Model, path, bytes or source) as a source."""
        if isinstance(model, ModelSource):
            return model
        if isinstance(model, Model):
            return cls.from_model(model)
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            return cls(formats.detect_format(data), data=data)
        if isinstance(model, (str, os.PathLike)):
            return cls.from_path(model)
        raise TypeError(f"expected a Model, a path or bytes, not {type(model).__name__}")

    def __repr__(self) -> str:
        return f"ModelSource({self.format}, {self.label})"


def _read_head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of a model file (enough to detect its format)."""
    try:
        if path.is_dir():
            raise ModelLoadError(f"{path} is a directory, not a model file")
        with open(path, "rb") as f:
            return f.read(size)
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: no such file") from None
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e}") from None


class Session(abc.ABC):
    """A model prepared on a runtime: its inputs and outputs as the runtime sees them."""

    __slots__ = ()

    #: The runtime's inputs (names, dtypes, shapes), in the model's order.
    inputs: list[InputSpec]
    #: The names of the model's outputs, in order.
    outputs: list[str]

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run once; returns the requested outputs (default: all) keyed as requested."""

    def close(self) -> None:  # noqa: B027 - deliberately a no-op default, not abstract: override only if needed
        """Release the runtime's resources (optional)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Backend(abc.ABC):
    """A runtime able to execute models of some formats."""

    #: Registry name, e.g. ``"onnxruntime"``.
    name: ClassVar[str]
    #: Model formats it runs (``"onnx"``, ``"graphdef"``, ``"tflite"``).
    formats: ClassVar[tuple[str, ...]]
    #: What to install when the runtime is missing (shown in BackendUnavailableError).
    install_hint: ClassVar[str]
    #: Option names :meth:`prepare` accepts.
    option_names: ClassVar[frozenset[str]] = frozenset()

    @abc.abstractmethod
    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        """Load ``source`` into the runtime.

        Raises BackendUnavailableError (runtime not installed), VerificationError
        (the runtime refuses the model or the options) or ModelLoadError (unsafe file).
        """

    def check_options(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - self.option_names)
        if unknown:
            allowed = ", ".join(sorted(self.option_names)) or "none"
            raise VerificationError(f"backend {self.name!r} has no option(s) {unknown}; its options are: {allowed}")

    def unavailable(self, what: str) -> BackendUnavailableError:
        return BackendUnavailableError(f"the {self.name} backend needs {what}: {self.install_hint}")


# -- registry -----------------------------------------------------------------
_BUILTIN: dict[str, tuple[str, str]] = {
    "onnxruntime": ("graphwright.runtime.onnxruntime", "OnnxRuntimeBackend"),
    "tensorflow": ("graphwright.runtime.tensorflow", "TensorFlowBackend"),
    "litert": ("graphwright.runtime.litert", "LiteRTBackend"),
    "litert-ref": ("graphwright.runtime.litert", "LiteRTReferenceBackend"),
    "reference": ("graphwright.runtime.reference.backend", "ReferenceBackend"),
    "tflm": ("graphwright.runtime.tflm", "TFLMBackend"),
}
_registered: dict[str, Backend] = {}


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend under ``backend.name`` (refuses to shadow one unless ``replace``)."""
    if not replace and (backend.name in _registered or backend.name in _BUILTIN):
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _registered[backend.name] = backend


def backend_names() -> list[str]:
    """Names of all known backends (installed or not), sorted."""
    return sorted(set(_BUILTIN) | set(_registered))


def get_backend(name: str) -> Backend:
    """The backend called ``name``; raises VerificationError for an unknown name."""
    backend = _registered.get(name)
    if backend is not None:
        return backend
    if name not in _BUILTIN:
        raise VerificationError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}")
    module_name, class_name = _BUILTIN[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    backend = cls()
    _registered[name] = backend
    return backend


def default_backend(format: str) -> str:
    """The backend that runs ``format`` when the caller names none."""
    try:
        return DEFAULT_BACKENDS[format]
    except KeyError:
        raise VerificationError(f"no default backend for format {format!r}") from None


def resolve_backend(source: ModelSource, name: str | None) -> Backend:
    """The named (or default) backend, checked to run ``source``'s format."""
    backend = get_backend(name or default_backend(source.format))
    if source.format not in backend.formats:
        raise VerificationError(
            f"backend {backend.name!r} cannot run {source.format} models ({source.label}); "
            f"use {default_backend(source.format)!r}"
        )
    return backend
