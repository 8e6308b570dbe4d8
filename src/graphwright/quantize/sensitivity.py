"""Sensitivity analysis: which layers lose the most accuracy when quantized.

Method — *one layer at a time*: for each layer L (a node reading a float weight, see
:func:`.report.weighted_layers`), a copy of the float model has L alone quantized (every other
node is passed to the quantizer as excluded) and runs on the samples; L's score is the SQNR of
the model's outputs against the float model's (the worst output's, in dB, summed over the
samples).  The lower the score, the more L's quantization costs: layers are ranked from the
lowest SQNR up.

Why this and not "quantize everything, then put one layer back to float": quantization noise
of separate layers adds up roughly independently at the output, so the noise a layer causes
alone is what keeping it float removes — and measured alone it is not buried under the noise
of all the others (with everything quantized, putting back one of N layers changes the output
SQNR by about 10 log10(N / (N - 1)) dB, within the sampling noise).  ``keep_float=auto:N``
keeps the N lowest-scoring layers in float by adding them to ``exclude_nodes``.

Cost: one quantization and ``len(samples)`` inferences per layer, O(layers x (model +
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

#: ``quantize_only(model, exclude_nodes)``: quantize ``model`` in place, leaving ``exclude_nodes`` float.
QuantizeFn = Callable[[Model, frozenset[str]], None]


@dataclass(slots=True)
class LayerSensitivity:
    node: str
    op: str
    sqnr_db: float  # output SQNR with this layer alone quantized (lower: more sensitive)
    kept_float: bool = False

    def to_json(self) -> dict[str, Any]:
        finite = None if math.isinf(self.sqnr_db) or math.isnan(self.sqnr_db) else self.sqnr_db
        return {"node": self.node, "op": self.op, "sqnr_db": finite, "kept_float": self.kept_float}


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


def rank_layers(model: Model, quantize_only: QuantizeFn, layers: Sequence[tuple[str, str, str]],
                samples: Sequence[Mapping[str, np.ndarray]], *,
                on_layer: Callable[[int, int, str], None] | None = None) -> list[LayerSensitivity]:
    """Each layer's output SQNR when it alone is quantized, most sensitive (lowest) first."""
    everything = frozenset(node.name for node in model.graph)
    reference = ModelRunner(model)
    try:
        expected = [reference.run(sample) for sample in samples]
    finally:
        reference.close()
    scores = []
    for i, (name, op, _tensor) in enumerate(layers):
        if on_layer is not None:
            on_layer(i, len(layers), name)
        candidate = clone_model(model)
        quantize_only(candidate, everything - {name})
        scores.append(LayerSensitivity(name, op, _output_sqnr(candidate, samples, expected)))
    if on_layer is not None:
        on_layer(len(layers), len(layers), "done")
    return sorted(scores, key=lambda s: s.sqnr_db)


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
