"""ONNX text fields (names, op types, domains, doc strings, metadata) must be UTF-8.

``onnx.proto`` is proto2, so protobuf does not validate ``string`` fields when
parsing: the Python runtime hands back a field that is not valid UTF-8 as
``bytes`` instead of ``str``.  Such a model is refused at load, with one line
naming the field.  The alternatives are worse: decoding with replacement
characters makes two different names equal (silently merging two values) and
cannot write the original bytes back; keeping ``bytes`` breaks every consumer of
a name.  (onnx's checker and onnxruntime do not look at the encoding; protobuf's
own proto3 parsers refuse it.)

The reader checks the fields it reads on its hot path itself (node and value
names, in one ``str.join`` per list); :func:`check_message` walks the rarer
parts (model fields, functions, shells of unmodeled fields, type protos,
annotations).  TensorProto data is never touched here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import ModelLoadError
from .wire import _is_repeated

__all__ = ["check_message", "check_strings", "check_tensor_text", "not_text"]

_TYPE_STRING = 9  # FieldDescriptor.TYPE_STRING
_TYPE_MESSAGE = 11  # FieldDescriptor.TYPE_MESSAGE
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def not_text(what: str, raw: Any) -> ModelLoadError:
    """The one-line error for a text field holding ``raw`` (bytes that are not UTF-8)."""
    return ModelLoadError(
        f"{what} {raw!r} is not valid UTF-8; ONNX names and strings must be UTF-8 text "
        "(the file is corrupt or was written by a broken exporter: re-export it)"
    )


def check_strings(values: Iterable[Any], what: str) -> None:
    """Refuse the first non-``str`` of ``values`` (a repeated string field)."""
    try:
        "".join(values)  # C speed; raises TypeError on the first bytes item
    except TypeError:
        bad = next(v for v in values if not isinstance(v, str))
        raise not_text(what, bad) from None


def check_tensor_text(proto: Any, what: str = "tensor") -> None:
    """The name of a TensorProto, and the ``external_data`` entries of an external one.

    Never reads the data fields (``raw_data`` would be copied).  A tensor's doc_string
    and metadata_props are carried through verbatim and never decoded, so they are not
    looked at (they cost a lookup per initializer)."""
    name = proto.name
    if name.__class__ is not str:
        raise not_text(f"{what} name", name)
    if proto.data_location == EXTERNAL:
        for entry in proto.external_data:
            if entry.key.__class__ is not str or entry.value.__class__ is not str:
                bad = entry.key if entry.key.__class__ is not str else entry.value
                raise not_text(f"{what} {name!r} external_data entry", bad)


def check_message(message: Any, what: str, skip: Iterable[int] = ()) -> None:
    """Every string field of ``message`` and its sub-messages, but the top-level fields
    numbered in ``skip`` (TensorProtos: see :func:`check_tensor_text`).

    O(fields of the message); for the small, rarely present parts of a model.  Run it
    before copying fields: protobuf refuses to set a string field to such bytes."""
    skipped = frozenset(skip)
    for fd, value in message.ListFields():
        if fd.number in skipped:
            continue
        kind = fd.type
        if kind == _TYPE_STRING:
            if _is_repeated(fd):
                check_strings(value, f"{what} {fd.name}")
            elif value.__class__ is not str:
                raise not_text(f"{what} {fd.name}", value)
        elif kind == _TYPE_MESSAGE:
            tensor = fd.message_type.name == "TensorProto"
            for item in value if _is_repeated(fd) else (value,):
                if tensor:
                    check_tensor_text(item, f"{what} {fd.name}")
                else:
                    check_message(item, what)
