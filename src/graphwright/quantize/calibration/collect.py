"""Run the float model over samples and stream every activation into :class:`~.stats.Statistics`.

Before: a float ONNX or TFLite model and an iterable of feeds.  After: per-value statistics of
the values a quantizer needs — by default every float activation: the graph inputs and the
outputs of the main graph's nodes (not constants).  The runtime is reached through
:mod:`graphwright.runtime.intermediates`: onnxruntime for ONNX (``engine="auto"``), LiteRT for
TFLite (``"auto"``/``"litert"``) or graphwright's ``"reference"`` interpreter.

Streaming: one batch of feeds and its activations are alive at a time; the statistics have a fixed
size per value (:mod:`.stats`), so memory does not grow with the number of samples.  Cost:
O(samples x (inference + activation elements)).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ... import formats
from ...errors import VerificationError
from ...ir import DType, Model, Node, Value
from ...runtime import input_specs
from ...runtime.intermediates import prepare_intermediates
from .data import Feed, batch_feeds
from .errors import CalibrationError
from .stats import DEFAULT_BINS, Statistics

__all__ = ["ENGINES", "Progress", "activation_names", "collect_statistics"]

#: ``engine`` values: "auto" picks onnxruntime (ONNX) or litert (TFLite).
ENGINES = ("auto", "onnxruntime", "litert", "litert-ref", "reference")
#: ``on_progress(samples done, total or None, label)``.
Progress = Callable[[int, "int | None", str], None]
_SKIPPED_OPS = {"Constant"}


def activation_names(model: Model) -> list[str]:
    """The float values of the main graph a quantizer may need a range for, in graph order:
    graph inputs, then every node output whose type is float or unknown (unknown ones are kept
    only if the runtime gives a float array), except constants and ``Constant`` outputs."""
    graph = model.graph
    names = [v.name for v in graph.inputs if not v.is_initializer and _maybe_float(v.dtype)]
    for node in graph:
        if node.op in _SKIPPED_OPS:
            continue
        names.extend(v.name for v in node.outputs
                     if v is not None and v.name and v.const is None and _maybe_float(v.dtype)
                     and not _unread_loop_output(node, v))
    return list(dict.fromkeys(names))


def _unread_loop_output(node: Node, value: Value) -> bool:
    """A TFLite WHILE output nothing reads: LiteRT leaves it unallocated ("Tensor data is null"),
    and no quantizer needs its range."""
    return node.op == "WHILE" and not value.uses() and not value.is_graph_output


def _maybe_float(dtype: DType | None) -> bool:
    return dtype is None or dtype is DType.UNDEFINED or dtype.is_float


def collect_statistics(model: Model | str | os.PathLike[str], samples: Iterable[Feed] | Callable[[], Iterable[Feed]],
                       *, values: Sequence[str] | None = None, engine: str = "auto", batch_size: int = 1,
                       bins: int = DEFAULT_BINS, on_progress: Progress | None = None) -> Statistics:
    """Statistics of ``values`` (default :func:`activation_names`) over every sample.

    ``samples`` yields ``{input name: array}`` (e.g. :func:`~.data.load_samples`,
    :func:`~.data.synthetic_samples`) or is a callable returning such an iterable;
    ``batch_size > 1`` concatenates that many feeds along axis 0 per run (dynamic batch axis
    needed).  ``on_progress(samples done, total, label)`` is called after every run, ``total``
    from ``samples.total`` or ``len(samples)`` when known (else None).  ``stats.samples`` counts
    the feeds that went in.
    """
    ir = model if isinstance(model, Model) else formats.load(model)
    if ir.format not in ("onnx", "tflite"):
        raise CalibrationError(f"calibration runs ONNX and TFLite models, not {ir.format}; for a GraphDef use "
                               "graphwright calibrate (the eight-bit flow)")
    if engine not in ENGINES:
        raise CalibrationError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    specs = input_specs(ir)
    if batch_size != 1:  # refuses a bad size or a fixed batch axis before anything runs
        next(batch_feeds(iter(()), specs, batch_size), None)
    stats = Statistics(bins)
    session = _prepare(ir, activation_names(ir) if values is None else list(values), engine)
    stream = samples() if callable(samples) else samples
    total = _total(stream)
    label = f"calibrating on {session.backend}"
    try:
        for feeds in _groups(iter(stream), batch_size):
            batch = feeds[0] if len(feeds) == 1 else next(batch_feeds(iter(feeds), specs, len(feeds)))
            for name, array in session.run(batch).items():
                if np.issubdtype(array.dtype, np.floating):
                    stats.update(name, array)
            stats.samples += len(feeds)
            if on_progress is not None:
                on_progress(stats.samples, total, label)
    finally:
        session.close()
    return stats


def _prepare(model: Model, wanted: Sequence[str], engine: str) -> Any:
    backend = None if engine == "auto" else engine
    try:
        return prepare_intermediates(model, wanted, backend=backend)
    except VerificationError as e:
        raise CalibrationError(f"calibration cannot run the model: {e}") from None


def _total(samples: Any) -> int | None:
    total = getattr(samples, "total", None)
    if total is None and hasattr(samples, "__len__"):
        total = len(samples)
    return None if total is None else int(total)


def _groups(feeds: Iterator[Feed], size: int) -> Iterator[list[Feed]]:
    group: list[Feed] = []
    for feed in feeds:
        group.append(feed)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group
