"""Whether the interpreter runs its hot loops compiled.

With numba installed (``pip install 'graphwright[fast]'``) the requantization of
every convolution and fully connected layer and the whole depthwise convolution
run as compiled loops (:mod:`._jit_kernels`): one pass over the data instead of
the ~8 numpy passes of the floating-point requantization, same integers.  The
choice is the interpreter's ``jit`` option: None (the Python API's default) =
compiled when numba is installed and loads, True = compiled or a clear error,
False = numpy alone.  The command line runs a model once, and importing numba and
loading the compiled loops (~0.7 s) costs more than they save on one inference
(~4 ms on MobileNetV2), so it uses numpy unless given ``--jit``.  Both paths are
tested bit-exact against LiteRT's reference kernels.
"""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

from ...errors import VerificationError

__all__ = ["available", "kernels", "wanted"]


def available() -> bool:
    """numba is importable (checked without importing it)."""
    return importlib.util.find_spec("numba") is not None


def wanted(requested: bool | None) -> bool:
    """Resolve an interpreter's ``jit`` option: None = compiled when numba is installed
    and loads; True = compiled or a clear error; False = numpy."""
    if requested is not None and not isinstance(requested, bool):
        raise VerificationError(f"jit must be True, False or None (automatic), not {requested!r}")
    if requested is False:
        return False
    if requested is None:
        return available() and _import_error() is None
    if not available():
        raise VerificationError("jit needs numba: pip install 'graphwright[fast]'")
    problem = _import_error()
    if problem is not None:
        raise VerificationError(f"jit: numba is installed but does not load ({problem}); "
                                f"reinstall it, or run without jit")
    return True


@functools.cache
def _import_error() -> str | None:
    """Why the compiled kernels cannot be imported (a numba built for another numpy,
    a broken llvmlite), or None; asked once per process."""
    try:
        kernels()
    except Exception as e:  # numba raises ImportError, but also its own errors from native code
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


@functools.cache
def kernels() -> ModuleType:
    """The compiled kernels (imports numba on first use; kernels call this on every run,
    so the import statement's lookup is paid once)."""
    from . import _jit_kernels  # lazy: numba is optional and slow to import

    return _jit_kernels
