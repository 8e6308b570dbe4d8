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
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..ir import Model
from .base import ModelSource, Session, resolve_backend

__all__ = ["IntermediateSession", "prepare_intermediates"]

_TFLITE_BACKENDS = ("litert", "litert-ref", "reference")


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

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The requested values for one set of feeds, in the order they were named."""
        computed = [n for n in self._names if n not in self._inputs]
        results = self._session.run(feeds, computed or None)  # None: the outputs, only to check the feeds
        return {n: np.array(feeds[n]) if n in self._inputs else results[n] for n in self._names}

    def close(self) -> None:
        self._session.close()


def prepare_intermediates(model: Model, names: Sequence[str], *, backend: str | None = None,
                          options: Mapping[str, Any] | None = None) -> IntermediateSession:
    """Load ``model`` on ``backend`` (default: onnxruntime for ONNX, litert for TFLite) to return
    the values ``names`` (each a graph input or a node output of the main graph)."""
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
        augmented = ModelSource("onnx", data=_with_outputs(source.data, computed), label=source.label,
                                external_dir=source.external_dir, written=True)
        return IntermediateSession(engine.prepare(augmented, opts), engine.name, names, inputs, keep=source)
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


def _with_outputs(data: bytes, names: Sequence[str]) -> bytes:
    """The ONNX file ``data`` with ``names`` appended to its graph outputs (typed when the file's
    value_info knows the type; else left for onnxruntime to infer)."""
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
    return bytes(proto.SerializeToString())
