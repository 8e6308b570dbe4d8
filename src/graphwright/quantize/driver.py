"""``quantize``: post-training quantization of an ONNX or TFLite model, with its report.

Steps, for a model file (never modified) or an IR model (copied, never modified):

1. samples: ``samples`` (an iterable of ``{input: array}``, or a callable returning one),
   ``data`` (a directory of ``.npy``/``.npz``), or — with a loud warning, on stderr and in the
   report — seeded synthetic inputs.  Every fifth sample is held out for the report (up to
   ``eval_samples``); the rest (up to ``calibration_samples``) calibrate, streamed.
2. ranges (static modes): ``ranges`` (a mapping or a ranges file), else calibration statistics
   collected on the float model and turned into ranges by ``method`` (``minmax`` collects each
   value's min and max only — on onnxruntime reduced inside the graph, 8 samples per run where the
   batch axis is dynamic, as onnxruntime's MinMaxCalibrater does; the others streaming histograms).
3. sensitivity (``keep_float``): the layers ranked by :mod:`.sensitivity` (leave one out) on a
   few calibration samples; the N whose float copy buys back the most join ``exclude_nodes``.
4. the format's quantizing transform (``transforms/quantize``) on a copy.
5. the report (:mod:`.report`): errors and per-layer SQNR on the held-out samples, sizes,
   latencies, times.

Modes: ONNX ``static`` (QDQ), ``dynamic``, ``weights`` (``bits`` 8 or 4); TFLite ``int8``
(alias ``static``), ``16x8``, ``dynamic``, ``weights``.  A GraphDef is refused with the
eight-bit transforms to use instead.  Cost: calibration O(samples x inference), sensitivity
O(layers x (model + a few inferences)), the transform O(model).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .. import formats
from ..errors import TransformError
from ..ir import Model
from ..transforms.quantize.dynamic_onnx import quantize_dynamic_onnx
from ..transforms.quantize.dynamic_tflite import quantize_dynamic_tflite
from ..transforms.quantize.gptq_onnx import collect_hessians, hessian_inputs
from ..transforms.quantize.options import QuantOptions, Ranges, load_ranges, resolve_ranges
from ..transforms.quantize.quantize_weights import DEFAULT_MINIMUM_SIZE
from ..transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers
from ..transforms.quantize.static_onnx import quantize_static_onnx
from ..transforms.quantize.static_tflite import check_static_tflite, quantize_static_tflite
from ..transforms.quantize.weights_tflite import quantize_weights_float16_tflite, quantize_weights_tflite
from ..transforms.registry import TransformResult
from . import calibration
from .report import QuantReport, clone_model, compare_models, latency_ms, model_bytes, weighted_layers
from .sensitivity import parse_keep_float, rank_layers

__all__ = ["GRAPHDEF_MESSAGE", "MODES", "METHODS", "quantize"]

#: Modes per format.
MODES: Mapping[str, tuple[str, ...]] = {
    "onnx": ("static", "dynamic", "weights"),
    "tflite": ("int8", "static", "16x8", "dynamic", "weights"),
}
METHODS = ("minmax", "percentile", "entropy", "mse")
GRAPHDEF_MESSAGE = ("quantize works on ONNX and TFLite models; for a TensorFlow GraphDef use the eight-bit "
                    "transforms: graphwright transform --transforms 'quantize_weights' (weights only), or "
                    "'quantize_nodes' then graphwright calibrate and 'freeze_requantization_ranges' (full eight-bit)")
SYNTHETIC_WARNING = ("NO CALIBRATION DATA: using {count} seeded random inputs (seed {seed}); ranges and the "
                     "accuracy report reflect random data, not your inputs — pass data (--data DIR) for a "
                     "model you will deploy")
#: The same for modes that calibrate nothing (dynamic, weights): only the report uses the inputs.
SYNTHETIC_EVAL_WARNING = ("NO EVALUATION DATA: the accuracy report runs on {count} seeded random inputs (seed "
                          "{seed}), not your inputs — pass data (--data DIR) for numbers about your model")
#: One sample in this many is held out for the report.
HOLDOUT_STRIDE = 5
#: Calibration samples drawn when no data is given (with data: every sample not held out).
SYNTHETIC_CALIBRATION_SAMPLES = 100
#: ``calibration_samples`` meaning "all of them".
UNLIMITED = sys.maxsize
#: Calibration samples the sensitivity analysis runs each candidate on.
SENSITIVITY_SAMPLES = 8
#: Inferences timed for each latency (the median is reported).
LATENCY_RUNS = 10

Progress = Callable[[int, int, str], None]
#: ``collect(model, calibration samples, on_progress) -> Statistics`` (see :func:`quantize`).
Collector = Callable[[Model, Iterator[Mapping[str, np.ndarray]], "Progress | None"], "calibration.Statistics"]


def quantize(model_or_path: Model | str | os.PathLike[str], *, mode: str, data: str | os.PathLike[str] | None = None,
             samples: Iterable[Any] | Callable[[], Iterable[Any]] | None = None, calibration_samples: int | None = None,
             eval_samples: int = 16, seed: int = 0, method: str = "minmax",
             ranges: Ranges | str | os.PathLike[str] | None = None, activation_type: str | None = None,
             weight_type: str | None = None, per_channel: bool = True, symmetric_activations: bool = False,
             io_type: str = "float32", bits: int = 8, block_size: int = 128, target: str = "generic",
             exclude_ops: Iterable[str] = (), exclude_nodes: Iterable[str] = (),
             keep_float: int | str | None = None, minimum_size: int = DEFAULT_MINIMUM_SIZE,
             report: bool = True, on_progress: Progress | None = None,
             collect: Collector | None = None, engine: str = "auto",
             batch_size: int | None = None, int4_method: str | None = None,
             accuracy_level: int = 4) -> tuple[Model, QuantReport]:
    """Quantize a model (see the module docstring); returns the quantized model and its report.

    ``collect(model, samples, on_progress)`` replaces the one-process statistics collection
    (``graphwright quantize --shards N [--ray]`` passes one that shards the calibration samples
    over processes or Ray tasks; it must return what ``collect_statistics`` would).
    ``engine`` runs the float model for calibration (``auto``: onnxruntime / LiteRT; TFLite also
    ``litert-ref`` or ``reference``, graphwright's interpreter), ``batch_size`` samples at a time
    (None: :func:`~.calibration.collect_statistics` chooses — batches of 8 for ONNX min-max where
    the batch axis is dynamic, else one by one).
    """
    started = time.perf_counter()
    original = _load(model_or_path)
    kind = _mode(original.format, mode)
    if method not in METHODS:
        raise TransformError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if bits not in (4, 8) or (bits == 4 and (original.format, kind) != ("onnx", "weights")):
        raise TransformError(f"bits={bits}: 4-bit weights are for ONNX --mode weights only; otherwise use 8")
    keep = _keep_float(keep_float)
    if int4_method is None:  # GPTQ when the caller gives data (it needs the layers' inputs), else mse
        int4_method = "gptq" if bits == 4 and (data is not None or samples is not None) else "mse"
    options = _options(original.format, mode, activation_type=activation_type, weight_type=weight_type, bits=bits,
                       per_channel=per_channel, symmetric_activations=symmetric_activations, io_type=io_type,
                       block_size=block_size, target=target, exclude_ops=exclude_ops, exclude_nodes=exclude_nodes,
                       int4_method=int4_method, accuracy_level=accuracy_level)
    given = _given_ranges(ranges) if kind == "static" else None
    out = QuantReport(original.format, mode, method=method if kind == "static" and given is None else None,
                      excluded_ops=sorted(options.exclude_ops), excluded_nodes=sorted(options.exclude_nodes))
    needs_ranges = kind == "static" and given is None
    gptq = kind == "weights" and original.format == "onnx" and options.weight_type in ("int4", "uint4") \
        and options.int4_method == "gptq"
    if kind == "static" and original.format == "tflite":
        check_static_tflite(original, options)  # an already-quantized model is refused before calibrating
    source = None
    if needs_ranges or gptq or report or keep is not None:
        if calibration_samples is None:  # every sample given (streamed), or the synthetic default
            given_data = data is not None or samples is not None
            calibration_samples = UNLIMITED if given_data else SYNTHETIC_CALIBRATION_SAMPLES
        source = _SampleSource(original, data, samples, calibration_samples if needs_ranges or gptq else 0,
                               eval_samples if report else 0, seed, out)
    table = given if given is not None else {}
    if needs_ranges:
        assert source is not None
        table = _calibrate(original, method, options, source, out, on_progress, collect,
                           {"engine": engine, "batch_size": batch_size})
    hessians = None
    if gptq:
        assert source is not None
        hessians = _hessians(original, options, minimum_size, source, out, on_progress)
    if keep is not None and source is not None:
        options = _sensitivity(original, kind, table, options, minimum_size, source, keep, out, on_progress)
    # the float model is needed afterwards only for the report (or when it is the caller's): else quantize it
    # in place, and skip the sizes (each a serialization)
    copy = report or isinstance(model_or_path, Model)
    before = _Before(original, options)
    model = clone_model(original) if copy else original
    _record(out, _apply(model, kind, table, options, minimum_size, hessians), before, model, options)
    out.ranges = dict(table)
    out.quantize_seconds = time.perf_counter() - started
    if copy:
        out.size_before, out.size_after = model_bytes(original), model_bytes(model)
    out.runtime = "onnxruntime" if model.format == "onnx" else "litert"
    if report and source is not None:
        _evaluate(original, model, source, out, on_progress)
    return model, out


class _Before:
    """What :func:`_record` needs of the float model, taken before the transform (which may run in place)."""

    def __init__(self, original: Model, options: QuantOptions) -> None:
        self.names = {node.name for node in original.graph}
        self.ops = {node.op for node in original.graph}
        wanted = set(options.exclude_nodes)
        self.kept = {name: op for name, op, _tensor in weighted_layers(original) if name in wanted} if wanted else {}


def _record(out: QuantReport, result: TransformResult, before: _Before, model: Model, options: QuantOptions) -> None:
    """The transform's counts and notes in the report, and a warning for what it did not do."""
    out.stats, out.notes = dict(result.stats), [*out.notes, *result.notes]
    if not result.changed:
        out.warnings.append("nothing was quantized (see the notes)")
    unknown = sorted(set(options.exclude_nodes) - before.names)
    if unknown:
        out.warnings.append(f"{len(unknown)} node(s) to exclude are not in the model: {', '.join(unknown[:5])}")
    known_ops = before.ops
    if options.exclude_ops - known_ops:
        out.warnings.append(f"op(s) to exclude that no node has: {', '.join(sorted(options.exclude_ops - known_ops))}")
    quantized_anyway = _not_float(before.kept, model)
    if quantized_anyway:
        out.warnings.append(f"{len(quantized_anyway)} node(s) to be kept float had their weights quantized anyway "
                            f"(the {out.mode} transform does not honour exclusions for them): "
                            f"{', '.join(quantized_anyway[:5])}")


def _not_float(before: Mapping[str, str], model: Model) -> list[str]:
    """Of the layers ``before`` (name: op) of the float model to be kept float, those that are not, in
    ``model``, the same node (name and op) still reading its float weights."""
    if not before:
        return []
    after = {name: op for name, op, _tensor in weighted_layers(model)}
    return sorted(name for name, op in before.items() if after.get(name) != op)


def _load(model_or_path: Model | str | os.PathLike[str]) -> Model:
    model = model_or_path if isinstance(model_or_path, Model) else formats.load(model_or_path)
    if model.format == "graphdef":
        raise TransformError(GRAPHDEF_MESSAGE)
    return model


def _mode(fmt: str, mode: str) -> str:
    """The transform family of ``mode``: static, dynamic or weights."""
    if mode not in MODES[fmt]:
        raise TransformError(f"--mode {mode!r} does not apply to {fmt} models; use one of {', '.join(MODES[fmt])}")
    return "static" if mode in ("int8", "16x8") else mode


def _keep_float(spec: int | str | None) -> int | None:
    try:
        return parse_keep_float(spec)
    except ValueError as e:
        raise TransformError(str(e)) from None


def _options(fmt: str, mode: str, *, activation_type: str | None, weight_type: str | None, bits: int,
             **kwargs: Any) -> QuantOptions:
    """The transforms' options.  ONNX static defaults to uint8 activations (int8 weights): the
    form onnxruntime's x86 kernels fuse — ResNet-18 with int8 activations ran 30.8 ms, with
    uint8 1.45 ms (64x64 input, 2 cores)."""
    act = activation_type or ("int16" if mode == "16x8" else "uint8" if fmt == "onnx" and mode == "static"
                              else "int8")
    if mode == "16x8" and act != "int16":
        raise TransformError(f"--mode 16x8 has int16 activations; activation_type {act!r} contradicts it")
    weights = weight_type or ("int4" if bits == 4 else "int8")
    return QuantOptions.build(activation_type=act, weight_type=weights, **kwargs)


def _hessians(model: Model, options: QuantOptions, minimum_size: int, source: _SampleSource, out: QuantReport,
              on_progress: Progress | None) -> dict[str, np.ndarray]:
    """GPTQ's per-weight input Hessians over the calibration samples (streamed, on onnxruntime)."""
    start = time.perf_counter()
    total = 0 if source.calibration_count == UNLIMITED else source.calibration_count
    progress = _phase(on_progress, "calibrating (GPTQ)", total=total)
    hessians, count = collect_hessians(model, source.calibration(), hessian_inputs(model, minimum_size, options),
                                       on_sample=None if progress is None else lambda n: progress(n, 0, "sample"))
    out.calibration_samples = count
    out.calibration_seconds = time.perf_counter() - start
    if count == 0:
        raise TransformError("no calibration samples: the data gave none (check --data or the samples)")
    return hessians


def _apply(model: Model, kind: str, table: Ranges, options: QuantOptions, minimum_size: int,
           hessians: Mapping[str, np.ndarray] | None = None) -> TransformResult:
    onnx = model.format == "onnx"
    if kind == "static":
        return (quantize_static_onnx if onnx else quantize_static_tflite)(model, table, options)
    if kind == "dynamic":
        return (quantize_dynamic_onnx if onnx else quantize_dynamic_tflite)(model, options)
    if onnx:
        return quantize_onnx_initializers(model, minimum_size=minimum_size, options=options, hessians=hessians)
    if options.weight_type == "float16":
        return quantize_weights_float16_tflite(model)
    return quantize_weights_tflite(model, options)


class _SampleSource:
    """The samples, split as they stream: every ``HOLDOUT_STRIDE``-th one held out for the report
    (kept, up to ``eval_count``), the others calibrate (up to ``calibration_count``); the first
    few calibration samples are kept for the sensitivity analysis."""

    def __init__(self, model: Model, data: Any, samples: Any, calibration_count: int, eval_count: int,
                 seed: int, report: QuantReport) -> None:
        self.model = model
        self.calibration_count, self.eval_count = max(calibration_count, 0), max(eval_count, 0)
        self.held_out: list[Mapping[str, np.ndarray]] = []
        self.kept: list[Mapping[str, np.ndarray]] = []
        self.calibrated = 0
        if samples is not None or data is not None:
            given = samples if samples is not None else data
            report.data_source = f"directory {os.fspath(data)}" if samples is None else "samples given by the caller"
            self._stream: Iterator[Mapping[str, np.ndarray]] = iter(calibration.load_samples(model, given))
        else:
            count = self.calibration_count + HOLDOUT_STRIDE * self.eval_count + SENSITIVITY_SAMPLES
            template = SYNTHETIC_WARNING if self.calibration_count else SYNTHETIC_EVAL_WARNING
            message = template.format(count=count, seed=seed)
            warnings.warn(message, UserWarning, stacklevel=3)
            report.warnings.append(message)
            report.data_source = f"synthetic (seed {seed})"
            self._stream = iter(calibration.synthetic_samples(model, count, seed))
        self._index = 0
        self._report = report

    def calibration(self) -> Iterator[Mapping[str, np.ndarray]]:
        """The calibration samples (diverting held-out ones as it goes)."""
        while self.calibrated < self.calibration_count:
            sample = self._next()
            if sample is None:
                return
            self.calibrated += 1
            if len(self.kept) < SENSITIVITY_SAMPLES:
                self.kept.append(sample)
            yield sample

    def evaluation(self) -> list[Mapping[str, np.ndarray]]:
        """The held-out samples (drawing more from the stream if needed); the calibration ones
        when none could be held out (said in the report)."""
        while len(self.held_out) < self.eval_count:
            sample = self._next()
            if sample is None:
                break
            if len(self.kept) < SENSITIVITY_SAMPLES:
                self.kept.append(sample)
        if not self.held_out and self.kept and self.eval_count:
            self._report.eval_split = "calibration"
            self._report.warnings.append("too few samples to hold any out: the report is on calibration samples")
            return self.kept[: self.eval_count]
        return self.held_out

    def sensitivity(self) -> list[Mapping[str, np.ndarray]]:
        """A few calibration samples (drawn now if calibration did not run)."""
        while len(self.kept) < SENSITIVITY_SAMPLES:
            sample = self._next()
            if sample is None:
                break
            self.kept.append(sample)
        return self.kept

    def _next(self) -> Mapping[str, np.ndarray] | None:
        """The next sample not held out (held-out ones are kept aside as they pass)."""
        for sample in self._stream:
            self._index += 1
            if self._index % HOLDOUT_STRIDE == 0 and len(self.held_out) < self.eval_count:
                self.held_out.append(sample)
                continue
            return sample
        return None


def _method_options(method: str, options: QuantOptions) -> dict[str, Any]:
    """What the range method needs to know of the quantization: symmetric, and the bits (entropy, mse)."""
    extra = {"dtype": options.activation_type} if method in ("entropy", "mse") else {}
    return {"symmetric": options.symmetric_activations, **extra}


def _range_method(method: str, options: QuantOptions, out: QuantReport) -> str:
    """The method the ranges are computed with: for int16 activations entropy and percentile are
    min/max, computed without histograms (said in the report's notes).

    Entropy's 32768 quantized bins exceed the histogram, so it never clips there anyway; a
    percentile's clipping buys no resolution at 65536 levels and cost 4.77 dB (EfficientNet-B0)
    and 0.88 dB (ResNet50) against the TFLite converter's 16x8 min/max (benchmarks/quantize.md)."""
    if options.activation_type == "int16" and method in ("entropy", "percentile"):
        out.notes.append(f"{method} on int16 activations uses the min/max ranges: at 65536 levels clipping "
                         f"a tail buys no resolution")
        return "minmax"
    return method


def _given_ranges(ranges: Ranges | str | os.PathLike[str] | None) -> dict[str, tuple[float, float]] | None:
    if ranges is None:
        return None
    return load_ranges(ranges) if isinstance(ranges, (str, os.PathLike)) else resolve_ranges(ranges)


def _calibrate(model: Model, method: str, options: QuantOptions, source: _SampleSource, out: QuantReport,
               on_progress: Progress | None, collect: Collector | None,
               how: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    start = time.perf_counter()
    method = _range_method(method, options, out)
    total = 0 if source.calibration_count == UNLIMITED else source.calibration_count  # 0: not known
    progress = _phase(on_progress, "", total=total)  # its label says "calibrating"
    if collect is None:
        stats = calibration.collect_statistics(model, source.calibration(), on_progress=progress,
                                               histogram=method != "minmax", **how)
    else:
        stats = collect(model, source.calibration(), progress)
    table = calibration.compute_ranges(stats, method, **_method_options(method, options))
    out.calibration_samples = source.calibrated
    out.calibration_seconds = time.perf_counter() - start
    if source.calibrated == 0:
        raise TransformError("no calibration samples: the data gave none (check --data or the samples)")
    return dict(table)


def _sensitivity(model: Model, kind: str, table: Ranges, options: QuantOptions, minimum_size: int,
                 source: _SampleSource, keep: int, out: QuantReport, on_progress: Progress | None) -> QuantOptions:
    start = time.perf_counter()
    layers = [layer for layer in weighted_layers(model) if not options.excluded(layer[1], layer[0])]

    def quantize_keeping(candidate: Model, keep: frozenset[str]) -> None:
        kept = QuantOptions(**{**_fields(options), "exclude_nodes": keep | options.exclude_nodes})
        _apply(candidate, kind, table, kept, minimum_size)

    ranked = rank_layers(model, quantize_keeping, layers, source.sensitivity(),
                         on_layer=_phase(on_progress, "sensitivity"))
    for item in ranked[:keep]:
        item.kept_float = True
    out.sensitivity = ranked
    out.kept_float = [item.node for item in ranked[:keep]]
    out.sensitivity_seconds = time.perf_counter() - start
    return QuantOptions(**{**_fields(options), "exclude_nodes": options.exclude_nodes | frozenset(out.kept_float)})


def _fields(options: QuantOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in QuantOptions.__dataclass_fields__}


def _evaluate(original: Model, model: Model, source: _SampleSource, out: QuantReport,
              on_progress: Progress | None) -> None:
    held_out = source.evaluation()
    out.eval_samples = len(held_out)
    if not held_out:
        return
    progress = _phase(on_progress, "evaluating")
    total = len(held_out)

    def tick(done: int) -> None:
        if progress is not None:
            progress(done, total, f"sample {done} of {total}")

    out.outputs, out.layers, notes = compare_models(original, model, held_out, layers=weighted_layers(original),
                                                    on_sample=tick)
    out.notes.extend(notes)
    if progress is not None:
        progress(total, total, "latency")
    out.latency_before_ms = latency_ms(original, held_out[0], runs=LATENCY_RUNS)
    out.latency_after_ms = latency_ms(model, held_out[0], runs=LATENCY_RUNS)


def _phase(on_progress: Progress | None, phase: str, *, total: int = 0) -> Progress | None:
    """``on_progress`` with the phase named in its label (and ``total`` when the caller knows none)."""
    if on_progress is None:
        return None

    def update(done: int, count: int | None, what: str) -> None:
        on_progress(done, count or total, f"{phase}: {what}" if phase else what)

    return update

