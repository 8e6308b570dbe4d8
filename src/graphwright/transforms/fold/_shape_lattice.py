"""Partial shape knowledge: symbolic dims, and the run-time values of small integer (shape) tensors.

An *element* (of a shape, or of a 1-D/0-D integer tensor that holds sizes) is one of

* an ``int`` (known), or a ``bool`` (a decided ``Equal``),
* an :class:`Expr`: an integer polynomial over *atoms* with integer coefficients, in canonical
  form, so that two elements are equal exactly when their expressions are (``N*1 == N``,
  ``(W+W)/2 == W``, ``B*S == S*B``).  Atoms are dim parameters (``"batch"``; ONNX's own
  ``unk__N`` too: the same symbol is the same size), opaque unknowns (:class:`Opaque`: a dim
  ONNX left unnamed, or a quotient that does not divide exactly; equal only to itself).

:class:`Lattice` walks a graph in topological order and knows, for each value it can, its
shape (:meth:`Lattice.shape`: a list of elements, rank known) and, for small integer tensors
of rank 0 or 1, their contents (:meth:`Lattice.elems`).  Shapes start from what ONNX's shape
inference wrote on the values; a dim ONNX left unknown (or named with a generated ``unk__N``)
is refined by the lattice's own rules for the shape-making operators (Reshape with 0/-1,
Expand, ConstantOfShape, Range, Transpose, Unsqueeze/Squeeze, Concat, Slice, Gather,
Flatten, elementwise broadcasting, MatMul/Gemm, Conv and pools, the recurrent layers).  Contents follow Shape (start/end), Size,
Gather/Slice/Concat/Unsqueeze/Squeeze/Reshape/Identity/Cast, Add/Sub/Mul/Div/Mod, Neg,
Max/Min where decidable, Equal/Where where decidable, ConstantOfShape and Range of known
sizes.  Everything is O(N + E) with shape-sized vectors (at most :data:`MAX_LEN` elements).

All of it is sound for any values of the dynamic dims: an element is an int only when it is
that int for every input, and two elements are equal only when they are for every input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import numpy as np

from ...ir import Node, Value, constant_value

__all__ = ["Expr", "Opaque", "Elem", "Lattice", "MAX_LEN", "is_int", "GENERATED"]

#: Longest vector the lattice tracks (shapes are short).
MAX_LEN = 64
#: Dim symbols ONNX invents for sizes it cannot name.
GENERATED = re.compile(r"unk__\d+")
_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64")


class Opaque:
    """An unknown integer equal only to itself (``key`` makes equal keys the same unknown); ``nonneg``:
    known to be >= 0 (a size, or a quotient of sizes), which comparisons may rely on."""

    __slots__ = ("key", "_hash", "nonneg")

    def __init__(self, key: object, nonneg: bool = True) -> None:
        self.key = key
        self._hash = hash(key)
        self.nonneg = nonneg

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.key == self.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"?{abs(self._hash) % 10000}"


Atom = str | Opaque
Monomial = tuple[Atom, ...]  # sorted atoms, with repetition


def _atom_order(a: Atom) -> tuple[int, str, int]:
    return (0, a, 0) if isinstance(a, str) else (1, "", a._hash)


class Expr:
    """A polynomial with integer coefficients over atoms; immutable, hashable, canonical."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict[Monomial, int]) -> None:
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self._hash = hash(frozenset(self.terms.items()))

    @staticmethod
    def atom(a: Atom) -> Expr:
        return Expr({(a,): 1})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.terms == self.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        parts = []
        for mono, c in self.terms.items():
            name = "*".join(a if isinstance(a, str) else repr(a) for a in mono)
            parts.append(str(c) if not mono else name if c == 1 else f"{c}*{name}")
        return " + ".join(parts) or "0"

    @property
    def nonnegative(self) -> bool:
        """Whether the value is >= 0 whatever the atoms (sizes and flagged quotients are >= 0)."""
        return self.signed_atoms_free and all(c >= 0 for c in self.terms.values())

    @property
    def signed_atoms_free(self) -> bool:
        """Every atom is >= 0 (so the signs of the coefficients decide comparisons)."""
        return all(isinstance(a, str) or a.nonneg for mono in self.terms for a in mono)

    def single_atom(self) -> Atom | None:
        if len(self.terms) == 1:
            (mono, c), = self.terms.items()
            if c == 1 and len(mono) == 1:
                return mono[0]
        return None


Elem = int | bool | Expr


def is_int(e: object) -> bool:
    return isinstance(e, int) and not isinstance(e, bool)


def _terms(e: Elem) -> dict[Monomial, int]:
    if isinstance(e, Expr):
        return dict(e.terms)
    return {(): int(e)} if int(e) else {}


def normal(terms: dict[Monomial, int]) -> Elem:
    terms = {m: c for m, c in terms.items() if c != 0}
    if not terms:
        return 0
    if len(terms) == 1 and () in terms:
        return terms[()]
    return Expr(terms)


def add(a: Elem, b: Elem, sign: int = 1) -> Elem:
    out = _terms(a)
    for m, c in _terms(b).items():
        out[m] = out.get(m, 0) + sign * c
    return normal(out)


def mul(a: Elem, b: Elem) -> Elem:
    out: dict[Monomial, int] = {}
    for ma, ca in _terms(a).items():
        for mb, cb in _terms(b).items():
            mono = tuple(sorted(ma + mb, key=_atom_order))
            out[mono] = out.get(mono, 0) + ca * cb
    return normal(out)


def div(a: Elem, b: Elem, op: str = "Div") -> Elem | None:
    """``a / b`` as ONNX's integer ``Div`` (truncation); ``op`` names the opaque result otherwise."""
    if is_int(a) and is_int(b):
        if b == 0:
            return None
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if is_int(b) and b != 0 and isinstance(a, Expr):
        if all(c % b == 0 for c in a.terms.values()):
            return normal({m: c // b for m, c in a.terms.items()})
        return Expr.atom(Opaque((op, a, b), nonneg=a.nonnegative and b > 0))
    quotient = exact_quotient(a, b)
    if quotient is not None:
        return quotient
    if isinstance(a, Expr) and isinstance(b, Expr):
        return Expr.atom(Opaque((op, a, b), nonneg=a.nonnegative and b.nonnegative))
    return None


def exact_quotient(a: Elem, b: Elem) -> Elem | None:
    """``a / b`` when ``b`` is a single monomial dividing every term of ``a`` exactly (else None)."""
    tb = _terms(b)
    if len(tb) != 1:
        return None
    (mb, cb), = tb.items()
    if cb == 0:
        return None
    out: dict[Monomial, int] = {}
    for ma, ca in _terms(a).items():
        if ca % cb:
            return None
        rest = list(ma)
        for atom in mb:
            if atom not in rest:
                return None
            rest.remove(atom)
        out[tuple(rest)] = ca // cb
    return normal(out)


def product(elems: Iterable[Elem]) -> Elem:
    out: Elem = 1
    for e in elems:
        out = mul(out, e)
    return out


def _compare(a: Elem, b: Elem) -> int | None:
    """Sign of ``a - b`` when it is the same for every value of the atoms (all >= 0), else None."""
    d = add(a, b, -1)
    if is_int(d):
        return (d > 0) - (d < 0)
    if isinstance(d, Expr) and d.signed_atoms_free:
        const = d.terms.get((), 0)
        others = [c for m, c in d.terms.items() if m]
        if all(c >= 0 for c in others) and const >= 0:
            return 1 if const > 0 else None
        if all(c <= 0 for c in others) and const <= 0:
            return -1 if const < 0 else None
    return None


def nonnegative(e: Elem) -> bool:
    return (is_int(e) and e >= 0) or (isinstance(e, Expr) and e.nonnegative)


def _norm_axis(axis: int, rank: int) -> int | None:
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def _ints(value: Value | None) -> list[int] | None:
    """A small constant integer tensor's elements (None if not constant, not integer or too long)."""
    if value is None or value.is_graph_input:
        return None
    tensor = constant_value(value)
    if tensor is None or tensor.dtype.numpy is None or len(tensor.shape) > 1 \
            or (tensor.shape and tensor.shape[0] > MAX_LEN) or np.dtype(tensor.dtype.numpy).kind not in "iub":
        return None  # decided from the header: a weight is never read here
    array = tensor.numpy()
    return [bool(x) if array.dtype.kind == "b" else int(x) for x in array.reshape(-1)]


#: Ops whose (first) output has the shape of their first input.
SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Softmax", "LogSoftmax", "Softplus", "Softsign", "Elu", "Selu", "Celu", "Gelu", "Mish", "Erf", "Exp", "Log",
    "Sqrt", "Reciprocal", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Not", "Clip", "Dropout",
    "LayerNormalization", "BatchNormalization", "InstanceNormalization", "LpNormalization", "Sin", "Cos",
    "IsNaN", "IsInf", "QuantizeLinear", "DequantizeLinear", "CumSum", "Shrink", "ThresholdedRelu",
})
#: Elementwise ops with multidirectional broadcasting.
BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift", "BitwiseAnd", "BitwiseOr",
})


class Lattice:
    """Shapes and small integer contents of the values of one model (see the module docstring).

    Feed it nodes in topological order with :meth:`visit` (subgraph nodes after the node
    that holds them, before its readers); it never changes the graph.
    """

    def __init__(self) -> None:
        self._shapes: dict[Value, list[Elem]] = {}
        self._elems: dict[Value, list[Elem]] = {}
        self._no_elems: set[Value] = set()  # values known to have no tracked contents
        self.scalar: set[Value] = set()  # values among _elems that are 0-d
        self.alias: dict[str, Elem] = {}  # generated unk__N symbol -> what the lattice derived for it
        #: small 2-D integer tensors: value -> (columns, row-major elements); only along PyTorch's
        #: pad-order idiom (Reshape to [-1, k], Slice of rows, Transpose, Reshape back to 1-D)
        self._rows: dict[Value, tuple[int, list[Elem]]] = {}
        #: value -> (its declared shape object, aliases known then, the elements made of it)
        self._declared: dict[Value, tuple[tuple[object, ...], int, list[Elem]]] = {}

    # ----- reading -----------------------------------------------------------------------------
    def dim_elem(self, value: Value, i: int, d: object) -> Elem:
        if isinstance(d, bool):
            return Expr.atom(Opaque(("dim", value, i)))
        if isinstance(d, int):
            return d
        if isinstance(d, str) and d:
            return self.alias.get(d, Expr.atom(d))
        return Expr.atom(Opaque(("dim", value, i)))

    def shape(self, value: Value | None) -> list[Elem] | None:
        if value is None:
            return None
        found = self._shapes.get(value)
        if found is not None:
            return found
        declared = value.shape
        if declared is None:
            if value.is_initializer or value.const is not None:
                tensor = constant_value(value)
                if tensor is not None:
                    return [int(d) for d in tensor.shape]
            return None
        # the same declared shape, read again while no new alias was learned: the same elements
        # (a walk asks for each value's shape several times; building the elements was ~5% of simplify)
        cached = self._declared.get(value)
        if cached is not None and cached[0] is declared and cached[1] == len(self.alias):
            return cached[2]
        elems = [self.dim_elem(value, i, d) for i, d in enumerate(declared)]
        self._declared[value] = (declared, len(self.alias), elems)
        return elems

    def elems(self, value: Value | None) -> list[Elem] | None:
        if value is None:
            return None
        found = self._elems.get(value)
        if found is not None:
            return found
        if value in self._no_elems:
            return None
        ints = _ints(value)
        if ints is None:
            self._no_elems.add(value)
            return None
        tensor = constant_value(value)
        if tensor is not None and len(tensor.shape) == 0:
            self.scalar.add(value)
        self._elems[value] = ints  # (constants do not change during a walk)
        return ints

    def computed(self, value: Value) -> list[Elem] | None:
        """The contents the walk derived for a node's output (None for constants and the unknown)."""
        return self._elems.get(value) if value.producer is not None and value.producer.op != "Constant" else None

    def is_scalar(self, value: Value) -> bool:
        if value in self.scalar:
            return True
        return value.shape is not None and len(value.shape) == 0

    def rank(self, value: Value) -> int | None:
        s = self.shape(value)
        return None if s is None else len(s)

    # ----- propagation -------------------------------------------------------------------------
    def visit(self, node: Node) -> None:
        if node.domain not in ("", "ai.onnx"):
            return
        try:
            elems = self._contents(node)
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
            elems = None
        if elems is not None and len(elems) <= MAX_LEN and node.outputs:
            self._elems[node.output] = elems
        try:
            shapes = self._shape_rules(node)
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
            shapes = None
        for value, derived in zip(node.outputs, shapes or ()):
            if derived is not None:
                self._refine(value, derived)
        if elems is not None and node.outputs and node.output not in self._shapes:
            out = node.output
            if out.shape is None:
                self._shapes[out] = [] if out in self.scalar else [len(elems)]

    def _refine(self, value: Value, derived: Sequence[Elem]) -> None:
        """Merge a derived shape with ONNX's: ONNX's ints and named symbols win, the lattice fills
        unknowns and generated symbols (remembering what a generated symbol stands for)."""
        if value.shape is not None and len(value.shape) != len(derived):
            return  # disagreeing ranks: trust neither
        merged: list[Elem] = []
        for i, e in enumerate(derived):
            d = value.shape[i] if value.shape is not None else None
            if isinstance(d, int) and not isinstance(d, bool):
                merged.append(d)
            elif isinstance(d, str) and d and not GENERATED.fullmatch(d):
                merged.append(self.dim_elem(value, i, d))
            elif isinstance(d, str) and GENERATED.fullmatch(d):
                known = self.alias.get(d)
                if known is None and not (isinstance(e, Expr) and isinstance(e.single_atom(), Opaque)
                                          and e.single_atom().key[0] == "dim"):  # type: ignore[union-attr]
                    self.alias[d] = e
                    known = e
                merged.append(known if known is not None else Expr.atom(d))
            else:
                merged.append(e)
        self._shapes[value] = merged

    def _contents(self, node: Node) -> list[Elem] | None:
        op, ins = node.op, node.inputs
        if op == "Shape" and ins and ins[0] is not None:
            dims = self.shape(ins[0])
            if dims is None:
                return None
            n = len(dims)
            start = int(node.attr("start", 0))
            end = node.attr("end")
            lo = max(0, min(n, start + n if start < 0 else start))
            hi = n if end is None else max(0, min(n, int(end) + n if int(end) < 0 else int(end)))
            return dims[lo:hi]
        if op == "Size" and ins and ins[0] is not None:
            dims = self.shape(ins[0])
            if dims is None:
                return None
            self.scalar.add(node.output)
            return [product(dims)]
        if op == "ConstantOfShape":
            n = self.elems(ins[0]) if ins else None
            value = node.attr("value")
            fill = 0
            if value is not None:
                array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
                if array.dtype.kind not in "iu" or array.size != 1:
                    return None
                fill = int(array.reshape(-1)[0])
            if n is None or len(n) != 1 or not is_int(n[0]) or n[0] > MAX_LEN:
                return None
            return [fill] * int(n[0])
        if op == "Range" and len(ins) == 3:
            start, limit, delta = (self.elems(v) for v in ins)
            if not (start and limit and delta) or not all(is_int(e[0]) for e in (start, limit, delta)):
                return None
            s, lim, d = int(start[0]), int(limit[0]), int(delta[0])
            if d == 0 or max(0, math.ceil((lim - s) / d)) > MAX_LEN:
                return None
            return list(range(s, lim, d))
        if ins and ins[0] is not None and ins[0] in self._rows:
            return self._matrix(node)
        data = self.elems(ins[0]) if ins else None
        if data is None:
            return None
        out = node.output
        if op == "Reshape" and len(ins) == 2 and not self.is_scalar(ins[0]):
            target = self.elems(ins[1])
            if target is not None and len(target) == 2 and all(is_int(t) for t in target) and target[1] > 0 \
                    and target[0] in (-1, len(data) // target[1]) and len(data) % target[1] == 0:
                self._rows[out] = (int(target[1]), list(data))  # 1-D -> [rows, k]: no 1-D contents
                return None
        if op in ("Identity", "Cast"):
            to = node.attr("to") if op == "Cast" else None
            if op == "Cast" and to not in (6, 7, 9):  # int32, int64, bool: no wrap-around on sizes
                return None
            if to == 9:
                if not all(is_int(e) or isinstance(e, bool) for e in data):
                    return None
                data = [bool(e) for e in data]
            elif to == 6 and any(is_int(e) and not -(2**31) <= e < 2**31 for e in data):
                return None  # int64 sentinels (Slice's "to the end") wrap in int32
            self._same_rank(out, ins[0])
            return data
        if op == "Gather" and len(ins) == 2:
            idx = self.elems(ins[1])
            if idx is None or int(node.attr("axis", 0)) != 0 or not all(is_int(i) for i in idx):
                return None
            rank = self.rank(ins[0])
            if rank is not None and rank > 1:
                return None
            picked = []
            for i in idx:
                if not -len(data) <= i < len(data):  # type: ignore[operator]
                    return None
                picked.append(data[i])  # type: ignore[index]
            if self.is_scalar(ins[1]):
                self.scalar.add(out)
            return picked
        if op in ("Unsqueeze", "Squeeze", "Reshape"):
            # only between a scalar and a 1-D vector (the rank of the result is then known)
            if op == "Reshape":
                target = self.elems(ins[1]) if len(ins) > 1 else None
                if target is None or len(target) > 1 or (not target and len(data) != 1):
                    return None
                if not target:
                    self.scalar.add(out)
                return data
            if len(data) != 1:
                return None
            if op == "Unsqueeze":
                return data if self.is_scalar(ins[0]) else None
            if self.is_scalar(ins[0]):
                return None
            self.scalar.add(out)
            return data
        if op == "Concat":
            parts = [self.elems(v) for v in ins]
            if any(p is None for p in parts):
                return None
            return [e for p in parts for e in p]  # type: ignore[union-attr]
        if op == "Slice" and len(ins) >= 3:
            starts, ends = self.elems(ins[1]), self.elems(ins[2])
            axes = self.elems(ins[3]) if len(ins) > 3 and ins[3] is not None else [0]
            steps = self.elems(ins[4]) if len(ins) > 4 and ins[4] is not None else [1]
            if not (starts and ends and axes and steps) or any(len(x) != 1 for x in (starts, ends, axes, steps)):
                return None
            if not all(is_int(x[0]) for x in (starts, ends, axes, steps)) or axes[0] not in (0, -1):
                return None
            if steps[0] == 0:
                return None
            n = len(data)
            return data[slice(*slice(starts[0], ends[0], steps[0]).indices(n))]  # type: ignore[misc]
        if op in ("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater",
                  "LessOrEqual", "GreaterOrEqual") and len(ins) == 2:
            other = self.elems(ins[1])
            if other is None:
                return None
            result = _broadcast2(op, data, other)
            if result is not None and self.is_scalar(ins[0]) and self.is_scalar(ins[1]):
                self.scalar.add(out)
            return result
        if op == "Neg":
            self._same_rank(out, ins[0])
            return [mul(e, -1) if not isinstance(e, bool) else None for e in data] \
                if not any(isinstance(e, bool) for e in data) else None
        if op == "Not":
            if not all(isinstance(e, bool) for e in data):
                return None
            self._same_rank(out, ins[0])
            return [not e for e in data]
        if op == "Where" and len(ins) == 3:
            a, b = self.elems(ins[1]), self.elems(ins[2])
            if a is None or b is None or not all(isinstance(c, bool) for c in data):
                return None
            n = max(len(data), len(a), len(b))
            if any(len(v) not in (1, n) for v in (data, a, b)):
                return None
            pick = [(a if data[i if len(data) > 1 else 0] else b) for i in range(n)]
            if all(self.is_scalar(v) for v in ins if v is not None):
                self.scalar.add(out)
            return [p[i if len(p) > 1 else 0] for i, p in enumerate(pick)]
        if op == "ReduceProd" and self.rank(ins[0]) == 1 and not node.attr("keepdims", 1):
            self.scalar.add(out)
            return [product(data)]
        return None

    def _matrix(self, node: Node) -> list[Elem] | None:
        """PyTorch's pad-order idiom on a small 2-D integer tensor (from :meth:`_contents`): a Slice
        of whole rows (axis 0, any step), a Transpose, a Reshape back to 1-D (its contents), a Cast.
        Anything else on a tracked matrix is unknown."""
        op, ins = node.op, node.inputs
        found = self._rows.get(ins[0])
        if found is None:
            return None
        cols, flat = found
        rows = len(flat) // cols
        out = node.output
        if op == "Slice" and len(ins) >= 3:
            starts, ends = self.elems(ins[1]), self.elems(ins[2])
            axes = self.elems(ins[3]) if len(ins) > 3 and ins[3] is not None else [0]
            steps = self.elems(ins[4]) if len(ins) > 4 and ins[4] is not None else [1]
            if not (starts and ends and axes and steps) or any(len(x) != 1 for x in (starts, ends, axes, steps)) \
                    or not all(is_int(x[0]) for x in (starts, ends, axes, steps)) or axes[0] not in (0, -2) \
                    or steps[0] == 0:
                return None
            picked = range(rows)[slice(starts[0], ends[0], steps[0])]  # type: ignore[misc]
            self._rows[out] = (cols, [flat[r * cols + c] for r in picked for c in range(cols)])
            return None
        if op == "Transpose":
            perm = node.attr("perm")
            if perm is not None and [int(p) for p in perm] != [1, 0]:
                return None
            self._rows[out] = (rows, [flat[r * cols + c] for c in range(cols) for r in range(rows)])
            return None
        if op in ("Identity", "Cast") and (op == "Identity" or node.attr("to") in (6, 7)):
            self._rows[out] = found
            return None
        if op == "Reshape" and len(ins) == 2:
            target = self.elems(ins[1])
            if target is not None and len(target) == 1 and target[0] in (-1, len(flat)):
                return list(flat)
        return None

    def _same_rank(self, out: Value, source: Value | None) -> None:
        if source is not None and self.is_scalar(source):
            self.scalar.add(out)

    # ----- shapes ------------------------------------------------------------------------------
    def _shape_rules(self, node: Node) -> list[list[Elem] | None] | None:
        op, ins = node.op, node.inputs
        first = self.shape(ins[0]) if ins and ins[0] is not None else None
        if op in SAME_SHAPE:
            return [first]
        if op in BROADCAST:
            shapes = [self.shape(v) for v in ins]
            if any(s is None for s in shapes):
                return None
            return [_broadcast_shape(shapes)]  # type: ignore[arg-type]
        if op == "Reshape" and first is not None and len(ins) == 2:
            target = self.elems(ins[1])
            if target is None:
                return None
            return [_reshape_shape(first, target, bool(node.attr("allowzero", 0)))]
        if op == "Expand" and first is not None and len(ins) == 2:
            target = self.elems(ins[1])
            if target is None or any(isinstance(e, bool) for e in target):
                return None
            return [_broadcast_shape([first, target], expand=True)]
        if op == "ConstantOfShape" and ins:
            target = self.elems(ins[0])
            if target is None or any(isinstance(e, bool) or not nonnegative(e) for e in target):
                return None
            return [list(target)]
        if op == "Range" and len(ins) == 3:
            start, limit, delta = (self.elems(v) for v in ins)
            if start == [0] and delta == [1] and limit and len(limit) == 1 and nonnegative(limit[0]):
                return [[limit[0]]]
            return None
        if op == "Transpose" and first is not None:
            perm = node.attr("perm")
            perm = list(range(len(first)))[::-1] if perm is None else [int(p) for p in perm]
            return [[first[p] for p in perm]] if sorted(perm) == list(range(len(first))) else None
        if op in ("Unsqueeze", "Squeeze") and first is not None:
            axes = self.elems(ins[1]) if len(ins) > 1 else None
            if axes is None and node.attr("axes") is not None:
                axes = [int(a) for a in node.attr("axes")]
            if axes is None or not all(is_int(a) for a in axes):
                return None
            if op == "Unsqueeze":
                rank = len(first) + len(axes)
                norm = sorted(_norm_axis(int(a), rank) for a in axes)  # type: ignore[type-var]
                if None in norm:
                    return None
                out = list(first)
                for a in norm:
                    out.insert(a, 1)  # type: ignore[arg-type]
                return [out]
            norm_s = {_norm_axis(int(a), len(first)) for a in axes}
            if None in norm_s:
                return None
            return [[d for i, d in enumerate(first) if i not in norm_s]]
        if op == "Concat":
            shapes = [self.shape(v) for v in ins]
            if any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:  # type: ignore[arg-type]
                return None
            axis = _norm_axis(int(node.attr("axis", 0)), len(shapes[0]))  # type: ignore[arg-type]
            if axis is None:
                return None
            out = list(shapes[0])  # type: ignore[arg-type]
            total: Elem = 0
            for s in shapes:
                total = add(total, s[axis])  # type: ignore[index]
            out[axis] = total
            return [out]
        if op == "MatMul" and len(ins) == 2:
            a, b = first, self.shape(ins[1])
            if a is None or b is None or len(a) < 2 or len(b) < 2:
                return None
            batch = _broadcast_shape([a[:-2], b[:-2]])
            return [None if batch is None else [*batch, a[-2], b[-1]]]
        if op == "Gemm" and len(ins) >= 2:
            a, b = first, self.shape(ins[1])
            if a is None or b is None or len(a) != 2 or len(b) != 2:
                return None
            m = a[1] if node.attr("transA", 0) else a[0]
            n = b[0] if node.attr("transB", 0) else b[1]
            return [[m, n]]
        if op in ("LSTM", "GRU", "RNN") and first is not None and len(first) == 3:
            hidden = node.attr("hidden_size")
            if hidden is None:
                return None
            dirs = 2 if node.attr("direction") in ("bidirectional", b"bidirectional") else 1
            seq, batch = (first[1], first[0]) if node.attr("layout", 0) else (first[0], first[1])
            if node.attr("layout", 0):
                y, h = [batch, seq, dirs, int(hidden)], [batch, dirs, int(hidden)]
            else:
                y, h = [seq, dirs, batch, int(hidden)], [dirs, batch, int(hidden)]
            return [y, h, h]
        if op == "Gather" and first is not None and len(ins) == 2:
            idx = self.shape(ins[1])
            axis = _norm_axis(int(node.attr("axis", 0)), len(first))
            if idx is None or axis is None:
                return None
            return [first[:axis] + idx + first[axis + 1:]]
        if op == "Slice" and first is not None and len(ins) >= 3:
            return [self._slice_shape(node, first)]
        if op in ("Conv", "MaxPool", "AveragePool", "LpPool") and first is not None and len(first) >= 3:
            out = self._window_shape(node, first)
            return [out, out]
        if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool") and first is not None and len(first) >= 3:
            return [first[:2] + [1] * (len(first) - 2)]
        if op == "Pad" and first is not None and len(ins) >= 2 and (len(ins) < 4 or ins[3] is None):
            pads = self.elems(ins[1])  # (opset >= 11: pads an input; every axis, begins then ends)
            rank = len(first)
            if pads is None or len(pads) != 2 * rank or any(isinstance(e, bool) for e in pads):
                return None
            return [[add(add(first[i], pads[i]), pads[i + rank]) for i in range(rank)]]
        if op == "Flatten" and first is not None:
            axis = _norm_axis(int(node.attr("axis", 1)), len(first) + 1)
            if axis is None:
                return None
            return [[product(first[:axis]), product(first[axis:])]]
        return None


    def _window_shape(self, node: Node, first: list[Elem]) -> list[Elem] | None:
        """Conv/pool output dims with explicit pads: ``(d + pads - dilation*(k-1) - 1) // stride + 1``
        (floor and ONNX's truncating Div agree: the numerator of a conv that runs is >= 0)."""
        auto_pad = node.attr("auto_pad", "NOTSET")
        if auto_pad not in ("NOTSET", b"NOTSET") or node.attr("ceil_mode", 0):
            return None
        spatial = len(first) - 2
        if node.op == "Conv":
            weight = self.shape(node.inputs[1]) if len(node.inputs) > 1 else None
            if weight is None or len(weight) != len(first):
                return None
            kernel, channels = list(node.attr("kernel_shape") or weight[2:]), weight[0]
        else:
            kernel, channels = list(node.attr("kernel_shape") or ()), first[1]
        pads = list(node.attr("pads") or [0] * (2 * spatial))
        strides = list(node.attr("strides") or [1] * spatial)
        dilations = list(node.attr("dilations") or [1] * spatial)
        if not len(kernel) == len(strides) == len(dilations) == spatial or len(pads) != 2 * spatial \
                or not all(is_int(k) for k in kernel):
            return None
        out = [first[0], channels]
        for i in range(spatial):
            numerator = add(first[2 + i], int(pads[i]) + int(pads[i + spatial])
                            - int(dilations[i]) * (int(kernel[i]) - 1) - 1)
            quotient = div(numerator, int(strides[i]))
            if quotient is None:
                return None
            out.append(add(quotient, 1))
        return out

    def _slice_shape(self, node: Node, first: list[Elem]) -> list[Elem] | None:
        """Slice's output dims: untouched axes copied; a sliced one where decidable (else unknown)."""
        ins = node.inputs
        starts, ends = self.elems(ins[1]), self.elems(ins[2])
        axes = self.elems(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts or ())))
        steps = self.elems(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts or ())
        if starts is None or ends is None or axes is None or steps is None \
                or not len(starts) == len(ends) == len(axes) == len(steps) or not all(is_int(a) for a in axes):
            return None
        out = list(first)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            k = _norm_axis(int(axis), len(first))  # type: ignore[arg-type]
            if k is None:
                return None
            out[k] = _slice_len(first[k], start, end, step)
            if out[k] is None:
                out[k] = Expr.atom(Opaque(("dim", node.output, k)))
        return out  # type: ignore[return-value]


def _slice_len(d: Elem, start: Elem, end: Elem, step: Elem) -> Elem | None:
    """Length of ``d``'s dim sliced [start:end:step], when the same for every size (else None)."""
    if not all(is_int(e) for e in (start, step)) or isinstance(end, bool) or step == 0:
        return None
    if is_int(d) and is_int(end):
        return len(range(d)[slice(start, end, step)])  # type: ignore[arg-type]
    if step == 1 and start == 0 and (end == d or (is_int(end) and end >= 2**31 - 1)):
        return d
    if step == 1 and is_int(start) and start >= 0 and (end == d or (is_int(end) and end >= 2**31 - 1)) \
            and _compare(d, start) in (0, 1):
        return add(d, start, -1)  # d >= start for every size: d - start
    return None


def _broadcast2(op: str, a: list[Elem], b: list[Elem]) -> list[Elem] | None:
    n = max(len(a), len(b))
    if len(a) not in (1, n) or len(b) not in (1, n):
        return None
    out: list[Elem] = []
    for i in range(n):
        x, y = a[i if len(a) > 1 else 0], b[i if len(b) > 1 else 0]
        r = _binary(op, x, y)
        if r is None:
            return None
        out.append(r)
    return out


def _binary(op: str, x: Elem, y: Elem) -> Elem | None:
    if op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        if isinstance(x, bool) or isinstance(y, bool):
            return (x == y) if op == "Equal" and isinstance(x, bool) and isinstance(y, bool) else None
        sign = _compare(x, y)
        if op == "Equal":
            if x == y:
                return True
            if sign is not None and sign != 0:
                return False
            if (is_int(x) and x < 0 and nonnegative(y)) or (is_int(y) and y < 0 and nonnegative(x)):
                return False  # a size is never negative
            return None
        if sign is None:
            return None
        return {"Less": sign < 0, "Greater": sign > 0, "LessOrEqual": sign <= 0, "GreaterOrEqual": sign >= 0}[op]
    if isinstance(x, bool) or isinstance(y, bool):
        return None
    if op == "Add":
        return add(x, y)
    if op == "Sub":
        return add(x, y, -1)
    if op == "Mul":
        return mul(x, y)
    if op == "Div":
        if is_int(y) and y == 1:
            return x
        return div(x, y)
    if op == "Mod":
        if is_int(x) and is_int(y) and y != 0 and x >= 0 and y > 0:
            return x % y
        if is_int(y) and y == 1:
            return 0
        return None
    if op in ("Max", "Min"):
        sign = _compare(x, y)
        if sign is None:
            return None
        return (x if sign >= 0 else y) if op == "Max" else (x if sign <= 0 else y)
    return None


def _broadcast_shape(shapes: Sequence[Sequence[Elem]], expand: bool = False) -> list[Elem] | None:
    rank = max(len(s) for s in shapes)
    out: list[Elem] = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        others = [d for d in dims if d != 1]
        if not others:
            out.append(1)
        elif all(d == others[0] for d in others):
            out.append(others[0])
        else:
            known = [d for d in others if is_int(d)]
            if known and all(d == known[0] for d in known):
                out.append(known[0])  # a symbolic dim broadcasting with a known non-1 size must be it
            else:
                return None
    return out


def _reshape_shape(first: list[Elem], target: list[Elem], allowzero: bool) -> list[Elem] | None:
    out: list[Elem | None] = []
    for i, t in enumerate(target):
        if isinstance(t, bool):
            return None
        if is_int(t) and t == 0 and not allowzero:
            if i >= len(first):
                return None
            out.append(first[i])
        elif is_int(t) and t == -1:
            out.append(None)
        elif is_int(t) and t < -1:
            return None
        else:
            out.append(t)
    if out.count(None) > 1:
        return None
    if None in out:
        known = [e for e in out if e is not None]
        quotient = exact_quotient(product(first), product(known))
        if quotient is None:
            return None
        out[out.index(None)] = quotient
    return out  # type: ignore[return-value]
