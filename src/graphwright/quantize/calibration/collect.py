"""Run the float model over samples and stream every activation into :class:`~.stats.Statistics`.

Before: a float ONNX or TFLite model and an iterable of feeds.  After: per-value statistics of
the values a quantizer needs — by default every float activation: the graph inputs and the
outputs of the main graph's nodes (not constants).  The runtime is reached through
:mod:`graphwright.runtime.intermediates`: onnxruntime for ONNX (``engine="auto"``), LiteRT for
TFLite (``"auto"``/``"litert"``) or graphwright's ``"reference"`` interpreter.

Streaming: one batch of feeds and its activations are alive at a time; the statistics have a fixed
size per value (:mod:`.stats`), so memory does not grow with the number of samples.  Cost:
O(samples x (inference + activation elements)).

``histogram=False`` collects min and max only (min-max calibration): on onnxruntime each float32
value is then reduced inside the graph (``reduce="extrema"`` of
:func:`~graphwright.runtime.intermediates.prepare_intermediates`, as onnxruntime's own
MinMaxCalibrater reduces), so neither the activations' copies out of the runtime nor histograms
are made; elsewhere the arrays' own min and max are taken.  The ranges are the same, bit for bit.
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
from ...runtime.intermediates import Extrema, prepare_intermediates
from .data import Feed, batch_feeds
from .errors import CalibrationError
from .stats import DEFAULT_BINS, Statistics

__all__ = ["AUTO_BATCH", "ENGINES", "Progress", "activation_names", "collect_statistics"]

#: ``engine`` values: "auto" picks onnxruntime (ONNX) or litert (TFLite).
ENGINES = ("auto", "onnxruntime", "litert", "litert-ref", "reference")
#: Feeds per run of ``batch_size=None`` when only min and max are collected.
AUTO_BATCH = 8
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
                       *, values: Sequence[str] | None = None, engine: str = "auto", batch_size: int | None = 1,
                       bins: int = DEFAULT_BINS, on_progress: Progress | None = None,
                       histogram: bool = True) -> Statistics:
    """Statistics of ``values`` (default :func:`activation_names`) over every sample.

    ``samples`` yields ``{input name: array}`` (e.g. :func:`~.data.load_samples`,
    :func:`~.data.synthetic_samples`) or is a callable returning such an iterable;
    ``batch_size > 1`` concatenates that many feeds along axis 0 per run (dynamic batch axis
    needed); ``None`` batches :data:`AUTO_BATCH` feeds when only min and max of an ONNX model are
    collected (``histogram=False``: memory stays a few numbers per value) and every input's batch axis is
    dynamic, consecutive feeds of one sample each and of equal shapes only, else runs them one by one.  ``on_progress(samples done, total, label)`` is called after every run, ``total``
    from ``samples.total`` or ``len(samples)`` when known (else None).  ``stats.samples`` counts
    the feeds that went in.  ``histogram=False``: min and max only (module docstring).
    """
    ir = model if isinstance(model, Model) else formats.load(model)
    if ir.format not in ("onnx", "tflite"):
        raise CalibrationError(f"calibration runs ONNX and TFLite models, not {ir.format}; for a GraphDef use "
                               "graphwright calibrate (the eight-bit flow)")
    if engine not in ENGINES:
        raise CalibrationError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    specs = input_specs(ir)
    auto = batch_size is None
    if auto:
        batch_size = AUTO_BATCH if not histogram and ir.format == "onnx" and _dynamic_batch(specs) else 1
    elif batch_size != 1:  # refuses a bad size or a fixed batch axis before anything runs
        next(batch_feeds(iter(()), specs, batch_size), None)
    assert batch_size is not None
    stats = Statistics(bins, histogram=histogram)
    session = _prepare(ir, activation_names(ir) if values is None else list(values), engine,
                       None if histogram else "extrema")
    stream = samples() if callable(samples) else samples
    total = _total(stream)
    label = f"calibrating on {session.backend}"
    try:
        for feeds in (_like_groups if auto else _groups)(iter(stream), batch_size):
            batch = feeds[0] if len(feeds) == 1 else next(batch_feeds(iter(feeds), specs, len(feeds)))
            for name, array in session.run(batch).items():
                if isinstance(array, Extrema):
                    stats.value(name).add_extrema(array.min, array.max, array.count)
                elif np.issubdtype(array.dtype, np.floating):
                    stats.update(name, array)
            stats.samples += len(feeds)
            if on_progress is not None:
                on_progress(stats.samples, total, label)
    finally:
        session.close()
    return stats


def _prepare(model: Model, wanted: Sequence[str], engine: str, reduce: str | None) -> Any:
    backend = None if engine == "auto" else engine
    try:
        return prepare_intermediates(model, wanted, backend=backend, reduce=reduce)
    except VerificationError as e:
        raise CalibrationError(f"calibration cannot run the model: {e}") from None


def _total(samples: Any) -> int | None:
    total = getattr(samples, "total", None)
    if total is None and hasattr(samples, "__len__"):
        total = len(samples)
    return None if total is None else int(total)


def _dynamic_batch(specs: Sequence[Any]) -> bool:
    """Every input has a known rank >= 1 and a dynamic first axis."""
    return all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] >= 0) for s in specs)


def _like_groups(feeds: Iterator[Feed], size: int) -> Iterator[list[Feed]]:
    """Up to ``size`` consecutive feeds per group, grouped only while each is one sample (leading
    axis 1 in every array) of the same shapes and dtypes as the group's first: the concatenation
    along axis 0 is then exactly a batch of them."""
    group: list[Feed] = []
    key: object = None
    for feed in feeds:
        arrays = {k: np.asarray(v) for k, v in feed.items()}
        single = all(a.ndim >= 1 and a.shape[0] == 1 for a in arrays.values())
        mine = tuple(sorted((k, a.shape, a.dtype.str) for k, a in arrays.items())) if single else None
        if group and (mine is None or mine != key or len(group) == size):
            yield group
            group = []
        group.append(feed)
        key = mine
        if mine is None:
            yield group
            group = []
    if group:
        yield group


def _groups(feeds: Iterator[Feed], size: int) -> Iterator[list[Feed]]:
    group: list[Feed] = []
    for feed in feeds:
        group.append(feed)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group
