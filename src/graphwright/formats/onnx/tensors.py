"""TensorProto <-> IR :class:`Tensor`: lazy decoding on read, copy-free entries on write.

Reading never copies data: an inline tensor's loader decodes ``raw_data``
(``np.frombuffer``) or the typed fields (``onnx.numpy_helper``) on the first
``numpy()`` call; ``source`` is the TensorProto itself.

Writing goes through :class:`TensorEntry`: either the unchanged source proto
(serialized as it is) or a small header proto plus a buffer that is written
straight into the output stream as the ``raw_data`` field, so a tensor's bytes
are never duplicated in memory to save it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import numpy_helper

from ...errors import ModelLoadError, ModelSaveError
from ...ir import DType, Tensor
from .dtypes import dtype_from_onnx, onnx_code, storage_nbytes
from .external import ExternalDataResolver, ExternalTensor, Region
from .text import check_tensor_text, not_text
from .wire import copy_fields, len_field_header, varint_len

__all__ = [
    "read_tensor", "read_sparse_tensor", "TensorEntry", "ProtoEntry", "RawEntry",
    "tensor_buffer", "buffer_len", "write_buffer", "expected_nbytes", "DATA_FIELDS", "EXTERNAL",
    "MAX_ELEMENTS", "tensor_header", "check_inline",
]

#: ``TensorProto.data_location`` value of external tensors.
EXTERNAL = onnx.TensorProto.EXTERNAL
_RAW_DATA = 9
#: Fields of TensorProto that hold (or locate) the data itself.
DATA_FIELDS = frozenset({3, 4, 5, 6, 7, 9, 10, 11, 13, 14})
_LITTLE = sys.byteorder == "little"


# -- reading -------------------------------------------------------------------

#: Larger element counts are refused when reading (as the GraphDef reader does).
MAX_ELEMENTS = 1 << 40
# TensorProto.data_type -> (typed field holding the values, stored values per element; 0: two per value)
_TYPED_FIELDS: dict[int, tuple[str, int]] = {
    1: ("float_data", 1), 14: ("float_data", 2), 7: ("int64_data", 1), 8: ("string_data", 1),
    11: ("double_data", 1), 15: ("double_data", 2), 12: ("uint64_data", 1), 13: ("uint64_data", 1),
    **{code: ("int32_data", 1) for code in (2, 3, 4, 5, 6, 9, 10, 16, 17, 18, 19, 20)},
    **{code: ("int32_data", 0) for code in (21, 22, 23)},  # 4-bit types: two per int32
}


def tensor_header(proto: onnx.TensorProto, what: str = "tensor") -> tuple[DType, tuple[int, ...], int]:
    """(dtype, dims, element count) of ``proto``, refusing a name that is not UTF-8, negative
    dimensions and sizes over :data:`MAX_ELEMENTS` (exact Python integers: no overflow)."""
    name = proto.name
    if name.__class__ is not str:
        raise not_text(f"{what} name", name)
    dims = tuple(proto.dims)
    count = math.prod(dims)
    if dims and min(dims) < 0:
        raise ModelLoadError(f"{what} {name!r} has a negative dimension in {list(dims)}")
    if count > MAX_ELEMENTS or (count == 0 and dims):  # a zero hides the size of the others
        if math.prod(max(d, 1) for d in dims) > MAX_ELEMENTS:
            raise ModelLoadError(
                f"{what} {name!r}: shape {list(dims)} is larger than any real tensor "
                f"(over 2**40 elements); the model is corrupt"
            )
    return dtype_from_onnx(proto.data_type), dims, count


def check_inline(proto: onnx.TensorProto, dtype: DType, dims: tuple[int, ...], count: int,
                 what: str = "tensor") -> None:
    """Refuse inline data whose size does not match the shape (raw bytes or typed values).

    Reads ``len(raw_data)`` (one copy of the bytes, freed at once) so that a short or long
    tensor fails when the model is loaded, not later in whatever first uses it."""
    if proto.HasField("raw_data") and dtype is not DType.STRING:
        expected = storage_nbytes(dtype, count)
        if expected is not None:
            length = len(proto.raw_data)
            if length != expected:
                raise ModelLoadError(
                    f"{what} {proto.name!r}: raw_data holds {length} bytes but shape {list(dims)} of "
                    f"{dtype.value} needs {expected}; the model is corrupt"
                )
        return
    spec = _TYPED_FIELDS.get(proto.data_type)
    if spec is None:
        return  # an element type graphwright does not model: carried through unchecked
    field, per = spec
    stored = len(getattr(proto, field))
    needed = count * per if per else (count + 1) // 2
    if stored != needed:
        raise ModelLoadError(
            f"{what} {proto.name!r} stores {stored} values in {field} but shape {list(dims)} of "
            f"{dtype.value} needs {needed}; the model is corrupt"
        )


def read_tensor(proto: onnx.TensorProto, resolver: ExternalDataResolver) -> Tensor:
    """A lazy IR tensor for ``proto``: sizes are validated now, values decoded on first use.

    External locations are validated now and read later."""
    dtype, dims, count = tensor_header(proto)
    if proto.data_location == EXTERNAL:
        check_tensor_text(proto)  # the external_data entries name a file
        return resolver.tensor(proto, dtype, dims)
    check_inline(proto, dtype, dims, count)
    return Tensor(dtype, dims, loader=partial(_decode_inline, proto, dtype, dims), source=proto, name=proto.name)


def read_sparse_tensor(proto: onnx.SparseTensorProto) -> Tensor:
    """A lazy dense view of a sparse initializer; ``source`` is the SparseTensorProto."""
    values = proto.values
    name = values.name
    if values.data_location == EXTERNAL or proto.indices.data_location == EXTERNAL:
        raise ModelLoadError(f"sparse tensor {name!r} keeps its values or indices in external data, "
                             "which graphwright does not read; store them inline")
    dtype, _, _ = _checked(values, "sparse tensor values")
    _checked(proto.indices, f"sparse tensor {name!r} indices")
    dims = tuple(proto.dims)
    span = 1
    for d in dims:
        if d < 0:
            raise ModelLoadError(f"sparse tensor {name!r} has a negative dimension in {list(dims)}")
        span *= max(d, 1)
    if span > MAX_ELEMENTS:
        raise ModelLoadError(f"sparse tensor {name!r}: dense shape {list(dims)} is over 2**40 elements; "
                             "the model is corrupt")
    return Tensor(dtype, dims, loader=partial(_densify, proto, dtype, dims), source=proto, name=name)


def _checked(proto: onnx.TensorProto, what: str) -> tuple[DType, tuple[int, ...], int]:
    dtype, dims, count = tensor_header(proto, what)
    check_inline(proto, dtype, dims, count, what)
    return dtype, dims, count


def _decode_inline(proto: onnx.TensorProto, dtype: DType, dims: tuple[int, ...]) -> np.ndarray:
    array = _decode_values(proto, dtype, dims)
    size = int(np.prod(dims, dtype=np.int64))
    if array.size != size:
        raise ModelLoadError(
            f"tensor {proto.name!r} holds {array.size} values but its shape {list(dims)} needs {size}; "
            "the model is corrupt"
        )
    return array.reshape(dims)


def _decode_values(proto: onnx.TensorProto, dtype: DType, dims: tuple[int, ...]) -> np.ndarray:
    np_type = dtype.numpy
    if proto.HasField("raw_data") and np_type is not None and dtype is not DType.STRING:
        raw = proto.raw_data
        expected = storage_nbytes(dtype, int(np.prod(dims, dtype=np.int64)))
        if len(raw) != expected:
            raise ModelLoadError(
                f"tensor {proto.name!r}: raw_data holds {len(raw)} bytes but shape {list(dims)} of "
                f"{dtype.value} needs {expected}; the model is corrupt"
            )
        array = np.frombuffer(raw, dtype=np_type.newbyteorder("<"))
        return array if np_type.isnative else array.astype(np_type)
    if dtype is DType.STRING:  # kept as bytes: ONNX strings need not be UTF-8
        array = np.empty(len(proto.string_data), dtype=object)
        array[:] = list(proto.string_data)
        return array
    try:
        return np.asarray(numpy_helper.to_array(proto))
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as e:
        raise ModelLoadError(f"tensor {proto.name!r} (element type {proto.data_type}) cannot be decoded: "
                             f"{type(e).__name__}: {e}") from None


def _densify(proto: onnx.SparseTensorProto, dtype: DType, dims: tuple[int, ...]) -> np.ndarray:
    name = proto.values.name
    values = _decode_inline(proto.values, dtype, tuple(proto.values.dims)).reshape(-1)
    indices = _decode_inline(proto.indices, DType.INT64, tuple(proto.indices.dims))
    try:
        dense = np.zeros(dims, dtype=values.dtype)
    except (ValueError, MemoryError):
        raise ModelLoadError(f"sparse tensor {name!r} of shape {list(dims)} is too large to densify") from None
    size = dense.size
    if indices.ndim == 1:
        if indices.size != values.size or (indices.size and (indices.min() < 0 or indices.max() >= size)):
            raise ModelLoadError(f"sparse tensor {name!r}: indices do not fit its values or shape {list(dims)}")
        dense.reshape(-1)[indices] = values
    elif indices.ndim == 2 and indices.shape == (values.size, len(dims)):
        if indices.size and ((indices < 0).any() or (indices >= np.asarray(dims)).any()):
            raise ModelLoadError(f"sparse tensor {name!r}: an index lies outside shape {list(dims)}")
        dense[tuple(indices.T)] = values
    else:
        raise ModelLoadError(f"sparse tensor {name!r}: indices of shape {list(indices.shape)} are malformed")
    return dense


# -- writing -------------------------------------------------------------------

def expected_nbytes(tensor: Tensor) -> int | None:
    """Bytes of the tensor's raw data, from dtype and shape (None when not fixed)."""
    return storage_nbytes(tensor.dtype, tensor.size)


def tensor_buffer(tensor: Tensor, name: str) -> Any:
    """The tensor's raw little-endian bytes as a buffer (a memory map or view where possible)."""
    try:
        source = tensor.source
        if isinstance(source, ExternalTensor):
            return Region(source)
        if isinstance(source, onnx.TensorProto) and source.HasField("raw_data") and source.data_location != EXTERNAL:
            return source.raw_data
        array = tensor.numpy()
        np_type = tensor.dtype.numpy
        if np_type is not None and tensor.dtype is not DType.STRING:
            array = np.ascontiguousarray(array, dtype=np_type.newbyteorder("<"))
            return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        packed = numpy_helper.from_array(np.asarray(array))
        if not packed.HasField("raw_data"):
            raise ModelSaveError(f"tensor {name!r} of {tensor.dtype.value} has no raw byte form")
        return packed.raw_data
    except ModelSaveError:
        raise
    except Exception as e:  # a tensor's loader is user code: report which tensor failed, as a save error
        raise ModelSaveError(f"cannot write tensor {name!r}: {type(e).__name__}: {e}") from e


def buffer_len(buffer: Any) -> int:
    """Length in bytes of a buffer returned by :func:`tensor_buffer`."""
    return buffer.nbytes if isinstance(buffer, (memoryview, np.ndarray, Region)) else len(buffer)


def write_buffer(out: BinaryIO, buffer: Any) -> None:
    """Write a buffer returned by :func:`tensor_buffer` (a :class:`Region` is copied in chunks)."""
    if isinstance(buffer, Region):
        buffer.write_to(out)
    else:
        out.write(buffer)


class TensorEntry:
    """One TensorProto to emit: knows its serialized size before any data is touched."""

    __slots__ = ()

    def size(self) -> int:
        raise NotImplementedError

    def write(self, out: BinaryIO) -> None:
        """Write the serialized TensorProto (exactly ``size()`` bytes)."""
        raise NotImplementedError

    def fill(self, dst: onnx.TensorProto) -> None:
        """Make ``dst`` (an empty TensorProto) this tensor."""
        raise NotImplementedError


class ProtoEntry(TensorEntry):
    """An existing proto without ``raw_data`` (typed fields, strings, external), emitted as it is."""

    __slots__ = ("proto", "_size")

    def __init__(self, proto: onnx.TensorProto) -> None:
        self.proto = proto
        self._size = proto.ByteSize()

    def size(self) -> int:
        return self._size

    def write(self, out: BinaryIO) -> None:
        out.write(self.proto.SerializeToString())

    def fill(self, dst: onnx.TensorProto) -> None:
        dst.CopyFrom(self.proto)


class RawEntry(TensorEntry):
    """Header fields plus a ``raw_data`` buffer produced on demand and streamed without a copy."""

    __slots__ = ("head", "tail", "length", "buffer", "name", "_head_bytes", "_tail_bytes")

    def __init__(
        self,
        head: onnx.TensorProto,
        tail: onnx.TensorProto,
        length: int,
        buffer: Callable[[], Any],
        name: str,
    ) -> None:
        self.head, self.tail, self.length, self.buffer, self.name = head, tail, length, buffer, name
        self._head_bytes = head.SerializeToString()
        self._tail_bytes = tail.SerializeToString()

    def size(self) -> int:
        return len(self._head_bytes) + 1 + varint_len(self.length) + self.length + len(self._tail_bytes)

    def write(self, out: BinaryIO) -> None:
        buffer = self.buffer()
        if buffer_len(buffer) != self.length:
            raise ModelSaveError(
                f"tensor {self.name!r}: its data has {buffer_len(buffer)} bytes but its shape and element "
                f"type need {self.length}; the tensor is inconsistent"
            )
        out.write(self._head_bytes)
        out.write(len_field_header(_RAW_DATA, self.length))
        write_buffer(out, buffer)
        out.write(self._tail_bytes)

    def fill(self, dst: onnx.TensorProto) -> None:
        buffer = self.buffer()
        if buffer_len(buffer) != self.length:
            raise ModelSaveError(f"tensor {self.name!r}: its data does not match its shape and element type")
        dst.MergeFrom(self.head)
        dst.raw_data = bytes(buffer)
        dst.MergeFrom(self.tail)


def split_proto(proto: onnx.TensorProto, name: str) -> tuple[onnx.TensorProto, onnx.TensorProto]:
    """(fields of ``proto`` numbered below raw_data, fields above it and unknown ones), renamed to ``name``.

    Writing head + raw_data + tail gives exactly ``proto.SerializeToString()``
    without ever serializing the data a second time.
    """
    numbers = [fd.number for fd, _ in proto.ListFields()]
    head, tail = onnx.TensorProto(), onnx.TensorProto()
    copy_fields(proto, head, skip=[n for n in numbers if n >= _RAW_DATA], unknown=False)
    copy_fields(proto, tail, skip=[n for n in numbers if n <= _RAW_DATA])
    if head.name != name:
        if name:
            head.name = name
        else:
            head.ClearField("name")
    return head, tail


def header_protos(tensor: Tensor, name: str) -> tuple[onnx.TensorProto, onnx.TensorProto]:
    """(fields numbered below raw_data, fields above it) describing ``tensor`` under ``name``.

    Metadata of the source proto (doc_string, metadata_props...) is kept; its
    data fields are not.
    """
    tail = onnx.TensorProto()
    proto = _source_proto(tensor)
    if proto is not None:
        copy_fields(proto, tail, skip=DATA_FIELDS | {1, 2, 8})
    return header_proto(tensor, name), tail


def header_proto(tensor: Tensor, name: str) -> onnx.TensorProto:
    """``tensor`` as name, element type and dims only (the source's own type code where it means the
    tensor's dtype): what shape inference reads of a large weight.  Unlike :func:`header_protos` it
    never lists the source proto's fields, which would materialize its raw data."""
    head = onnx.TensorProto()
    proto = _source_proto(tensor)
    code = proto.data_type if proto is not None and tensor.dtype is dtype_from_onnx(proto.data_type) else None
    head.dims.extend(tensor.shape)
    head.data_type = onnx_code(tensor.dtype, f"tensor {name!r}") if code is None else code
    if name:
        head.name = name
    return head


def _source_proto(tensor: Tensor) -> onnx.TensorProto | None:
    source = tensor.source
    proto = source.proto if isinstance(source, ExternalTensor) else source
    return proto if isinstance(proto, onnx.TensorProto) else None


def fresh_proto(tensor: Tensor, name: str) -> onnx.TensorProto:
    """A TensorProto for tensors with no raw byte form (strings): built from the values."""
    array = _checked_numpy(tensor, name)
    if tensor.dtype is DType.STRING:
        proto = onnx.TensorProto(dims=tensor.shape, data_type=onnx.TensorProto.STRING)
        proto.string_data.extend(x if isinstance(x, bytes) else str(x).encode() for x in array.reshape(-1))
    else:
        proto = numpy_helper.from_array(np.asarray(array))
        proto.data_type = onnx_code(tensor.dtype, f"tensor {name!r}")
    if name:
        proto.name = name
    return proto


def _checked_numpy(tensor: Tensor, name: str) -> np.ndarray:
    try:
        return tensor.numpy()
    except Exception as e:  # a tensor's loader is user code: report which tensor failed, as a save error
        raise ModelSaveError(f"cannot write tensor {name!r}: {type(e).__name__}: {e}") from e
