"""The ``tflm`` backend: TFLite models on TensorFlow Lite Micro's interpreter (the ``[tflm]`` extra).

TFLite Micro is the microcontroller runtime: its own kernels (largely LiteRT's
reference arithmetic), static shapes, and every tensor placed in one memory
arena sized up front.  It is a second oracle beside ``litert-ref``.

* The model is read by graphwright's TFLite reader first (a corrupt file is a
  :class:`~graphwright.errors.ModelLoadError`); its subgraph-0 tensors are then
  addressed by name through their index in the file.  The interpreter keeps
  every tensor (``kPreserveAllTensors``), so any operator output can be asked for;
  resource and variant tensors (handles, which TFLM's Python wrapper cannot
  return) are left out of the result.
* Shapes are the file's static shapes (TFLM cannot resize inputs).
* The arena is sized from the model (every non-constant tensor twice, plus
  bookkeeping per tensor and operator) and doubled while TFLM reports that it
  ran out, up to ``max_arena_size`` bytes (default 1 GiB); ``arena_size`` fixes
  it instead.  TFLM does not survive every arena that is too small (some
  kernels crash on a failed allocation): run untrusted or unusual models with
  ``isolate=True``.
* A hybrid LSTM (float input, 8-bit weights) is refused: TFLM has no kernel
  for it but runs it anyway, computing NaN.
* TFLM reports its errors by printing them; they are captured and turned into
  one-line :class:`~graphwright.errors.VerificationError` messages, e.g.
  ``TFLM has no operator LSH_PROJECTION``.

:func:`supported_operators` lists the builtin operators TFLM registers;
:func:`missing_operator` reads the operator back from a refusal's message.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..formats.tflite import read_model, serialize
from ..ir import DType, Graph, Model, Node, Value
from .base import Backend, InputSpec, ModelSource, Session, check_feeds

__all__ = ["TFLMBackend", "arena_estimate", "available", "missing_operator", "supported_operators"]

#: Smallest arena tried: below a few KiB TFLM crashes while it sets itself up.
ARENA_FLOOR = 64 << 10
DEFAULT_MAX_ARENA = 1 << 30
#: Bookkeeping TFLM keeps in the arena per tensor and per operator (generous).
_PER_ENTRY = 1 << 10

_MISSING_BUILTIN = re.compile(r"Didn't find op for builtin opcode '([^']+)'")
_OUT_OF_RANGE = re.compile(r"builtin_code out of range: (\d+)")
_MISSING_CUSTOM = "Failed to get registration from op code CUSTOM"
_OUT_OF_ARENA = ("Failed to allocate", "Failed to resize buffer", "missing:")
_NO_OPERATOR = re.compile(r"TFLM has no (?:custom )?operator (\S+)")


def available() -> bool:
    """Whether TFLM's Python package (``tflite-micro``) is installed (nothing is imported)."""
    return importlib.util.find_spec("tflite_micro") is not None


def missing_operator(message: str) -> str | None:
    """The operator named by a ``TFLM has no operator X`` refusal (the first, for custom ones), else None."""
    match = _NO_OPERATOR.search(message)
    return match.group(1).rstrip(",") if match else None


def _import_runtime(backend: Backend) -> ModuleType:
    try:
        from tflite_micro.python.tflite_micro import runtime  # lazy: an optional extra, needed to run only
    except ImportError:
        raise backend.unavailable("tflite-micro") from None
    return runtime


class TFLMBackend(Backend):
    name = "tflm"
    formats = ("tflite",)
    install_hint = "pip install graphwright[tflm]"
    option_names = frozenset({"arena_size", "max_arena_size"})

    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        self.check_options(options)
        runtime = _import_runtime(self)
        model = read_model(source.data, source.label)  # ModelLoadError on a corrupt file
        for graph in model.graphs:
            for node in graph:
                if node.op in _NO_HYBRID and _hybrid(node):
                    raise VerificationError(
                        f"tflm cannot load {source.label}: TFLM has no hybrid {node.op} (float input, "
                        f"8-bit weights; it computes NaN instead of refusing): {node.name!r}")
        return TFLMSession(runtime, source, model, options)


class TFLMSession(Session):
    __slots__ = ("_handles", "_interp", "_label", "_tensor_index", "arena_size", "inputs", "outputs")

    def __init__(self, runtime: ModuleType, source: ModelSource, model: Model, options: Mapping[str, Any]) -> None:
        self._label = source.label
        graph = model.graph
        self.inputs = [InputSpec(v.name, v.dtype or DType.UNDEFINED, _static_shape(v)) for v in graph.inputs]
        self.outputs = [v.name for v in graph.outputs]
        self._tensor_index: dict[str, int] = {}
        #: resource and variant tensors: handles TFLM's Python wrapper cannot return (it crashes)
        self._handles: set[str] = set()
        for value in _values(graph):
            index = value.meta.get("tflite.tensor_index")
            if index is not None:
                self._tensor_index.setdefault(value.name, int(index))
            if value.dtype in (DType.RESOURCE, DType.VARIANT):
                self._handles.add(value.name)
        fixed = _arena_option(options, "arena_size", None)
        limit = _arena_option(options, "max_arena_size", DEFAULT_MAX_ARENA)
        size = fixed if fixed is not None else min(arena_estimate(model), limit)
        while True:
            printed, interp, error = _attempt(lambda arena=size: runtime.Interpreter.from_bytes(
                source.data, arena_size=arena, intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors))
            if error is None:
                break
            out_of_arena = any(s in printed for s in _OUT_OF_ARENA)
            if out_of_arena and fixed is None and size < limit:
                size = min(2 * size, limit)
                continue
            if out_of_arena:
                reason = (f"an arena of {size} bytes is too small ({_first_lines(printed)}); "
                          f"raise {'arena_size' if fixed is not None else 'max_arena_size'}")
            else:
                reason = _reason(runtime, printed, error, model)
            raise VerificationError(f"tflm cannot load {source.label}: {reason}")
        self._interp = interp
        #: The arena size the interpreter was built with, in bytes.
        self.arena_size = size

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        check_feeds(self.inputs, feeds, label=self._label)
        names = list(outputs) if outputs is not None else list(self.outputs)
        unknown = [n for n in names if n not in self._tensor_index]
        if unknown:
            raise VerificationError(f"{self._label}: no tensor named {unknown[0]!r}")
        interp = self._interp
        for position, spec in enumerate(self.inputs):
            interp.set_input(np.asarray(feeds[spec.name], order="C"), position)  # 0-d stays 0-d
        printed, _, error = _attempt(interp.invoke)
        if error is not None:
            raise VerificationError(f"tflm failed running {self._label}: {_first_lines(printed) or error}")
        return {n: np.array(interp.GetTensor(self._tensor_index[n], 0)["tensor_data"])
                for n in names if n not in self._handles}


#: Operators TFLM runs on float input with 8-bit weights without a hybrid kernel (garbage results).
_NO_HYBRID = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM"})


def _hybrid(node: Node) -> bool:
    """Float activations with 8-bit constant weights (LiteRT's hybrid kernels)."""
    x, weights = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    return (x is not None and x.dtype is DType.FLOAT32 and weights is not None
            and weights.dtype in (DType.INT8, DType.UINT8))


def _arena_option(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    """An arena size option: whole bytes, at least :data:`ARENA_FLOOR` (TFLM crashes below)."""
    value = options.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < ARENA_FLOOR:
        raise VerificationError(f"tflm option {name} must be a whole number of bytes >= {ARENA_FLOOR}, not {value!r}")
    return value


def _attempt(call: Callable[[], Any]) -> tuple[str, Any, RuntimeError | None]:
    """``call()`` with what TFLM prints captured: (printed text, result, the RuntimeError raised).

    TFLM's C++ code prints to file descriptor 2, which is redirected to a temporary file meanwhile
    (what other threads write to stderr during the call lands there too)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            result, error = call(), None
        except RuntimeError as e:  # TFLM's Python wrapper raises RuntimeError; the reason is printed
            result, error = None, e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        printed = capture.read().decode("utf-8", "replace")
    return printed, result, error


def _first_lines(printed: str, limit: int = 400) -> str:
    """TFLM's printed lines, distinct and non-empty, joined into one bounded line."""
    lines = list(dict.fromkeys(line.strip() for line in printed.splitlines() if line.strip()))
    text = "; ".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(runtime: ModuleType, printed: str, error: RuntimeError, model: Model) -> str:
    """Why TFLM refused the model, in one line; an operator it lacks is named."""
    match = _MISSING_BUILTIN.search(printed)
    if match:
        return f"TFLM has no operator {match.group(1)}"
    match = _OUT_OF_RANGE.search(printed)
    if match:
        return f"TFLM has no operator {_builtin_name(int(match.group(1)))}"
    if _MISSING_CUSTOM in printed:
        codes = sorted({node.op for graph in model.graphs for node in graph if node.domain == "custom"})
        missing = [code for code in codes if not _registered(runtime, code, custom=True)] or codes
        return f"TFLM has no custom operator {', '.join(missing)}"
    return _first_lines(printed) or str(error)


# -- which operators TFLM has ---------------------------------------------------
#: A builtin code beyond every schema: the probe's second operator, which TFLM never has.
_SENTINEL = "BUILTIN_1048576"


@functools.cache
def supported_operators() -> frozenset[str]:
    """The builtin operators (schema names, e.g. ``"CONV_2D"``) TFLM's interpreter registers.

    Probed: a two-operator model (the operator, then one TFLM cannot have) is
    loaded for each builtin; TFLM looks every operator up before it prepares any,
    so no kernel runs.  Says nothing of the types or options a kernel accepts.
    About 2 s (once per process)."""
    runtime = _import_runtime(TFLMBackend())
    from ai_edge_litert import schema_py_generated as schema  # lazy: only the probe needs the operator list

    names = [n for n, code in vars(schema.BuiltinOperator).items()
             if not n.startswith("_") and isinstance(code, int) and n not in ("CUSTOM", "DELEGATE")]
    return frozenset(n for n in names if _registered(runtime, n))


def _registered(runtime: ModuleType, op: str, *, custom: bool = False) -> bool:
    """Whether TFLM finds a kernel for builtin ``op`` (or custom code ``op``)."""
    graph = Graph("tflite", "probe")
    x = Value("x", DType.FLOAT32, (1,))
    graph.set_inputs([x])
    for name, code in (("probed", op), ("sentinel", _SENTINEL)):
        graph.append(Node(code, [x], dialect="tflite", domain="custom" if custom and name == "probed" else "",
                          name=name, outputs=[Value(name, DType.FLOAT32, (1,))]))
    graph.set_outputs([node.output for node in graph])
    data = serialize(Model(graph, "tflite"))
    printed, _, error = _attempt(lambda: runtime.Interpreter.from_bytes(data, arena_size=ARENA_FLOOR))
    sentinel_code = _SENTINEL.removeprefix("BUILTIN_")
    return error is not None and f"out of range: {sentinel_code}" in printed


def _builtin_name(code: int) -> str:
    from ai_edge_litert import schema_py_generated as schema  # lazy: only to name an operator TFLM lacks

    names = {c: n for n, c in vars(schema.BuiltinOperator).items() if not n.startswith("_") and isinstance(c, int)}
    return names.get(code, f"BUILTIN_{code}")


def _static_shape(value: Value) -> tuple[int | None, ...] | None:
    """The shape TFLM runs with: the file's ``shape`` (not its signature)."""
    shape = value.meta.get("tflite.shape", value.shape)
    return None if shape is None else tuple(shape)


def _values(graph: Graph) -> Iterator[Value]:
    yield from graph.inputs
    yield from graph.initializers
    yield from graph.states
    for node in graph:
        yield from (v for v in node.inputs if v is not None)
        yield from node.outputs


def arena_estimate(model: Model) -> int:
    """Arena bytes that hold ``model`` with every tensor kept: each non-constant
    tensor twice (16-byte aligned), 8 bytes per quantization channel of the
    constants (per-channel multipliers and shifts), and :data:`_PER_ENTRY` per
    tensor and operator.  O(tensors)."""
    total = ARENA_FLOOR
    for graph in model.graphs:
        seen: set[int] = set()
        for value in _values(graph):
            if id(value) in seen:
                continue
            seen.add(id(value))
            total += _PER_ENTRY
            if value.is_initializer:
                total += 8 * (len(value.quant.scale) if value.quant is not None else 0)
            else:
                total += 2 * ((_nbytes(value) + 15) & ~15)
        total += _PER_ENTRY * len(graph)
    return total


def _nbytes(value: Value) -> int:
    shape = _static_shape(value) or ()
    numpy_type = value.dtype.numpy if value.dtype is not None else None
    itemsize = np.dtype(numpy_type).itemsize if numpy_type is not None and np.dtype(numpy_type) != object else 8
    return itemsize * int(np.prod([d or 1 for d in shape], dtype=np.int64))
