"""Sensitivity analysis: which layers cost the most accuracy when quantized.

Method — *leave one out*: the model is quantized whole once (the baseline), then once per layer
L (a node reading a float weight, see :func:`.report.weighted_layers`) with everything but L
quantized — L passed to the quantizer as excluded, exactly what ``keep_float`` will do.  Each
run's score is the SQNR of the model's outputs against the float model's (the worst output's,
in dB, with the sums over all the samples); L's *gain* is its score minus the baseline's: the
accuracy keeping L alone in float buys back.  Layers are ranked by gain, largest first, and
``keep_float=auto:N`` keeps the first N in float by adding them to ``exclude_nodes``.

Why not "quantize L alone and measure its error": a layer kept float still reads and writes
tensors its quantized neighbours quantize, so the activation rounding around it stays; L alone
quantized charges L with that rounding and ranks layers by noise that keeping them float does
not remove (on the landmarks TFLite model the two layers worst alone, kept float, bought 0.3
dB; the two best by gain 0.5 dB; on torchvision's MobileNetV3-small the top four by gain
bought 10.7 dB, the top four alone 9.7 dB).  Leave-one-out measures what keeping each layer
float does, interactions with the rest included; gains are first-order (keeping two layers
float buys roughly, not exactly, the sum of their gains).

Cost: ``layers + 1`` quantizations, each run on ``len(samples)`` inputs: O(layers x (model +
samples x inference)); use a few samples (``driver.SENSITIVITY_SAMPLES``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import Model
from .report import ModelRunner, clone_model, sqnr_db

__all__ = ["LayerSensitivity", "parse_keep_float", "rank_layers"]

#: ``quantize_keeping(model, layers)``: quantize ``model`` in place, leaving the nodes ``layers`` float.
QuantizeFn = Callable[[Model, frozenset[str]], None]


@dataclass(slots=True)
class LayerSensitivity:
    node: str
    op: str
    sqnr_db: float  # output SQNR with every layer quantized but this one
    gain_db: float  # sqnr_db minus the output SQNR with every layer quantized (larger: more sensitive)
    kept_float: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "sqnr_db": _finite(self.sqnr_db), "gain_db": _finite(self.gain_db),
                "kept_float": self.kept_float}


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else x


def parse_keep_float(spec: int | str | None) -> int | None:
    """``None`` -> no analysis; ``N`` or ``"auto:N"`` -> keep the N most sensitive layers float
    (``auto:0`` ranks the layers and keeps none)."""
    if spec is None:
        return None
    text = str(spec).strip()
    count = text[len("auto:"):] if text.startswith("auto:") else text
    if not count.isdigit():
        raise ValueError(f"keep_float must be N or auto:N with N >= 0, got {spec!r}")
    return int(count)


def rank_layers(model: Model, quantize_keeping: QuantizeFn, layers: Sequence[tuple[str, str, str]],
                samples: Sequence[Mapping[str, np.ndarray]], *,
                on_layer: Callable[[int, int, str], None] | None = None) -> list[LayerSensitivity]:
    """Each layer's leave-one-out score and gain (see the module docstring), largest gain first
    (ties in graph order)."""
    reference = ModelRunner(model)
    try:
        expected = [reference.run(sample) for sample in samples]
    finally:
        reference.close()

    def score(keep: frozenset[str]) -> float:
        candidate = clone_model(model)
        quantize_keeping(candidate, keep)
        return _output_sqnr(candidate, samples, expected)

    total = len(layers) + 1
    if on_layer is not None:
        on_layer(0, total, "everything quantized")
    baseline = score(frozenset())
    scores = []
    for i, (name, op, _tensor) in enumerate(layers, start=1):
        if on_layer is not None:
            on_layer(i, total, name)
        kept = score(frozenset({name}))
        scores.append(LayerSensitivity(name, op, kept, kept - baseline))
    if on_layer is not None:
        on_layer(total, total, "done")
    return sorted(scores, key=lambda s: -s.gain_db)


def _output_sqnr(candidate: Model, samples: Sequence[Mapping[str, np.ndarray]],
                 expected: Sequence[Mapping[str, np.ndarray]]) -> float:
    """The worst output's SQNR of ``candidate`` against ``expected``, over all samples."""
    runner = ModelRunner(candidate)
    signal: dict[str, float] = {}
    noise: dict[str, float] = {}
    try:
        for sample, want in zip(samples, expected, strict=True):
            got = runner.run(sample)
            for key, a in want.items():
                a64, b64 = np.asarray(a, np.float64), np.asarray(got[key], np.float64)
                signal[key] = signal.get(key, 0.0) + float(np.sum(a64 ** 2))
                noise[key] = noise.get(key, 0.0) + float(np.sum((a64 - b64) ** 2))
    finally:
        runner.close()
    return min((sqnr_db(signal[k], noise[k]) for k in signal), default=math.inf)
