"""Runtime shapes of chosen values at two sizes of every dynamic input dim, for fusions that need equal shapes.

onnxruntime's fused kernels (``SkipLayerNormalization`` and its simplified form) add their two
inputs without ONNX broadcasting: they need equal shapes, or a skip of shape ``(1, S, H)`` /
``(S, H)``.  When the IR's shapes of a residual sum's two summands are not statically equal —
after a dynamic export, shape inference often names the same runtime dim twice
(``batch`` and ``unk__3``) — the fusion asks this probe: the model, with the summands made
extra outputs, runs on onnxruntime twice, with every dynamic input dim set to a different
small size each time, chosen by axis: axis 0, the batch, gets 2 then 3; axis 1, the sequence,
5 then 7; axis ``i`` > 1 gets ``4 + i`` then ``6 + i``.  A named dim takes the size of the axis
where it first appears, in input order (a mask's ``(batch, 1, seq, seq)`` follows the ids'
``(batch, seq)``); by axis rather than by name because exporters name one runtime dim
differently on different inputs (the dynamo exporter's ``s21`` and ``s6`` for one batch).  Integer inputs
all zeros (a valid index into any table, so token ids and type ids cannot go out of range),
float inputs seeded normal.  A fusion is allowed when the shapes agree in both runs.

This is evidence at two sizes of every dynamic dim, not a proof (onnxruntime's own optimizer
compares symbolic shapes at one size); the fused model is then checked at other sizes by
the tests.  If the probe model cannot run (an input whose values are sizes, a
model whose inputs zeros do not fit), ``error`` says why and the fusion is refused with it.

Cost: two onnxruntime runs of the model, once per transform call before it rewrites anything,
only when some candidate's shapes are not statically known to fit; values inside subgraphs are
not probed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ...errors import GraphwrightError
from ...ir import DType, Model, Value
from ...runtime import ModelSource, input_specs, run

__all__ = ["ShapeProbe", "PROBE_SIZES"]

#: The two sizes given to a dynamic input dim at axis ``i``.
PROBE_SIZES: tuple[Callable[[int], int], Callable[[int], int]] = (
    lambda i: (2, 5)[i] if i < 2 else 4 + i,
    lambda i: (3, 7)[i] if i < 2 else 6 + i,
)

Shape = tuple[int, ...]


class ShapeProbe:
    """Lazily measured runtime shapes of the values ``candidates()`` names (main graph only)."""

    def __init__(self, model: Model, candidates: Callable[[], Iterable[Value]]) -> None:
        self.model = model
        self._candidates = candidates
        self._shapes: dict[Value, list[Shape]] | None = None
        self.error = ""

    def measure_if(self, needed: bool) -> None:
        """Measure now (before any rewrite of the sweep) when ``needed``; else measure nothing."""
        if self._shapes is None:
            self._shapes = self._measure() if needed else {}

    def alias(self, new: Value, old: Value) -> None:
        """``new`` (a fused node's output) carries what ``old`` carried: the same runtime shapes."""
        if self._shapes is not None and old in self._shapes:
            self._shapes[new] = self._shapes[old]

    def shapes(self, value: Value) -> list[Shape] | None:
        """The shapes ``value`` had in the two runs, or None (not a candidate, or the probe failed)."""
        if value.shape is not None and all(isinstance(d, int) for d in value.shape):
            return [tuple(int(d) for d in value.shape)] * len(PROBE_SIZES)  # type: ignore[arg-type]
        if self._shapes is None:
            self._shapes = self._measure()
        return self._shapes.get(value)

    def _measure(self) -> dict[Value, list[Shape]]:
        graph = self.model.graph
        inside = {id(v) for node in graph for v in node.outputs}
        candidates = list(dict.fromkeys(self._candidates()))
        inputs = {v.name: v for v in candidates if v.is_graph_input and not v.is_initializer}
        wanted = [v for v in candidates if id(v) in inside and (v.is_graph_output or v.dtype is not None)]
        if not wanted and not inputs:
            return {}
        original = graph.outputs
        names = [v.name for v in wanted]
        graph.set_outputs([*original, *(v for v in wanted if not v.is_graph_output)])
        try:
            source = ModelSource.from_model(self.model)
        finally:
            graph.set_outputs(original)
        specs = input_specs(self.model)
        first_axis: dict[str, int] = {}
        for spec in specs:
            for axis, dim in enumerate(spec.shape or ()):
                if isinstance(dim, str):
                    first_axis.setdefault(dim, axis)
        found: dict[Value, list[Shape]] = {v: [] for v in [*wanted, *inputs.values()]}
        for size in PROBE_SIZES:
            feeds: dict[str, np.ndarray] = {}
            for spec in specs:
                if spec.shape is None:
                    self.error = f"input {spec.name!r} has no known rank, so it can't be fed for the shape probe"
                    return {}
                shape = [d if isinstance(d, int) else size(first_axis.get(d, axis) if isinstance(d, str) else axis)
                         for axis, d in enumerate(spec.shape)]
                np_type = spec.dtype.numpy
                if np_type is None:
                    self.error = f"input {spec.name!r} of type {spec.dtype.value} can't be fed for the shape probe"
                    return {}
                if spec.dtype.is_float:
                    feeds[spec.name] = np.random.default_rng(0).standard_normal(shape).astype(np_type)
                else:
                    feeds[spec.name] = np.zeros(shape, np_type if spec.dtype is not DType.BOOL else np.bool_)
            try:
                out = run(source, feeds, backend="onnxruntime", outputs=names) if names else {}
            except GraphwrightError as error:
                self.error = f"the shape probe did not run on onnxruntime: {str(error).splitlines()[0][:200]}"
                return {}
            for value in wanted:
                found[value].append(tuple(int(d) for d in np.shape(out[value.name])))
            for name, value in inputs.items():
                found[value].append(tuple(int(d) for d in feeds[name].shape))
        return found
