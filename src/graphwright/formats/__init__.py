"""Readers and writers: the only modules that import format libraries.

``load`` picks the format by content (magic bytes, then parsing), not by the
file name; ``save`` writes atomically in the model's own format.  Each format
package exposes the same three functions::

    load(path: Path, data: bytes) -> Model     # raises ModelLoadError
    save(model: Model, path: Path) -> None     # atomic; raises ModelSaveError
    serialize(model: Model) -> bytes           # in memory, e.g. for a runtime
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from ..errors import ModelLoadError
from ..ir import Model
from .files import read_bytes, refuse_overwrite

__all__ = ["load", "save", "serialize", "detect_format"]

_MODULES = {"graphdef": "graphdef", "onnx": "onnx", "tflite": "tflite"}


def _module(fmt: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{_MODULES[fmt]}")


def detect_format(data: bytes, path: Path | None = None) -> str:
    """Name the format of a model file's bytes: ``graphdef``, ``onnx`` or ``tflite``.

    TFLite carries the ``TFL3`` identifier at offset 4.  GraphDef and ONNX are
    both protobufs: a GraphDef starts with a node (field 1, length-delimited:
    byte 0x0a) or, rarely, library/versions; an ONNX ModelProto starts with
    ``ir_version`` (field 1, varint: byte 0x08).  Text that parses as a
    protobuf text GraphDef is ``graphdef`` too.
    """
    where = f"{path}: " if path else ""
    if len(data) == 0:
        raise ModelLoadError(f"{where}file is empty")
    if len(data) >= 8 and data[4:8] == b"TFL3":
        return "tflite"
    first = data[0]
    if first == 0x08:
        return "onnx"
    if first in (0x0A, 0x12, 0x1A, 0x22):  # GraphDef fields node, library(2), version(3), versions(4)
        return "graphdef"
    head = data[:4096].lstrip()
    if head[:1].isalpha() or head[:1] == b"#":
        return "graphdef"  # text format; the GraphDef reader reports a parse error precisely
    raise ModelLoadError(
        f"{where}not a TensorFlow GraphDef, ONNX or TFLite model (unrecognised leading bytes)"
    )


def load(path: str | os.PathLike[str], *, format: str | None = None) -> Model:
    """Read a model file into the IR, choosing the reader by the file's content."""
    p = Path(path)
    if format in (None, "onnx"):
        # Large inline weights stay memory-mapped instead of being parsed into the proto:
        # peak memory of a load stays near zero copies of the weights.  Anything unusual
        # (None) goes through the ordinary reader below, which reports errors.
        from .onnx.mapped import load_mapped  # lazy: format packages load on first use (onnx is slow)

        mapped = load_mapped(p)
        if mapped is not None:
            mapped.source_path = p
            return mapped
    data = read_bytes(p)
    fmt = format or detect_format(data, p)
    if fmt not in _MODULES:
        raise ModelLoadError(f"unknown format {fmt!r}; expected one of {sorted(_MODULES)}")
    model: Model = _module(fmt).load(p, data)
    model.source_path = p
    return model


def save(model: Model, path: str | os.PathLike[str]) -> None:
    """Write ``model`` in its own format, atomically (the destination is never half-written)."""
    p = Path(path)
    # The input is never changed: not through a symbolic or hard link either (and ONNX weights
    # may still be read lazily from it).  The ONNX writer also checks its external data file.
    refuse_overwrite(p, [model.source_path])
    _module(model.format).save(model, p)


def serialize(model: Model) -> bytes:
    """The model's file content as bytes (ONNX models over 2 GB cannot be serialized in memory)."""
    return _module(model.format).serialize(model)
