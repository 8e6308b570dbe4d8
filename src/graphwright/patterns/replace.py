"""``replace_matching``: find non-overlapping matches and swap each for a new sub-graph.

The Graph Transform Tool's ``ReplaceMatchingOpTypes`` contract, on the IR:

* Nodes are tried as match roots in graph order; a node belongs to at most one
  applied match (earlier roots win), and nodes a replacement adds are not
  matched again in the same sweep (run the sweep again for a fixed point).
* For each match, ``fn(match)`` returns a :class:`Replacement` (new nodes,
  re-emitted matched nodes and ``{old value: new value}``), a plain list of
  nodes (shorthand for ``Replacement(nodes)``), or ``None`` / :class:`Skip`
  to leave the match alone.  With a rule set, a skipped match lets the next
  rule for the same root try.
* Matched nodes that are not re-emitted are removed.  New nodes go just
  before the root (after it, for those reading a re-emitted root); a sweep that
  leaves a reader before its new producer (an intermediate value mapped to a new
  node's output) ends with a stable topological sort, so a sorted graph stays sorted.
* A replacement that would leave a value of a removed node still read outside
  the match, or a graph output, without a mapping is **refused**: the graph is
  left exactly as it was for that match and the report says why.
  ``allow_inconsistencies=True`` applies it anyway (the caller repairs).
* Control users of a removed node move to the producer of the value its
  first mapped output maps to (refused if there is none).  Control inputs of
  removed nodes are dropped: a replacement keeps them by copying them
  (:meth:`Match.clone` copies the cloned node's).
* Constants captured by ``CONST``/``Const(...)`` that nobody reads any more
  (and are not graph inputs/outputs) are removed afterwards, with their
  ``Const`` node, unless ``sweep_constants=False``.

Cost: one pass over the graph, O(N) index look-ups plus match attempts (see
:mod:`.matcher`) plus, per applied match, O(size of the match + its edges).

Provenance: inside ``with recording(callback):`` every applied replacement is
also handed to ``callback`` as a :class:`Rewrite` (the matched, removed,
re-emitted and new nodes, new initializers, mapped values and the constants
swept after it), so the step runner can say which original nodes each new node
replaced.  Outside it the sweep does exactly what it did before (one context
variable read per sweep).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from ..errors import GraphwrightError, TransformError
from ..ir import Graph, Node, Value, topological_order
from ._build import Replacement, Skip
from .matcher import Match, Matcher, MatchStats, as_pattern
from .pattern import Const, Pattern
from .predicates import why_not_bypassable

__all__ = ["Rule", "RuleSet", "ReplaceReport", "Outcome", "replace_matching", "ReplaceFn", "CheckFn",
           "drop_if_unread", "Rewrite", "recording"]

ReplaceResult = Replacement | Skip | Sequence[Node] | None
ReplaceFn = Callable[[Match], ReplaceResult]
CheckFn = Callable[[Match], Any]
F = TypeVar("F", bound=ReplaceFn)

_CONST_OPS = {("tf", "Const"), ("onnx", "Constant")}


class Rewrite:
    """One applied replacement, as :func:`recording` hands it to its callback.

    ``matched`` are the nodes of the match, ``removed`` those of them that left the graph,
    ``kept`` those re-emitted, ``new`` the nodes inserted, ``initializers`` the constants
    added as initializers, ``mapping`` the ``{old value: new value}`` of the replacement and
    ``swept`` the constant nodes (or initializer values) removed afterwards because nothing
    read them any more.
    """

    __slots__ = ("rule", "matched", "removed", "kept", "new", "initializers", "mapping", "swept")

    def __init__(self, rule: str, matched: Sequence[Node], removed: Sequence[Node], kept: Sequence[Node],
                 new: Sequence[Node], initializers: Sequence[Value], mapping: dict[Value, Value],
                 swept: Sequence[Node | Value]) -> None:
        self.rule = rule
        self.matched = tuple(matched)
        self.removed = tuple(removed)
        self.kept = tuple(kept)
        self.new = tuple(new)
        self.initializers = tuple(initializers)
        self.mapping = mapping
        self.swept = tuple(swept)

    def __repr__(self) -> str:
        return (f"Rewrite({self.rule!r}: {[n.name for n in self.removed]} -> {[n.name for n in self.new]}, "
                f"kept={[n.name for n in self.kept]})")


RewriteCallback = Callable[[Rewrite], None]
_RECORDER: ContextVar[RewriteCallback | None] = ContextVar("graphwright_rewrite_recorder", default=None)


@contextmanager
def recording(callback: RewriteCallback) -> Iterator[None]:
    """Hand every replacement applied inside the block to ``callback`` (a :class:`Rewrite`).

    Used by the step runner for provenance; blocks nest (the innermost callback gets them)."""
    token = _RECORDER.set(callback)
    try:
        yield
    finally:
        _RECORDER.reset(token)


class Outcome:
    """A match that was not applied: the root node's name and op, the rule, and why."""

    __slots__ = ("node", "op", "rule", "reason")

    def __init__(self, node: str, op: str, rule: str, reason: str) -> None:
        self.node = node
        self.op = op
        self.rule = rule
        self.reason = reason

    def __repr__(self) -> str:
        return f"Outcome({self.node!r} ({self.op}), rule={self.rule!r}: {self.reason})"


class ReplaceReport:
    """What a sweep did.  ``changed`` is true when at least one match was applied."""

    __slots__ = ("applied", "refused", "skipped", "by_rule", "removed", "added", "swept", "stats")

    def __init__(self) -> None:
        self.applied = 0
        #: Replacements refused because they would break the graph.
        self.refused: list[Outcome] = []
        #: Matches left alone by the rule (``None``/``Skip``) or failing its check.
        self.skipped: list[Outcome] = []
        #: Applied matches per rule name.
        self.by_rule: dict[str, int] = {}
        self.removed = 0  # matched nodes removed
        self.added = 0  # nodes inserted
        self.swept = 0  # dead constants removed afterwards
        self.stats = MatchStats()

    @property
    def changed(self) -> bool:
        return self.applied > 0

    def merge(self, other: ReplaceReport) -> None:
        """Add another sweep's counts to this report (for fixed-point loops)."""
        self.applied += other.applied
        self.refused += other.refused
        self.skipped += other.skipped
        for key, count in other.by_rule.items():
            self.by_rule[key] = self.by_rule.get(key, 0) + count
        self.removed += other.removed
        self.added += other.added
        self.swept += other.swept
        for key in MatchStats.__slots__:
            setattr(self.stats, key, getattr(self.stats, key) + getattr(other.stats, key))

    def __repr__(self) -> str:
        return (f"ReplaceReport(applied={self.applied}, refused={len(self.refused)}, "
                f"skipped={len(self.skipped)}, removed={self.removed}, added={self.added})")


class Rule:
    """A pattern, a replacement function and an optional check run before it.

    ``check(match)`` returns ``None`` when the match may be rewritten, or a string saying why
    not (the reason lands in the report, and the CLI shows it); predicates such as
    :func:`~graphwright.patterns.why_not_fusable` have that shape.  A boolean check is accepted
    too (``False`` refuses with a generic reason).
    """

    __slots__ = ("pattern", "fn", "name", "check")

    def __init__(self, pattern: Pattern, fn: ReplaceFn, name: str, check: CheckFn | None = None) -> None:
        self.pattern = pattern
        self.fn = fn
        self.name = name
        self.check = check

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.pattern!r})"


class RuleSet:
    """Rules indexed by root op; one sweep applies them all, first matching rule first.

    ::

        rules = RuleSet()

        @rules.rule(P("Identity", ANY(name="x")))
        def drop_identity(m):           # Identity(x) -> x
            return Replacement([], {m.node.output: m["x"].value})

        report = rules.apply(graph)
    """

    __slots__ = ("name", "_rules", "_matcher")

    def __init__(self, rules: Iterable[Rule] = (), *, name: str = "") -> None:
        self.name = name
        self._rules: list[Rule] = []
        self._matcher: Matcher[Rule] = Matcher()
        for rule in rules:
            self._append(rule)

    def add(self, pattern: Pattern | str, fn: ReplaceFn, *, name: str | None = None,
            check: CheckFn | None = None) -> Rule:
        """Add a rule; ``name`` defaults to the function's name."""
        if not callable(fn):
            raise TypeError(f"a rule needs a callable replacement function, got {type(fn).__name__}")
        rule_name = name or str(getattr(fn, "__name__", f"rule{len(self._rules)}"))
        return self._append(Rule(as_pattern(pattern), fn, rule_name, check))

    def rule(self, pattern: Pattern | str, *, name: str | None = None,
             check: CheckFn | None = None) -> Callable[[F], F]:
        """Decorator form of :meth:`add`."""
        def register(fn: F) -> F:
            self.add(pattern, fn, name=name, check=check)
            return fn
        return register

    def _append(self, rule: Rule) -> Rule:
        rule.pattern = self._matcher.add(rule.pattern, rule)
        self._rules.append(rule)
        return rule

    def __iter__(self) -> Any:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def apply(self, graph: Graph, *, allow_inconsistencies: bool = False,
              sweep_constants: bool = True, skip: Container[str] = ()) -> ReplaceReport:
        """One sweep over ``graph`` (see the module docstring).  O(N) plus the matches' work.

        ``skip`` names rules to leave out of this sweep."""
        return _sweep(graph, self._matcher, allow_inconsistencies, sweep_constants, skip)

    def names(self) -> list[str]:
        """The rule names, each once, in the order added."""
        return list(dict.fromkeys(rule.name for rule in self._rules))


def replace_matching(
    graph: Graph,
    pattern: Pattern | str | RuleSet,
    fn: ReplaceFn | None = None,
    *,
    check: CheckFn | None = None,
    allow_inconsistencies: bool = False,
    sweep_constants: bool = True,
) -> ReplaceReport:
    """Replace every non-overlapping match of ``pattern`` by what ``fn(match)`` returns.

    ``pattern`` is a pattern object, an OpTypePattern string, or a
    :class:`RuleSet` (then ``fn`` and ``check`` must be omitted).  See the
    module docstring for the contract.  Returns a :class:`ReplaceReport`.
    """
    if isinstance(pattern, RuleSet):
        if fn is not None or check is not None:
            raise TypeError("replace_matching(graph, rules): fn and check belong to the rules")
        return pattern.apply(graph, allow_inconsistencies=allow_inconsistencies, sweep_constants=sweep_constants)
    if fn is None:
        raise TypeError("replace_matching needs a replacement function")
    rules = RuleSet()
    rules.add(pattern, fn, check=check)
    return rules.apply(graph, allow_inconsistencies=allow_inconsistencies, sweep_constants=sweep_constants)


# ---------------------------------------------------------------------------


def _sweep(graph: Graph, matcher: Matcher[Rule], allow: bool, sweep_constants: bool,
           skip: Container[str] = ()) -> ReplaceReport:
    report = ReplaceReport()
    claimed: set[Node] = set()
    candidates = matcher.candidates
    recorder = _RECORDER.get()
    for node in graph:
        if not candidates(node.op):  # no rule roots at this op: one dictionary look-up
            report.stats.nodes += 1
            continue
        for rule, m in matcher.match(node, exclude=claimed, stats=report.stats):
            if skip and rule.name in skip:
                continue
            if rule.check is not None:
                refusal = _why_not(rule, m)
                if refusal is not None:
                    report.skipped.append(Outcome(node.name, node.op, rule.name, refusal))
                    continue
            result = _run(rule, m, rule.fn)
            if result is None or isinstance(result, Skip):
                _detach(_made_by(m))
                reason = result.reason if isinstance(result, Skip) else ""
                report.skipped.append(Outcome(node.name, node.op, rule.name, reason))
                continue
            repl = result if isinstance(result, Replacement) else Replacement(result)
            try:
                plan = _Plan(graph, m, repl, rule)
            except GraphwrightError:  # a malformed replacement: leave no half-built edges behind
                _detach([n for n in repl.nodes if n.graph is None] + _made_by(m))
                raise
            if plan.problems and not allow:
                _detach(plan.new + plan.garbage)
                report.refused.append(Outcome(node.name, node.op, rule.name, plan.reason()))
                continue
            plan.apply(force=bool(plan.problems))
            swept: list[Node | Value] | None = [] if recorder is not None else None
            if sweep_constants:
                report.swept += _sweep_constants(graph, m, swept)
            if recorder is not None:
                recorder(Rewrite(rule.name, m.nodes, plan.removed, list(plan.kept), plan.new, plan.inits,
                                 plan.mapping, swept or ()))
            claimed.update(m.nodes)
            claimed.update(plan.new)
            report.applied += 1
            report.removed += len(plan.removed)
            report.added += len(plan.new)
            report.by_rule[rule.name] = report.by_rule.get(rule.name, 0) + 1
            break
    if report.applied:
        _restore_order(graph)
    return report


def _restore_order(graph: Graph) -> None:
    """Put the graph back in topological order if a replacement broke it: a value mapped to a new
    node's output (inserted before the root) can have readers between the matched node that made it
    and the root.  O(N + E) when the order held, the usual case; a stable sort otherwise."""
    order = topological_order(graph)
    if any(a is not b for a, b in zip(order, graph, strict=True)):
        graph.sort(order)


def _why_not(rule: Rule, m: Match) -> str | None:
    """A rule's check: ``None`` (or ``True``) lets the match through; a string is the refusal
    reason; ``False`` refuses with a generic reason naming the check."""
    assert rule.check is not None
    verdict = _run(rule, m, rule.check)
    if verdict is None or verdict is True:
        return None
    if verdict is False:
        return f"check {getattr(rule.check, '__name__', 'check')} failed"
    return str(verdict)


def _run(rule: Rule, m: Match, fn: Callable[[Match], Any]) -> Any:
    """Call a rule's function or check; a crash becomes a TransformError naming the rule and node."""
    try:
        return fn(m)
    except GraphwrightError:
        _detach(_made_by(m))
        raise
    except Exception as exc:
        _detach(_made_by(m))
        root = m.node
        where = f"{root.op} node {root.name!r}" if root is not None else "a match"
        raise TransformError(
            f"rule {rule.name!r} failed on {where}: {type(exc).__name__}: {exc}"
        ) from exc


def _made_by(m: Match) -> list[Node]:
    """Nodes built through the match's helpers (clones, constant nodes)."""
    top = m._shared()
    return top.created + [node for node, _ in top.constants if node is not None]


def _detach(nodes: Iterable[Node]) -> None:
    """Undo the def-use edges of nodes that never made it into the graph."""
    for node in nodes:
        if node.graph is None:
            node.set_inputs(())
            node.set_control_inputs(())
            for user in node.control_users:
                user.remove_control_input(node)


class _Plan:
    """A replacement checked against the graph, ready to apply (or to refuse with ``problems``)."""

    __slots__ = ("graph", "root", "new", "kept", "removed", "mapping", "inits", "garbage",
                 "problems", "control_moves", "bypass", "control_to")

    def __init__(self, graph: Graph, m: Match, repl: Replacement, rule: Rule) -> None:
        self.graph = graph
        root = m.node
        assert root is not None
        self.root = root
        matched = dict.fromkeys(m.nodes)
        new: dict[Node, None] = {}
        kept: dict[Node, None] = {}
        for node in repl.nodes:
            if node.graph is None:
                new[node] = None
            elif node.graph is graph and node in matched:
                kept[node] = None
            else:
                raise TransformError(
                    f"rule {rule.name!r}: replacement node {node.name!r} ({node.op}) is already in a graph "
                    f"but is not part of the match at {root.name!r}"
                )
        self.mapping = self._mapping(repl, root, kept, matched, rule)
        self.bypass = repl.bypass
        self.control_to = repl.control_to
        top = m._shared()
        targets = set(self.mapping.values())
        const_nodes: list[Node] = []
        self.inits: list[Value] = []
        self.garbage: list[Node] = [n for n in top.created if n not in new]
        for cnode, value in top.constants:
            used = value.num_uses > 0 or value in targets
            if cnode is None:
                if used:
                    self.inits.append(value)
            elif used and cnode not in new:
                const_nodes.append(cnode)
            elif not used:
                self.garbage.append(cnode)
        self.new: list[Node] = const_nodes + [n for n in new if n not in const_nodes]
        self.kept = kept
        self.removed: list[Node] = [n for n in matched if n not in kept]
        self.problems: list[str] = []
        self.control_moves: list[tuple[Node, Node | None]] = []
        self._check()

    @staticmethod
    def _mapping(repl: Replacement, root: Node, kept: dict[Node, None],
                 matched: dict[Node, None], rule: Rule) -> dict[Value, Value]:
        if repl.values is None:
            if not repl.nodes or repl.nodes[-1] is root:
                return {}
            return dict(zip(root.outputs, repl.nodes[-1].outputs))
        for old, new in repl.values.items():
            if not isinstance(old, Value) or not isinstance(new, Value):
                raise TransformError(f"rule {rule.name!r}: Replacement.values must map Value to Value")
            if old.producer not in matched:
                raise TransformError(
                    f"rule {rule.name!r}: mapped value {old.name!r} is not an output of a matched node"
                )
        return dict(repl.values)

    def _check(self) -> None:
        removed = dict.fromkeys(self.removed)
        new = dict.fromkeys(self.new)
        for old, target in self.mapping.items():
            if target.producer in removed:
                self.problems.append(
                    f"{old.name!r} is mapped to {target.name!r}, an output of removed node {target.producer.name!r}"
                )
        for node in self.removed:
            mover: Node | None = None
            fallback = self.control_to
            for value in node.outputs:
                mapped = self.mapping.get(value)
                if mapped is not None and mover is None:
                    mover = mapped.producer
                for user, _ in value.uses():
                    if user in new:
                        self.problems.append(
                            f"new node {user.name!r} reads {value.name!r} of removed node {node.name!r} "
                            "(re-emit that node or read another value)"
                        )
                    elif user not in removed and mapped is None:
                        self.problems.append(
                            f"{value.name!r} (output of {node.name!r}) is still read by {user.name!r} "
                            "outside the match and the replacement does not map it"
                        )
                if value.is_graph_output and mapped is None:
                    self.problems.append(
                        f"{value.name!r} (output of {node.name!r}) is a graph output and the replacement "
                        "does not map it"
                    )
                if value.is_graph_output and mapped is not None and self.bypass:
                    why = why_not_bypassable(value, mapped)
                    if why is not None:
                        self.problems.append(why)
            if mover is None:
                mover = fallback
            outside = [u for u in node.control_users if u not in removed]
            if outside:
                if mover is None:
                    self.problems.append(
                        f"{node.name!r} has control users ({outside[0].name!r}...) and no mapped output to move them to"
                    )
                self.control_moves.append((node, mover))

    def reason(self, limit: int = 3) -> str:
        """The problems on one line: the first ``limit``, then how many more."""
        shown = "; ".join(self.problems[:limit])
        extra = len(self.problems) - limit
        return f"{shown} (+{extra} more)" if extra > 0 else shown

    def apply(self, *, force: bool) -> None:
        graph, root = self.graph, self.root
        if root in self.kept:
            after = self._readers_of(root)
            graph.insert_before(root, [n for n in self.new if n not in after])
            graph.insert_after(root, [n for n in self.new if n in after])
        elif self.new:
            graph.insert_before(root, self.new)
        for value in self.inits:
            graph.add_initializer(value)
        removed = dict.fromkeys(self.removed)
        new = dict.fromkeys(self.new)
        for old, target in self.mapping.items():
            if old is target:
                continue
            for user, i in old.uses():
                if user not in new and user not in removed:
                    user.replace_input(i, target)
            if old.is_graph_output:
                graph.set_outputs([target if v is old else v for v in graph.outputs])
                if self._renames(old, target, removed, new):
                    name = old.name  # the graph keeps its output names
                    old.name = f"{name}__replaced"
                    target.name = name
                    if target.dtype is None:
                        target.dtype = old.dtype
                    if target.shape is None:
                        target.shape = old.shape
        for node, mover in self.control_moves:
            for user in node.control_users:
                if user in removed:
                    continue
                user.remove_control_input(node)
                if mover is not None and mover is not user:
                    user.add_control_input(mover)
        graph.remove(self.removed, force=force)
        _detach(self.garbage)

    def _renames(self, old: Value, target: Value, removed: dict[Node, None], new: dict[Node, None]) -> bool:
        """Whether ``target`` takes the name of the graph output ``old`` it replaces.

        Outside the ``tf`` dialect a graph's output names are its interface: the target is
        renamed when it is new, or when it is a plain intermediate of this graph (a bypass:
        ``Identity(x)`` as the output makes ``x`` the output under the old name).  Targets that
        cannot take a name (graph inputs/outputs, initializers, values of an outer graph) are
        refused by :meth:`_check`.  The second case only for :meth:`Replacement.bypass_to`.
        """
        if self.graph.dialect == "tf" or old.producer not in removed:
            return False
        producer = target.producer
        if producer in new:
            return True
        return self.bypass and producer is not None and producer.graph is self.graph

    def _readers_of(self, root: Node) -> set[Node]:
        """New nodes that read an output of ``root``, directly or through other new nodes."""
        reading: set[Node] = set()
        produced = set(root.outputs)
        for node in self.new:  # the replacement lists producers before readers
            if any(v in produced for v in node.inputs if v is not None) or any(
                c is root or c in reading for c in node.control_inputs
            ):
                reading.add(node)
                produced.update(node.outputs)
        return reading


def _sweep_constants(graph: Graph, m: Match, removed: list[Node | Value] | None = None) -> int:
    """Remove constants captured by ``Const`` patterns that the replacement left unread
    (appended to ``removed``, when given: the node, or the initializer value)."""
    count = 0
    stack = [m.root]
    seen: set[Value] = set()
    while stack:
        sub = stack.pop()
        stack.extend(sub.inputs)
        value = sub.value
        if not isinstance(sub.pattern, Const) or value is None or value in seen:
            continue
        seen.add(value)
        producer = value.producer
        if drop_if_unread(graph, value):
            count += 1
            if removed is not None:
                removed.append(producer if producer is not None else value)
    return count


def drop_if_unread(graph: Graph, value: Value) -> bool:
    """Remove ``value`` from ``graph`` when it is a constant nobody reads any more — an
    initializer of ``graph``, or the output of a ``Const``/``Constant`` node whose outputs
    are all unread and that nothing waits on.  Returns whether it removed something."""
    if value.num_uses or value.is_graph_output or value.is_graph_input:
        return False
    node = value.producer
    if node is not None:
        if (node.graph is graph and (node.dialect, node.op) in _CONST_OPS and not node.control_users
                and all(out.num_uses == 0 and not out.is_graph_output for out in node.outputs)):
            graph.remove(node)
            return True
        return False
    if value.is_initializer and value.owner is graph:
        graph.remove_initializer(value)
        return True
    return False
