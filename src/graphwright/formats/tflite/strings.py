"""TFLite's string tensor buffer layout.

``int32 count``, then ``count + 1`` int32 byte offsets from the start of the
buffer (the last one is the buffer length), then the string bytes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["decode_string_tensor", "encode_string_tensor", "string_buffer_problem"]


def _header(data: np.ndarray) -> tuple[int, np.ndarray] | str:
    raw = np.asarray(data, dtype=np.uint8)
    if raw.size < 4:
        return f"string buffer of {raw.size} bytes has no count"
    count = int(raw[:4].view("<i4")[0])
    if count < 0 or 4 * (count + 2) > raw.size:
        return f"string buffer of {raw.size} bytes cannot hold {count} strings"
    offsets = raw[4: 4 * (count + 2)].view("<i4").astype(np.int64)
    if offsets[0] != 4 * (count + 2) or offsets[-1] != raw.size or np.any(np.diff(offsets) < 0):
        return "string buffer offsets are not increasing within the buffer"
    return count, offsets


def string_buffer_problem(data: np.ndarray, elements: int) -> str | None:
    """Why ``data`` is not a valid string buffer of ``elements`` strings (None if it is)."""
    header = _header(data)
    if isinstance(header, str):
        return header
    if header[0] != elements:
        return f"string buffer holds {header[0]} strings for {elements} elements"
    return None


def decode_string_tensor(data: np.ndarray) -> np.ndarray:
    """The strings of a buffer as a 1-D object array of ``bytes``."""
    header = _header(data)
    if isinstance(header, str):
        raise ValueError(header)  # malformed data, not a wrong argument type
    count, offsets = header
    raw = np.asarray(data, dtype=np.uint8).tobytes()
    out = np.empty(count, dtype=object)
    for i in range(count):
        out[i] = raw[offsets[i]: offsets[i + 1]]
    return out


def encode_string_tensor(values: np.ndarray) -> bytes:
    """The buffer bytes of an array of ``bytes``/``str`` (flattened in C order)."""
    items = [v.encode() if isinstance(v, str) else bytes(v) for v in np.asarray(values, dtype=object).ravel()]
    offsets = [4 * (len(items) + 2)]
    for item in items:
        offsets.append(offsets[-1] + len(item))
    head = np.asarray([len(items), *offsets], dtype="<i4").tobytes()
    return head + b"".join(items)
