"""Model files on disk: atomic writes and bounded reads.

Shared by the format writers, and public for the layers above that write or read
model-sized files (``runtime.ModelSource``, ``calibrate``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import ModelLoadError, ModelSaveError

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_chunks", "read_bytes"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    If the body raises (or the process dies) ``path`` is untouched and the
    temporary file is removed: a model file is never left half-written.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise ModelSaveError(f"cannot write {target}: directory {directory} does not exist")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_chunks(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> None:
    """Stream ``chunks`` to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            f.writelines(chunks)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise ModelSaveError(f"cannot write {path}: {e.strerror or e}") from None


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename)."""
    atomic_write_chunks(path, (data,))


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Read a whole model file, turning OS errors into one-line :class:`ModelLoadError`."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ModelLoadError(f"{p} is a directory, not a model file")
        return p.read_bytes()
    except FileNotFoundError:
        raise ModelLoadError(f"{p}: no such file") from None
    except OSError as e:
        raise ModelLoadError(f"cannot read {p}: {e.strerror or e}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
