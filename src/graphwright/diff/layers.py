"""Per-layer error of model B against model A: every intermediate tensor both models name alike.

Typically A is a float TFLite model and B its quantized version (the converter keeps the tensor
names of activations).  Both run once on the same inputs keeping their intermediates (the way
``graphwright compare --layers`` runs LiteRT: :func:`graphwright.runtime.execute.execute` asked
for every operator output); B's quantized tensors are dequantized with their own scale and zero
point (``real = scale * (q - zero_point)``), and A's float inputs are quantized with B's input
parameters when B takes integers.  For each shared tensor, in A's execution order: SQNR
(``10 log10(sum a^2 / sum (a-b)^2)``, dB; infinite when equal), max ``|a-b|``, max ``|a-b|``
relative to A's largest magnitude, and for a quantized B the max error in steps of its scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GraphwrightError
from ..ir import Model
from ..runtime.execute import Job, execute
from ..verify.quantized import dequantize, quantize_like, sqnr_of

__all__ = ["LayerError", "LayerErrors", "layer_errors", "dequantize", "quantize_like", "sqnr_of", "feeds_for_b",
           "dequantized_outputs"]


@dataclass(frozen=True, slots=True)
class LayerError:
    index: int  # position of the producing operator in A's execution order
    op_a: str
    op_b: str
    tensor: str
    shape: list[int]
    dtype_b: str
    sqnr_db: float  # inf when B equals A exactly
    max_abs: float
    max_rel: float  # max |a-b| / max |a| (0 when both are all zeros)
    mean_abs: float
    max_steps: float | None  # max |a-b| in units of B's quantization scale (None: B not quantized)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "op_a": self.op_a, "op_b": self.op_b, "tensor": self.tensor,
                "shape": self.shape, "dtype_b": self.dtype_b,
                "sqnr_db": None if math.isinf(self.sqnr_db) else self.sqnr_db,
                "max_abs_error": self.max_abs, "max_rel_error": self.max_rel, "mean_abs_error": self.mean_abs,
                "max_error_in_steps": self.max_steps}


@dataclass(slots=True)
class LayerErrors:
    backend_a: str
    backend_b: str
    layers: list[LayerError] = field(default_factory=list)
    #: Tensors both models name but whose shapes differ (not compared).
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"backend_a": self.backend_a, "backend_b": self.backend_b, "metric": "sqnr_db",
                "layers": [x.to_json() for x in self.layers], "skipped": self.skipped, "notes": self.notes}


def _values(model: Model) -> dict[str, tuple[int, str, Any]]:
    """Every operator output of the main graph: name -> (operator index, op, value)."""
    found: dict[str, tuple[int, str, Any]] = {}
    for i, node in enumerate(model.graph):
        for v in node.outputs:
            found.setdefault(v.name, (i, node.op, v))
    return found


def _inputs(model: Model) -> list[Any]:
    return list(model.graph.inputs)


def _quantized(v: Any) -> bool:
    return getattr(v, "quant", None) is not None and np.dtype(v.dtype.numpy).kind in "iu"


def feeds_for_b(model_b: Model, feeds_a: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """A's feeds (in input order) for B: a float feed quantized where B's input is quantized."""
    out: dict[str, np.ndarray] = {}
    notes = []
    for v, (name, x) in zip(_inputs(model_b), feeds_a.items(), strict=False):
        x = np.asarray(x)
        if _quantized(v) and x.dtype.kind == "f":
            out[v.name] = quantize_like(x, v.quant, np.dtype(v.dtype.numpy))
            notes.append(f"B's input {v.name!r} is A's {name!r} quantized with B's scale and zero point")
        else:
            out[v.name] = x
    return out, notes


def dequantized_outputs(model_a: Model, model_b: Model, outputs_b: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """B's outputs, each dequantized where B's is quantized and A's (same position) is not."""
    out = dict(outputs_b)
    for va, vb in zip(model_a.graph.outputs, model_b.graph.outputs, strict=False):
        if vb.name in out and _quantized(vb) and not _quantized(va) and np.dtype(va.dtype.numpy).kind == "f":
            out[vb.name] = dequantize(np.asarray(out[vb.name]), vb.quant).astype(np.dtype(va.dtype.numpy))
    return out


def layer_errors(
    model_a: Model, model_b: Model, path_a: str, path_b: str, *,
    feeds: Mapping[str, np.ndarray] | None = None, seed: int = 0,
    backend_a: str | None = None, backend_b: str | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> LayerErrors | None:
    """Compare every tensor A and B both produce (same name, same shape); None when they share none."""
    va, vb = _values(model_a), _values(model_b)
    shared = [n for n in va if n in vb]
    if not shared:
        return None

    def tick(done: int, what: str) -> None:
        if on_progress is not None:
            on_progress(done, 2, what)

    tick(0, "running A's layers")
    try:
        run_a = execute(path_a, feeds, Job(backend=backend_a, seed=seed, outputs=shared))
        feeds_b, notes = feeds_for_b(model_b, run_a.feeds)
        tick(1, "running B's layers")
        run_b = execute(path_b, feeds_b, Job(backend=backend_b, seed=seed, outputs=shared))
    except GraphwrightError as e:  # the outputs ran; an intermediate the runtime will not hand back
        return LayerErrors(backend_a or "-", backend_b or "-", notes=[f"per-layer error unavailable: {e}"])
    report = LayerErrors(run_a.backend, run_b.backend, notes=notes)
    for name in shared:
        index, op_a, value_a = va[name]
        _, op_b, value_b = vb[name]
        a = np.asarray(run_a.outputs[name])
        b = np.asarray(run_b.outputs[name])
        if a.shape != b.shape or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
            report.skipped.append(name)
            continue
        steps: float | None = None
        bq = b.astype(np.float64)
        if _quantized(value_b) and not _quantized(value_a):
            bq = dequantize(b, value_b.quant)
        a64 = a.astype(np.float64)
        diff = np.abs(a64 - bq)
        max_abs = float(diff.max()) if diff.size else 0.0
        top = float(np.abs(a64).max()) if a64.size else 0.0
        if _quantized(value_b):
            scale = float(np.asarray(value_b.quant.scale, np.float64).max())
            steps = max_abs / scale if scale > 0 else None
        report.layers.append(LayerError(
            index, op_a, op_b, name, [int(d) for d in a.shape], str(b.dtype), sqnr_of(a64, bq), max_abs,
            max_abs / top if top > 0 else (0.0 if max_abs == 0 else math.inf),
            float(diff.mean()) if diff.size else 0.0, steps))
    tick(2, "done")
    return report
