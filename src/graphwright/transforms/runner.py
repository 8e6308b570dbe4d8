"""Running a pipeline: validate every call up front, then apply them in order.

After each transform the structural check runs (inputs defined, acyclic, graph
outputs still produced); a transform that breaks it fails loudly instead of
handing a broken graph to the next step.  ``ignore_errors=true`` on a call
turns that call's error into a warning and moves on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import GraphCheckError, GraphwrightError, TransformError
from ..ir import Model, check
from .binding import bind_io
from .context import TransformContext
from .params import Params
from .pipeline import TransformCall, format_call, parse_pipeline
from .presets import expand_presets
from .registry import TransformResult, TransformSpec, get

__all__ = ["run_pipeline", "StepReport", "StepRunner", "PipelineReport", "plan_pipeline"]


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

    def __init__(self, model: Model, ctx: TransformContext | None = None) -> None:
        self.model = model
        self.ctx = ctx if ctx is not None else TransformContext()

    def run(self, spec: TransformSpec | str, kwargs: dict[str, Any] | None = None, *,
            label: str | None = None) -> StepReport:
        spec = get(spec) if isinstance(spec, str) else spec
        model = self.model
        if model.graph.dialect not in spec.dialects:
            raise TransformError(_dialect_message(spec, model.graph.dialect))
        before = len(model.graph)
        start = time.perf_counter()
        result = spec.fn(model, self.ctx, **(kwargs or {}))
        if not isinstance(result, TransformResult):
            raise TransformError(f"{spec.name}: transform returned {type(result).__name__}, not TransformResult")
        try:
            for g in model.graphs:
                check(g)
        except GraphCheckError as e:
            raise TransformError(f"{spec.name} left the graph inconsistent: {e}") from e
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
