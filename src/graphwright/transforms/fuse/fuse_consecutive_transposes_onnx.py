"""fuse_consecutive_transposes: one Transpose instead of a chain.

Before::  t1 = Transpose(x, perm=p1); t2 = Transpose(t1, perm=p2)
After::   t2 = Transpose(x, perm=q)  with q[i] = p1[p2[i]]   (x itself when q is the identity)

Output axis ``i`` of ``t2`` is axis ``p2[i]`` of ``t1``, which is axis
``p1[p2[i]]`` of ``x``.  A missing ``perm`` reverses the axes (the rank must
then be known).  When ``q`` is the identity but ``t2``'s output is a graph output
that ``x`` can't be renamed to (a graph input, say), ``t2`` stays as an identity
Transpose of ``x``.  The first Transpose is removed when nothing else reads it.

Two rules of the rewrite engine (``transposes_cancel`` when ``q`` is the identity,
``transposes_fused`` otherwise).  The pattern matches the first Transpose as
``P("Transpose", ...)`` unless an earlier match of the same sweep claimed it
(it is the second Transpose of the chain's previous link, just rewritten); then
it is looked at through ``where=``, so a chain ``t1 -> t2 -> t3`` collapses in
one sweep, root after root in graph order, exactly as the pass always did.  The
root is re-emitted, edited in place, so its output value (value_info, graph
output record) is the same object.  A claimed first Transpose left unread goes
in a clean-up rule set run afterwards on the graphs that have one.  All
graphs; O(N + E).
"""

from __future__ import annotations

from ...ir import Attr, Model, Node, Value
from ...patterns import ANY, Match, P, Replacement, RuleSet, Skip, read_only_by, same_graph, why_not_bypassable
from .._onnx import is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_consecutive_transposes"]


def _perm(node: Node) -> list[int] | None:
    perm = node.attr("perm")
    if perm is not None:
        return [int(p) for p in perm]
    x = node.inputs[0] if node.inputs else None
    rank = len(x.shape) if x is not None and x.shape is not None else None
    return None if rank is None else list(reversed(range(rank)))


def _label(node: Node) -> str:
    """How a reason names a node: its name, or its output's when it has none."""
    return repr(node.name) if node.name else f"the one making {node.outputs[0].name!r}"


def _made_by_transpose(value: Value) -> bool:
    """``where=`` of the first Transpose's output: a standard Transpose with a data input made it."""
    first = value.producer
    return (first is not None and first.op == "Transpose" and is_standard(first)
            and bool(first.inputs) and first.inputs[0] is not None)


#: The first Transpose: matched (and removed when nothing else reads it) -- or, when an earlier
#: match of the same sweep claimed it (it is the second Transpose of the previous link of a
#: chain), seen through ``where=``.
_T1 = P("Transpose", ANY, ..., domain="", name="first") | ANY(name="t1", where=_made_by_transpose)


def _first(m: Match) -> tuple[Node, bool]:
    """The first Transpose, and whether the match holds it (else an earlier match claimed it)."""
    matched = "first" in m
    node = m["first"].node if matched else m["t1"].value.producer  # type: ignore[union-attr]
    assert node is not None
    return node, matched


def _composed(m: Match) -> tuple[Node, list[int]] | str:
    """(the first Transpose, the composed perm), or why the two can't be composed."""
    node = m.node
    first, _ = _first(m)
    assert node is not None
    if not same_graph(first, node):
        return f"the first Transpose ({_label(first)}) is in an enclosing graph"
    p1, p2 = _perm(first), _perm(node)
    if p1 is None or p2 is None:
        which = first if p1 is None else node
        return f"the perm of {_label(which)} is not known (no perm attribute and the input's rank is unknown)"
    if len(p1) != len(p2):
        return f"perms of different lengths: {p1} then {p2}"
    return first, [p1[i] for i in p2]


def _cancels(node: Node) -> bool:
    """``where=`` of the first rule (checked before the inputs): the two perms compose to the identity."""
    mid = node.inputs[0]
    if mid is None or not _made_by_transpose(mid):
        return False
    first = mid.producer
    assert first is not None
    p1, p2 = _perm(first), _perm(node)
    if p1 is None or p2 is None or len(p1) != len(p2) or not same_graph(first, node):
        return False
    return [p1[i] for i in p2] == list(range(len(p2)))


def _x_takes_the_name(m: Match) -> str | None:
    """``check`` of the first rule: removing the pair must not lose a graph output's name."""
    node = m.node
    assert node is not None
    return why_not_bypassable(node.output, _first(m)[0].inputs[0])  # type: ignore[arg-type]


def _rules() -> tuple[RuleSet, RuleSet, set[Node]]:
    """The fusion rules; the clean-up rule removing the claimed first Transposes they left
    unread; and the set of those."""
    unread: set[Node] = set()

    def kept(m: Match) -> list[Node]:
        """The matched first Transpose when something else still reads it (re-emitted), else nothing;
        a claimed one left unread goes to the clean-up."""
        node = m.node
        first, matched = _first(m)
        assert node is not None
        if not read_only_by(first, {node}):
            return [first] if matched else []
        if not matched:
            unread.add(first)
        return []

    def cancel(m: Match) -> Replacement:  # Transpose(Transpose(x, p), p⁻¹) -> x
        node = m.node
        assert node is not None
        repl = Replacement.bypass_to(node.output, _first(m)[0].inputs[0])  # type: ignore[arg-type]
        repl.nodes.extend(kept(m))
        return repl

    def compose(m: Match) -> Replacement | Skip:  # Transpose(Transpose(x, p1), p2) -> Transpose(x, p1∘p2)
        found = _composed(m)
        if isinstance(found, str):
            return m.skip(found)
        first, perm = found
        node = m.node
        assert node is not None
        keep = kept(m)
        # The root stays (re-emitted, edited in place): its output keeps its identity, so its
        # value_info, graph-output record and readers are untouched.
        node.replace_input(0, first.inputs[0])
        node.attrs["perm"] = Attr.ints(perm)
        return Replacement([*keep, node])

    fuse = RuleSet(name="fuse_consecutive_transposes")
    fuse.add(P("Transpose", _T1, ..., domain="", where=_cancels), cancel, name="transposes_cancel",
             check=_x_takes_the_name)                          # Transpose(Transpose(x, p), p⁻¹) -> x
    fuse.add(P("Transpose", _T1, ..., domain=""), compose, name="transposes_fused")  # -> Transpose(x, p1∘p2)
    cleanup = RuleSet(name="fuse_consecutive_transposes_cleanup")
    cleanup.add(P("Transpose", where=unread.__contains__), lambda m: Replacement([], {}),
                name="first_transpose_removed")  # a claimed first Transpose nothing reads any more -> gone
    return fuse, cleanup, unread


@transform("fuse_consecutive_transposes", dialects={"onnx"})
def fuse_consecutive_transposes(model: Model, ctx: TransformContext) -> TransformResult:
    """Compose Transpose(Transpose(x)) into one Transpose (or none)."""
    fuse, cleanup, unread = _rules()
    report = apply_rules(model, [fuse])
    if unread:  # dead until now, read by nothing: removing them later changes no other match
        report.merge(apply_rules(model, [cleanup], graphs=list(dict.fromkeys(n.graph for n in unread if n.graph))))
    cancelled = report.by_rule.get("transposes_cancel", 0)
    fused = cancelled + report.by_rule.get("transposes_fused", 0)
    return result_of(report, stats={"transposes_fused": fused, "identity_removed": cancelled})
