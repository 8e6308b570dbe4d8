"""Layer-by-layer comparison of the reference interpreter with another backend.

``compare_layers(model, feeds, other="litert-ref")`` runs the model on the
reference interpreter (keeping every tensor) and on ``other`` (LiteRT keeps its
intermediates with ``experimental_preserve_all_tensors``), then compares every
operator's outputs in execution order: elements that differ, the largest
difference, and the first layer whose difference exceeds ``tolerance``.
O(total tensor size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...formats import load
from ...formats.tflite import read_model
from ...ir import Model
from ..base import ModelSource
from ..execute import Job, ModelLike, execute
from .interpreter import Interpreter

__all__ = ["LayerDiff", "LayerReport", "compare_layers"]


@dataclass(frozen=True, slots=True)
class LayerDiff:
    """One operator output compared: how many elements differ and by how much."""

    index: int  # operator position in execution order
    op: str
    tensor: str
    size: int
    mismatched: int  # elements whose difference exceeds the tolerance
    exact: int  # elements exactly equal
    max_abs_diff: float

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "op": self.op, "tensor": self.tensor, "size": self.size,
                "mismatched": self.mismatched, "exact": self.exact, "max_abs_diff": self.max_abs_diff}


@dataclass(slots=True)
class LayerReport:
    """All compared outputs, in execution order, and the first that differs."""

    other: str
    tolerance: float
    layers: list[LayerDiff] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # tensors the other runtime did not keep

    @property
    def first_difference(self) -> LayerDiff | None:
        return next((d for d in self.layers if d.mismatched), None)

    @property
    def exact_share(self) -> float:
        """Fraction of all compared elements that are exactly equal."""
        total = sum(d.size for d in self.layers)
        return 1.0 if total == 0 else sum(d.exact for d in self.layers) / total

    def summary(self) -> str:
        first = self.first_difference
        share = f"{100 * self.exact_share:.3f}% of elements identical"
        if first is None:
            return f"all {len(self.layers)} layers agree with {self.other} (tolerance {self.tolerance:g}); {share}"
        return (f"first difference vs {self.other} at layer {first.index} {first.op} -> {first.tensor!r}: "
                f"{first.mismatched}/{first.size} elements differ, max |diff| {first.max_abs_diff:g}; {share}")

    def to_json(self) -> dict[str, object]:
        first = self.first_difference
        return {"other": self.other, "tolerance": self.tolerance, "exact_share": self.exact_share,
                "first_difference": None if first is None else first.to_json(),
                "layers": [d.to_json() for d in self.layers], "missing": self.missing}


def compare_layers(
    model: ModelLike,
    feeds: Mapping[str, np.ndarray],
    *,
    other: str = "litert-ref",
    rounding: str = "double",
    tolerance: float = 0.0,
    isolate: bool = False,
    jit: bool | None = None,
    flavor: str = "litert",
) -> LayerReport:
    """Compare every operator output of the reference interpreter with ``other``
    (``jit``: the interpreter's compiled loops, see :mod:`.jit`; ``flavor``: whose
    kernels it computes as, ``"tflm"`` to match TFLite Micro, see :mod:`.interpreter`)."""
    source = ModelSource.of(model)
    ir = model if isinstance(model, Model) else _load(source)
    interp = Interpreter(ir, rounding=rounding, jit=jit, flavor=flavor)
    mine = interp.trace(feeds)
    names = [v.name for node in ir.graph for v in node.outputs]
    theirs = execute(source, dict(feeds), Job(backend=other, outputs=names), isolate=isolate).outputs
    report = LayerReport(other, tolerance)
    for i, node in enumerate(ir.graph):
        for v in node.outputs:
            if v.name not in theirs:
                report.missing.append(v.name)
                continue
            a = np.asarray(mine[v.name]).astype(np.float64)
            b = np.asarray(theirs[v.name]).astype(np.float64)
            if a.shape != b.shape:
                report.layers.append(LayerDiff(i, node.op, v.name, a.size, a.size, 0, float("inf")))
                continue
            diff = np.abs(a - b)
            report.layers.append(LayerDiff(
                i, node.op, v.name, int(a.size), int(np.count_nonzero(diff > tolerance)),
                int(np.count_nonzero(diff == 0)), float(diff.max()) if diff.size else 0.0))
    return report


def _load(source: ModelSource) -> Model:
    if source.path is not None:
        return load(source.path)
    return read_model(source.data, source.label)
