"""The numpy interpreter for TFLite models (subgraph 0), float and integer-only.

``Interpreter(model, rounding="double")`` checks once that every operator has a
kernel (an unsupported one is refused by name before anything runs, never
approximated), then ``run(feeds)`` executes the operators in file order, which
is TFLite's execution order.  ``trace(feeds)`` returns every tensor by name:
graph inputs, every intermediate, outputs — what ``experimental_preserve_all_tensors``
gives in LiteRT.  Cost: the sum of the kernels' costs; memory: every tensor is
kept only when tracing, else freed after its last use.

The operators run from a plan built once (kernel, inputs, outputs, tensors to
free); kernels keep what they derive from constants (weight matrices,
multipliers, requantization tables, scratch buffers) in per-operator caches, so
one interpreter runs one model at a time: ``run``/``trace`` take a lock, and
threads wanting parallel runs use one interpreter each.  ``jit`` selects the
compiled loops for requantization, depthwise convolution and few-row fully
connected layers (:mod:`.jit`; default: when numba is installed) — the same
integers as the numpy path, about twice as fast.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import VerificationError
from ...formats import load
from ...ir import Graph, Model, Node, Value
from ..base import InputSpec, check_feeds
from . import (  # noqa: F401  (register the kernels and their prepare checks)
    control_flow,
    conv,
    elementwise,
    index_ops,
    math_ops,
    pool,
    reduce_ops,
    sequence,
    shape_ops,
    sparse,
)
from ._common import INT16_KERNELS, KERNELS, OpContext
from .fixedpoint import ROUNDING_MODES
from .jit import wanted
from .prepare import check_graph, static_input_shape

__all__ = ["Interpreter", "supported_operators"]

#: what a kernel raises on operands prepare could not check (their values come at run time)
_KERNEL_FAILURES = (ArithmeticError, ValueError, IndexError, TypeError, MemoryError)


def supported_operators() -> list[str]:
    """BuiltinOperator names the reference interpreter implements, sorted."""
    return sorted(KERNELS)


class Interpreter:
    """Run a TFLite model's main graph with the reference kernels."""

    __slots__ = ("_cache", "_checked", "_last_use", "_lock", "_order", "_steps", "graph", "inputs", "jit",
                 "label", "outputs", "rounding")

    def __init__(self, model: Model | str | os.PathLike[str], *, rounding: str = "double",
                 jit: bool | None = None) -> None:
        if isinstance(model, (str, os.PathLike)):
            model = load(model)
        if model.format != "tflite":
            raise VerificationError(
                f"the reference interpreter runs TFLite models only, not {model.format} ones"
            )
        if rounding not in ROUNDING_MODES:
            raise VerificationError(f"unknown rounding {rounding!r}; expected one of {', '.join(ROUNDING_MODES)}")
        self.rounding = rounding
        #: hot loops compiled with numba (None: when installed; see :mod:`.jit`)
        self.jit = wanted(jit)
        self.graph: Graph = model.graph
        self.label = str(model.source_path) if model.source_path is not None else "<in-memory tflite model>"
        self._order: list[Node] = list(self.graph)
        for node in self._order:
            if node.op not in KERNELS or node.domain == "custom":
                raise VerificationError(
                    f"the reference interpreter cannot run this model: operator {node.op} "
                    f"({node.name!r}) is not implemented"
                )
            for out in node.outputs:  # 16x8 quantization has kernels of its own, opted in per operator
                if out.quant is not None and out.quant.scale.size and out.dtype is not None \
                        and (out.dtype.value == "int4" or (out.dtype.value == "int16" and node.op not in INT16_KERNELS)):
                    raise VerificationError(
                        f"the reference interpreter cannot run this model: operator {node.op} "
                        f"({node.name!r}) has {out.dtype.value}-quantized output, which is not implemented"
                    )
        self.inputs = [InputSpec(v.name, v.dtype, v.shape) for v in self.graph.inputs]  # type: ignore[arg-type]
        # what the kernels assume (scales, shifts, operand shapes, sizes), for the file's input shapes;
        # again for other shapes when a run feeds them (see prepare.py)
        shapes = tuple(static_input_shape(v) for v in self.graph.inputs)
        check_graph(self.graph, shapes, rounding)
        self._checked: set[tuple[object, ...]] = {shapes}
        self.outputs = [v.name for v in self.graph.outputs]
        last: dict[Value, int] = {}
        for i, node in enumerate(self._order):
            for v in node.inputs:
                if v is not None:
                    last[v] = i
        self._last_use = last
        self._cache: dict[Node, dict[str, object]] = {node: {} for node in self._order}
        # the execution plan: per operator its kernel, inputs, outputs and the
        # non-output intermediates whose last reader it is
        fed = set(self.graph.inputs) | set(self.graph.states)
        self._steps = [
            (KERNELS[node.op], node, self._sources(node, fed), node.outputs,
             [v for v in dict.fromkeys(node.inputs) if v is not None and last.get(v) == i
              and not v.is_graph_output and v.const is None])
            for i, node in enumerate(self._order)
        ]
        # kernels keep scratch buffers in their caches: one run at a time per interpreter
        self._lock = threading.Lock()

    def run(
        self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """The requested tensors (default: the graph outputs), keyed by name."""
        wanted = list(outputs) if outputs is not None else list(self.outputs)
        every = self._execute(feeds, keep=set(wanted))
        missing = [n for n in wanted if n not in every]
        if missing:
            raise VerificationError(f"{self.label}: no tensor named {missing[0]!r}")
        return {n: every[n] for n in wanted}

    def trace(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every non-constant tensor (inputs, intermediates, outputs), keyed by name, in execution order."""
        return self._execute(feeds, keep=None)

    def profile(self, feeds: Mapping[str, np.ndarray], repeat: int = 10) -> dict[str, float]:
        """Seconds per operator type for one run: each operator's fastest of ``repeat``
        runs (after a warm-up run), summed per type, most expensive first."""
        check_feeds(self.inputs, feeds, label=self.label)
        self._check_shapes(feeds)
        best = [float("inf")] * len(self._steps)
        with self._lock:
            self._execute_locked(feeds, set())  # warm-up: plans, tables, runners
            for _ in range(max(repeat, 1)):
                self._execute_locked(feeds, set(), best)
        totals: dict[str, float] = {}
        for (_, node, *_rest), seconds in zip(self._steps, best, strict=True):
            totals[node.op] = totals.get(node.op, 0.0) + seconds
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))

    def _execute(self, feeds: Mapping[str, np.ndarray], keep: set[str] | None) -> dict[str, np.ndarray]:
        check_feeds(self.inputs, feeds, label=self.label)
        self._check_shapes(feeds)
        with self._lock:
            return self._execute_locked(feeds, keep)

    def _check_shapes(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Run the prepare checks for input shapes not seen yet (one tuple lookup otherwise)."""
        shapes = tuple(np.shape(feeds[v.name]) for v in self.graph.inputs)
        if shapes not in self._checked:
            check_graph(self.graph, shapes, self.rounding)
            self._checked.add(shapes)

    def _execute_locked(self, feeds: Mapping[str, np.ndarray], keep: set[str] | None,
                        best: list[float] | None = None) -> dict[str, np.ndarray]:
        """One run; with ``best``, each operator's time is folded into its minimum there.

        An operator whose kernel left a runner (``cache["compiled"] = (shape, dtype, fn)``:
        a function of its first input alone, the others being constants) runs it directly
        when that input's shape and dtype match — no context, no kernel prologue."""
        env: dict[Value, np.ndarray] = {}
        kept: dict[str, np.ndarray] = {}
        for v in self.graph.inputs:
            env[v] = np.asarray(feeds[v.name])
            if keep is None or v.name in keep:
                kept[v.name] = env[v]
        rounding, caches, read, jit, clock = self.rounding, self._cache, self._read, self.jit, time.perf_counter
        node: Node | None = None
        # float kernels overflow to inf silently, as the C kernels do
        with np.errstate(all="ignore"):
            try:
                for i, (fn, node, sources, outputs, frees) in enumerate(self._steps):
                    arrays = [const if v is None else env[v] if v in env else read(v) for v, const in sources]
                    cache = caches[node]
                    start = clock() if best is not None else 0.0
                    runner = cache.get("compiled")
                    if runner is not None and arrays and (x := arrays[0]) is not None and x.shape == runner[0] \
                            and x.dtype == runner[1]:
                        results = [runner[2](x)]
                    else:
                        results = fn(OpContext(node, arrays, rounding, cache, jit))
                    if best is not None:
                        best[i] = min(best[i], clock() - start)
                    for value, array in zip(outputs, results, strict=False):
                        env[value] = array
                        if keep is None or value.name in keep:
                            kept[value.name] = array
                    if keep is not None:
                        for used in frees:
                            env.pop(used, None)
            except _KERNEL_FAILURES as e:  # what prepare could not see (values known only at run time)
                where = f"operator {node.op} ({node.name!r})" if node is not None else "this model"
                raise VerificationError(
                    f"the reference interpreter cannot run {where}: its inputs do not fit it "
                    f"({type(e).__name__}: {' '.join(str(e).split())[:200]})"
                ) from None
        return kept

    @staticmethod
    def _sources(node: Node, fed: set[Value]) -> list[tuple[Value | None, np.ndarray | None]]:
        """Per input ``(value, None)`` for tensors a run provides (graph inputs, states,
        operator outputs — even when the file also gives them a buffer: the feed wins),
        ``(None, array)`` for constants (read from the model once, not on every run) and
        ``(None, None)`` for omitted optional inputs; ``fed``: the graph's inputs and states."""
        return [(None, v.const.numpy()) if v is not None and v.const is not None and v not in fed
                and v.producer is None else (v, None) for v in node.inputs]

    @staticmethod
    def _read(value: Value) -> np.ndarray:
        """A provided tensor this run has not set: its buffer from the file (a state's
        initial value), else an error."""
        if value.const is not None:
            return value.const.numpy()
        raise VerificationError(f"tensor {value.name!r} is read before any operator writes it")
