"""Running a pipeline: validate every call up front, then apply them in order.

After each transform the structural check runs (inputs defined, acyclic, graph
outputs still produced); a transform that breaks it fails loudly instead of
handing a broken graph to the next step.  ``ignore_errors=true`` on a call
turns that call's error into a warning and moves on.

Provenance: every step run here also records, for each node it creates, which original
nodes (those of the model when its first step ran) it replaced.  Rewrites of the one engine
are recorded exactly (:func:`graphwright.patterns.replace.recording`); whatever else a step
did to the graph (transforms that edit it directly) is recorded coarsely from the nodes that
vanished and appeared in the step, matched by name and output name where they can be.  The
record lives in ``model.meta[PROVENANCE_KEY]`` (a :class:`Provenance`) for the model's whole
life in memory; :meth:`Provenance.to_json` is the sidecar ``OUT.provenance.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..errors import GraphCheckError, GraphwrightError, TransformError
from ..ir import Graph, Model, Node, Value, all_graphs, check
from ..patterns.replace import Rewrite, recording
from .binding import bind_io
from .context import TransformContext
from .params import Params
from .pipeline import TransformCall, format_call, parse_pipeline
from .presets import expand_presets
from .registry import TransformResult, TransformSpec, get

__all__ = ["run_pipeline", "StepReport", "StepRunner", "PipelineReport", "plan_pipeline", "Provenance",
           "PROVENANCE_KEY", "provenance_of", "node_key", "observe_steps"]

#: Where a model keeps its :class:`Provenance` in ``Model.meta`` (no writer reads this key).
PROVENANCE_KEY = "graphwright.provenance"
#: Version of the sidecar's JSON layout.
PROVENANCE_VERSION = 1
_CONST_OPS = frozenset({"Const", "Constant"})


#: ``observer(label, nodes)``: called as each step starts, with the node count of the main graph.
StepObserver = Callable[[str, int], None]
_OBSERVER: ContextVar[StepObserver | None] = ContextVar("graphwright_step_observer", default=None)


@contextmanager
def observe_steps(observer: StepObserver) -> Iterator[None]:
    """Call ``observer(label, nodes)`` before every step any :class:`StepRunner` runs inside the
    block (a progress display for work that runs steps without a known count, like simplify)."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


@dataclass
class StepReport:
    call: str
    changed: bool
    seconds: float
    nodes_before: int
    nodes_after: int
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped_error: str | None = None
    #: Matches the step's rewrites left alone: ``(rule, node, op, reason)`` each.
    refusals: list[tuple[str, str, str, str]] = field(default_factory=list)


@dataclass
class PipelineReport:
    steps: list[StepReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(step.changed for step in self.steps)


@dataclass(frozen=True)
class _Planned:
    call: TransformCall
    spec: TransformSpec
    kwargs: dict[str, Any]
    ignore_errors: bool
    skip_reason: str | None = None


def plan_pipeline(calls: str | Sequence[TransformCall], dialect: str | None = None) -> list[_Planned]:
    """Parse, expand presets, look up and bind every call; fails before anything runs."""
    parsed = parse_pipeline(calls) if isinstance(calls, str) else list(calls)
    planned = []
    for call in expand_presets(parsed):
        spec = get(call.name)
        params = Params(call.name, call.params)
        ignore = params.one_bool("ignore_errors", False)
        kwargs = spec.bind(params)
        skip = None
        if dialect is not None and dialect not in spec.dialects:
            if call.preset is not None:
                skip = f"not applicable (from preset {call.preset}): {_dialect_message(spec, dialect)}"
            elif not ignore:
                raise TransformError(_dialect_message(spec, dialect))
        planned.append(_Planned(call, spec, kwargs, bool(ignore), skip))
    return planned


def _dialect_message(spec: TransformSpec, dialect: str) -> str:
    names = {"tf": "TensorFlow GraphDef", "onnx": "ONNX", "tflite": "TFLite"}
    supported = ", ".join(names[d] for d in sorted(spec.dialects))
    return f"{spec.name} does not apply to {names.get(dialect, dialect)} models (it works on: {supported})"


class StepRunner:
    """Runs transforms on one model, one step at a time: the single place a step is executed.

    Each :meth:`run` calls the transform, checks the result is a :class:`TransformResult`,
    runs the structural check on every graph (subgraphs included) and returns what the step
    did as a :class:`StepReport`.  A transform that breaks the graph fails loudly, naming
    itself.  ``run_pipeline`` and ``simplify``'s fixed point both run their steps here.
    """

    def __init__(self, model: Model, ctx: TransformContext | None = None, *, provenance: bool = True) -> None:
        self.model = model
        self.ctx = ctx if ctx is not None else TransformContext()
        #: record :class:`Provenance` (off: no per-step node snapshots; simplify's CLI without --provenance)
        self.provenance = provenance

    def run(self, spec: TransformSpec | str, kwargs: dict[str, Any] | None = None, *,
            label: str | None = None) -> StepReport:
        spec = get(spec) if isinstance(spec, str) else spec
        model = self.model
        if model.graph.dialect not in spec.dialects:
            raise TransformError(_dialect_message(spec, model.graph.dialect))
        before = len(model.graph)
        observer = _OBSERVER.get()
        if observer is not None:
            observer(label or spec.name, before)
        start = time.perf_counter()
        provenance = provenance_of(model, create=True) if self.provenance else None
        if provenance is not None:
            provenance.begin(model)
        finished = False
        try:
            with recording(provenance.rewrite) if provenance is not None else nullcontext():
                result = spec.fn(model, self.ctx, **(kwargs or {}))
            if not isinstance(result, TransformResult):
                raise TransformError(f"{spec.name}: transform returned {type(result).__name__}, not TransformResult")
            try:
                # a step that says it changed nothing (and kept its node count) is not re-checked:
                # simplify's fixed point runs ~100 such steps on a big export
                if result.changed or len(model.graph) != before:
                    for g in model.graphs:
                        check(g)
            except GraphCheckError as e:
                raise TransformError(f"{spec.name} left the graph inconsistent: {e}") from e
            finished = True
        finally:
            if not finished and provenance is not None:
                provenance.abandon()
        if provenance is not None:
            provenance.end(model, label or spec.name)
        return StepReport(label or spec.name, result.changed, time.perf_counter() - start, before,
                          len(model.graph), dict(result.stats), list(result.notes),
                          refusals=list(result.refusals))


def run_pipeline(
    model: Model,
    transforms: str | Sequence[TransformCall],
    *,
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    on_step: Callable[[int, int, str], None] | None = None,
) -> PipelineReport:
    """Apply a pipeline to ``model`` in place and report what each step did.

    ``on_step(i, total, call_text)`` is called before each step (progress display).
    """
    graph = model.graph
    planned = plan_pipeline(transforms, graph.dialect)
    bound_before = bool(graph.outputs)
    bind_io(model, inputs, outputs)
    ctx = TransformContext(list(inputs), list(outputs))
    runner = StepRunner(model, ctx)
    report = PipelineReport()
    if graph.dialect == "tf" and not outputs and not bound_before:
        names = ", ".join(v.producer.name for v in graph.outputs[:5] if v.producer is not None)
        more = f" and {len(graph.outputs) - 5} more" if len(graph.outputs) > 5 else ""
        report.warnings.append(
            f"no --outputs given: using the nodes nothing reads as outputs ({names}{more}); "
            "name the real outputs to strip everything else"
        )
    for i, step in enumerate(planned):
        text = format_call(step.call)
        if on_step is not None:
            on_step(i, len(planned), text)
        ctx.params = Params(step.call.name, step.call.params)
        before = len(model.graph)
        if step.skip_reason is not None:
            report.steps.append(StepReport(text, False, 0.0, before, before, notes=[step.skip_reason]))
            continue
        start = time.perf_counter()
        try:
            report.steps.append(runner.run(step.spec, step.kwargs, label=text))
        except GraphwrightError as e:
            if not step.ignore_errors:
                raise
            message = str(e)
            report.warnings.append(f"{text}: skipped because of an error (ignore_errors=true): {message}")
            report.steps.append(StepReport(text, False, time.perf_counter() - start, before,
                                           len(model.graph), skipped_error=message))
    report.warnings.extend(ctx.warnings)
    return report


# ---------------------------------------------------------------------------
# Provenance


def provenance_of(model: Model, *, create: bool = False) -> Provenance | None:
    """The model's :class:`Provenance` (made from its current nodes with ``create``), or None."""
    record = model.meta.get(PROVENANCE_KEY)
    if isinstance(record, Provenance):
        return record
    if not create:
        return None
    record = Provenance(model)
    model.meta[PROVENANCE_KEY] = record
    return record


def _nodes(model: Model) -> list[Node]:
    return [node for g in all_graphs(model) for node in g]


def node_key(node: Node) -> str:
    """How provenance and diffs name a node: its name; a TFLite operator (the format keeps no
    operator names: a reader names it after its first output) by its first output's name; an
    unnamed node (ONNX allows them) by its first output's name after ``>``."""
    if node.dialect == "tflite" and node.outputs and node.outputs[0].name:
        return node.outputs[0].name
    if node.name:
        return node.name
    return ">" + node.outputs[0].name if node.outputs else f">{node.op}"


class Provenance:
    """For every node of a model, the original nodes it comes from, kept through each step.

    Original nodes are those of the model when the first step ran, by name.  A node a step
    creates gets the origins of the nodes it replaced; a node that stays keeps its own (also
    when renamed or re-typed in place).  An original node that no node carries any more was
    removed: :attr:`fates` says by which step and rule, and into what.

    Steps are recorded exactly from the rewrite engine (:class:`Rewrite`: the new nodes of a
    replacement replace its matched nodes; with no new node the re-emitted ones absorb the
    removed ones); the rest of a step's changes — made by transforms that edit the graph
    directly — coarsely, from the nodes that vanished and appeared: an appeared node with the
    name (or first output name) of a vanished one replaces it (with the vanished nodes connected
    to that one: a folded sub-graph), the other appeared nodes replace all the other vanished ones
    together, and such records say ``coarse``.  A vanished node whose output name now belongs to
    an initializer was *folded* into it; one whose readers now read another node of its op was
    *merged* into that one (duplicates); a rule that bypasses a match to a node whose inputs or
    weights it rewrote in place (BatchNormalization into the Conv before it) fused it into that node.

    Cost per step: O(nodes) to compare the node sets, plus O(size) per applied rewrite.
    """

    def __init__(self, model: Model) -> None:
        #: node -> names of the original nodes it comes from
        self.origins: dict[Node, tuple[str, ...]] = {}
        #: original name -> its op
        self.original: dict[str, str] = {}
        #: node created by a step -> (step, rule or None, coarse)
        self.made: dict[Node, tuple[str, str | None, bool]] = {}
        #: original name -> where it went when the last node carrying it left the graph
        self.fates: dict[str, dict[str, Any]] = {}
        #: labels of the steps recorded, in order
        self.steps: list[str] = []
        for node in _nodes(model):
            self.origins[node] = (node_key(node),)
            self.original.setdefault(node_key(node), node.op)
        self._depth = 0  # steps under way (a transform may run steps of its own)
        self._before: set[Node] = set()
        self._order: list[Node] = []
        self._inputs: dict[Node, tuple[Value | None, ...]] = {}
        self._consts: dict[Value, int] = {}
        self._nested = True  # the model may have nested graphs (found out at the first step)
        self._new: dict[Node, str] = {}  # node made by the engine in this step -> rule
        self._gone: dict[Node, tuple[str, list[str]]] = {}  # removed by the engine -> (rule, into)
        #: bypass targets of this step: (node read instead, origins of the match, rule)
        self._bypassed: list[tuple[Node, tuple[str, ...], str]] = []
        self._folded: dict[Node, bool] = {}  # removed by the engine into new initializers only
        self._out0: dict[Node, str] = {}

    # -- one step ---------------------------------------------------------------
    def begin(self, model: Model) -> None:
        self._depth += 1
        if self._depth > 1:  # a step run inside a step: the outer one accounts for it
            return
        graphs = self._graphs(model)
        self._nested = len(graphs) > len(model.graphs)
        nodes = [node for g in graphs for node in g]
        self._order = nodes
        self._before = set(nodes)
        # inputs as they were (immutable tuples: O(1) each): a removed node loses its edges, a
        # rewritten one gets other inputs
        # (the nodes' slots are read directly: simplify takes ~200 steps, each snapshots every node)
        self._inputs = {node: node._inputs for node in nodes}
        # which tensor each constant held (by id: a reference would keep a replaced weight alive
        # until the step ends, a second copy at the peak): a rule may rewrite a weight in place
        consts = {v: id(v.const) for g in graphs for v in g.initializers}
        # first output names as they were: a folder may rename a value and give its name to a constant
        out0: dict[Node, str] = {}
        for node in nodes:
            outputs = node._outputs
            if outputs:
                out0[node] = outputs[0].name
                if node.op in _CONST_OPS:
                    consts[outputs[0]] = id(node.attrs.get("value"))
        self._consts = consts
        self._out0 = out0
        self._bypassed = []
        origins = self.origins
        for node in [n for n in nodes if n not in origins]:  # added between steps (by hand...): their own origin
            origins[node] = (node_key(node),)
            self.original.setdefault(node_key(node), node.op)
        self._new = {}
        self._gone = {}
        self._folded = {}

    def rewrite(self, rw: Rewrite) -> None:
        """The engine's callback: one applied replacement."""
        swept_nodes = [n for n in rw.swept if isinstance(n, Node)]
        sources = list(dict.fromkeys([*rw.matched, *swept_nodes]))
        carried = tuple(dict.fromkeys(name for n in sources for name in self.origins.get(n, ())))
        into_nodes = list(rw.new) or list(rw.kept)
        # a node outside the match that the rewrite now feeds with what it made and whose output
        # replaces the match (Conv <- BatchNormalization folded into its new weights) absorbs it
        fed = set(rw.initializers).union(v for n in rw.new for v in n.outputs)
        matched = set(rw.matched)
        absorbing = list(dict.fromkeys(
            v.producer for v in rw.mapping.values()
            if v.producer is not None and v.producer not in matched and v.producer not in rw.new
            and any(i in fed for i in v.producer.inputs)
        )) if fed else []
        for node in absorbing:
            self.origins[node] = tuple(dict.fromkeys([*self.origins.get(node, ()), *carried]))
            self._new[node] = rw.rule
        if absorbing and not rw.kept:
            into_nodes = absorbing
        if not rw.new and not rw.kept and not absorbing:
            # a bypass: the node now read instead absorbs the match if the rule changed its inputs
            # in place (checked when the step ends), else the match was removed (an Identity...)
            for v in rw.mapping.values():
                if v.producer is not None and v.producer not in matched:
                    self._bypassed.append((v.producer, carried, rw.rule))
        if rw.new:
            for node in rw.new:
                self.origins[node] = carried
                self._new[node] = rw.rule
        elif rw.kept and rw.removed:  # the re-emitted nodes absorb what the rewrite removed
            for node in rw.kept:
                self.origins[node] = tuple(dict.fromkeys([*self.origins.get(node, ()), *carried]))
                self._new[node] = rw.rule
        into = [node_key(n) for n in into_nodes] + [v.name for v in rw.initializers]
        if not into:  # a bypass or an elimination: the values now read instead
            into = list(dict.fromkeys(v.name for v in rw.mapping.values()))
        for node in [*rw.removed, *swept_nodes]:
            self._gone[node] = (rw.rule, into)
            if rw.initializers and not into_nodes:
                self._folded[node] = True

    def end(self, model: Model, label: str) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        graphs = all_graphs(model) if self._nested else model.graphs
        after = [node for g in graphs for node in g]
        if not self._new and not self._gone and not self._bypassed and after == self._order:
            # the same nodes in the same order and no rewrite: nothing vanished or appeared (most of
            # simplify's steps), so there is nothing to record but the step
            self.steps.append(label)
            self._reset()
            return
        after_set = set(after)
        vanished = [n for n in self._order if n not in after_set]
        appeared = [n for n in after if n not in self._before]
        self.steps.append(label)
        for target, carried, rule in self._bypassed:
            if target in after_set and target in self._before and self._inputs_changed(target):
                self.origins[target] = tuple(dict.fromkeys([*self.origins.get(target, ()), *carried]))
                self._new[target] = rule
        for node, rule in self._new.items():
            if node in after_set:
                self.made[node] = (label, rule, False)
        # what the engine did not account for: matched by name, then by first output name; the other
        # vanished nodes connected to a matched one (a folded sub-graph) go with it
        loose_gone = [n for n in vanished if n not in self._gone]
        loose_new = [n for n in appeared if n not in self._new]
        if loose_new and loose_gone:
            loose_new = self._coarse(label, loose_gone, loose_new)
        for node in loose_new:  # appeared from nothing: added by the step
            self.origins[node] = ()
            self.made[node] = (label, None, False)
        # nodes made and removed within the step (a later sweep undid an earlier one) count too
        transient = [n for n in self._gone if n not in self._before and n not in after_set]
        departed = [*vanished, *transient]
        # an output that is now an initializer: the node was folded into that constant
        constants = ({v.name for g in graphs for v in g.initializers}
                     if any(node not in self._gone or not self._gone[node][1] for node in departed) else set())
        readers: dict[Node, list[Node]] | None = None
        for node in departed:
            rule, into = self._gone.get(node, ("", []))
            names = [self._out0.get(node, ""), *(v.name for v in node.outputs[1:])]
            folded = [name for name in names if name in constants] if not into else []
            merged: list[str] = []
            if not into and not folded and node in self._before:
                # its readers now read a node of the same op instead: merged into that one
                if readers is None:
                    readers = {}
                    for reader, inputs in self._inputs.items():
                        for v in inputs:
                            if v is not None and v.producer is not None:
                                readers.setdefault(v.producer, []).append(reader)
                merged = list(dict.fromkeys(
                    node_key(v.producer) for r in readers.get(node, ()) if r in after_set for v in r.inputs
                    if v is not None and v.producer is not None and v.producer.op == node.op
                    and v not in self._inputs.get(r, ())))
            for name in self.origins.get(node, ()):
                self.fates[name] = {"step": label, "rule": rule or None, "into": into or folded or merged,
                                    "coarse": node not in self._gone or not rule}
                if folded or (into and self._folded.get(node)):
                    self.fates[name]["folded"] = True
                if merged:
                    self.fates[name]["merged"] = True
            self.origins.pop(node, None)
            self.made.pop(node, None)
        self._reset()

    def _reset(self) -> None:
        self._before = set()
        self._order = []
        self._inputs = {}
        self._consts = {}
        self._bypassed = []
        self._folded = {}
        self._out0 = {}
        self._new = {}
        self._gone = {}

    def _graphs(self, model: Model) -> list[Graph]:
        """The model's graphs, nested bodies included while it has any (a model without If/Loop
        bodies is not scanned for them at every step: one that gains one is not followed into it)."""
        return all_graphs(model) if self._nested else list(model.graphs)

    def abandon(self) -> None:
        """A step failed: forget what it started (the next step snapshots the graph afresh)."""
        self._depth = max(self._depth - 1, 0)

    def _inputs_changed(self, node: Node) -> bool:
        """Whether the step gave ``node`` other inputs or other constant data in its inputs."""
        inputs = node.inputs
        if inputs != self._inputs.get(node):
            return True
        for v in inputs:
            if v is not None and v in self._consts:
                now = v.const if v.const is not None else (
                    v.producer.attrs.get("value") if v.producer is not None else None)
                if id(now) != self._consts[v]:  # the new tensor was made while the old one lived
                    return True
        return False

    def _coarse(self, label: str, gone: list[Node], new: list[Node]) -> list[Node]:
        """Record what a step did outside the engine; returns the new nodes that replace nothing."""
        by_name = {node_key(n): n for n in gone}
        by_output = {n.outputs[0].name: n for n in gone if n.outputs}
        twins: dict[Node, list[Node]] = {}  # vanished node -> the appeared nodes standing for it
        rest_new = []
        for node in new:
            twin = by_name.get(node_key(node)) or (by_output.get(node.outputs[0].name) if node.outputs else None)
            if twin is not None:
                twins.setdefault(twin, []).append(node)
            else:
                rest_new.append(node)
        # connected groups of vanished nodes, through the edges they had before the step
        members = set(gone)
        root: dict[Node, Node] = {n: n for n in gone}

        def find(x: Node) -> Node:
            while root[x] is not x:
                root[x] = root[root[x]]
                x = root[x]
            return x

        for node in gone:
            for v in self._inputs.get(node, ()):
                producer = v.producer if v is not None else None
                if producer is not None and producer in members:
                    root[find(producer)] = find(node)
        groups: dict[Node, list[Node]] = {}
        for node in gone:
            groups.setdefault(find(node), []).append(node)
        unmatched: list[Node] = []
        for group in groups.values():
            heirs = [n for g in group for n in twins.get(g, ())]
            if not heirs:
                unmatched.extend(group)
                continue
            carried = tuple(dict.fromkeys(name for g in group for name in self.origins.get(g, ())))
            for node in heirs:
                self.origins[node] = carried
                self.made[node] = (label, None, True)
            for g in group:
                self._gone[g] = ("", [node_key(n) for n in heirs])
        if rest_new and unmatched:
            carried = tuple(dict.fromkeys(name for n in unmatched for name in self.origins.get(n, ())))
            for node in rest_new:
                self.origins[node] = carried
                self.made[node] = (label, None, True)
            for node in unmatched:
                self._gone[node] = ("", [node_key(n) for n in rest_new])
            rest_new = []
        return rest_new

    # -- reading it ---------------------------------------------------------------
    def to_json(self, model: Model) -> dict[str, Any]:
        """The sidecar: every node that is not an original node under its own name, and every
        original node no node carries any more.  An original node listed in neither is in the
        model unchanged in name (its op or attributes may still have been changed in place)."""
        nodes: dict[str, dict[str, Any]] = {}
        alive: set[str] = set()
        for node in _nodes(model):
            origins = self.origins.get(node, ())
            alive.update(origins)
            made = self.made.get(node)
            key = node_key(node)
            if origins == (key,) and (made is None or self.original.get(key) == node.op):
                continue  # an original node under its own name and op (maybe re-made by a step)
            entry: dict[str, Any] = {"op": node.op, "from": list(origins)}
            if made is not None:
                entry["step"], entry["rule"], entry["coarse"] = made[0], made[1], made[2]
            nodes[node_key(node)] = entry
        removed = {name: {"op": self.original.get(name, ""), **fate}
                   for name, fate in self.fates.items() if name not in alive}
        return {"graphwright_provenance": PROVENANCE_VERSION, "steps": list(self.steps),
                "original_ops": dict(self.original), "nodes": nodes, "removed": removed}
