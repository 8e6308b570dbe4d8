"""Memory-mapped loading of ``.onnx`` files: inline weights are read in place, never copied.

``parse_model`` needs the whole file in memory and copies every ``raw_data``
field into the parsed message, and each ``raw_data`` access copies it once
more: a model is held two to three times over while it is read.  Here the file
is memory-mapped instead and walked at the wire level (only field headers are
touched, never weight bytes).  Every ``raw_data`` of a top-level initializer of
at least :data:`MAP_MIN_BYTES` bytes is cut out of a small copy of the message
and remembered as a byte range of the file; that copy is parsed as usual and
each cut tensor gets a :class:`MappedTensor` source, read lazily as a
read-only memory map (like external data, see ``external.py``).  The writer
copies such a tensor from the file around its header fields (``external.Region``:
``os.pread`` in chunks, so saving maps nothing), and a round trip gives the same bytes.

Anything unusual (a repeated ``raw_data`` field, external or typed data beside
it, a file that is not a clean protobuf) keeps that tensor, or the whole file,
on the ordinary path.  Cost: O(fields outside weights) Python work; memory:
the file's pages that transforms actually read (page cache, not heap).
"""

from __future__ import annotations

import mmap
import os
import stat
from functools import partial
from pathlib import Path

import onnx

from ...errors import ModelLoadError
from ...ir import DType, Model, Tensor
from .dtypes import storage_nbytes
from .external import ExternalTensor, _load
from .reader import from_proto_with_regions, parse_model
from .tensors import tensor_header
from .wire import WIRE_LEN, varint

__all__ = ["MappedTensor", "load_mapped", "MAP_MIN_BYTES"]

#: Inline ``raw_data`` fields at least this large are mapped instead of parsed.
MAP_MIN_BYTES = 4096
_MODEL_GRAPH, _GRAPH_INIT, _RAW_DATA = 7, 5, 9
_T_DATA_TYPE, _T_EXTERNAL, _T_LOCATION = 2, 13, 14
_WIRE_VARINT, _WIRE_I64, _WIRE_I32 = 0, 1, 5


class MappedTensor(ExternalTensor):
    """Source of an inline tensor whose ``raw_data`` stays in the model file (``proto`` lacks it).

    A subclass of :class:`ExternalTensor` only to share the validated lazy
    read (:func:`~.external.read_region`); the writer emits it inline.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"MappedTensor({self.proto.name!r}, {self.path.name}, offset={self.offset}, length={self.length})"


class _NotClean(Exception):
    """The bytes do not follow the simple wire layout this module handles; use the ordinary reader."""


def _varint(buf: mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _NotClean
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: mmap.mmap, pos: int, end: int):  # type: ignore[no-untyped-def]
    """(number, wire type, field start, payload start, payload end) of each field in ``buf[pos:end]``."""
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            _, stop = _varint(buf, pos, end)
        elif wire == _WIRE_I64:
            stop = pos + 8
        elif wire == _WIRE_I32:
            stop = pos + 4
        elif wire == WIRE_LEN:
            length, pos = _varint(buf, pos, end)
            stop = pos + length
        else:  # groups are not used by ONNX
            raise _NotClean
        if stop > end or number == 0:
            raise _NotClean
        yield number, wire, start, pos, stop
        pos = stop


def _tensor(buf: mmap.mmap, pos: int, end: int) -> tuple[bytes, tuple[int, int] | None]:
    """The TensorProto at ``buf[pos:end]`` without its raw_data, and where that data lies."""
    fields = list(_fields(buf, pos, end))
    raws = [f for f in fields if f[0] == _RAW_DATA]
    if (len(raws) != 1 or raws[0][1] != WIRE_LEN or raws[0][4] - raws[0][3] < MAP_MIN_BYTES
            or any(f[0] in (_T_EXTERNAL, _T_LOCATION) for f in fields)):
        return bytes(buf[pos:end]), None
    _, _, start, data_start, data_end = raws[0]
    return bytes(buf[pos:start]) + bytes(buf[data_end:end]), (data_start, data_end - data_start)


def _strip(buf: mmap.mmap) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The model's bytes with large top-level initializer data cut out, and the cut ranges in order."""
    out = bytearray()
    regions: list[tuple[int, int] | None] = []
    graphs = 0
    for number, wire, start, pos, stop in _fields(buf, 0, len(buf)):
        if number != _MODEL_GRAPH or wire != WIRE_LEN:
            out += buf[start:stop]
            continue
        graphs += 1
        graph = bytearray()
        for g_number, g_wire, g_start, g_pos, g_stop in _fields(buf, pos, stop):
            if g_number == _GRAPH_INIT and g_wire == WIRE_LEN:
                body, region = _tensor(buf, g_pos, g_stop)
                graph += varint(_GRAPH_INIT << 3 | WIRE_LEN) + varint(len(body)) + body
                regions.append(region)
            else:
                graph += buf[g_start:g_stop]
        out += varint(_MODEL_GRAPH << 3 | WIRE_LEN) + varint(len(graph)) + graph
    if graphs != 1:  # several graph fields merge when parsed: leave that to protobuf
        raise _NotClean
    return bytes(out), regions


def load_mapped(path: Path | str) -> Model | None:
    """The model at ``path`` with large inline weights memory-mapped, or None to use the ordinary reader.

    None is returned for files this fast path does not handle (empty, not
    plain protobuf, hard-linked, no large inline weights); the ordinary
    :func:`~graphwright.formats.load` then reads them and reports any error.
    """
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[0] != 0x08:  # ONNX models start with ir_version
                return None
            try:
                stripped, regions = _strip(buf)
            except _NotClean:
                return None
    if not any(regions):
        return None
    proto = parse_model(stripped, str(path))
    identity = (st.st_dev, st.st_ino)

    def mapped(tp: onnx.TensorProto, region: tuple[int, int]) -> Tensor:
        dtype, dims, count = tensor_header(tp)
        offset, length = region
        expected = storage_nbytes(dtype, count)
        if dtype is DType.STRING:
            raise ModelLoadError(f"tensor {tp.name!r}: a string tensor cannot hold raw_data; the model is corrupt")
        if expected is not None and expected != length:
            raise ModelLoadError(
                f"tensor {tp.name!r}: raw_data holds {length} bytes but shape {list(dims)} of "
                f"{dtype.value} needs {expected}; the model is corrupt"
            )
        source = MappedTensor(tp, path, offset, length, identity)
        return Tensor(dtype, dims, loader=partial(_load, source, dtype, dims), source=source, name=tp.name)

    try:
        model = from_proto_with_regions(proto, path.parent, regions, mapped)
    except ModelLoadError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    model.source_path = path
    return model

