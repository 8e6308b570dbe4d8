"""eliminate_nop: remove nodes that return their input unchanged.

Before::  a = Mul(x[2, 8], 1.0); b = Reshape(a, [2, 8]); c = Cast(b, to=FLOAT)
          d = Transpose(c, perm=[0, 1]); e = Slice(d, [0], [INT64_MAX], [1])
After::   e is x

Each rule is one line of the table below, a rule of the rewrite engine named
like onnxoptimizer's pass for the same thing (``skip=...`` turns rules off by
those names; the registered transform lists them as ``rule_names``).  A rule's
function returns the value the node's output equals, or None (then the node is
no match); the node is then bypassed (``Replacement.bypass_to``: a graph output
keeps its name, and when the value can't take it the node stays, with that
reason in the report).  The checks are exact:

- ``x op c`` with ``c`` all units (``x*1``, ``1*x``, ``x+0``, ``0+x``, ``x-0``,
  ``x/1``, ``x**1``, ``x and true``, ``x or false``) only when broadcasting
  ``c`` cannot change ``x``'s shape (``c`` has no more dims than ``x`` and each
  of its dims is 1 or equal to ``x``'s), and the output dtype is ``x``'s;
- Reshape/Flatten/Expand whose output shape equals the input's (static dims,
  or the same symbolic dim in place for Reshape's ``0`` copies);
- Cast/CastLike to the dtype the input already has;
- Transpose with the identity permutation; Concat/Sum/Max/Min of one input;
- Slice that keeps every element (start 0, step 1, end at or past the dim),
  Pad with all-zero pads.

Every rule matches a single node, so one sweep removes a chain of no-ops (each
node is tried after the one before it was bypassed).  All graphs, If/Loop
bodies included.  O(N + E) (constants are read only for the ops above, and only
when at most :data:`MAX_UNIT_ELEMENTS`; the first element is compared before the rest, so a real
weight is rejected at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir import DType, Node, Value
from ...patterns import ANY, Match, P, Replacement, RuleSet, Skip, compatible_dtype
from ...runtime.numpy_onnx import onnx_dtype_numpy
from .._onnx import const_array, static_shape
from ..rules import rule_transform

__all__ = ["eliminate_nop", "RULES", "TABLE", "rule_set", "MAX_UNIT_ELEMENTS"]

#: Larger "unit" constants are not inspected.  Exporters fold all-zero biases of attention scores
#: into dense constants (EfficientFormer's 8x49x49 ``attention_biases`` gathered by index), so the
#: bound is generous; a real weight is rejected on its first element.
MAX_UNIT_ELEMENTS = 1 << 20
_INT64_MAX = np.iinfo(np.int64).max

#: A rule's function: the value the node's output equals, or None.
Source = Callable[[Node], "Value | None"]


def _fits(const: Value, x: Value) -> bool:
    """Broadcasting ``const`` against ``x`` leaves ``x``'s shape unchanged."""
    c_shape = static_shape(const)
    if c_shape is None or x.shape is None or len(c_shape) > len(x.shape):
        return False
    for c, d in zip(reversed(c_shape), reversed(x.shape)):
        if c != 1 and c != d:
            return False
    return True


def _unit(x: Value | None, const: Value | None, unit: float, out: Value) -> Value | None:
    if x is None or const is None or x.dtype is None or (x.dtype != out.dtype and out.dtype is not None):
        return None
    array = const_array(const) if static_shape(const) is not None and _small(const) else None
    if array is None or array.size == 0 or not _fits(const, x) or const.dtype != x.dtype:
        return None
    if array.flat[0] != unit:
        return None
    return x if bool(np.all(array == unit)) else None


def _small(value: Value) -> bool:
    shape = static_shape(value)
    return shape is not None and int(np.prod(shape, dtype=np.int64)) <= MAX_UNIT_ELEMENTS


def _right_unit(unit: float) -> Source:
    return lambda n: _unit(n.inputs[0], n.inputs[1], unit, n.output) if len(n.inputs) == 2 else None


def _either_unit(unit: float) -> Source:
    def rule(n: Node) -> Value | None:
        if len(n.inputs) != 2:
            return None
        return _unit(n.inputs[0], n.inputs[1], unit, n.output) or _unit(n.inputs[1], n.inputs[0], unit, n.output)
    return rule


def _same_shape(n: Node) -> Value | None:
    x = n.inputs[0]
    if x is None or x.shape is None or n.output.shape is None:
        return None
    if static_shape(x) is not None and static_shape(x) == static_shape(n.output):
        return x
    return None


def _reshape(n: Node) -> Value | None:
    x = n.inputs[0]
    target = const_array(n.inputs[1]) if len(n.inputs) > 1 else None
    if x is None or x.shape is None or target is None or target.ndim != 1 or len(target) != len(x.shape):
        return _same_shape(n)
    allowzero = bool(n.attr("allowzero", 0))
    unknown = 0
    for _i, (want, have) in enumerate(zip(target.tolist(), x.shape)):
        if want == 0 and not allowzero:
            continue  # copies dim i
        if isinstance(have, int) and want == have:
            continue
        if want == -1:
            unknown += 1
            continue
        return None
    # one -1 among otherwise equal dims is that very dim
    return x if unknown <= 1 else None


def _cast(n: Node) -> Value | None:
    x = n.inputs[0]
    target = onnx_dtype_numpy(n.attr("to", -1))
    if x is None or x.dtype is None or target is None or x.dtype.numpy != target:
        return None
    return x if x.dtype not in (DType.STRING,) else None


def _cast_like(n: Node) -> Value | None:
    x, like = n.inputs[0], n.inputs[1] if len(n.inputs) > 1 else None
    if x is None or like is None or x.dtype is None or x.dtype != like.dtype:
        return None
    return x


def _transpose(n: Node) -> Value | None:
    x = n.inputs[0]
    perm = n.attr("perm")
    if x is None:
        return None
    if perm is None:
        return x if x.shape is not None and len(x.shape) <= 1 else None
    return x if list(perm) == list(range(len(perm))) else None


def _single_input(n: Node) -> Value | None:
    present = [v for v in n.inputs if v is not None]
    return present[0] if len(present) == 1 and len(n.inputs) == 1 else None


def _slice(n: Node) -> Value | None:
    x = n.inputs[0]
    if x is None or x.shape is None or len(n.inputs) < 3:
        return None
    starts, ends = const_array(n.inputs[1]), const_array(n.inputs[2])
    axes = const_array(n.inputs[3]) if len(n.inputs) > 3 and n.inputs[3] is not None else None
    steps = const_array(n.inputs[4]) if len(n.inputs) > 4 and n.inputs[4] is not None else None
    if starts is None or ends is None or (len(n.inputs) > 3 and n.inputs[3] is not None and axes is None):
        return None
    if len(n.inputs) > 4 and n.inputs[4] is not None and steps is None:
        return None
    rank = len(x.shape)
    axes_list = list(range(len(starts))) if axes is None else [int(a) + rank if a < 0 else int(a) for a in axes]
    for k, axis in enumerate(axes_list):
        if not 0 <= axis < rank:
            return None
        step = 1 if steps is None else int(steps[k])
        start, end, dim = int(starts[k]), int(ends[k]), x.shape[axis]
        if step != 1:
            return None
        if start != 0 and not (isinstance(dim, int) and start <= -dim):
            return None
        if end < _INT64_MAX and not (isinstance(dim, int) and end >= dim):
            return None
    return x


def _pad(n: Node) -> Value | None:
    x = n.inputs[0]
    if x is None:
        return None
    if len(n.inputs) > 1 and n.inputs[1] is not None:
        pads = const_array(n.inputs[1])
        if pads is None:
            return None
    else:
        attr = n.attr("pads")
        if attr is None:
            return None
        pads = np.asarray(attr)
    return x if pads.size and not np.any(pads) else None


def _rule(source: Source) -> tuple[Callable[[Node], bool], Callable[[Match], Replacement | Skip]]:
    """(the pattern's ``where=``, the rewrite) of one table line.

    ``where``: the node has one output and ``source`` finds the value it equals.  A node that is
    not a no-op is simply no match (no report entry); one that is but can't be removed is skipped
    or refused with a reason.  The rewrite bypasses the node: readers of its output read that
    value, and a graph output keeps its name.  The value ``where`` found is kept for the rewrite,
    which the engine runs on the same node right after (one slot: no second look at constants).
    """
    found: list[tuple[Node, Value]] = []

    def where(node: Node) -> bool:
        value = source(node) if len(node.outputs) == 1 else None
        found[:] = [] if value is None else [(node, value)]
        return value is not None

    def rewrite(m: Match) -> Replacement | Skip:
        node = m.node
        assert node is not None
        value = found[0][1] if found and found[0][0] is node else source(node)
        found.clear()
        assert value is not None  # the pattern's where= found it
        if not compatible_dtype(value, node.output):
            return m.skip(f"{value.name!r} is {value.dtype.value if value.dtype else '?'}, "
                          f"not {node.output.dtype.value if node.output.dtype else '?'} like {node.output.name!r}")
        return Replacement.bypass_to(node.output, value)

    where.__name__ = f"is_nop({getattr(source, '__name__', '?')})"
    return where, rewrite


_1 = (ANY,)  # exactly one data input
_2 = (ANY, ANY)  # exactly two
_1_ = (ANY, ...)  # at least one (the first is the data)
_2_ = (ANY, ANY, ...)
_3_ = (ANY, ANY, ANY, ...)

#: The rules: op (standard domain), its data inputs, the onnxoptimizer-style rule name (what
#: ``skip=`` takes) and the function finding the value the output equals.  One line per rule.
TABLE: list[tuple[str, tuple[Any, ...], str, Source]] = [
    ("Mul", _2, "eliminate_nop_with_unit", _either_unit(1)),        # x*1 -> x, 1*x -> x
    ("Add", _2, "eliminate_nop_with_unit", _either_unit(0)),        # x+0 -> x, 0+x -> x
    ("Sub", _2, "eliminate_nop_with_unit", _right_unit(0)),         # x-0 -> x
    ("Div", _2, "eliminate_nop_with_unit", _right_unit(1)),         # x/1 -> x
    ("Pow", _2, "eliminate_nop_with_unit", _right_unit(1)),         # x**1 -> x
    ("And", _2, "eliminate_nop_with_unit", _either_unit(True)),     # x and true -> x
    ("Or", _2, "eliminate_nop_with_unit", _either_unit(False)),     # x or false -> x
    ("Reshape", _1_, "eliminate_nop_reshape", _reshape),            # Reshape(x, shape(x)) -> x
    ("Flatten", _1_, "eliminate_nop_flatten", _same_shape),         # Flatten of a 2-D x at axis 1 -> x
    ("Expand", _1_, "eliminate_nop_expand", _same_shape),           # Expand(x, s) with broadcast(x, s) = x -> x
    ("Squeeze", _1_, "eliminate_nop_squeeze", _same_shape),         # squeezing nothing -> x
    ("Cast", _1_, "eliminate_nop_cast", _cast),                     # Cast(x, to=dtype(x)) -> x
    ("CastLike", _2_, "eliminate_nop_cast", _cast_like),            # CastLike(x, y) with dtype(y) = dtype(x) -> x
    ("Transpose", _1_, "eliminate_nop_transpose", _transpose),      # Transpose(x, perm=identity) -> x
    ("Concat", _1, "eliminate_nop_concat", _single_input),          # Concat(x) -> x
    ("Sum", _1, "eliminate_nop_concat", _single_input),             # Sum(x) -> x
    ("Max", _1, "eliminate_nop_concat", _single_input),             # Max(x) -> x
    ("Min", _1, "eliminate_nop_concat", _single_input),             # Min(x) -> x
    ("Mean", _1, "eliminate_nop_concat", _single_input),            # Mean(x) -> x
    ("Slice", _3_, "eliminate_nop_slice", _slice),                  # Slice keeping everything -> x
    ("Pad", _1_, "eliminate_nop_pad", _pad),                        # Pad by zeros -> x
]


def rule_set() -> RuleSet:
    """The table as a rule set, built per run (its rules keep per-run state: see :func:`_rule`)."""
    rules = RuleSet(name="eliminate_nop")
    for op, inputs, name, source in TABLE:
        where, rewrite = _rule(source)
        rules.add(P(op, *inputs, domain="", where=where), rewrite, name=name)
    return rules


#: The rules (for their names and patterns; each run builds its own copy).
RULES = rule_set()

eliminate_nop = rule_transform(
    "eliminate_nop", lambda model: [rule_set()], dialects={"onnx"}, rule_names=RULES.names(),
    summary="Remove no-op nodes: x*1, x+0, same-shape Reshape/Expand, same-type Cast, identity Transpose...",
)
