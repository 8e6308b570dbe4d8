"""Rule sets as transforms: the one place a rewrite report becomes a transform result.

Every fusion, folding and elimination is a :class:`~graphwright.patterns.RuleSet` (a pattern
in the model's own op vocabulary, a ``check`` returning ``None`` or a reason, a rewrite).
This module runs rule sets over a model and turns what they did into a
:class:`~graphwright.transforms.TransformResult`; :func:`rule_transform` registers rule sets
as a transform in one call::

    rules = RuleSet(name="drop_identity")
    rules.add(P("Identity", ANY(name="x")), lambda m: Replacement.bypass_to(m.node.output, m["x"].value))
    rule_transform("drop_identity", lambda model: [rules], dialects={"onnx"},
                   summary="Remove Identity nodes.")

Refused matches keep their reason: the result lists them (``refusals``), the pipeline report
carries them, and ``graphwright transform``/``simplify`` print the most common ones.
Cost: each sweep is O(N + E) (see :mod:`graphwright.patterns.replace`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ..errors import TransformError
from ..ir import Graph, Model, all_graphs
from ..patterns import ReplaceReport, RuleSet
from .context import TransformContext
from .registry import DIALECTS, TransformResult, transform

__all__ = ["MAX_SWEEPS", "apply_rules", "result_of", "rule_transform"]

#: Fixed-point sweeps a rule set gets per graph (each sweep can expose new matches).
MAX_SWEEPS = 8


def apply_rules(model: Model, rule_sets: Iterable[RuleSet], *, subgraphs: bool = True, sweeps: int = 1,
                skip: Iterable[str] = (), graphs: Sequence[Graph] | None = None) -> ReplaceReport:
    """Apply each rule set in turn, on every graph (``subgraphs=False``: the main graph only).

    A rule set sweeps a graph up to ``sweeps`` times, stopping at the first sweep that applied
    nothing; the skip and refusal reasons kept are those of that last sweep (matches that a
    later sweep applied are not reported as refused).  ``skip`` names rules to leave out.
    """
    chosen = list(graphs) if graphs is not None else (all_graphs(model) if subgraphs else [model.graph])
    skipped = frozenset(skip)
    total = ReplaceReport()
    sets = list(rule_sets)
    for graph in chosen:
        for rules in sets:
            for _ in range(max(1, sweeps)):
                report = rules.apply(graph, skip=skipped)
                total.applied += report.applied
                total.removed += report.removed
                total.added += report.added
                total.swept += report.swept
                for name, count in report.by_rule.items():
                    total.by_rule[name] = total.by_rule.get(name, 0) + count
                if not report.applied:
                    break
            total.skipped += report.skipped
            total.refused += report.refused
    return total


def result_of(report: ReplaceReport, *, stats: dict[str, int] | None = None,
              changed: bool | None = None, notes: Iterable[str] = ()) -> TransformResult:
    """The transform result of a rules run: applied counts per rule (or ``stats``), the reasons
    of the matches left alone as notes (one per distinct node and reason), and every refusal."""
    outcomes = report.skipped + report.refused
    reasons = [f"{o.node} ({o.op}): {o.reason}" for o in outcomes if o.reason]
    return TransformResult(
        report.applied > 0 if changed is None else changed,
        dict(report.by_rule) if stats is None else stats,
        list(dict.fromkeys([*notes, *reasons])),
        refusals=[(o.rule, o.node, o.op, o.reason or "no reason given") for o in outcomes],
    )


def rule_transform(name: str, rule_sets: Callable[[Model], Iterable[RuleSet]], *,
                   dialects: Iterable[str] = DIALECTS, summary: str, subgraphs: bool = True,
                   sweeps: int = 1, rule_names: Iterable[str] = ()) -> Callable[..., TransformResult]:
    """Register ``rule_sets(model)`` as the transform ``name`` and return its function.

    The transform takes ``skip`` (rule names to leave out, checked against ``rule_names``
    when given) and reports per-rule counts and refusal reasons (:func:`result_of`).
    """
    known = frozenset(rule_names)

    def run(model: Model, ctx: TransformContext, *, skip: list[str] | None = None) -> TransformResult:
        unknown = sorted(set(skip or ()) - known) if known else []
        if unknown:
            raise TransformError(f"{name}: unknown rule {unknown[0]!r}; rules: {', '.join(sorted(known))}")
        report = apply_rules(model, rule_sets(model), subgraphs=subgraphs, sweeps=sweeps, skip=skip or ())
        return result_of(report, stats=dict(sorted(report.by_rule.items())))

    run.__name__ = name
    run.__qualname__ = name
    run.__doc__ = summary
    run.__module__ = rule_sets.__module__
    run.rule_names = known  # type: ignore[attr-defined]
    return transform(name, dialects=dialects)(run)
