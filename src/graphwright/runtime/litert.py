"""The ``litert`` and ``litert-ref`` backends: TFLite models on the LiteRT interpreter.

``litert`` uses the interpreter's default kernels (optimized built-ins, with
the XNNPACK delegate where it applies); ``litert-ref`` uses the reference
kernels (``OpResolverType.BUILTIN_REF``), against which graphwright's integer
arithmetic is bit-exact.  Subgraph 0 is run; feeds and outputs use tensor
names.  Asking for a tensor that is not a model output rebuilds the
interpreter with ``experimental_preserve_all_tensors`` so intermediate values
are kept.

A session is one LiteRT interpreter, so what LiteRT keeps from one ``invoke()``
to the next carries over from run to run: the variable tensors of the fused
sequence operators (LSTM/RNN state), resource variables, CALL_ONCE and the
seeded random generators; a run with other input shapes resizes the inputs and
re-allocates, which zeroes the variable tensors and re-seeds the generators, as
in LiteRT.  When a later run asks for intermediate tensors and the interpreter
has to be rebuilt to keep them, a model with such state (one of
:data:`STATEFUL_OPS` in its main graph) has its earlier runs replayed on the new
interpreter first, so the state is where the runs left it.

Options: ``preserve_all_tensors`` (bool), ``num_threads`` (int),
``verify_file`` (bool, default True).

LiteRT does not verify everything in a file, and crashes on some corrupt ones
(a buffer whose ``offset + size`` overflows 64 bits passes its range check and
is read far outside the file).  So a file that graphwright's own writer did not
produce is first read by graphwright's TFLite reader, which refuses corrupt
files with :class:`~graphwright.errors.ModelLoadError`; ``verify_file=False``
skips that.  Run untrusted files with ``isolate=True`` as well.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from ..errors import VerificationError
from ..formats.tflite import read_model
from ..ir import DType
from .base import Backend, InputSpec, ModelSource, Session, check_feeds, one_line

__all__ = ["STATEFUL_OPS", "LiteRTBackend", "LiteRTReferenceBackend"]

#: operators whose state LiteRT keeps across invocations (variable tensors, resources, generators)
STATEFUL_OPS = frozenset({
    "UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN", "LSTM", "RNN", "SVDF", "VAR_HANDLE", "ASSIGN_VARIABLE", "READ_VARIABLE",
    "CALL_ONCE", "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL",
})


def _import_interpreter(backend: Backend) -> ModuleType:
    try:
        from ai_edge_litert import interpreter  # type: ignore[import-untyped]  # lazy: slow to import, needed to run only
    except ImportError:
        raise backend.unavailable("ai-edge-litert") from None
    return interpreter


class LiteRTBackend(Backend):
    name = "litert"
    formats = ("tflite",)
    install_hint = "pip install ai-edge-litert"
    option_names = frozenset({"preserve_all_tensors", "num_threads", "verify_file"})
    #: Name of the ``OpResolverType`` member used.
    resolver: ClassVar[str] = "AUTO"

    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        self.check_options(options)
        module = _import_interpreter(self)
        if options.get("verify_file", True) and not source.written:
            read_model(source.data, source.label)  # raises ModelLoadError on a corrupt file
        return LiteRTSession(module, self, source, options)


class LiteRTReferenceBackend(LiteRTBackend):
    name = "litert-ref"
    resolver = "BUILTIN_REF"


class LiteRTSession(Session):
    __slots__ = (
        "_backend",
        "_history",
        "_input_index",
        "_interp",
        "_module",
        "_options",
        "_output_index",
        "_preserve",
        "_source",
        "_stateful",
        "inputs",
        "outputs",
    )

    def __init__(self, module: ModuleType, backend: LiteRTBackend, source: ModelSource,
                 options: Mapping[str, Any]) -> None:
        self._module = module
        self._backend = backend
        self._source = source
        self._options = dict(options)
        self._preserve = bool(options.get("preserve_all_tensors", False))
        self._interp = self._build(self._preserve)
        #: the feeds run so far, kept (for a stateful model, until the interpreter keeps every tensor)
        #: to replay them should it be rebuilt
        self._stateful = _stateful(self._interp)
        self._history: list[dict[str, np.ndarray]] = []
        details = self._interp.get_input_details()
        self.inputs = [InputSpec(d["name"], _dtype(d["dtype"]), _shape(d)) for d in details]
        self._input_index = {d["name"]: int(d["index"]) for d in details}
        out = self._interp.get_output_details()
        self.outputs = [d["name"] for d in out]
        self._output_index = {d["name"]: int(d["index"]) for d in out}

    def _build(self, preserve: bool, *, quiet: bool = False) -> Any:
        module = self._module
        threads = self._options.get("num_threads")
        try:
            with warnings.catch_warnings():
                if quiet:  # we enabled it ourselves, to return the intermediate tensors asked for
                    warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
                interp = module.Interpreter(
                    model_content=self._source.data,
                    experimental_op_resolver_type=getattr(module.OpResolverType, self._backend.resolver),
                    experimental_preserve_all_tensors=preserve,
                    num_threads=None if threads is None else int(threads),
                )
            interp.allocate_tensors()
        except Exception as e:  # LiteRT raises ValueError/RuntimeError
            raise VerificationError(f"{self._backend.name} cannot load {self._source.label}: {one_line(e)}") from None
        return interp

    def _tensor_indices(self, names: Sequence[str]) -> dict[str, int]:
        missing = [n for n in names if n not in self._output_index]
        if not missing:
            return {n: self._output_index[n] for n in names}
        if not self._preserve:  # intermediate tensors need an interpreter that keeps them
            self._preserve = True
            self._interp = self._build(True, quiet=True)
            try:
                for feeds in self._history:  # the state where the earlier runs left it
                    self._invoke(feeds)
            except Exception as e:  # LiteRT raises ValueError/RuntimeError
                raise VerificationError(
                    f"{self._backend.name} failed replaying the earlier runs of {self._source.label}: {one_line(e)}"
                ) from None
            self._history.clear()
        all_tensors: dict[str, int] = {}
        for d in self._interp.get_tensor_details():
            all_tensors.setdefault(d["name"], int(d["index"]))
        unknown = [n for n in names if n not in all_tensors]
        if unknown:  # LiteRT renames some tensors when it prepares them (DENSIFY's output: "Densify_output")
            for node in read_model(self._source.data, self._source.label).graph:
                for value in node.outputs:
                    index = value.meta.get("tflite.tensor_index")
                    if index is not None:
                        all_tensors.setdefault(value.name, int(index))
            unknown = [n for n in names if n not in all_tensors]
        if unknown:
            raise VerificationError(f"{self._source.label}: no tensor named {unknown[0]!r}")
        return {n: all_tensors[n] for n in names}

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        check_feeds(self.inputs, feeds, label=self._source.label)
        names = list(outputs) if outputs is not None else list(self.outputs)
        indices = self._tensor_indices(names)
        try:
            self._invoke(feeds)
            if self._stateful and not self._preserve:
                self._history.append({name: np.array(array) for name, array in feeds.items()})
            return {name: np.array(self._interp.get_tensor(indices[name])) for name in names}
        except Exception as e:  # LiteRT raises ValueError/RuntimeError
            raise VerificationError(
                f"{self._backend.name} failed running {self._source.label}: {one_line(e)}"
            ) from None

    def _invoke(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Set the inputs (resized and re-allocated where a shape changed) and invoke."""
        interp = self._interp
        current = {d["name"]: tuple(int(x) for x in d["shape"]) for d in interp.get_input_details()}
        resized = False
        for name, array in feeds.items():
            shape = np.shape(array)
            if current[name] != shape:
                interp.resize_tensor_input(self._input_index[name], list(shape), strict=False)
                resized = True
        if resized:
            interp.allocate_tensors()
        for name, array in feeds.items():
            interp.set_tensor(self._input_index[name], np.ascontiguousarray(array))
        interp.invoke()


def _stateful(interp: Any) -> bool:
    """Whether the interpreter's main graph has an operator of :data:`STATEFUL_OPS` (True when
    LiteRT cannot say)."""
    try:
        return any(d.get("op_name") in STATEFUL_OPS for d in interp._get_ops_details())
    except Exception:  # an older or newer LiteRT without it: assume state
        return True


def _dtype(np_type: Any) -> DType:
    try:
        return DType.from_numpy(np_type)
    except ValueError:
        return DType.UNDEFINED


def _shape(detail: Mapping[str, Any]) -> tuple[int | None, ...]:
    signature = detail.get("shape_signature")
    dims = detail["shape"] if signature is None or (len(signature) == 0 and len(detail["shape"])) else signature
    return tuple(None if int(d) < 0 else int(d) for d in dims)
