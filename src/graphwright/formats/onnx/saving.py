"""``save``, ``serialize`` and ``to_proto``: streaming, atomic, external data over 2 GB.

``save`` writes the model piece by piece (see ``writer.py``) into a temporary
file beside the destination and renames it into place; the external data file,
when there is one, is written the same way and renamed first, so a failure at
any point leaves the previous files untouched and no temporary file behind.
Peak memory is the IR plus one tensor's bytes at a time, and
for a tensor still in its file (memory-mapped inline or external, not read by anything) one
1 MiB chunk (``external.Region``).

External data is used when asked (``external_data=True``), when the model
already keeps tensors outside (it was loaded that way), or when the file would
exceed protobuf's 2 GB limit (``size_limit``).  Then every initializer of at
least ``external_min_bytes`` bytes goes to ``<model file name>.data`` beside
the model, with a relative ``location``.

Model and data stay a consistent pair whatever happens: when ``<name>.data``
exists already (a model at the destination may be reading it), the new data
goes to the first free ``<name>.N.data``; it is renamed into place before the
model, and the old data file is removed only after the new model is in place.
A kill at any point leaves the old model with its old data or the new model
with its new data, never a mix.  Nothing the model being saved reads is ever
written over (its own file, its external data, through any link).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import onnx

from ...errors import GraphwrightError, ModelSaveError
from ...ir import AttrKind, Model, subgraphs
from .. import files
from ..files import atomic_path, refuse_overwrite, same_file
from .external import ExternalTensor
from .mapped import MappedTensor
from .tensors import buffer_len, tensor_buffer, write_buffer
from .wire import len_field_header, varint_len
from .writer import Builder, ModelParts, data_file_name

__all__ = ["save", "serialize", "to_proto", "PROTOBUF_LIMIT_BYTES", "EXTERNAL_MIN_BYTES"]

#: Protobuf cannot parse a message of 2 GiB or more; larger models need external data.
PROTOBUF_LIMIT_BYTES = 2**31 - 1
#: When external data is used, initializers of at least this many bytes go to the data file.
EXTERNAL_MIN_BYTES = 1024
_GRAPH_FIELD, _INITIALIZER_FIELD = 7, 5
_CHUNK_PAD = bytes(4096)
# Protobuf text fields of the source model that are not UTF-8 only fail when read back by Python.
_BAD_TEXT = "a text field of the source model (a name or doc_string) is not valid UTF-8; the model is corrupt"


def save(
    model: Model,
    path: Path | str,
    *,
    size_limit: int = PROTOBUF_LIMIT_BYTES,
    external_min_bytes: int = EXTERNAL_MIN_BYTES,
    external_data: bool | None = None,
) -> None:
    """Write ``model`` to ``path`` atomically.

    ``external_data``: None (default) decides by itself (see the module
    docstring), True always moves initializers of at least
    ``external_min_bytes`` bytes to ``<file name>.data``, False never uses
    external data.  ``size_limit`` is the largest model file allowed
    (protobuf's limit by default); raises :class:`ModelSaveError` when the
    model cannot fit, or on any write failure.
    """
    path = Path(path)
    files_read = _files_read(model)
    refuse_overwrite(path, files_read)
    try:
        location = data_file_name(path)
        external = external_data if external_data is not None else _has_external_tensors(model)
        if external:
            location = _data_location(path, files_read)
        parts = Builder(model, external=external, min_bytes=external_min_bytes, data_location=location).parts()
        blobs = _Blobs(parts)
        if blobs.total > size_limit and not external and external_data is None:
            external = True
            location = _data_location(path, files_read)
            parts = Builder(model, external=True, min_bytes=external_min_bytes, data_location=location).parts()
            blobs = _Blobs(parts)
        size = blobs.total
        if size > size_limit:
            how = (f"with every initializer of {external_min_bytes}+ bytes in external data; lower external_min_bytes"
                   if external else "without external data; allow external_data")
            raise ModelSaveError(f"cannot save {path}: the model needs {size} bytes, over the {size_limit}-byte "
                                 f"limit, {how}")
        with atomic_path(path) as tmp_model:
            data_ctx = atomic_path(path.with_name(location)) if parts.external else contextlib.nullcontext(None)
            with data_ctx as tmp_data:
                if tmp_data is not None:
                    with open(tmp_data, "wb") as f:
                        _write_external(parts, f)
                        _sync(f)
                with open(tmp_model, "wb") as f:
                    _write_parts(parts, blobs, f)
                    _sync(f)
        # Both files are in place (the data first, under a name no previous model reads, then the
        # model): a kill at any point left an old or a new model, each with its own data.
        _remove_old_data(path, location if parts.external else None, files_read)
    except ModelSaveError:
        raise
    except OSError as e:
        raise ModelSaveError(f"cannot write {path}: {e.strerror or e}") from None
    except GraphwrightError as e:  # e.g. the external data a tensor was loaded from has gone
        raise ModelSaveError(f"cannot save {path}: {e}") from None
    except UnicodeError:
        raise ModelSaveError(f"cannot save {path}: {_BAD_TEXT}") from None


def serialize(model: Model) -> bytes:
    """The model as one in-memory ``.onnx`` file (all tensors inline; must fit protobuf's limit)."""
    try:
        parts = Builder(model).parts()
        blobs = _Blobs(parts)
        if blobs.total > PROTOBUF_LIMIT_BYTES:
            raise ModelSaveError(
                f"the model needs {blobs.total} bytes, over protobuf's 2 GB limit; save() it to a file "
                "(external data)"
            )
        out = io.BytesIO()
        _write_parts(parts, blobs, out)
        return out.getvalue()
    except GraphwrightError as e:
        raise e if isinstance(e, ModelSaveError) else ModelSaveError(str(e)) from None
    except UnicodeError:
        raise ModelSaveError(_BAD_TEXT) from None


def to_proto(model: Model) -> onnx.ModelProto:
    """A complete ModelProto of the model (all tensors inline), e.g. for onnx.checker or a runtime."""
    try:
        return Builder(model).proto()
    except GraphwrightError as e:
        raise e if isinstance(e, ModelSaveError) else ModelSaveError(str(e)) from None
    except UnicodeError:
        raise ModelSaveError(_BAD_TEXT) from None


def _is_external(source: object) -> bool:
    """Whether a tensor source is external data (a mapped inline tensor is not: it was inline)."""
    return isinstance(source, ExternalTensor) and not isinstance(source, MappedTensor)


def _tensor_sources(model: Model) -> Iterator[object]:
    """The ``source`` of every tensor of the model (initializers and tensor attributes, all graphs)."""
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for value in graph.initializers:
            if value.const is not None:
                yield value.const.source
        for node in graph:
            for attr in node.attrs.values():
                if attr.kind is AttrKind.TENSOR:
                    yield attr.value.source
                elif attr.kind is AttrKind.TENSORS:
                    yield from (t.source for t in attr.value)
            stack.extend(subgraphs(node))


def _has_external_tensors(model: Model) -> bool:
    return any(_is_external(source) for source in _tensor_sources(model))


def _files_read(model: Model) -> set[Path]:
    """The files the model's tensors are still read from (its own file, its external data)."""
    found = {source.path for source in _tensor_sources(model) if isinstance(source, ExternalTensor)}
    if model.source_path is not None:
        found.add(Path(model.source_path))
    return found


def _data_location(path: Path, taken: set[Path]) -> str:
    """The external data file name for a save to ``path``: ``<name>.data`` unless a file of that
    name exists (a model already there may be reading it), then ``<name>.1.data``, ``.2``... —
    the first free one.  Never a file the model being saved reads."""
    base = data_file_name(path)
    candidates = [base] + [f"{path.name}.{i}.data" for i in range(1, 1000)]
    for name in candidates:
        candidate = path.with_name(name)
        if not os.path.lexists(candidate) and not any(same_file(candidate, f) for f in taken):
            return name
    raise ModelSaveError(f"cannot save {path}: {len(candidates)} data files named after it already exist; "
                         "remove the old ones")


def _remove_old_data(path: Path, keep: str | None, files_read: set[Path]) -> None:
    """After the new model is in place, remove the data files earlier saves to ``path`` wrote
    (``<name>.data``, ``<name>.N.data``) that it no longer reads."""
    pattern = re.compile(rf"^{re.escape(path.name)}(\.\d+)?\.data$")
    try:
        names = os.listdir(path.parent if str(path.parent) else ".")
    except OSError:
        return
    for name in names:
        old = path.with_name(name)
        if name == keep or not pattern.match(name) or any(same_file(old, f) for f in files_read):
            continue
        if files.on_step is not None:
            files.on_step(f"remove {name}")
        with contextlib.suppress(OSError):
            os.unlink(old)


class _Blobs:
    """The serialized small pieces of a model and the sizes of the whole and of its graph."""

    __slots__ = ("head", "graph_head", "graph_tail", "tail", "graph_size", "total")

    def __init__(self, parts: ModelParts) -> None:
        self.head = parts.head.SerializeToString()
        self.graph_head = parts.graph_head.SerializeToString()
        self.graph_tail = parts.graph_tail.SerializeToString()
        self.tail = parts.tail.SerializeToString()
        graph = len(self.graph_head) + len(self.graph_tail)
        for entry in parts.entries:
            n = entry.size()
            graph += 1 + varint_len(n) + n
        self.graph_size = graph
        self.total = len(self.head) + 1 + varint_len(graph) + graph + len(self.tail)


def _write_parts(parts: ModelParts, blobs: _Blobs, out: BinaryIO) -> None:
    """Serialize the model into ``out``; the bytes equal ``SerializeToString`` of the whole proto."""
    start = out.tell()
    out.write(blobs.head)
    out.write(len_field_header(_GRAPH_FIELD, blobs.graph_size))
    out.write(blobs.graph_head)
    for entry in parts.entries:
        out.write(len_field_header(_INITIALIZER_FIELD, entry.size()))
        entry.write(out)
    out.write(blobs.graph_tail)
    out.write(blobs.tail)
    written = out.tell() - start
    if written != blobs.total:  # entries check their own sizes; this guards the framing
        raise ModelSaveError(f"internal size mismatch while writing the model ({written} != {blobs.total} bytes)")


def _write_external(parts: ModelParts, out: BinaryIO) -> None:
    position = 0
    for item in parts.external:
        while position < item.offset:
            pad = min(item.offset - position, len(_CHUNK_PAD))
            out.write(_CHUNK_PAD[:pad])
            position += pad
        buffer = tensor_buffer(item.tensor, item.name)
        length = buffer_len(buffer)
        if length != item.length:
            raise ModelSaveError(
                f"tensor {item.name!r}: its data has {length} bytes but its shape and element type need {item.length}"
            )
        write_buffer(out, buffer)
        position += length


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())
