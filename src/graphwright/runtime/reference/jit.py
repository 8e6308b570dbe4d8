"""Whether the interpreter runs its hot loops compiled.

With numba installed (``pip install 'graphwright[fast]'``) the requantization of
every convolution and fully connected layer and the whole depthwise convolution
run as compiled loops (:mod:`._jit_kernels`): one pass over the data instead of
the ~8 numpy passes of the floating-point requantization, same integers.  Without
numba, or with ``GRAPHWRIGHT_JIT=0`` in the environment, or ``Interpreter(...,
jit=False)``, everything runs on numpy alone; the command line, which runs a
model once, uses numpy unless ``GRAPHWRIGHT_JIT=1`` (:func:`for_single_run`).  Both paths are tested bit-exact
against LiteRT's reference kernels.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from types import ModuleType

from ...errors import VerificationError

__all__ = ["ENV", "available", "for_single_run", "kernels", "wanted"]

#: environment variable that turns the compiled loops off when set to 0
ENV = "GRAPHWRIGHT_JIT"


def available() -> bool:
    """numba is importable (checked without importing it)."""
    return importlib.util.find_spec("numba") is not None


def wanted(requested: bool | None) -> bool:
    """Resolve an interpreter's ``jit`` option: None = compiled when numba is installed,
    imports, and ``GRAPHWRIGHT_JIT`` is not 0; True = compiled or a clear error; False = numpy."""
    if requested is False:
        return False
    if requested is None:
        return os.environ.get(ENV, "1").strip() != "0" and available() and _import_error() is None
    if not available():
        raise VerificationError("jit=True needs numba: pip install 'graphwright[fast]'")
    problem = _import_error()
    if problem is not None:
        raise VerificationError(f"jit=True: numba is installed but does not load ({problem}); "
                                f"reinstall it, or run with jit=False")
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


def for_single_run() -> bool | None:
    """The ``jit`` option for a command that runs a model once (``graphwright run``,
    ``compare --layers``): numpy, unless ``GRAPHWRIGHT_JIT=1`` asks for the compiled
    loops — importing numba and loading them takes ~0.7 s, more than they save on
    one inference (~4 ms on MobileNetV2); they pay from a few hundred runs on."""
    return None if os.environ.get(ENV, "").strip() == "1" else False


def kernels() -> ModuleType:
    """The compiled kernels (imports numba on first use)."""
    from . import _jit_kernels

    return _jit_kernels
