"""Run a model and return chosen intermediate values, not just its outputs.

Before: a model and the names of values inside it (graph inputs, any node output).  After: a
session whose ``run(feeds)`` returns exactly those arrays, keyed by name:

* ONNX on onnxruntime: a copy of the model with the wanted values appended as graph outputs (the
  file the runtime sees; the IR is not touched), loaded with graph optimizations off so every
  value exists as the model computes it (as onnxruntime's own calibrators do);
* TFLite on LiteRT (``litert``/``litert-ref``): an interpreter built with
  ``experimental_preserve_all_tensors`` (which also keeps default delegates away), tensors read
  by name; on graphwright's ``reference`` interpreter: its ``run(feeds, outputs=names)``.

Graph inputs are returned from the feeds (copies), whatever the runtime.  A TFLite name that
two tensors share is refused (the runtime would read the first).  Cost: one model load,
then one run per call; memory: the requested arrays of one run.

``reduce="extrema"`` (what min-max calibration needs): on onnxruntime, every float32 value
(typed in the model or by ONNX inference) is reduced in the graph instead of copied out —
``ReduceMin``, ``ReduceMax`` and ``Size`` of it, and ``ReduceSum`` to see NaN (onnxruntime's
ReduceMin/ReduceMax skip a NaN that is not first, and may then return a wrong finite value; a
NaN anywhere makes the sum NaN, whatever the order of the additions) — and ``run`` returns an
:class:`Extrema` for it: ``(min, max, count)`` of its elements, all finite.  An infinity shows in
the min or max; a sum that is only infinite is an overflow of finite elements (an attention
mask's ``finfo.min``), not a NaN.  A value whose min or max is not finite, or whose sum is NaN, is
run again in a second session (made on first need) that returns its array, which the caller
filters.  The other values,
and every value on the other runtimes, come back as arrays.  Memory: a few scalars per value, and
onnxruntime is free to reuse the buffers of the reduced ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import VerificationError
from ..ir import DType, Model
from .base import ModelSource, Session, resolve_backend

__all__ = ["Extrema", "IntermediateSession", "prepare_intermediates"]

_TFLITE_BACKENDS = ("litert", "litert-ref", "reference")
REDUCE_MODES = ("extrema",)
#: The reductions of one value, in the order of its extra graph outputs.
_REDUCTIONS = ("ReduceMin", "ReduceMax", "ReduceSum", "Size")


class Extrema(NamedTuple):
    """``min``/``max`` of ``count`` elements, every one finite (``count`` 0: an empty tensor)."""

    min: float
    max: float
    count: int


class IntermediateSession:
    """A prepared model returning the values named at preparation (see the module docstring)."""

    __slots__ = ("_inputs", "_keep", "_names", "_session", "backend")

    def __init__(self, session: Session, backend: str, names: Sequence[str], inputs: set[str],
                 keep: Any = None) -> None:
        self._session = session
        self._names = list(names)
        self._inputs = inputs
        self._keep = keep  # what must outlive the session (a temporary directory of external data)
        self.backend = backend

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The requested values for one set of feeds, in the order they were named: arrays, and
        :class:`Extrema` for the values reduced in the graph (``reduce="extrema"``)."""
        computed = [n for n in self._names if n not in self._inputs]
        results = self._session.run(feeds, computed or None)  # None: the outputs, only to check the feeds
        return {n: np.array(feeds[n]) if n in self._inputs else results[n] for n in self._names}

    def close(self) -> None:
        self._session.close()


class _ReducedSession(IntermediateSession):
    """An :class:`IntermediateSession` whose float32 values come back reduced (module docstring)."""

    __slots__ = ("_full", "_fallback", "_fallback_names", "_make", "_reduced")

    def __init__(self, session: Session, backend: str, names: Sequence[str], inputs: set[str], keep: Any,
                 full: Sequence[str], reduced: Mapping[str, tuple[str, ...]], make: Any) -> None:
        super().__init__(session, backend, names, inputs, keep)
        self._full = list(full)
        self._reduced = dict(reduced)
        self._make = make  # names -> a session returning those values' arrays
        self._fallback: IntermediateSession | None = None
        self._fallback_names: set[str] = set()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        results = self._session.run(feeds, None)  # every output: what it asks for, and the model's own
        out: dict[str, Any] = {}
        redo = []
        for name in self._names:
            if name in self._inputs:
                out[name] = np.array(feeds[name])
            elif name in self._reduced:
                lo, hi, total, size = (results[o] for o in self._reduced[name])
                count = int(size)
                if (count and not (np.isfinite(lo) and np.isfinite(hi))) or np.isnan(total):
                    redo.append(name)
                else:
                    out[name] = Extrema(float(lo), float(hi), count)
            else:
                out[name] = results[name]
        if redo:
            out.update(self._again(feeds, redo))
        return {name: out[name] for name in self._names}

    def _again(self, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict[str, Any]:
        """The arrays of ``names`` (a min or max not finite, or a NaN sum), from the fallback session."""
        if not set(names) <= self._fallback_names:
            if self._fallback is not None:
                self._fallback.close()
            self._fallback_names |= set(names)
            self._fallback = self._make(sorted(self._fallback_names))
        assert self._fallback is not None
        got = self._fallback.run(feeds)
        return {n: got[n] for n in names}

    def close(self) -> None:
        super().close()
        if self._fallback is not None:
            self._fallback.close()


def prepare_intermediates(model: Model, names: Sequence[str], *, backend: str | None = None,
                          options: Mapping[str, Any] | None = None, reduce: str | None = None) -> IntermediateSession:
    """Load ``model`` on ``backend`` (default: onnxruntime for ONNX, litert for TFLite) to return
    the values ``names`` (each a graph input or a node output of the main graph); ``reduce``:
    see the module docstring."""
    if reduce is not None and reduce not in REDUCE_MODES:
        raise VerificationError(f"reduce must be one of {', '.join(REDUCE_MODES)}, got {reduce!r}")
    inputs = {v.name for v in model.graph.inputs}
    known = inputs | {v.name for node in model.graph for v in node.outputs if v is not None}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise VerificationError(f"the model has no value named {unknown[0]!r}")
    source = ModelSource.from_model(model)
    engine = resolve_backend(source, backend)
    computed = [n for n in names if n not in inputs]
    opts = dict(options or {})
    if model.format == "onnx":
        opts.setdefault("graph_optimization_level", "disable")

        def make(full: Sequence[str], reduced: Sequence[str] = ()) -> tuple[Session, dict[str, tuple[str, ...]]]:
            data, outs = _with_outputs(source.data, full, reduced)
            augmented = ModelSource("onnx", data=data, label=source.label, external_dir=source.external_dir,
                                    written=True)
            return engine.prepare(augmented, opts), outs

        if reduce is None or engine.name != "onnxruntime":
            return IntermediateSession(make(computed)[0], engine.name, names, inputs, keep=source)
        floats = _float32_values(model, computed)
        full = [n for n in computed if n not in floats]
        session, outs = make(full, [n for n in computed if n in floats])

        def fallback(wanted: Sequence[str]) -> IntermediateSession:
            return IntermediateSession(make(wanted)[0], engine.name, wanted, set(), keep=source)

        return _ReducedSession(session, engine.name, names, inputs, source, full, outs, fallback)
    if model.format == "tflite" and engine.name in _TFLITE_BACKENDS:
        _refuse_shared_names(model, computed)
        if engine.name == "reference":
            return IntermediateSession(engine.prepare(source, opts), engine.name, names, inputs)
        opts.setdefault("preserve_all_tensors", True)
        with warnings.catch_warnings():  # LiteRT warns that the option is for debugging: it is what we need
            warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
            return IntermediateSession(engine.prepare(source, opts), engine.name, names, inputs)
    raise VerificationError(f"intermediate values of {model.format} models on {engine.name} are not supported; "
                            "use onnxruntime (ONNX) or litert/reference (TFLite)")


def _refuse_shared_names(model: Model, names: Sequence[str]) -> None:
    """TFLite tensors are found by name: a name two tensors share would give the wrong one."""
    wanted = set(names)
    seen: set[str] = set()
    for node in model.graph:
        for value in node.outputs:
            if value is not None and value.name in wanted:
                if value.name in seen:
                    raise VerificationError(f"two tensors are named {value.name!r}; rename one to read its values")
                seen.add(value.name)


def _float32_values(model: Model, names: Sequence[str]) -> set[str]:
    """Those of ``names`` that are float32 tensors, by the model's types or ONNX's inference."""
    values = {v.name: v for node in model.graph for v in node.outputs if v is not None and v.name}
    wanted = [values[n] for n in names if n in values]
    if any(v.dtype is None or v.dtype is DType.UNDEFINED for v in wanted):
        from ..formats.onnx.inference import InferenceFailed, infer_types  # lazy: loads onnx

        try:
            inferred = {value: dtype for value, (dtype, _) in infer_types(model, data_prop=False).items()}
        except InferenceFailed:
            inferred = {}
    else:
        inferred = {}
    return {v.name for v in wanted if (v.dtype if v.dtype not in (None, DType.UNDEFINED) else inferred.get(v))
            is DType.FLOAT32}


def _with_outputs(data: bytes, names: Sequence[str],
                  reduced: Sequence[str] = ()) -> tuple[bytes, dict[str, tuple[str, ...]]]:
    """The ONNX file ``data`` with ``names`` appended to its graph outputs (typed when the file's
    value_info knows the type; else left for onnxruntime to infer), and for each of ``reduced``
    its reductions (:data:`_REDUCTIONS`, all axes, scalars) as outputs: returns the bytes and
    ``{reduced name: its output names}``."""
    import onnx  # lazy: the ONNX package loads only when an ONNX model is run

    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    graph = proto.graph
    present = {o.name for o in graph.output}
    typed = {vi.name: vi for vi in graph.value_info}
    for name in names:
        if name in present:
            continue
        info = onnx.ValueInfoProto()
        if name in typed:
            info.CopyFrom(typed[name])
        else:
            info.name = name
        graph.output.append(info)
        present.add(name)
    outs: dict[str, tuple[str, ...]] = {}
    if reduced:
        taken = present | {i.name for i in graph.input} | {i.name for i in graph.initializer} \
            | {o for node in graph.node for o in node.output}
        counter = 0
        for name in reduced:
            made = []
            for op in _REDUCTIONS:
                while f"gw_extrema_{counter}" in taken:
                    counter += 1
                out = f"gw_extrema_{counter}"
                taken.add(out)
                attrs = {} if op == "Size" else {"keepdims": 0}
                graph.node.append(onnx.helper.make_node(op, [name], [out], name=out, **attrs))
                elem = onnx.TensorProto.INT64 if op == "Size" else onnx.TensorProto.FLOAT
                graph.output.append(onnx.helper.make_tensor_value_info(out, elem, []))
                made.append(out)
            outs[name] = tuple(made)
    return bytes(proto.SerializeToString()), outs
