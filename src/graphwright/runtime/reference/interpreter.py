"""The numpy interpreter for TFLite models, float and integer-only.

``Interpreter(model, rounding="double")`` checks once that every operator has a
kernel (an unsupported one is refused by name before anything runs, never
approximated), then ``run(feeds)`` executes the main graph's operators in file
order, which is TFLite's execution order.  ``trace(feeds)`` returns every tensor
of the main graph by name: graph inputs, every intermediate, outputs — what
``experimental_preserve_all_tensors`` gives in LiteRT.  Cost: the sum of the
kernels' costs; memory: every tensor is kept only when tracing, else freed after
its last use.  A run (not a trace) leaves out a LOGISTIC/TANH whose every reader
says it does not read it and whose output is not asked for (an 8-bit swish
``x·sigmoid(x)`` reads one table of ``x``, see ``_Plan.skipped``).

Every graph has its own plan (kernel, inputs, outputs, tensors to free per
operator), built once: the main graph and each subgraph the control-flow
operators call (WHILE's condition and body, IF's branches, CALL_ONCE's
initializer, see :mod:`.control_flow`), which reach the other plans through
:class:`Subgraphs`.  What LiteRT keeps from one ``Invoke`` to the next is kept
here too: variable tensors (the recurrent state of the fused sequence
operators, written in place; :meth:`Interpreter.reset_variables` zeroes them as
``reset_all_variables`` does), resource variables and which CALL_ONCE
initializers have run.  When that state is reset follows LiteRT's interpreter
(``tflite/core/subgraph.cc``), checked against it invocation by invocation in
``tests/runtime/reference/test_state_across_runs.py``:

* variable tensors carry over from one run to the next; they are zeroed (int8: the
  zero point) by :meth:`Interpreter.reset_variables` and whenever the input shapes
  change from the previous run — LiteRT's ``resize_tensor_input`` then makes
  ``allocate_tensors`` re-plan and re-prepare everything, which resets variable
  tensors (an ``allocate_tensors`` with unchanged shapes does nothing);
* resource variables and CALL_ONCE's "initialized" mark live as long as the
  interpreter: neither ``reset_all_variables`` nor a re-allocation touches them;
* the seeded generators of RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL and MULTINOMIAL
  go on from run to run, and start over whenever LiteRT re-prepares their operator:
  on a change of input shapes (above), and — within a run — when an earlier
  operator's output changed shape since the previous run (LiteRT re-prepares every
  operator after one that resized a dynamic output, e.g. a RANDOM_UNIFORM whose
  shape is a graph input).

Kernels keep what they derive from constants (weight matrices, multipliers,
requantization tables, scratch buffers) in per-operator caches, so one
interpreter runs one model at a time: ``run``/``trace`` take a lock, and threads
wanting parallel runs use one interpreter each.  ``jit`` selects the compiled
loops for requantization, depthwise convolution and few-row fully connected
layers (:mod:`.jit`; default: when numba is installed) — the same integers as
the numpy path, about twice as fast.

``flavor`` says whose kernels the operators compute as: ``"litert"`` (default),
LiteRT's reference kernels (``BUILTIN_REF``); ``"tflm"``, TensorFlow Lite Micro's,
what runs on the microcontroller.  They differ on a few operators, each kernel
branching on ``OpContext.flavor`` in one place: int8 and 16x8 FULLY_CONNECTED
(TFLM requantizes as the convolutions do — int8 with two roundings, 16x8 with the
int64 ``MultiplyByQuantizedMultiplier`` — where LiteRT's reference kernel rounds
once, or in double), quantized RELU6 (TFLM clamps to ``[zp_in, q_in(6)]`` in the
input's quantization and copies the integers, ignoring the output's), the int8
UNIDIRECTIONAL_SEQUENCE_LSTM (TFLM's own integer implementation, see
:mod:`.lstm_integer`), int16 RSQRT (the 8-bit formula, not LiteRT's table), int16
ADD/SUB (never LiteRT's power-of-two path), quantized MUL (its multiplier computed
in double, LiteRT's in float32) and int16 SOFTMAX (its tables built in float32,
LiteRT's in double).  TFLM rounds twice, so ``flavor="tflm"`` takes ``rounding="double"``.
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
from . import (  # noqa: F401  (every module that registers kernels and their prepare checks, see _common.kernel)
    activations,
    add_sub_mul,
    binary_ops,
    complex_ops,
    control_flow,
    conv,
    conv_3d,
    depthwise_conv,
    detection,
    fully_connected,
    index_ops,
    lsh_projection,
    lstm,
    math_ops,
    matmul,
    misc_ops,
    normalization,
    pool,
    prepare_rules,
    quantize_ops,
    random_ops,
    reduce_ops,
    rnn,
    shape_ops,
    softmax,
    sparse,
    svdf,
    transpose_conv,
)
from ._common import CUSTOM_KERNELS, FLAVORS, INT16_KERNELS, KERNELS, REFUSED, OpContext
from .control_flow import SUBGRAPH_OPS, SUBGRAPHS_KEY, called_subgraphs, check_call
from .fixedpoint import ROUNDING_MODES
from .jit import wanted
from .prepare import check_graph, static_input_shape

__all__ = ["Interpreter", "Subgraphs", "supported_operators"]

#: what a kernel raises on operands prepare could not check (their values come at run time)
_KERNEL_FAILURES = (ArithmeticError, ValueError, IndexError, TypeError, MemoryError)


#: operators a run may leave out when every reader of their output says it does not read it
_SKIPPABLE = frozenset({"LOGISTIC", "TANH"})
#: operators with a seeded generator in their cache (``"philox"``, see :mod:`.random_ops`), which
#: LiteRT seeds anew each time it prepares them
_SEEDED_OPS = frozenset({"RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL"})
#: pure operators whose outputs, given constant or shape-only inputs, are the same on every run
#: with the same input shapes (see ``_Plan.freeze``)
_STATIC_OPS = frozenset({"SHAPE", "STRIDED_SLICE", "PACK", "SLICE", "GATHER", "CONCATENATION", "SQUEEZE",
                         "EXPAND_DIMS", "CAST", "RESHAPE"})


def supported_operators() -> list[str]:
    """BuiltinOperator names the reference interpreter implements, sorted."""
    return sorted(KERNELS)


class _Plan:
    """One graph's execution plan: per operator its kernel, inputs, outputs and the
    non-output intermediates whose last reader it is; the operators' caches; the
    graph's variable tensors, which persist from run to run."""

    __slots__ = ("caches", "frozen", "frozen_shapes", "graph", "last_seeded", "out_shapes", "seeded", "skips",
                 "states", "static", "steps", "warm")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        #: steps whose outputs depend on the input shapes only (see :meth:`freeze`), and their outputs
        #: for the input shapes ``frozen_shapes``
        self.static: frozenset[int] = frozenset()
        self.frozen: dict[int, list[np.ndarray]] = {}
        self.frozen_shapes: tuple[object, ...] | None = None
        #: kept tensor names -> the steps a run keeping them leaves out (see :meth:`skipped`)
        self.skips: dict[frozenset[str], frozenset[int]] = {}
        #: a run has completed: the kernels have said which inputs they do not read
        self.warm = False
        order = list(graph)
        last: dict[Value, int] = {}
        for i, node in enumerate(order):
            for v in node.inputs:
                if v is not None:
                    last[v] = i
        fed = set(graph.inputs) | set(graph.states)
        self.steps = [
            (KERNELS[node.op], node, _sources(node, fed), node.outputs,
             [v for v in dict.fromkeys(node.inputs) if v is not None and last.get(v) == i
              and not v.is_graph_output and v.const is None])
            for i, node in enumerate(order)
        ]
        self.caches: dict[Node, dict[str, object]] = {node: {} for node in order}
        #: the steps with a seeded generator, the last of them (-1: none), and the output shapes
        #: of the steps before it in the previous run (see :meth:`execute`)
        self.seeded = frozenset(i for i, node in enumerate(order) if node.op in _SEEDED_OPS)
        self.last_seeded = max(self.seeded, default=-1)
        self.out_shapes: dict[int, tuple[tuple[int, ...], ...]] = {}
        self.states: dict[Value, np.ndarray] = {}
        self.reset_states()

    def reset_states(self) -> None:
        """Variable tensors as LiteRT resets them: zeros (int8: the zero point), whatever the file holds."""
        for v in self.graph.states:
            shape = static_input_shape(v)
            if shape is None or v.dtype is None or v.dtype.numpy is None:
                raise VerificationError(f"the reference interpreter cannot run this model: variable tensor "
                                        f"{v.name!r} has no static shape and numeric type")
            fill = int(v.quant.zero_point.reshape(-1)[0]) if v.quant is not None and v.quant.zero_point.size \
                and v.dtype.value == "int8" else 0
            self.states[v] = np.full(shape, fill, v.dtype.numpy)

    def reseed(self) -> None:
        """Start every seeded generator over, as LiteRT's Prepare of these operators does."""
        for i in self.seeded:
            self.caches[self.steps[i][1]].pop("philox", None)

    def freeze(self) -> None:
        """Mark the steps a run may compute once: the shape arithmetic after SHAPE (:data:`_STATIC_OPS`
        reading only constants and such steps' outputs) — EfficientNet's squeeze-and-excite reshapes
        (SHAPE, STRIDED_SLICE, PACK) on every block.  Their outputs are kept from run to run while the
        input shapes stay and every SHAPE gives what it gave before (SHAPEs run every time: a shape
        may depend on data); a run returns copies of kept tensors it is asked for.  Not graph
        outputs nor variables; the main graph only (a subgraph's input shapes change from call to
        call); ``trace`` neither reads nor keeps them."""
        static: set[int] = set()
        made: set[Value] = set()
        for i, (_, node, sources, outputs, _frees) in enumerate(self.steps):
            if node.op not in _STATIC_OPS or any(v.is_graph_output or v in self.states for v in outputs):
                continue
            if node.op != "SHAPE" and any(v is not None and v not in made for v, _const in sources):
                continue
            static.add(i)
            made.update(outputs)
        self.static = frozenset(static)

    def skipped(self, keep: set[str]) -> frozenset[int]:
        """The steps a run keeping ``keep`` need not run: a LOGISTIC or TANH whose output is not
        kept and which every reader has said it does not read (``cache["unread"]``, the input
        index: an 8-bit MUL of the gate by its own input reads one 256-entry table of the input
        instead, see ``add_sub_mul._gated_table``).  Worked out once per ``keep`` after a first run."""
        key = frozenset(keep)
        found = self.skips.get(key)
        if found is not None:
            return found
        where = {node: i for i, (_, node, *_rest) in enumerate(self.steps)}
        skip = set()
        for i, (_, node, _sources, outputs, _frees) in enumerate(self.steps):
            if node.op not in _SKIPPABLE or len(outputs) != 1:
                continue
            out = outputs[0]
            uses = out.uses()
            if out.is_graph_output or out.name in keep or not uses or out in self.states:
                continue
            if all(user in where and self.caches[user].get("unread") == index for user, index in uses):
                skip.add(i)
        found = self.skips[key] = frozenset(skip)
        return found

    def execute(self, env: dict[Value, np.ndarray], keep: set[str] | None, kept: dict[str, np.ndarray],
                rounding: str, jit: bool, flavor: str, best: list[float] | None = None,
                given: Mapping[str, np.ndarray] | None = None) -> None:
        """Run the operators on ``env`` (inputs set), storing the outputs there and, by name, the
        tensors ``keep`` names (None: every one) in ``kept``; with ``best``, each operator's time
        is folded into its minimum there; an output named in ``given`` is replaced by that array
        once its operator has run (see :meth:`Interpreter.trace`).

        An operator whose kernel left a runner (``cache["compiled"] = (shape, dtype, fn)``:
        a function of its first input alone, the others being constants) runs it directly
        when that input's shape and dtype match — no context, no kernel prologue."""
        env.update(self.states)  # written in place by the stateful kernels
        caches, clock = self.caches, time.perf_counter
        last_seeded, resized = self.last_seeded, False
        skip = self.skipped(keep) if keep is not None and self.warm else frozenset()
        static, frozen = (self.static, self.frozen) if keep is not None else (frozenset(), {})
        node: Node | None = None
        try:
            for i, (fn, node, sources, outputs, frees) in enumerate(self.steps):
                if skip and i in skip:  # an output no one reads (its readers see None)
                    env[outputs[0]] = None  # type: ignore[assignment]
                    continue
                if static and i in frozen and node.op != "SHAPE":  # computed by an earlier run (SHAPEs checked)
                    for value, array in zip(outputs, frozen[i], strict=False):
                        env[value] = array
                        if value.name in keep:  # type: ignore[operator]
                            kept[value.name] = array.copy()  # the caller's own: the frozen one is reused
                    continue
                arrays = [const if v is None else env[v] if v in env else _read(v) for v, const in sources]
                cache = caches[node]
                if resized and i in self.seeded:  # LiteRT re-prepared it after an earlier output resized
                    cache.pop("philox", None)
                start = clock() if best is not None else 0.0
                runner = cache.get("compiled")
                if runner is not None and arrays and (x := arrays[0]) is not None and x.shape == runner[0] \
                        and x.dtype == runner[1]:
                    results = [runner[2](x)]
                else:
                    results = fn(OpContext(node, arrays, rounding, cache, jit, flavor))
                if best is not None:
                    best[i] = min(best[i], clock() - start)
                if given:
                    results = [given.get(v.name, a) for v, a in zip(outputs, results, strict=False)]
                if i < last_seeded:  # did an output change shape since the previous run?
                    shapes = tuple(np.shape(a) for a in results)
                    resized = resized or self.out_shapes.get(i, shapes) != shapes
                    self.out_shapes[i] = shapes
                if static and i in static:
                    if node.op == "SHAPE" and i in frozen and not _same(frozen[i][0], results[0]):
                        frozen.clear()  # a shape moved (a data-dependent one): recompute what follows
                    frozen[i] = results
                    results = [a.copy() if v.name in keep else a  # type: ignore[operator]
                               for v, a in zip(outputs, results, strict=False)]
                for value, array in zip(outputs, results, strict=False):
                    env[value] = array
                    if keep is None or value.name in keep:
                        kept[value.name] = array
                if keep is not None:
                    for used in frees:
                        env.pop(used, None)
            self.warm = True
        except _KERNEL_FAILURES as e:  # what prepare could not see (values known only at run time)
            where = f"operator {node.op} ({node.name!r})" if node is not None else "this model"
            raise VerificationError(
                f"the reference interpreter cannot run {where}: its inputs do not fit it "
                f"({type(e).__name__}: {' '.join(str(e).split())[:200]})"
            ) from None


class Subgraphs:
    """What the control-flow and resource-variable kernels share during a run (they find it
    in their cache under :data:`.control_flow.SUBGRAPHS_KEY`): the plans of the model's graphs,
    by subgraph index, and the resource variables, keyed by id as LiteRT's ``resources``
    (ids handed out per ``(container, shared_name)`` by VAR_HANDLE)."""

    __slots__ = ("flavor", "jit", "plans", "resource_ids", "resources", "rounding")

    def __init__(self, plans: dict[int, _Plan], rounding: str, jit: bool, flavor: str) -> None:
        self.plans, self.rounding, self.jit, self.flavor = plans, rounding, jit, flavor
        self.resource_ids: dict[tuple[str, str], int] = {}
        self.resources: dict[int, np.ndarray] = {}

    def call(self, index: int, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Run subgraph ``index`` on ``arrays`` (its inputs, in order); its outputs, in order."""
        plan = self.plans[index]
        env = {v: a for v, a in zip(plan.graph.inputs, arrays, strict=True) if a is not None}
        plan.execute(env, set(), {}, self.rounding, self.jit, self.flavor)
        return [env[v] if v in env else _read(v) for v in plan.graph.outputs]


class Interpreter:
    """Run a TFLite model's main graph (and the subgraphs it calls) with the reference kernels."""

    __slots__ = ("_cache", "_checked", "_last_shapes", "_lock", "_main", "_subgraphs", "flavor", "graph", "inputs",
                 "jit", "label", "outputs", "rounding")

    def __init__(self, model: Model | str | os.PathLike[str], *, rounding: str = "double",
                 jit: bool | None = None, flavor: str = "litert") -> None:
        if isinstance(model, (str, os.PathLike)):
            model = load(model)
        if model.format != "tflite":
            raise VerificationError(
                f"the reference interpreter runs TFLite models only, not {model.format} ones"
            )
        if rounding not in ROUNDING_MODES:
            raise VerificationError(f"unknown rounding {rounding!r}; expected one of {', '.join(ROUNDING_MODES)}")
        if flavor not in FLAVORS:
            raise VerificationError(f"unknown kernel flavor {flavor!r}; expected one of {', '.join(FLAVORS)}")
        if flavor == "tflm" and rounding != "double":
            raise VerificationError("flavor 'tflm' computes as TFLM's kernels, which round twice: rounding='double'")
        self.rounding = rounding
        #: whose kernels the operators compute as (see the module docstring)
        self.flavor = flavor
        #: hot loops compiled with numba (None: when installed; see :mod:`.jit`)
        self.jit = wanted(jit)
        self.graph: Graph = model.graph
        self.label = str(model.source_path) if model.source_path is not None else "<in-memory tflite model>"
        graphs = model.graphs
        reached = called_subgraphs(graphs)  # subgraph indices reachable from the main graph
        for index in (0, *reached):
            for node in graphs[index]:
                _check_kernel(node)
                check_call(node, graphs)
        self.inputs = [InputSpec(v.name, v.dtype, v.shape) for v in self.graph.inputs]  # type: ignore[arg-type]
        # what the kernels assume (scales, shifts, operand shapes, sizes), for the file's input shapes;
        # again for other shapes when a run feeds them (see prepare.py); subgraphs for their file shapes
        shapes = tuple(static_input_shape(v) for v in self.graph.inputs)
        check_graph(self.graph, shapes, rounding)
        for index in reached:
            check_graph(graphs[index], tuple(static_input_shape(v) for v in graphs[index].inputs), rounding)
        self._checked: set[tuple[object, ...]] = {shapes}
        self.outputs = [v.name for v in self.graph.outputs]
        plans = {index: _Plan(graphs[index]) for index in (0, *reached)}
        self._main = plans[0]
        self._main.freeze()
        self._cache = self._main.caches
        self._subgraphs = Subgraphs(plans, rounding, self.jit, flavor)
        for plan in plans.values():
            for node, cache in plan.caches.items():
                if node.op in SUBGRAPH_OPS:
                    cache[SUBGRAPHS_KEY] = self._subgraphs
        # kernels keep scratch buffers in their caches: one run at a time per interpreter
        self._lock = threading.Lock()
        #: the previous run's input shapes (None: no run yet); a change resets the state as LiteRT's re-allocation
        self._last_shapes: tuple[object, ...] | None = None

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

    def trace(self, feeds: Mapping[str, np.ndarray],
              given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every non-constant tensor of the main graph (inputs, intermediates, outputs), keyed by
        name, in execution order.  ``given``: main-graph tensors (by name) whose values are taken
        from there instead — each replaces its operator's output once the operator has run, so
        what reads it computes on it (checking every operator on another runtime's inputs, e.g.
        an integer QUANTIZE on LiteRT's float values where a float kernel's rounding differs)."""
        if given:
            known = {v.name: v for node in self.graph for v in node.outputs}
            for name, array in given.items():
                value = known.get(name)
                if value is None:
                    raise VerificationError(f"{self.label}: no operator output named {name!r} to take as given")
                if value.dtype is not None and value.dtype.numpy is not None \
                        and np.asarray(array).dtype != value.dtype.numpy:
                    raise VerificationError(f"{self.label}: given {name!r} is {np.asarray(array).dtype}, "
                                            f"the tensor {value.dtype.value}")
        return self._execute(feeds, keep=None, given=given)

    def reset_variables(self) -> None:
        """Zero every variable tensor (int8: its zero point), as LiteRT's ``reset_all_variables``;
        resource variables, CALL_ONCE and the random generators keep their state, as there."""
        with self._lock:
            for plan in self._subgraphs.plans.values():
                plan.reset_states()

    def _reallocated(self) -> None:
        """What LiteRT's ``allocate_tensors`` does after an input was resized: every operator prepared
        again (the random generators seeded anew) and the variable tensors reset."""
        for plan in self._subgraphs.plans.values():
            plan.reset_states()
            plan.reseed()
            plan.out_shapes.clear()

    def profile(self, feeds: Mapping[str, np.ndarray], repeat: int = 10) -> dict[str, float]:
        """Seconds per operator type for one run: each operator's fastest of ``repeat``
        runs (after a warm-up run), summed per type, most expensive first (a control-flow
        operator counts the subgraphs it runs)."""
        check_feeds(self.inputs, feeds, label=self.label)
        self._check_shapes(feeds)
        steps = self._main.steps
        best = [float("inf")] * len(steps)
        with self._lock:
            self._execute_locked(feeds, set())  # warm-up: plans, tables, runners
            for _ in range(max(repeat, 1)):
                self._execute_locked(feeds, set(), best)
        totals: dict[str, float] = {}
        for (_, node, *_rest), seconds in zip(steps, best, strict=True):
            if seconds != float("inf"):  # else a step no run needed (see _Plan.skipped)
                totals[node.op] = totals.get(node.op, 0.0) + seconds
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))

    def _execute(self, feeds: Mapping[str, np.ndarray], keep: set[str] | None,
                 given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        check_feeds(self.inputs, feeds, label=self.label)
        self._check_shapes(feeds)
        with self._lock:
            return self._execute_locked(feeds, keep, given=given)

    def _check_shapes(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Run the prepare checks for input shapes not seen yet (one tuple lookup otherwise)."""
        shapes = tuple(np.shape(feeds[v.name]) for v in self.graph.inputs)
        if shapes not in self._checked:
            check_graph(self.graph, shapes, self.rounding)
            self._checked.add(shapes)

    def _execute_locked(self, feeds: Mapping[str, np.ndarray], keep: set[str] | None,
                        best: list[float] | None = None,
                        given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One run of the main graph; with ``best``, each operator's time is folded into its minimum there."""
        env: dict[Value, np.ndarray] = {}
        kept: dict[str, np.ndarray] = {}
        shapes = tuple(np.shape(feeds[v.name]) for v in self.graph.inputs)
        if shapes != self._main.frozen_shapes:  # what the static steps computed holds for other shapes
            self._main.frozen.clear()
            self._main.frozen_shapes = shapes
        if self._last_shapes is not None and shapes != self._last_shapes:
            self._reallocated()
        self._last_shapes = shapes
        for v in self.graph.inputs:
            env[v] = np.asarray(feeds[v.name])
            if keep is None or v.name in keep:
                kept[v.name] = env[v]
        # float kernels overflow to inf silently, as the C kernels do
        with np.errstate(all="ignore"):
            self._main.execute(env, keep, kept, self.rounding, self.jit, self.flavor, best, given)
        return kept


def _check_kernel(node: Node) -> None:
    """Refuse an operator without a kernel, or with an output type its kernel does not compute."""
    if node.op in REFUSED:
        raise VerificationError(f"the reference interpreter cannot run this model: operator {node.op} "
                                f"({node.name!r}) is not implemented: {REFUSED[node.op]}")
    if node.op not in KERNELS or (node.domain == "custom") != (node.op in CUSTOM_KERNELS):
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


def _sources(node: Node, fed: set[Value]) -> list[tuple[Value | None, np.ndarray | None]]:
    """Per input ``(value, None)`` for tensors a run provides (graph inputs, states,
    operator outputs — even when the file also gives them a buffer: the feed wins),
    ``(None, array)`` for constants (read from the model once, not on every run) and
    ``(None, None)`` for omitted optional inputs; ``fed``: the graph's inputs and states."""
    return [(None, v.const.numpy()) if v is not None and v.const is not None and v not in fed
            and v.producer is None else (v, None) for v in node.inputs]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Two SHAPE results alike (small integer vectors): dtype, shape and bytes, cheaper than
    ``np.array_equal`` on every squeeze-and-excite block's SHAPE."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _read(value: Value) -> np.ndarray:
    """A tensor no operator of this run has set: its buffer from the file (an empty tensor
    has none, e.g. RESHAPE's shape ``[]`` to a scalar), else an error."""
    if value.const is not None:
        return value.const.numpy()
    shape = static_input_shape(value)
    if shape is not None and 0 in shape and value.dtype is not None and value.dtype.numpy is not None:
        return np.empty(shape, value.dtype.numpy)
    raise VerificationError(f"tensor {value.name!r} is read before any operator writes it")
