"""The quantization report: how far the quantized model is from the float one, and what it costs.

Both models run on the same runtime (onnxruntime for ONNX, LiteRT for TFLite) on the same
held-out inputs — samples the calibration never saw.  A quantized model that takes or gives
integers (TFLite ``io_type=int8``) is fed the float inputs quantized with its own input scale
and zero point, and its integer outputs are dequantized (``real = scale * (q - zero_point)``)
before they are compared.

Per output: max and mean ``|a - b|``, the relative error ``max|a - b| / max|a|``, the SQNR
``10 log10(sum a^2 / sum (a - b)^2)`` in dB (infinite when equal; the sums run over every
evaluation sample, so it is the SQNR of the whole split, not a mean of per-sample ratios),
and for classifier-like outputs (``[..., C]`` with one row of C >= 2 scores per sample) the
fraction of rows whose argmax agrees.  Per layer: the SQNR of each weighted layer's output
(matched by tensor name in both models, the quantized one dequantized with its own
parameters).  Also the file size before and after, the median latency of ``runs`` invocations
on the runtime, and the time quantization took.

Running the evaluation is O(samples x (cost of one inference of each model)); the report
itself is O(outputs + layers).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import formats
from ..ir import Model, Value
from ..runtime import Session, prepare
from ..verify.quantized import dequantize, quantize_like, sqnr_db

__all__ = [
    "LayerSQNR", "ModelRunner", "OutputError", "QuantReport", "clone_model", "compare_models",
    "latency_ms", "model_bytes", "sqnr_db", "weighted_layers",
]

#: Operators whose float weights make them a *layer* (what per-layer SQNR and sensitivity rank).
WEIGHTED_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Attention", "LSTM", "GRU", "RNN",  # ONNX
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D",  # TFLite
    "BATCH_MATMUL", "EMBEDDING_LOOKUP", "UNIDIRECTIONAL_SEQUENCE_LSTM",
})


def _finite(x: float | None) -> float | None:
    """JSON has no infinity: an exact match is written as null (the table says 'exact')."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


@dataclass(slots=True)
class OutputError:
    name: str
    shape: list[int]
    max_abs: float
    mean_abs: float
    rel_error: float  # max |a - b| / max |a|
    sqnr_db: float
    top1_agreement: float | None  # None: the output is not classifier-like

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": self.shape, "max_abs_error": self.max_abs,
                "mean_abs_error": self.mean_abs, "rel_error": self.rel_error,
                "sqnr_db": _finite(self.sqnr_db), "top1_agreement": self.top1_agreement}


@dataclass(slots=True)
class LayerSQNR:
    node: str
    op: str
    tensor: str
    sqnr_db: float

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "tensor": self.tensor, "sqnr_db": _finite(self.sqnr_db)}


@dataclass(slots=True)
class QuantReport:
    """What ``quantize`` did and how accurate the result is (see the module docstring)."""

    format: str
    mode: str
    method: str | None = None
    data_source: str = ""
    calibration_samples: int = 0
    eval_samples: int = 0
    eval_split: str = "held-out"  # or "calibration" when the data had too few samples to hold any out
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    excluded_ops: list[str] = field(default_factory=list)
    excluded_nodes: list[str] = field(default_factory=list)
    kept_float: list[str] = field(default_factory=list)
    outputs: list[OutputError] = field(default_factory=list)
    layers: list[LayerSQNR] = field(default_factory=list)
    sensitivity: list[Any] = field(default_factory=list)  # sensitivity.LayerSensitivity, most sensitive first
    stats: dict[str, Any] = field(default_factory=dict)
    size_before: int | None = None
    size_after: int | None = None
    runtime: str = ""
    latency_before_ms: float | None = None
    latency_after_ms: float | None = None
    quantize_seconds: float = 0.0
    calibration_seconds: float = 0.0
    sensitivity_seconds: float = 0.0
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format, "mode": self.mode, "method": self.method, "data_source": self.data_source,
            "calibration_samples": self.calibration_samples, "eval_samples": self.eval_samples,
            "eval_split": self.eval_split, "warnings": self.warnings, "notes": self.notes,
            "excluded_ops": self.excluded_ops, "excluded_nodes": self.excluded_nodes, "kept_float": self.kept_float,
            "outputs": [o.to_json() for o in self.outputs], "layers": [x.to_json() for x in self.layers],
            "sensitivity": [s.to_json() for s in self.sensitivity], "stats": self.stats,
            "size_before": self.size_before, "size_after": self.size_after, "runtime": self.runtime,
            "latency_before_ms": self.latency_before_ms, "latency_after_ms": self.latency_after_ms,
            "quantize_seconds": self.quantize_seconds, "calibration_seconds": self.calibration_seconds,
            "sensitivity_seconds": self.sensitivity_seconds, "ranges_count": len(self.ranges),
        }


def clone_model(model: Model) -> Model:
    """An independent copy of ``model`` (written by its format's writer and read back). O(model)."""
    data = formats.serialize(model)
    if model.format == "onnx":
        from ..formats.onnx.reader import load  # lazy: the onnx package is slow to import

        return load(Path(model.source_path or "model.onnx"), data)
    from ..formats.tflite.reader import read_model  # lazy: format packages load on first use

    return read_model(data, str(model.source_path or "<tflite>"))


def model_bytes(model: Model) -> int:
    """Size of the model's file as its writer makes it."""
    return len(formats.serialize(model))


def weighted_layers(model: Model) -> list[tuple[str, str, str]]:
    """``(node name, op, output tensor)`` of every node of the main graph that reads a float
    constant of rank >= 2 (a weight), in graph order: the *layers*."""
    found = []
    for node in model.graph:
        if node.op not in WEIGHTED_OPS or not node.outputs:
            continue
        if any(_float_weight(v) for v in node.inputs if v is not None):
            found.append((node.name, node.op, node.outputs[0].name))
    return found


def _float_weight(value: Value) -> bool:
    const = value.const
    return const is not None and const.dtype.numpy is not None and np.dtype(const.dtype.numpy).kind == "f" \
        and len(const.shape or ()) >= 2


def _values_by_name(model: Model) -> dict[str, Value]:
    return {v.name: v for node in model.graph for v in node.outputs}


def _is_integer_quantized(value: Value | None) -> bool:
    return (value is not None and value.quant is not None and value.dtype is not None
            and value.dtype.numpy is not None and np.dtype(value.dtype.numpy).kind in "iu")


class ModelRunner:
    """One model loaded on its runtime, fed the float model's inputs, giving float values back.

    ``tensors`` are extra tensor names (intermediates) to return beside the outputs: an ONNX
    model gets them as extra graph outputs of a copy; LiteRT hands them back itself.
    """

    def __init__(self, model: Model, tensors: Sequence[str] = ()) -> None:
        self.model = model
        self._values = _values_by_name(model)
        self.tensors = [t for t in tensors if t in self._values]
        self.outputs = [v.name for v in model.graph.outputs]
        runnable = model
        if self.tensors and model.format == "onnx":
            runnable = clone_model(model)
            known = _values_by_name(runnable)
            extra = [known[t] for t in self.tensors if t not in self.outputs]
            runnable.graph.set_outputs([*runnable.graph.outputs, *extra])
        self.session: Session = prepare(runnable)
        self.backend = "onnxruntime" if model.format == "onnx" else "litert"

    def feeds(self, float_feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The float model's feeds for this model (by name, else by position): quantized where it takes integers."""
        out = {}
        by_position = list(float_feeds.values())
        for i, value in enumerate(self.model.graph.inputs):
            if value.name not in float_feeds and i >= len(by_position):
                continue  # the runtime names what is missing
            array = np.asarray(float_feeds[value.name] if value.name in float_feeds else by_position[i])
            integer = _is_integer_quantized(value) and array.dtype.kind == "f"
            out[value.name] = quantize_like(array, value.quant, np.dtype(value.dtype.numpy)) if integer else array
        return out

    def run(self, float_feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs (by position: ``"output:<i>"``) and the tensors asked for (by name), as float64
        where this model quantized them."""
        names = list(dict.fromkeys([*self.outputs, *self.tensors]))
        raw = self.session.run(self.feeds(float_feeds), names)
        result = {}
        for i, name in enumerate(self.outputs):
            result[f"output:{i}"] = self._real(name, raw[name])
        for name in self.tensors:
            result[name] = self._real(name, raw[name])
        return result

    def _real(self, name: str, array: np.ndarray) -> np.ndarray:
        value = self._values.get(name) or next((v for v in self.model.graph.outputs if v.name == name), None)
        array = np.asarray(array)
        if _is_integer_quantized(value):
            return dequantize(array, value.quant)
        return array

    def close(self) -> None:
        self.session.close()


@dataclass(slots=True)
class _Accumulator:
    signal: float = 0.0
    noise: float = 0.0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    count: int = 0
    peak: float = 0.0
    rows: int = 0
    agree: int = 0
    shape: list[int] = field(default_factory=list)

    def add(self, a: np.ndarray, b: np.ndarray, classifier: bool) -> None:
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        diff = np.abs(a64 - b64)
        self.shape = [int(d) for d in a64.shape]
        self.signal += float(np.sum(a64 ** 2))
        self.noise += float(np.sum(diff ** 2))
        if diff.size:
            self.max_abs = max(self.max_abs, float(diff.max()))
            self.peak = max(self.peak, float(np.abs(a64).max()))
        self.sum_abs += float(diff.sum())
        self.count += diff.size
        if classifier:
            ra, rb = a64.reshape(-1, a64.shape[-1]), b64.reshape(-1, b64.shape[-1])
            self.rows += ra.shape[0]
            self.agree += int(np.sum(ra.argmax(axis=-1) == rb.argmax(axis=-1)))

    def error(self, name: str) -> OutputError:
        rel = self.max_abs / self.peak if self.peak > 0 else (0.0 if self.max_abs == 0 else math.inf)
        return OutputError(name, self.shape, self.max_abs, self.sum_abs / max(self.count, 1), rel,
                           sqnr_db(self.signal, self.noise), self.agree / self.rows if self.rows else None)


def classifier_like(shape: Sequence[int]) -> bool:
    """One row of C >= 2 scores per sample: ``[C]``, ``[1, C]`` or ``[N, C]``."""
    return 1 <= len(shape) <= 2 and shape[-1] >= 2


def _layer_pairs(quant_model: Model, layers: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str, str]]:
    """``(node, op, float tensor, quantized tensor)``: the same tensor name, else the first output of
    the quantized model's node of the same name and op (a quantizer that renames a layer's output,
    e.g. when it folds the activation after it into the quantization range)."""
    values = _values_by_name(quant_model)
    nodes = {node.name: node for node in quant_model.graph}
    pairs = []
    for node, op, tensor in layers:
        if tensor in values:
            pairs.append((node, op, tensor, tensor))
        elif node in nodes and nodes[node].op == op and nodes[node].outputs:
            pairs.append((node, op, tensor, nodes[node].outputs[0].name))
    return pairs


def compare_models(float_model: Model, quant_model: Model, samples: Iterable[Mapping[str, np.ndarray]], *,
                   layers: Sequence[tuple[str, str, str]] = (),
                   on_sample: Any = None) -> tuple[list[OutputError], list[LayerSQNR], list[str]]:
    """Run both models on every sample; per-output errors, per-layer SQNR, and notes."""
    pairs = _layer_pairs(quant_model, layers)
    reference = ModelRunner(float_model, [p[2] for p in pairs])
    candidate = ModelRunner(quant_model, [p[3] for p in pairs])
    outs: dict[str, _Accumulator] = {}
    per_layer: dict[str, _Accumulator] = {}
    count = 0
    try:
        for sample in samples:
            a, b = reference.run(sample), candidate.run(sample)
            for key in [k for k in a if k.startswith("output:")]:
                x, y = a[key], b[key]
                if x.shape != y.shape or np.asarray(x).dtype.kind not in "fiu":
                    continue
                outs.setdefault(key, _Accumulator()).add(x, y, classifier_like(x.shape)
                                                         and np.asarray(x).dtype.kind == "f")
            for _node, _op, mine, theirs in pairs:
                if mine in a and theirs in b and a[mine].shape == b[theirs].shape:
                    per_layer.setdefault(mine, _Accumulator()).add(a[mine], b[theirs], False)
            count += 1
            if on_sample is not None:
                on_sample(count)
    finally:
        reference.close()
        candidate.close()
    names = reference.outputs
    errors = [outs[f"output:{i}"].error(name) for i, name in enumerate(names) if f"output:{i}" in outs]
    layer_rows = [LayerSQNR(node, op, tensor, sqnr_db(per_layer[tensor].signal, per_layer[tensor].noise))
                  for node, op, tensor in layers if tensor in per_layer]
    notes = []
    missing = [t for _, _, t in layers if t not in per_layer]
    if missing:
        notes.append(f"{len(missing)} layer output(s) not found in the quantized model "
                     f"(no per-layer SQNR), e.g. {missing[0]!r}")
    return errors, layer_rows, notes


def latency_ms(model: Model, sample: Mapping[str, np.ndarray], *, runs: int = 10) -> float:
    """Median wall time of one inference on the model's runtime (after one warm-up run), in ms."""
    runner = ModelRunner(model)
    try:
        feeds = runner.feeds(sample)
        runner.session.run(feeds, runner.outputs)
        times = []
        for _ in range(max(runs, 1)):
            start = time.perf_counter()
            runner.session.run(feeds, runner.outputs)
            times.append(time.perf_counter() - start)
    finally:
        runner.close()
    return 1000.0 * statistics.median(times)
