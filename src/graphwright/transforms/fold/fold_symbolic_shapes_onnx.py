"""fold_symbolic_shapes: run-time shape glue folded with partial shape knowledge (dynamic dims kept dynamic).

Before::  s = Shape(h[B, S, 64]); b = Unsqueeze(Gather(s, 0), [0]); q = Unsqueeze(Gather(s, 1), [0])
          t = Concat(b, q, [-1], [16]); y = Reshape(h2[B, S, 64], t)
After::   y = Reshape(h2, [0, 0, -1, 16])      (the glue goes when nothing else reads it)

Exporters compute shapes at run time from ``Shape`` when any dim is dynamic, so
constant folding cannot remove that glue.  This pass walks every graph with the
partial-shape lattice of ``_shape_lattice.py``: every value's shape as known ints
and symbolic dims (dim parameters and expressions over them: ``B*S``, ``W/4``),
and the contents of small integer tensors as such elements (see that module for
the operators it follows).  Then, node by node:

* **constant**: an integer/bool tensor of rank 0 or 1 whose elements are all known
  becomes an initializer (``Gather(Shape(x), 1)`` where dim 1 is static; a
  ``Concat``/``ConstantOfShape`` shape whose dynamic parts turned out static);
* **same vector**: two values of one dtype and rank with equal elements are one
  value (``N*1``, ``x/1``, ``Where(Equal(s, -1), 1, s)``, a second copy of
  the same glue); the later one's readers read the earlier one;
* **one Shape slice**: a 1-D value whose elements are dims ``i..j`` of one value
  ``x`` becomes ``Shape(x, start=i, end=j)`` (``Concat`` of a shape's own pieces,
  ``Unsqueeze(Gather(Shape(x), i))``), when an input of the node it replaces
  goes with it; opset >= 15, or the whole shape;
* **regrouped Concat**: a ``Concat`` of dims, constants and other pieces is
  rebuilt from one ``Shape`` slice per run of consecutive dims of one value
  and one constant per run of ints, when fewer ``Shape`` nodes are made than
  computed inputs read by this ``Concat`` alone go; a 1-D ``Concat`` read only
  by another ``Concat`` is flattened into it;
* **Reshape/Expand targets** (``allowzero`` 0, or 1 without literal zeros)
  whose elements are known become constants: ints as they are, a dim the input
  has at the same position ``0`` (copy), a dim whose output size is a known int
  that int, one other dim ``-1``; an ``Expand`` gets ``1`` where the input
  already has the dim;
* **no-op by shape**: an ``Expand``, ``Reshape`` or ``Slice`` (steps 1) whose
  output shape is its input's, dim for dim (symbols included), is removed;
* **zero RNN state**: an ``initial_h``/``initial_c`` of LSTM/GRU/RNN made of
  zeros (``ConstantOfShape`` of 0, ``Expand`` of a 0, sliced or reshaped) is
  dropped: zero is the operator's default;
* **Transpose of unit dims**: a ``Transpose`` that moves only dims of size 1
  (the other dims keep their order) is a ``Reshape`` (not next to another
  ``Transpose``: that pair is one Transpose for ``fuse_consecutive_transposes``).

Nothing depends on the values of dynamic dims: an element is folded only when it
is the same for every input, so the model's dynamic behaviour is unchanged (the
tests run each fold at two or more sizes of every dynamic dim).  All graphs,
subgraphs included; O(N + E) (vectors are shape-sized).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Graph, Model, Node, Value, constant_value, topological_order
from .._onnx import Names, all_graphs, bypass, const_array, is_standard, new_initializer, opset_version
from ..context import TransformContext
from ..registry import TransformResult, transform
from ._shape_lattice import Elem, Expr, Lattice, is_int

__all__ = ["fold_symbolic_shapes"]

_INT_DTYPES = {DType.INT64, DType.INT32, DType.INT16, DType.INT8, DType.UINT8, DType.UINT16, DType.UINT32,
               DType.UINT64, DType.BOOL}
#: Recurrent ops and the inputs holding their initial states.
_STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
#: Ops that pass zeros through (a slice, reshape or copy of zeros is zeros).
_ZERO_KEEPING = frozenset({"Slice", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Cast", "Transpose", "Flatten",
                           "Expand", "Tile", "Gather", "Split"})


class _Folder:
    def __init__(self, model: Model) -> None:
        self.names = Names(model)
        self.lattice = Lattice()
        self.shape_attrs = opset_version(model, default=0) >= 15
        self.stats = dict.fromkeys(("constants", "vectors_merged", "shape_slices", "concats_regrouped",
                                    "targets_folded", "rnn_states_dropped", "transposes_to_reshape",
                                    "noops_removed", "concats_flattened"), 0)

    # ----- helpers -----------------------------------------------------------------------------
    def _rank(self, value: Value) -> int | None:
        if value.shape is not None:
            return len(value.shape)
        return 0 if value in self.lattice.scalar else None

    def _const(self, graph: Graph, elems: list[Elem], dtype: DType, scalar: bool, base: str) -> Value:
        np_dtype = np.bool_ if dtype is DType.BOOL else dtype.numpy
        array = np.asarray([bool(e) if dtype is DType.BOOL else int(e) for e in elems], dtype=np_dtype)
        return new_initializer(graph, array.reshape(()) if scalar else array, base, self.names)

    def _sources(self, graph: Graph, value: Value) -> None:
        shape = self.lattice.shape(value)
        if shape is None or value in self.registered:
            return
        self.registered.add(value)
        for i, e in enumerate(shape):
            if isinstance(e, Expr):
                self.prov.setdefault(e, []).append((value, i))

    def _shape_run(self, elems: list[Elem], k: int) -> tuple[Value, int, int] | None:
        """The longest run of ``elems`` from ``k`` that is dims ``i..j`` of one value: (value, i, j)."""
        best: tuple[Value, int, int] | None = None
        for value, i in self.prov.get(elems[k], ()) if isinstance(elems[k], Expr) else ():
            shape = self.lattice.shape(value)
            if shape is None:
                continue
            n = 1
            while k + n < len(elems) and i + n < len(shape) and shape[i + n] == elems[k + n]:
                n += 1
            if (i + n != len(shape) or i != 0) and not self.shape_attrs:
                continue
            if best is None or n > best[2] - best[1]:
                best = (value, i, i + n)
        return best

    def _shape_node(self, graph: Graph, anchor: Node, source: Value, start: int, end: int) -> Value:
        rank = len(self.lattice.shape(source) or ())
        attrs: dict[str, Attr] = {}
        if start:
            attrs["start"] = Attr.int(start)
        if end != rank:
            attrs["end"] = Attr.int(end)
        name = self.names.fresh(f"{source.name}_shape_{start}_{end}")
        node = Node("Shape", [source], dialect="onnx", name=name, attrs=attrs,
                    outputs=[Value(name, DType.INT64, (end - start,))])
        graph.insert_before(anchor, node)
        self.lattice.visit(node)
        return node.output

    # ----- the walk ----------------------------------------------------------------------------
    def run_graph(self, graph: Graph) -> None:
        self.prov: dict[Expr, list[tuple[Value, int]]] = {}
        self.seen: dict[tuple[object, ...], Value] = {}
        self.registered: set[Value] = set()
        for value in graph.inputs:
            self._sources(graph, value)
        for node in topological_order(graph):
            if not is_standard(node):
                continue
            self.lattice.visit(node)
            if node.op == "Shape" and node.inputs and node.inputs[0] is not None:
                self._sources(graph, node.inputs[0])
            self._targets(graph, node)
            if self._noop(node):
                continue
            self._rnn_state(node)
            if self._transpose(graph, node):
                continue
            self._flatten(node)
            if len(node.outputs) == 1 and node.op != "Constant":
                self._vector(graph, node)

    def _vector(self, graph: Graph, node: Node) -> None:
        out = node.output
        elems = self.lattice.computed(out)
        if elems is None or out.dtype not in _INT_DTYPES:
            return
        rank = self._rank(out)
        if rank is None or rank > 1 or (rank == 0 and len(elems) != 1):
            return
        if out.shape is not None and rank == 1 and is_int(out.shape[0]) and out.shape[0] != len(elems):
            return  # the lattice and ONNX disagree: leave it
        if out.is_graph_output or not out.num_uses:
            return
        is_bool = out.dtype is DType.BOOL
        if all((isinstance(e, bool) if is_bool else is_int(e)) for e in elems):
            const = self._const(graph, elems, out.dtype, rank == 0, f"{node.name or node.op}_folded")
            out.replace_all_uses_with(const, graph_outputs=False)
            self.stats["constants"] += 1
            return
        key = (out.dtype, rank, tuple(elems))
        first = self.seen.setdefault(key, out)
        if first is not out and all(user.graph is graph for user in out.users()):  # (captures keep their order)
            out.replace_all_uses_with(first, graph_outputs=False)
            self.stats["vectors_merged"] += 1
            return
        if rank != 1 or out.dtype is not DType.INT64 or not elems:
            return
        if node.op != "Shape" and _freed(node, ()):
            run = self._shape_run(elems, 0)
            if run is not None and run[2] - run[1] == len(elems):
                new = self._shape_node(graph, node, *run)
                out.replace_all_uses_with(new, graph_outputs=False)
                self.seen[key] = new
                self.stats["shape_slices"] += 1
                return
        if node.op == "Concat":
            self._regroup(graph, node, elems)

    def _flatten(self, node: Node) -> None:
        """Concat(a, Concat(b, c)) of 1-D vectors -> Concat(a, b, c) when the inner one has no other reader."""
        if node.op != "Concat" or self._rank(node.output) != 1 or int(node.attr("axis", 0)) not in (0, -1):
            return
        inputs: list[Value | None] = []
        for v in node.inputs:
            inner = v.producer if v is not None else None
            if (inner is not None and inner.op == "Concat" and is_standard(inner) and inner.graph is node.graph
                    and v.num_uses == 1 and not v.is_graph_output and int(inner.attr("axis", 0)) in (0, -1)
                    and self._rank(v) == 1):
                inputs.extend(inner.inputs)
            else:
                inputs.append(v)
        if len(inputs) != len(node.inputs):
            node.set_inputs(inputs)
            self.stats["concats_flattened"] += 1

    def _regroup(self, graph: Graph, node: Node, elems: list[Elem]) -> None:
        """Rebuild a Concat from Shape slices, constant runs and (aligned) original inputs."""
        spans: list[tuple[int, int, Value]] = []
        k = 0
        for v in node.inputs:
            e = self.lattice.elems(v)
            if v is None or e is None:
                return
            spans.append((k, k + len(e), v))
            k += len(e)
        starts = {s: (end, v) for s, end, v in spans}
        pieces: list[tuple[str, object]] = []
        k = 0
        while k < len(elems):
            if is_int(elems[k]):
                j = k
                while j < len(elems) and is_int(elems[j]):
                    j += 1
                pieces.append(("const", elems[k:j]))
                k = j
                continue
            run = self._shape_run(elems, k)
            if run is not None:
                pieces.append(("shape", run))
                k += run[2] - run[1]
                continue
            if k in starts and not self.lattice.is_scalar(starts[k][1]):
                end, v = starts[k]
                pieces.append(("keep", v))
                k = end
                continue
            return
        made = sum(1 for kind, _ in pieces if kind == "shape")
        if made >= _freed(node, [v for kind, v in pieces if kind == "keep"]):  # type: ignore[misc]
            return
        inputs: list[Value] = []
        for kind, what in pieces:
            if kind == "const":
                inputs.append(self._const(graph, what, DType.INT64, False, f"{node.name or 'Concat'}_part"))  # type: ignore[arg-type]
            elif kind == "shape":
                inputs.append(self._shape_node(graph, node, *what))  # type: ignore[misc]
            else:
                inputs.append(what)  # type: ignore[arg-type]
        node.set_inputs(inputs)
        self.stats["concats_regrouped"] += 1

    def _targets(self, graph: Graph, node: Node) -> None:
        if node.op not in ("Reshape", "Expand") or len(node.inputs) != 2 or node.inputs[0] is None:
            return
        shape_in = node.inputs[1]
        if shape_in is None or shape_in.producer is None or const_array(shape_in) is not None:
            return
        elems = self.lattice.elems(shape_in)
        x = self.lattice.shape(node.inputs[0])
        if elems is None:
            return
        if node.op == "Reshape":
            target = _reshape_target(x, elems, self.lattice.shape(node.output), bool(node.attr("allowzero", 0)))
        else:
            target = _expand_target(x, elems)
        if target is None:
            return
        const = new_initializer(graph, np.asarray(target, dtype=np.int64), f"{node.name or node.op}_shape", self.names)
        node.replace_input(1, const)
        if node.op == "Reshape" and node.attr("allowzero", 0) and 0 in target:
            node.attrs["allowzero"] = Attr.int(0)  # the zeros are copies now (no literal zero was there)
        self.stats["targets_folded"] += 1

    def _noop(self, node: Node) -> bool:
        """An Expand, Reshape or Slice (steps 1) whose output has its input's shape (dim for dim, symbols
        included) goes: a Slice of step 1 as long as the dim starts at 0 and takes it all."""
        if node.op not in ("Expand", "Reshape", "Slice") or not node.inputs or node.inputs[0] is None:
            return False
        if node.op == "Slice":
            steps = self.lattice.elems(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
            if steps is None or any(e != 1 or isinstance(e, bool) for e in steps) or len(node.inputs) < 3:
                return False
        x, out = self.lattice.shape(node.inputs[0]), self.lattice.shape(node.output)
        if x is None or out is None or len(x) != len(out) or any(a != b for a, b in zip(x, out)):
            return False
        if any(isinstance(e, bool) for e in x) or not bypass(node, node.inputs[0]):
            return False
        self.stats["noops_removed"] += 1
        return True

    def _rnn_state(self, node: Node) -> None:
        for index in _STATE_INPUTS.get(node.op, ()):
            if index < len(node.inputs) and node.inputs[index] is not None and _zeros(node.inputs[index]):
                node.replace_input(index, None)
                self.stats["rnn_states_dropped"] += 1
        if node.op in _STATE_INPUTS:
            inputs = list(node.inputs)
            while inputs and inputs[-1] is None:
                inputs.pop()
            if len(inputs) != len(node.inputs):
                node.set_inputs(inputs)

    def _transpose(self, graph: Graph, node: Node) -> bool:
        if node.op != "Transpose" or not node.inputs or node.inputs[0] is None:
            return False
        source = node.inputs[0].producer
        if (source is not None and source.op == "Transpose") or any(u.op == "Transpose" for u in node.output.users()):
            return False  # fuse_consecutive_transposes makes one Transpose (or none) of the pair
        x = self.lattice.shape(node.inputs[0])
        perm = node.attr("perm")
        if x is None or perm is None or sorted(int(p) for p in perm) != list(range(len(x))):
            return False
        perm = [int(p) for p in perm]
        moved = [p for p in perm if x[p] != 1]
        if moved != sorted(moved) or perm == list(range(len(x))):
            return False
        target: list[int] = []
        for j, p in enumerate(perm):
            e = x[p]
            if is_int(e):
                if e == 0:
                    return False
                target.append(int(e))
            elif j < len(x) and x[j] == e:
                target.append(0)
            else:
                target.append(-1)
        if target.count(-1) > 1 or any(isinstance(e, bool) for e in x):
            return False
        const = new_initializer(graph, np.asarray(target, dtype=np.int64), f"{node.name or 'Transpose'}_shape",
                                self.names)
        reshape = Node("Reshape", [node.inputs[0], const], dialect="onnx", name=node.name,
                       outputs=[Value(self.names.fresh(f"{node.output.name}_reshaped"), node.output.dtype,
                                      node.output.shape)])
        graph.insert_before(node, reshape)
        if not bypass(node, reshape.output):
            graph.remove(reshape)
            return False
        self.lattice.visit(reshape)
        self.stats["transposes_to_reshape"] += 1
        return True


def _freed(node: Node, kept: object) -> int:
    """How many computed inputs of ``node`` (not in ``kept``) it alone reads: their producers go with it."""
    keep = {id(v) for v in kept}  # type: ignore[attr-defined]
    return sum(1 for v in node.inputs if v is not None and id(v) not in keep and v.producer is not None
               and v.producer.op != "Constant" and v.num_uses == 1 and not v.is_graph_output)


def _zeros(value: Value | None, depth: int = 0) -> bool:
    """Whether ``value`` is all zeros whatever the inputs (a bounded walk through zero-keeping ops)."""
    if value is None or depth > 8:
        return False
    if value.producer is None or value.producer.op == "Constant":
        if value.is_graph_input:
            return False
        tensor = constant_value(value)
        if tensor is None or tensor.dtype.numpy is None or tensor.size > (1 << 16):
            return False
        return not np.any(tensor.numpy())
    node = value.producer
    if not is_standard(node) or (value is not node.outputs[0] and node.op != "Split"):
        return False
    if node.op == "ConstantOfShape":
        fill = node.attr("value")
        return fill is None or not np.any(fill.numpy())
    if node.op in _ZERO_KEEPING:
        return _zeros(node.inputs[0] if node.inputs else None, depth + 1)
    return False


def _reshape_target(x: list[Elem] | None, elems: list[Elem], out: list[Elem] | None,
                    allowzero: bool) -> list[int] | None:
    if allowzero and any(is_int(e) and e == 0 for e in elems):
        return None
    target: list[int] = []
    for j, e in enumerate(elems):
        if isinstance(e, bool):
            return None
        if is_int(e):
            target.append(int(e))
        elif x is not None and j < len(x) and x[j] == e:
            target.append(0)
        elif out is not None and j < len(out) and is_int(out[j]):
            target.append(int(out[j]))
        else:
            target.append(-1)
    if target.count(-1) > 1 and out is not None and len(out) == len(target):
        # an original -1 whose output size is known: that size, so a symbolic dim can take the -1
        for j, e in enumerate(elems):
            if is_int(e) and e == -1 and is_int(out[j]) and target.count(-1) > 1:
                target[j] = int(out[j])  # type: ignore[arg-type]
    if target.count(-1) > 1 or any(t < -1 for t in target):
        return None
    return target


def _expand_target(x: list[Elem] | None, elems: list[Elem]) -> list[int] | None:
    if x is None:
        return None
    offset = len(elems) - len(x)
    target: list[int] = []
    for j, e in enumerate(elems):
        if is_int(e):
            target.append(int(e))
        elif isinstance(e, Expr) and 0 <= j - offset < len(x) and x[j - offset] == e:
            target.append(1)
        else:
            return None
    return target


@transform("fold_symbolic_shapes", dialects={"onnx"})
def fold_symbolic_shapes(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold run-time shape glue with partial shape knowledge (see the module docstring)."""
    folder = _Folder(model)
    for graph in all_graphs(model):
        folder.run_graph(graph)
    stats = folder.stats
    return TransformResult(any(stats.values()), stats)
