"""ONNX external data: safe resolution of ``location`` and lazy, memory-mapped reads.

An external tensor names a file (``location``, relative to the model's
directory) and a byte range.  A hostile model can point that at anything, so
every location is validated *before any byte is read*: no absolute path, no
``..``, no symbolic link on the way, no hard-linked file (``st_nlink > 1``),
the file must exist inside the model's directory and the range must lie
inside the file.  The check is repeated when the bytes are finally mapped
(with ``O_NOFOLLOW`` and an inode comparison), so swapping the file between
load and read is caught too.

Reads are lazy: :class:`ExternalTensor` is the ``source`` of the IR tensor and
its loader memory-maps only the tensor's range on the first ``numpy()`` call.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx

from ...errors import ModelLoadError
from ...ir import DType, Tensor
from .dtypes import dtype_from_onnx, storage_nbytes

__all__ = ["ExternalTensor", "ExternalDataResolver", "Region", "read_region"]




class ExternalTensor:
    """The ``source`` of a tensor stored in an external file: its proto and validated byte range."""

    __slots__ = ("proto", "path", "offset", "length", "_identity")

    def __init__(
        self, proto: onnx.TensorProto, path: Path, offset: int, length: int, identity: tuple[int, int]
    ) -> None:
        self.proto = proto
        self.path = path
        self.offset = offset
        self.length = length
        self._identity = identity  # (st_dev, st_ino) seen at validation

    def __repr__(self) -> str:
        return f"ExternalTensor({self.proto.name!r}, {self.path.name}, offset={self.offset}, length={self.length})"

    def read_windows(self, starts: Sequence[int], width: int) -> list[bytes]:
        """Bytes ``[s, s + width)`` of the tensor's data for each start, by ``os.pread``: nothing is
        mapped, so sampling a weight (``Tensor.fingerprint``'s windows) leaves it out of this
        process's memory — through a map, the kernel's fault-around pages in 64 KiB per window."""
        with _open_checked(self) as f:
            return [os.pread(f.fileno(), max(0, min(width, self.length - s)), self.offset + s) for s in starts]


class ExternalDataResolver:
    """Validates external locations of one model (each file is checked once) and makes lazy tensors."""

    __slots__ = ("base_dir", "_real_base", "_files")

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self._real_base: Path | None = None
        self._files: dict[str, tuple[Path, os.stat_result]] = {}

    def tensor(self, proto: onnx.TensorProto, dtype: DType, dims: tuple[int, ...]) -> Tensor:
        """A lazy tensor for an external ``proto``; raises ModelLoadError if its location is unsafe."""
        name = proto.name
        entries: dict[str, str] = {}
        for entry in proto.external_data:
            if entry.key in entries:
                raise ModelLoadError(f"tensor {name!r}: external_data key {entry.key!r} appears twice")
            entries[entry.key] = entry.value
        location = entries.get("location", "")
        path, st = self._validate_file(name, location)
        offset = _parse_int(name, "offset", entries.get("offset", "0"))
        size = int(np.prod(dims, dtype=np.int64)) if dims else 1
        expected = storage_nbytes(dtype, size)
        if "length" in entries:
            length = _parse_int(name, "length", entries["length"])
        elif expected is not None:
            length = expected
        else:
            length = max(st.st_size - offset, 0)
        if expected is not None and length != expected:
            raise ModelLoadError(
                f"tensor {name!r}: external data length {length} does not match its shape "
                f"{list(dims)} of {dtype.value} ({expected} bytes); the model is corrupt"
            )
        if offset + length > st.st_size:
            raise ModelLoadError(
                f"tensor {name!r}: external data range {offset}..{offset + length} runs past the end of "
                f"{location!r} ({st.st_size} bytes); the data file is truncated or does not belong to this model"
            )
        source = ExternalTensor(proto, path, offset, length, (st.st_dev, st.st_ino))
        return Tensor(dtype, dims, loader=partial(_load, source, dtype, dims), source=source, name=name)

    def _validate_file(self, tensor: str, location: str) -> tuple[Path, os.stat_result]:
        known = self._files.get(location)
        if known is not None:
            return known
        if self.base_dir is None:
            raise ModelLoadError(
                f"tensor {tensor!r} keeps its data in external file {location!r} but the model was not "
                "read from a file; pass base_dir (the model's directory) to from_proto"
            )
        if self._real_base is None:
            self._real_base = Path(os.path.realpath(self.base_dir))
        path, st = check_location(self.base_dir, self._real_base, tensor, location)
        self._files[location] = (path, st)
        return path, st


def check_location(base_dir: Path, real_base: Path, tensor: str, location: str) -> tuple[Path, os.stat_result]:
    """Validate ``location`` against ``base_dir`` without opening anything; returns (path, lstat)."""
    def refuse(why: str) -> ModelLoadError:
        return ModelLoadError(f"tensor {tensor!r}: refusing external data location {location!r}: {why}")

    if not location:
        raise refuse("it is empty")
    if "\0" in location:
        raise refuse("it contains a NUL byte")
    drive = len(location) > 1 and location[0].isalpha() and location[1] == ":"  # C:\\ on Windows
    if os.path.isabs(location) or location.startswith(("/", "\\")) or drive:
        raise refuse("absolute paths are not allowed; the file must sit beside the model")
    parts = location.replace("\\", "/").split("/")
    if any(part == ".." for part in parts):
        raise refuse("'..' components are not allowed; the file must sit beside the model")
    path = base_dir
    st: os.stat_result | None = None
    for part in parts:
        if part in ("", "."):
            continue
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise refuse(f"{path} does not exist") from None
        except OSError as e:
            raise refuse(f"cannot inspect {path}: {e.strerror or e}") from None
        if stat.S_ISLNK(st.st_mode):
            raise refuse(f"{path} is a symbolic link")
    if st is None:
        raise refuse("it names the model's directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise refuse(f"{path} is not a regular file")
    if st.st_nlink > 1:
        raise refuse(f"{path} has {st.st_nlink} hard links; copy the file instead of linking it")
    real = Path(os.path.realpath(path))
    if real != real_base and real_base not in real.parents:
        raise refuse(f"{path} resolves outside the model's directory")
    return path, st


def _open_checked(source: ExternalTensor) -> BinaryIO:
    """The tensor's file, opened without following links and re-validated (same inode, range inside)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    name = source.proto.name
    try:
        fd = os.open(source.path, flags)
    except OSError as e:
        raise ModelLoadError(f"tensor {name!r}: cannot open external data {source.path}: {e.strerror or e}") from None
    f = os.fdopen(fd, "rb")
    st = os.fstat(f.fileno())
    if (st.st_dev, st.st_ino) != source._identity or st.st_nlink > 1 or not stat.S_ISREG(st.st_mode):
        f.close()
        raise ModelLoadError(
            f"tensor {name!r}: external data file {source.path} was replaced after the model was loaded; reload it"
        )
    if source.offset + source.length > st.st_size:
        f.close()
        raise ModelLoadError(
            f"tensor {name!r}: external data file {source.path} shrank after the model was loaded; reload it"
        )
    return f


def read_region(source: ExternalTensor) -> np.ndarray:
    """The tensor's bytes as a read-only uint8 memory map, re-validating the file first."""
    if source.length == 0:
        return np.zeros(0, dtype=np.uint8)
    with _open_checked(source) as f:
        return np.memmap(f, dtype=np.uint8, mode="r", offset=source.offset, shape=(source.length,))


class Region:
    """A tensor's byte range in its file, copied out by :meth:`write_to` in chunks of ``os.pread``.

    What the writer streams for a tensor whose bytes nothing has read: unlike the memory map of
    :func:`read_region`, the copied pages never become resident in this process, so saving a
    model adds one chunk to its peak memory instead of its largest untouched weight (49 MB of
    Faster R-CNN's 72 MB file).  The file is re-validated as for :func:`read_region`.
    """

    __slots__ = ("source", "nbytes")

    #: Bytes per read.
    CHUNK = 1 << 20

    def __init__(self, source: ExternalTensor) -> None:
        self.source = source
        self.nbytes = source.length

    def write_to(self, out: BinaryIO) -> None:
        if self.nbytes == 0:
            return
        with _open_checked(self.source) as f:
            position, end = self.source.offset, self.source.offset + self.nbytes
            while position < end:
                chunk = os.pread(f.fileno(), min(self.CHUNK, end - position), position)
                if not chunk:
                    raise ModelLoadError(f"tensor {self.source.proto.name!r}: external data file "
                                         f"{self.source.path} shrank while it was read; reload it")
                out.write(chunk)
                position += len(chunk)

    def __bytes__(self) -> bytes:
        return read_region(self.source).tobytes()


def _load(source: ExternalTensor, dtype: DType, dims: tuple[int, ...]) -> np.ndarray:
    region = read_region(source)
    np_type = dtype.numpy
    if np_type is not None and dtype is not DType.STRING:
        array = region.view(np_type.newbyteorder("<"))
        return array if np_type.isnative else array.astype(np_type)
    # bfloat16, float8, int4...: let onnx decode the raw bytes (ml_dtypes arrays).
    proto = onnx.TensorProto(dims=dims, data_type=source.proto.data_type, raw_data=region.tobytes())
    try:
        return onnx.numpy_helper.to_array(proto)
    except (ValueError, TypeError, KeyError) as e:
        code = source.proto.data_type
        raise ModelLoadError(
            f"tensor {source.proto.name!r}: cannot decode element type {code} ({dtype_from_onnx(code).value}): {e}"
        ) from None


def _parse_int(tensor: str, key: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ModelLoadError(f"tensor {tensor!r}: external data {key} {text!r} is not an integer") from None
    if value < 0:
        raise ModelLoadError(f"tensor {tensor!r}: external data {key} {value} is negative")
    return value
