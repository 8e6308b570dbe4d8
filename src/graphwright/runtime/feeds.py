"""Model inputs: seeded random arrays, or the user's ``.npy``/``.npz`` files.

Used by :func:`~graphwright.runtime.execute` for inputs nobody fed, and
re-exported by :mod:`graphwright.verify` (its comparisons feed both models these).

Random feeds are deterministic per input *name*: the generator of an input is
seeded from ``(seed, sha256(name))``, so adding, removing or reordering other
inputs never changes its values.  Floats are N(0, 1); integer inputs are drawn
from ``[0, 10)`` (they are usually indices or ids); int8/uint8 (quantized
activations) span their whole range; bools are fair coin flips.  Dims that are
unknown (``None``) or symbolic (``"N"``) become 1 unless ``dim_values`` names
them: by symbol (``{"N": 4}``) or by ``"input:axis"`` (``{"x:0": 4}``).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import VerificationError
from ..ir import DType
from .base import InputSpec, check_feed

__all__ = ["DEFAULT_DIM", "INT_HIGH", "load_feeds", "random_array", "random_feeds"]

#: Exclusive upper bound of random values for integer inputs wider than 8 bits.
INT_HIGH = 10
#: Size given to unknown or symbolic dims nobody named.
DEFAULT_DIM = 1
_FULL_RANGE = (DType.INT8, DType.UINT8, DType.QINT8, DType.QUINT8)


def _rng(seed: int, name: str) -> np.random.Generator:
    if seed < 0:
        raise VerificationError(f"seed must be a non-negative integer, not {seed}")
    # a TFLite name that is not UTF-8 is read with surrogate escapes: hash its original bytes
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()
    return np.random.default_rng([int(seed), *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def _concrete_shape(spec: InputSpec, dim_values: Mapping[str, int]) -> tuple[int, ...]:
    if spec.shape is None:
        raise VerificationError(
            f"input {spec.name!r} has an unknown rank; give its value from a file (NAME=FILE.npy)"
        )
    dims: list[int] = []
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int) and dim >= 0:
            dims.append(dim)
            continue
        key = f"{spec.name}:{axis}"
        size = dim_values.get(key, dim_values.get(dim, DEFAULT_DIM) if isinstance(dim, str) else DEFAULT_DIM)
        if not isinstance(size, (int, np.integer)) or size < 0:
            raise VerificationError(f"size for dim {dim or key!r} of input {spec.name!r} must be a non-negative int")
        dims.append(int(size))
    return tuple(dims)


def random_array(spec: InputSpec, *, seed: int = 0, dim_values: Mapping[str, int] | None = None) -> np.ndarray:
    """One seeded random array for ``spec`` (see the module docstring for the distributions)."""
    shape = _concrete_shape(spec, dim_values or {})
    rng = _rng(seed, spec.name)
    dtype = spec.dtype
    np_type = dtype.numpy
    if np_type is None or dtype is DType.STRING:
        raise VerificationError(
            f"cannot make random values for input {spec.name!r} of type {dtype.value}; "
            "give its value from a file (NAME=FILE.npy)"
        )
    if dtype.is_float:
        return rng.standard_normal(shape).astype(np_type)
    if dtype in (DType.COMPLEX64, DType.COMPLEX128):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np_type)
    if dtype is DType.BOOL:
        return rng.random(shape) < 0.5
    if dtype in _FULL_RANGE:
        info = np.iinfo(np_type)
        return rng.integers(info.min, int(info.max) + 1, size=shape, dtype=np_type)
    return rng.integers(0, INT_HIGH, size=shape, dtype=np_type)


def random_feeds(
    specs: Iterable[InputSpec],
    seed: int = 0,
    dim_values: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Seeded random arrays for every input in ``specs``, keyed by input name."""
    return {spec.name: random_array(spec, seed=seed, dim_values=dim_values) for spec in specs}


def load_feeds(
    items: Sequence[str | os.PathLike[str]],
    specs: Sequence[InputSpec] | None = None,
) -> dict[str, np.ndarray]:
    """Read user inputs: ``"NAME=FILE.npy"`` (one input) or ``"FILE.npz"`` (arrays named by input).

    Files are read with ``allow_pickle=False``.  With ``specs``, names must be
    model inputs and arrays must fit their dtype and shape.  Every problem is a
    one-line :class:`VerificationError` naming the input and the file.
    """
    feeds: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for item in items:
        for name, array, where in _read_item(os.fspath(item)):
            if name in feeds:
                raise VerificationError(f"input {name!r} is given twice ({origin[name]} and {where})")
            feeds[name] = array
            origin[name] = where
    if specs is not None:
        by_name = {s.name: s for s in specs}
        for name, array in feeds.items():
            spec = by_name.get(name)
            if spec is None:
                known = ", ".join(repr(s.name) for s in specs) or "none"
                raise VerificationError(f"{origin[name]}: the model has no input {name!r}; its inputs are {known}")
            check_feed(spec, array, label=origin[name])
    return feeds


def _read_item(item: str) -> list[tuple[str, np.ndarray, str]]:
    name, sep, file_name = item.partition("=")
    if not sep or Path(item).is_file():
        name, file_name = "", item
    path = Path(file_name)
    if not path.is_file():
        raise VerificationError(f"input file {file_name} does not exist")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise VerificationError(f"cannot read {file_name}: {e.strerror or e}") from None
    if magic != b"\x93NUMPY" and magic[:2] != b"PK":
        raise VerificationError(f"{file_name} is not a .npy or .npz file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise VerificationError(
                f"{file_name} holds pickled Python objects, which are never loaded; save plain arrays"
            ) from None
        raise VerificationError(f"{file_name} is not a .npy/.npz file: {e}") from None
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise VerificationError(f"cannot read {file_name} as a .npy/.npz file: {e}") from None
    if isinstance(loaded, np.ndarray):
        if not name:
            raise VerificationError(f"{file_name} holds one array: write it as NAME={file_name}")
        return [(name, loaded, file_name)]
    with loaded as npz:
        if name:
            raise VerificationError(f"{file_name} is an .npz archive: pass it without NAME= (its arrays are named)")
        out = []
        for key in npz.files:
            try:
                out.append((key, npz[key], f"{file_name}[{key}]"))
            except ValueError as e:
                if "allow_pickle" in str(e):
                    raise VerificationError(
                        f"{file_name}: array {key!r} holds pickled Python objects, which are never loaded"
                    ) from None
                raise VerificationError(f"{file_name}: cannot read array {key!r}: {e}") from None
            except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
                raise VerificationError(f"{file_name}: cannot read array {key!r}: {e}") from None
        return out
