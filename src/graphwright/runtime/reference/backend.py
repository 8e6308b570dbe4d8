"""The ``reference`` runtime backend: :class:`Interpreter` behind the Backend interface.

Options: ``rounding`` (``"double"`` default, or ``"single"``), ``jit`` (compiled
loops: None = when numba is installed, see :mod:`.jit`) and ``flavor`` (``"litert"``
default, or ``"tflm"``: TFLite Micro's kernels, see :mod:`.interpreter`).  The model bytes
are read by graphwright's TFLite reader, which validates indices and buffer
bounds, so no native code touches the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...formats.tflite import read_model
from ..base import Backend, InputSpec, ModelSource, Session
from .interpreter import Interpreter

__all__ = ["ReferenceBackend", "ReferenceSession"]


class ReferenceBackend(Backend):
    name = "reference"
    formats = ("tflite",)
    install_hint = "nothing (it is part of graphwright)"
    option_names = frozenset({"flavor", "jit", "rounding"})

    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        self.check_options(options)
        model = read_model(source.data, source.label)
        interpreter = Interpreter(model, rounding=str(options.get("rounding", "double")), jit=_flag(options.get("jit")),
                                  flavor=str(options.get("flavor", "litert")))
        return ReferenceSession(interpreter, source.label)


class ReferenceSession(Session):
    __slots__ = ("inputs", "interpreter", "label", "outputs")

    def __init__(self, interpreter: Interpreter, label: str) -> None:
        self.interpreter = interpreter
        self.interpreter.label = label
        self.label = label
        self.inputs: list[InputSpec] = list(interpreter.inputs)
        self.outputs: list[str] = list(interpreter.outputs)

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return self.interpreter.run(feeds, outputs)


def _flag(value: Any) -> bool | None:
    """A boolean option as given in Python or as text (``true``/``false``); anything
    else is passed on for the interpreter to refuse."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value  # type: ignore[no-any-return]
