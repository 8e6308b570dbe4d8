"""What changed between two models of one format: summary, op histogram, changes by kind.

With a provenance sidecar next to model B (see :mod:`.provenance`) every change is exact: each
node of B that a step made names the nodes of A it replaced.  Without one, nodes are matched by
name, and the nodes that are not matched are grouped by structure — connected changed nodes
of A and of B that touch the same unchanged neighbours are one change — and the report says so.

Kinds of change: ``fused`` (k nodes of A became one node of B, constants aside), ``folded``
(nodes of A became constants), ``merged`` (a duplicate removed, its readers reading its twin),
``replaced`` (k nodes became n > 1), ``removed`` (gone with no
replacement: eliminated, bypassed), ``added``, ``renamed``, ``retyped`` (same node, another op
or output dtype) and ``quantized`` (a float output became an integer one, or a quantized op).

Nested graphs are compared too, each against the graph at the same path in B (:func:`bodies`):
ONNX If/Loop/Scan bodies as ``node/attribute`` (``loop_1/body``, nested ``loop_1/body/if_2/then_branch``),
TFLite subgraphs as the operator that calls them and its role (``lstm/while/body``, ``cond/then``).
A change inside one carries its path (``Change.graph``) and says it first in its title
(``loop_1/body: fused 2 nodes (MatMul, Add) into 1 Gemm``); a body only one model has is a note.

Cost: O(N + E) for both models (every graph) plus O(size) per change for its neighbourhood.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..ir import AttrKind, Graph, Model, Node, constant_value, constant_values
from ..transforms.runner import node_key

__all__ = ["ModelSide", "Change", "ModelDiff", "Body", "bodies", "nested", "diff_models", "side_of", "KINDS", "neighbourhood",
           "nodes_by_key"]

#: Kinds of change, in the order reports list them.
KINDS = ("fused", "folded", "merged", "replaced", "quantized", "retyped", "renamed", "removed", "added")

_CONST_OPS = frozenset({"Const", "Constant"})
_INT_DTYPES = ("int8", "uint8", "int16", "int4", "uint4")
_QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                        "ConvInteger", "DynamicQuantizeLinear", "QuantizeV2", "Dequantize", "QuantizedConv2D",
                        "QuantizedMatMul", "QUANTIZE", "DEQUANTIZE", "FakeQuantWithMinMaxVars"})
#: At most this many unchanged neighbours are drawn around a change, per side.
CONTEXT_LIMIT = 30


@dataclass
class ModelSide:
    """One model's numbers (nodes, parameters and ops of every graph, bodies included)."""

    path: str
    format: str
    nodes: int
    parameters: int
    file_bytes: int | None
    op_histogram: dict[str, int]
    #: graphs: the main one plus nested bodies / subgraphs
    graphs: int = 1


@dataclass
class Change:
    """One change: nodes of A (``before``) that became nodes of B (``after``)."""

    kind: str
    before: list[str]
    after: list[str]
    ops_before: list[str]
    ops_after: list[str]
    exact: bool
    step: str | None = None
    rule: str | None = None
    coarse: bool = False
    detail: str = ""
    #: initializers (constants that are not nodes) the ``before`` nodes were folded into
    constants: list[str] = field(default_factory=list)
    #: the body the change is in (see :func:`bodies`); "" for the main graph
    graph: str = ""

    def title(self) -> str:
        return f"{self.graph}: {self._what()}" if self.graph else self._what()

    def _what(self) -> str:
        k, n = len(self.before), len(self.after)
        def ops(names: list[str]) -> str:
            counts = Counter(names)
            return ", ".join(f"{c}x {op}" if c > 1 else op for op, c in counts.most_common(4)) + (
                ", ..." if len(counts) > 4 else "")
        if self.kind == "fused":
            main = [op for op in self.ops_after if op not in _CONST_OPS] or self.ops_after
            return f"fused {k} nodes ({ops(self.ops_before)}) into 1 {main[0]}"
        if self.kind == "folded":
            n = n or len(self.constants)
            return f"folded {k} node{'s' * (k != 1)} ({ops(self.ops_before)}) into {n} constant{'s' * (n != 1)}"
        if self.kind == "merged":
            return f"merged duplicate {self.ops_before[0]} {self.before[0]} into {', '.join(self.after) or self.detail or '?'}"
        if self.kind == "replaced":
            return f"replaced {k} nodes ({ops(self.ops_before)}) by {n} ({ops(self.ops_after)})"
        if self.kind == "removed":
            return f"removed {k} node{'s' * (k != 1)} ({ops(self.ops_before)})"
        if self.kind == "added":
            return f"added {n} node{'s' * (n != 1)} ({ops(self.ops_after)})"
        if self.kind == "renamed":
            return f"renamed {self.before[0]} -> {self.after[0]}"
        return f"{self.kind} {self.before[0]}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["title"] = self.title()
        return data


@dataclass
class ModelDiff:
    a: ModelSide
    b: ModelSide
    #: "provenance" (exact, from the sidecar) or "structure" (names, then neighbours)
    matched_by: str
    provenance: str | None
    changes: list[Change]
    notes: list[str] = field(default_factory=list)
    #: each model's compared nested graphs by path (:func:`nested`), for pictures of the changes inside
    #: them, and the path in B of each body of A (another when its caller was renamed)
    bodies_a: dict[str, Graph] = field(default_factory=dict, repr=False)
    bodies_b: dict[str, Graph] = field(default_factory=dict, repr=False)
    paired: dict[str, str] = field(default_factory=dict)

    def op_deltas(self) -> list[tuple[str, int, int]]:
        """(op, count in A, count in B) for every op whose count changed, biggest change first."""
        ops = set(self.a.op_histogram) | set(self.b.op_histogram)
        rows = [(op, self.a.op_histogram.get(op, 0), self.b.op_histogram.get(op, 0)) for op in ops]
        rows = [r for r in rows if r[1] != r[2]]
        return sorted(rows, key=lambda r: (-abs(r[2] - r[1]), r[0]))

    def counts(self) -> dict[str, int]:
        """Changes per kind, in :data:`KINDS` order, kinds with none left out."""
        found = Counter(c.kind for c in self.changes)
        return {kind: found[kind] for kind in KINDS if found[kind]}

    def to_json(self) -> dict[str, Any]:
        return {
            "a": asdict(self.a),
            "b": asdict(self.b),
            "matched_by": self.matched_by,
            "provenance": self.provenance,
            "counts": self.counts(),
            "op_deltas": [{"op": op, "a": a, "b": b, "delta": b - a} for op, a, b in self.op_deltas()],
            "changes": [c.to_json() for c in self.changes],
            "notes": list(self.notes),
        }


def side_of(model: Model, path: str | os.PathLike[str] | None = None) -> ModelSide:
    graphs = [model.graph, *bodies(model).values()]
    parameters = 0
    for graph in graphs:
        for value in constant_values(graph):
            tensor = constant_value(value)
            if tensor is not None:
                parameters += tensor.size
    histogram = Counter(_op_label(n) for graph in graphs for n in graph)
    where = path if path is not None else model.source_path
    size = os.path.getsize(where) if where is not None and Path(where).is_file() else None
    return ModelSide(str(where or ""), model.format, sum(len(g) for g in graphs), int(parameters), size,
                     dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))), len(graphs))


@dataclass(frozen=True)
class Body:
    """A nested graph: its path, the path of the graph holding its caller ("" the main graph, None
    for a TFLite subgraph no operator calls), the caller's key and the role it runs it in."""

    path: str
    parent: str | None
    caller: str
    role: str
    graph: Graph = field(compare=False, repr=False)


def nested(model: Model) -> list[Body]:
    """The model's nested graphs, outer first: an ONNX body at ``node/attribute`` (``GRAPHS``
    lists as ``attribute[k]``), a TFLite subgraph at the first operator calling it and the role
    its index attribute names (``while/body`` from ``body_subgraph_index``), a path inside a
    body prefixed by the body's.  A TFLite subgraph no operator calls goes by its name (else
    ``subgraph{i}``).  O(N) over every graph."""
    found: list[Body] = []
    taken: set[str] = set()
    seen = {id(model.graph)}
    pending: list[tuple[Graph, str]] = [(model.graph, "")]
    loose = list(enumerate(model.subgraphs, 1))
    while pending or loose:
        if not pending:  # a subgraph nothing reached: a root of its own
            i, graph = loose.pop(0)
            if id(graph) not in seen:
                seen.add(id(graph))
                found.append(Body(_unique(graph.name or f"subgraph{i}", taken), None, "", "", graph))
                pending.append((graph, found[-1].path))
            continue
        graph, where = pending.pop(0)
        for node in graph:
            for role, sub in _called(node, model):
                if id(sub) not in seen:
                    seen.add(id(sub))
                    key = node_key(node)
                    path = _unique(f"{where}/{key}/{role}" if where else f"{key}/{role}", taken)
                    found.append(Body(path, where, key, role, sub))
                    pending.append((sub, path))
    return found


def bodies(model: Model) -> dict[str, Graph]:
    """The model's nested graphs by path (see :func:`nested`)."""
    return {body.path: body.graph for body in nested(model)}


def _called(node: Node, model: Model) -> Iterable[tuple[str, Graph]]:
    """(role, graph) of each graph the node runs: graph attributes, TFLite subgraph indices."""
    for name, attr in (node.attrs or {}).items():
        if attr.kind is AttrKind.GRAPH:
            yield name, attr.value
        elif attr.kind is AttrKind.GRAPHS:
            yield from ((f"{name}[{k}]", g) for k, g in enumerate(attr.value))
        elif model.format == "tflite" and name.endswith(("_subgraph_index", "_subgraph_indices")):
            role = name.rsplit("_subgraph_", 1)[0]
            indices = [attr.value] if attr.kind is AttrKind.INT else list(attr.value)
            many = attr.kind is not AttrKind.INT
            for k, index in enumerate(indices):
                if 0 < int(index) < len(model.graphs):
                    yield (f"{role}[{k}]" if many else role), model.graphs[int(index)]


def _unique(path: str, taken: set[str]) -> str:
    k, candidate = 2, path
    while candidate in taken:
        candidate, k = f"{path}#{k}", k + 1
    taken.add(candidate)
    return candidate


def nodes_by_key(graph: Graph) -> dict[str, Node]:
    """The graph's nodes by :func:`~graphwright.transforms.runner.node_key`."""
    return {node_key(n): n for n in graph}


def _op_label(node: Node) -> str:
    return f"{node.domain}::{node.op}" if node.domain and node.domain != "ai.onnx" else node.op


def _dtype(node: Node) -> str | None:
    if not node.outputs or node.outputs[0].dtype is None:
        return None
    return node.outputs[0].dtype.value


def _dtype_changed(old: Node, new: Node) -> bool:
    """Both output dtypes known and different (an unknown dtype is not a change)."""
    ta, tb = _dtype(old), _dtype(new)
    return ta is not None and tb is not None and ta != tb


def _is_const(node: Node) -> bool:
    return node.op in _CONST_OPS


class _Union:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        parent = self.parent
        parent.setdefault(x, x)
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, x: Any, y: Any) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[ry] = rx

    def groups(self) -> list[list[Any]]:
        out: dict[Any, list[Any]] = {}
        for x in self.parent:
            out.setdefault(self.find(x), []).append(x)
        return list(out.values())


def _neighbours(node: Node) -> Iterable[Node]:
    yield from node.predecessors()
    yield from node.successors()


def diff_models(a: Model, b: Model, *, path_a: str | None = None, path_b: str | None = None,
                provenance: Mapping[str, Any] | None = None, provenance_path: str | None = None) -> ModelDiff:
    """Compare two models of the same format, every graph against its counterpart in B (see the
    module docstring and :func:`_pair_bodies`)."""
    side_a, side_b = side_of(a, path_a), side_of(b, path_b)
    notes: list[str] = []
    nested_a, nested_b = nested(a), nested(b)
    graphs_a = {"": a.graph, **{body.path: body.graph for body in nested_a}}
    graphs_b = {"": b.graph, **{body.path: body.graph for body in nested_b}}
    nodes_a = {path: nodes_by_key(g) for path, g in graphs_a.items()}
    nodes_b = {path: nodes_by_key(g) for path, g in graphs_b.items()}
    if provenance is not None:
        every_a = {name for nodes in nodes_a.values() for name in nodes}
        known = [name for entry in provenance["nodes"].values() for name in entry["from"]]
        known += list(provenance["removed"])
        missing = [name for name in known if name not in every_a]
        if known and len(missing) > len(known) // 2:
            notes.append(f"the provenance sidecar {provenance_path} does not describe {side_a.path} "
                         f"({len(missing)} of {len(known)} original names are not in it): matched by structure")
            provenance = None
    changes: list[Change] = []
    pairs: dict[str, str] = {}
    pending = [("", "")] + [(x.path, x.path) for x in nested_a if x.parent is None and x.path in graphs_b]
    while pending:
        pa, pb = pending.pop(0)
        pairs[pa] = pb
        if provenance is not None:
            found = _by_provenance(nodes_a[pa], nodes_b[pb], provenance)
        else:
            found = _by_structure(graphs_a[pa], graphs_b[pb], nodes_a[pa], nodes_b[pb])
        for change in found:
            change.graph = pa
        changes += found
        pending += _pair_bodies(pa, pb, nested_a, nested_b, nodes_b[pb], found)
    matched_by = "provenance" if provenance is not None else "structure"
    if provenance is None:
        notes.append("no provenance sidecar: changes are matched by node name and graph structure, not exact")
    paired_b = set(pairs.values())
    notes += [f"{x.path} is only in A (B has no such graph: its insides are not compared)"
              for x in nested_a if x.path not in pairs]
    notes += [f"{x.path} is only in B (A has no such graph: its insides are not compared)"
              for x in nested_b if x.path not in paired_b]
    order = {kind: i for i, kind in enumerate(KINDS)}
    changes.sort(key=lambda c: (c.graph != "", c.graph, order[c.kind], -len(c.before) - len(c.after),
                                (c.before or c.after)[0]))
    return ModelDiff(side_a, side_b, matched_by, provenance_path if matched_by == "provenance" else None,
                     changes, notes, {p: graphs_a[p] for p in pairs if p}, {pairs[p]: graphs_b[pairs[p]] for p in pairs if p},
                     {p: q for p, q in pairs.items() if p})


def _pair_bodies(pa: str, pb: str, nested_a: list[Body], nested_b: list[Body], nodes_b: Mapping[str, Node],
                 found: list[Change]) -> list[tuple[str, str]]:
    """The bodies called from graph ``pa`` of A paired with those called from its counterpart ``pb``
    of B: same role, called by the same node — under the same name, or the name a one-to-one change
    of that graph gave it (a renamed Loop keeps its body); the rest, per role, in calling order
    when both sides have as many left (callers renamed past recognition, as by obfuscation)."""
    became = {c.before[0]: c.after[0] for c in found if len(c.before) == 1 and len(c.after) == 1}
    in_b = {(x.caller, x.role): x.path for x in nested_b if x.parent == pb}
    pairs, left = [], []
    for x in nested_a:
        if x.parent != pa:
            continue
        caller = x.caller if x.caller in nodes_b else became.get(x.caller, "")
        if (caller, x.role) in in_b:
            pairs.append((x.path, in_b.pop((caller, x.role))))
        else:
            left.append(x)
    for role in dict.fromkeys(x.role for x in left):
        mine = [x.path for x in left if x.role == role]
        theirs = [path for (_, r), path in in_b.items() if r == role]
        if len(mine) == len(theirs):
            pairs += zip(mine, theirs)
    return pairs


def _classify(before: list[Node], after: list[Node], constants: list[str]) -> tuple[str, str]:
    """(kind, detail) of nodes of A that became nodes of B (or the initializers ``constants``)."""
    if not before:
        return "added", ""
    if not after:
        return ("folded", "") if constants else ("removed", "")
    if all(_is_const(n) for n in after) and not all(_is_const(n) for n in before):
        return "folded", ""
    if len(before) == 1 and len(after) == 1:
        old, new = before[0], after[0]
        ta, tb = _dtype(old), _dtype(new)
        if old.op != new.op or (ta != tb and ta is not None and tb is not None):
            what = f"{old.op} -> {new.op}" if old.op != new.op else f"{ta} -> {tb}"
            if old.op != new.op and ta != tb and ta is not None and tb is not None:
                what += f" ({ta} -> {tb})"
            quant = (tb in _INT_DTYPES and ta not in _INT_DTYPES) or (
                new.op in _QUANT_OPS and old.op not in _QUANT_OPS)
            return ("quantized" if quant else "retyped"), what
        if node_key(old) != node_key(new):
            return "renamed", ""
        return "retyped", "attributes"
    main = [n for n in after if not _is_const(n)]
    if len(main) == 1 and len(before) > 1:
        return "fused", ""
    return "replaced", ""


def _change(before: list[Node], after: list[Node], *, exact: bool, step: str | None = None,
            rule: str | None = None, coarse: bool = False, constants: list[str] | None = None) -> Change:
    kind, detail = _classify(before, after, constants or [])
    return Change(kind, [node_key(n) for n in before], [node_key(n) for n in after], [n.op for n in before],
                  [n.op for n in after], exact, step, rule, coarse, detail, list(constants or []))


def _by_provenance(nodes_a: dict[str, Node], nodes_b: dict[str, Node], prov: Mapping[str, Any]) -> list[Change]:
    made: dict[str, dict[str, Any]] = {name: entry for name, entry in prov["nodes"].items() if name in nodes_b}
    groups = _Union()
    for name, entry in made.items():
        groups.find(("b", name))
        for origin in entry["from"]:
            if origin in nodes_a:
                groups.union(("b", name), ("a", origin))
    changes: list[Change] = []
    for members in groups.groups():
        after = [nodes_b[n] for side, n in members if side == "b"]
        before = [nodes_a[n] for side, n in members if side == "a"]
        entries = [made[node_key(n)] for n in after]
        steps = list(dict.fromkeys(e.get("step") for e in entries if e.get("step")))
        rules = list(dict.fromkeys(e.get("rule") for e in entries if e.get("rule")))
        coarse = any(e.get("coarse") for e in entries)
        if len(before) == 1 and len(after) == 1 and node_key(before[0]) == node_key(after[0]) \
                and before[0].op == after[0].op and not _dtype_changed(before[0], after[0]):
            continue  # re-made identical (a step put back what it took)
        change = _change(_a_order(before, nodes_a), after, exact=not coarse, step=" > ".join(steps) or None,
                         rule=", ".join(rules) or None, coarse=coarse)
        changes.append(change)
    # original nodes no node of B carries: removed, grouped by step and rule and connectivity in A
    removed: dict[tuple[str | None, str | None, bool, bool], list[str]] = {}
    for name, fate in prov["removed"].items():
        if name in nodes_a:
            if fate.get("merged"):
                twins = [nodes_b[n] for n in fate.get("into", ()) if n in nodes_b]
                change = _change([nodes_a[name]], twins, exact=not fate.get("coarse"), step=fate.get("step"),
                                 rule=fate.get("rule"), coarse=bool(fate.get("coarse")))
                change.kind, change.detail = "merged", ", ".join(fate.get("into", ()))
                changes.append(change)
                continue
            key = (fate.get("step"), fate.get("rule"), bool(fate.get("coarse")), bool(fate.get("folded")))
            removed.setdefault(key, []).append(name)
    for (step, rule, coarse, folded), names in removed.items():
        for part in _connected([nodes_a[n] for n in names]):
            into = [c for n in part for c in prov["removed"][node_key(n)].get("into", ())] if folded else []
            changes.append(_change(_a_order(part, nodes_a), [], exact=not coarse, step=step, rule=rule,
                                   coarse=coarse, constants=list(dict.fromkeys(into))))
    # nodes the steps did not make but changed in place (op or dtype), under the same name
    for name, old in nodes_a.items():
        if name in made or name in prov["removed"]:
            continue
        new = nodes_b.get(name)
        if new is not None and (new.op != old.op or _dtype_changed(old, new)):
            changes.append(_change([old], [new], exact=True))
    return changes


def _a_order(nodes: list[Node], index: Mapping[str, Node]) -> list[Node]:
    order = {name: i for i, name in enumerate(index)}
    return sorted(nodes, key=lambda n: order.get(node_key(n), 0))


def _connected(nodes: list[Node]) -> list[list[Node]]:
    """Split nodes into groups connected through each other."""
    members = set(nodes)
    groups = _Union()
    for node in nodes:
        groups.find(node_key(node))
        for other in _neighbours(node):
            if other in members:
                groups.union(node_key(node), node_key(other))
    by_name = {node_key(n): n for n in nodes}
    return [[by_name[n] for n in group] for group in groups.groups()]


def _by_structure(graph_a: Graph, graph_b: Graph, nodes_a: dict[str, Node], nodes_b: dict[str, Node]) -> list[Change]:
    """Changes without provenance.  A node is *kept* when B has a node of its name and op.  A node
    of A that B lacks goes with the first node downstream of it (through other such nodes) whose
    name B has: a kept node there means it was removed, a node of B under that name with another
    op means it went into that node (a fusion keeps its last node's name, as TF's and ONNX
    rewrites do).  The nodes only B has join, likewise, the first node downstream of them whose
    name A has."""
    kept = {name for name, node in nodes_a.items() if name in nodes_b and nodes_b[name].op == node.op}
    renamed = _renamed(nodes_a, nodes_b)
    back = {new: old for old, new in renamed.items()}
    target_a = _downstream(graph_a, lambda name: name in nodes_b or name in renamed)
    target_b = _downstream(graph_b, lambda name: name in nodes_a or name in back)
    kept |= set(renamed) | set(back)  # a renamed node ties nothing together
    fused: dict[str, tuple[list[Node], list[Node]]] = {}  # name in both (op changed) -> (A nodes, B nodes)
    removed: dict[str | None, list[Node]] = {}  # kept node downstream (None: none) -> A nodes
    added: dict[str | None, list[Node]] = {}
    for name, node in nodes_a.items():
        if name in kept:
            continue
        target = target_a.get(name)
        if target is not None and target not in kept:
            fused.setdefault(target, ([], []))[0].append(node)
        else:
            removed.setdefault(target, []).append(node)
    for name, node in nodes_b.items():
        if name in kept:
            continue
        target = target_b.get(name)
        if target is not None and target not in kept:
            fused.setdefault(target, ([], []))[1].append(node)
        else:
            added.setdefault(target, []).append(node)
    changes = [_change(before, after, exact=False) for before, after in fused.values()]
    changes.extend(_change([nodes_a[old]], [nodes_b[new]], exact=False) for old, new in renamed.items())
    constants = {v.name for v in graph_b.initializers}
    for group in removed.values():
        for part in _connected(group):
            into = [v.name for n in part for v in n.outputs if v.name in constants]
            changes.append(_change(part, [], exact=False, constants=into))
    for group in added.values():
        changes.extend(_change([], part, exact=False) for part in _connected(group))
    for name in kept:  # same name and op: changed only if the output dtype changed
        if name not in nodes_a or name not in nodes_b:
            continue
        old, new = nodes_a[name], nodes_b[name]
        if _dtype(old) != _dtype(new) and _dtype(old) is not None and _dtype(new) is not None:
            changes.append(_change([old], [new], exact=False))
    return changes


def _renamed(nodes_a: dict[str, Node], nodes_b: dict[str, Node]) -> dict[str, str]:
    """Nodes only A has and nodes only B has that read the same values with the same op, when
    that pairing is one to one: the same node under another name."""
    def signature(node: Node) -> tuple[str, ...]:
        return (node.op, *(v.name if v is not None else "" for v in node.inputs))

    only_a: dict[tuple[str, ...], list[str]] = {}
    for name, node in nodes_a.items():
        if name not in nodes_b:
            only_a.setdefault(signature(node), []).append(name)
    only_b: dict[tuple[str, ...], list[str]] = {}
    for name, node in nodes_b.items():
        if name not in nodes_a:
            only_b.setdefault(signature(node), []).append(name)
    return {names[0]: only_b[key][0] for key, names in only_a.items()
            if len(names) == 1 and len(only_b.get(key, ())) == 1 and len(key) > 1}


def _downstream(graph: Graph, known: Any) -> dict[str, str | None]:
    """For each node, the first node at or downstream of it whose name ``known(name)`` accepts
    (None if there is none).  One pass in reverse order; O(N + E)."""
    target: dict[str, str | None] = {}
    for node in reversed(list(graph)):
        key = node_key(node)
        if known(key):
            target[key] = key
            continue
        found = None
        for user in node.successors():
            found = target.get(node_key(user))
            if found is not None:
                break
        target[key] = found
    return target


def neighbourhood(graph_nodes: Mapping[str, Node], names: list[str], *, limit: int = CONTEXT_LIMIT,
                  mark: bool = True) -> dict[str, Any]:
    """The nodes ``names`` (flagged changed, unless not ``mark``) and their neighbours (at most
    ``limit`` more), with the edges among them, for a picture:
    ``{"nodes": [[name, op, changed]], "edges": [[i, j]], "more": n}``."""
    core = [graph_nodes[n] for n in names if n in graph_nodes]
    members: dict[Node, bool] = {n: mark for n in core}
    extra = 0
    for node in core:
        for other in _neighbours(node):
            if other in members:
                continue
            if len(members) - len(core) >= limit:
                extra += 1
                continue
            members[other] = False
    index = {node: i for i, node in enumerate(members)}
    edges: list[list[int]] = []
    for node, i in index.items():
        for value in node.inputs:
            producer = value.producer if value is not None else None
            if producer is not None and producer in index:
                edges.append([index[producer], i])
        for ctrl in node.control_inputs:
            if ctrl in index:
                edges.append([index[ctrl], i])
    edges = [list(e) for e in dict.fromkeys(tuple(e) for e in edges)]
    return {"nodes": [[node_key(n), n.op, changed] for n, changed in members.items()], "edges": edges, "more": extra}
