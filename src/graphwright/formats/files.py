"""Model files on disk: atomic writes and bounded reads.

Shared by the format writers, and public for the layers above that write or read
model-sized files (``runtime.ModelSource``, ``calibrate``).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import ModelLoadError, ModelSaveError

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_chunks", "read_bytes", "same_file", "refuse_overwrite",
           "remove_stale_temporaries"]


#: Temporary files of a save: ``.<target name>.gw-<pid>-<random>.tmp`` beside the target.
_TMP = re.compile(r"^\..+\.gw-(\d+)-[A-Za-z0-9_]+\.tmp$")

#: Called with a step name just before each change a save makes to the directory
#: (``"rename <file name>"``, ``"remove <file name>"``).  Tests set it to kill the process at
#: that point; ``None`` in normal use.
on_step: Callable[[str], None] | None = None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    If the body raises, ``path`` is untouched and the temporary file is removed: a model file is
    never left half-written.  The temporary name (``.<name>.gw-<pid>-<random>.tmp``) says whose
    it is: if the process is killed, the next save into that directory removes it
    (:func:`remove_stale_temporaries`).
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise ModelSaveError(f"cannot write {target}: directory {directory} does not exist")
    remove_stale_temporaries(directory)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.gw-{os.getpid()}-", suffix=".tmp", dir=directory)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        if on_step is not None:
            on_step(f"rename {target.name}")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def remove_stale_temporaries(directory: Path) -> int:
    """Remove the temporary files of saves into ``directory`` whose process is gone (killed
    mid-save); a save still running in another process keeps its file.  O(files in directory)."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        found = _TMP.match(name)
        if found is None or _alive(int(found.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(directory / name)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same inode when both exist (symbolic and hard links,
    directory links, ``./`` prefixes), else the same fully resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def refuse_overwrite(target: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None]) -> None:
    """Raise :class:`ModelSaveError` when ``target`` is one of the files the model was read from."""
    for source in inputs:
        if source is not None and same_file(source, target):
            same = "" if os.path.abspath(source) == os.path.abspath(target) else f" (it is the same file as {source})"
            raise ModelSaveError(f"refusing to overwrite the input {target}{same}; write to another path")


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
