"""Control flow with subgraphs (WHILE, IF, CALL_ONCE) and the resource-variable operators —
as LiteRT runs them.

The kernels run other subgraphs through the interpreter's :class:`~.interpreter.Subgraphs`,
which the interpreter puts in their cache under :data:`SUBGRAPHS_KEY`; the values pass by
position, as LiteRT copies them into the subgraph's inputs and back from its outputs.

* WHILE: the loop values go through the condition subgraph (one boolean) and, while it
  is true, through the body subgraph, whose outputs are the next values.
* IF: input 0 is the condition (one boolean); the other inputs go to the then or the
  else subgraph, whose outputs are the operator's.
* CALL_ONCE: runs its initialization subgraph (no inputs, no outputs) on the first run of
  the interpreter only; what it does lasts through resource variables.
* VAR_HANDLE gives the resource id of variable ``(container, shared_name)``, the same in
  every subgraph (ids in order of first appearance); ASSIGN_VARIABLE stores a copy of a
  tensor as that variable's value, READ_VARIABLE reads it.  Variables live as long as the
  interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...errors import VerificationError
from ...ir import Graph, Node
from ._common import OpContext, kernel
from .prepare import OpCheck, Shape, prepare_rule, static_input_shape

if TYPE_CHECKING:
    from .interpreter import Subgraphs

__all__ = ["SUBGRAPHS_KEY", "SUBGRAPH_OPS", "called_subgraphs", "check_call"]

#: where the interpreter puts its :class:`~.interpreter.Subgraphs` in these operators' caches
SUBGRAPHS_KEY = "subgraphs"
#: operator -> the attributes naming the subgraphs it runs
_CALLS: dict[str, tuple[str, ...]] = {
    "WHILE": ("cond_subgraph_index", "body_subgraph_index"),
    "IF": ("then_subgraph_index", "else_subgraph_index"),
    "CALL_ONCE": ("init_subgraph_index",),
}
#: the operators that need the interpreter's subgraphs or resource variables
SUBGRAPH_OPS = frozenset({*_CALLS, "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})


def called_subgraphs(graphs: Sequence[Graph]) -> list[int]:
    """Indices of the subgraphs the main graph calls, directly or not, in order of discovery;
    a call to a subgraph that does not exist or that calls itself back is refused."""
    found: list[int] = []

    def visit(index: int, path: tuple[int, ...]) -> None:
        for node in graphs[index]:
            for target in _targets(node, len(graphs)):
                if target in path:
                    raise _refuse(node, f"subgraph {target} calls itself (through {' -> '.join(map(str, path))})")
                if target not in found:
                    found.append(target)
                    visit(target, (*path, target))

    visit(0, (0,))
    return found


def _targets(node: Node, count: int) -> list[int]:
    targets = []
    for name in _CALLS.get(node.op, ()):
        index = node.attr(name)
        if not isinstance(index, (int, np.integer)) or not 0 <= int(index) < count:
            raise _refuse(node, f"its {name} is {index!r}, not one of the model's {count} subgraphs")
        targets.append(int(index))
    return targets


def check_call(node: Node, graphs: Sequence[Graph]) -> None:
    """Refuse a control-flow operator whose subgraphs do not take its inputs or give its outputs
    (LiteRT's Prepare checks of the counts)."""
    if node.op not in _CALLS:
        return
    n_in, n_out = len(node.inputs), len(node.outputs)

    def expect(index: int, role: str, inputs: int, outputs: int) -> None:
        graph = graphs[index]
        if (len(graph.inputs), len(graph.outputs)) != (inputs, outputs):
            raise _refuse(node, f"its {role} subgraph {index} has {len(graph.inputs)} inputs and "
                          f"{len(graph.outputs)} outputs, where {inputs} and {outputs} are needed")

    if node.op == "WHILE":
        if n_out != n_in:
            raise _refuse(node, f"it has {n_in} inputs but {n_out} outputs")
        if int(node.attr("cond_subgraph_index")) == int(node.attr("body_subgraph_index")):
            raise _refuse(node, "its condition and body are the same subgraph")
        expect(int(node.attr("cond_subgraph_index")), "condition", n_in, 1)
        expect(int(node.attr("body_subgraph_index")), "body", n_in, n_in)
    elif node.op == "IF":
        if n_in < 1:
            raise _refuse(node, "it has no condition input")
        expect(int(node.attr("then_subgraph_index")), "then", n_in - 1, n_out)
        expect(int(node.attr("else_subgraph_index")), "else", n_in - 1, n_out)
    else:
        expect(int(node.attr("init_subgraph_index")), "initialization", 0, 0)


def _refuse(node: Node, what: str) -> VerificationError:
    return VerificationError(f"the reference interpreter cannot run operator {node.op} ({node.name!r}): {what}; "
                             "the model is invalid")


def _subgraphs(ctx: OpContext) -> Subgraphs:
    return ctx.cache[SUBGRAPHS_KEY]  # type: ignore[no-any-return]


def _truth(ctx: OpContext, cond: np.ndarray, what: str) -> bool:
    """A condition as LiteRT reads it: one boolean (a scalar or shape [1])."""
    if cond.dtype != np.bool_ or cond.size != 1 or cond.ndim > 1:
        raise ctx.error(f"its {what} is a {cond.dtype} tensor of shape {list(cond.shape)}, not one boolean")
    return bool(cond.reshape(-1)[0])


# -- control flow ------------------------------------------------------------------------------------

@kernel("WHILE", int16=True)
def _while(ctx: OpContext) -> list[np.ndarray]:
    graphs = _subgraphs(ctx)
    cond, body = int(ctx.attr("cond_subgraph_index")), int(ctx.attr("body_subgraph_index"))
    values = list(ctx.arrays)
    while _truth(ctx, graphs.call(cond, values)[0], "condition subgraph's output"):
        values = graphs.call(body, values)
    return values  # type: ignore[return-value]


@kernel("IF", int16=True)
def _if(ctx: OpContext) -> list[np.ndarray]:
    branch = "then_subgraph_index" if _truth(ctx, ctx.x(0), "condition") else "else_subgraph_index"
    return _subgraphs(ctx).call(int(ctx.attr(branch)), ctx.arrays[1:])


@kernel("CALL_ONCE")
def _call_once(ctx: OpContext) -> list[np.ndarray]:
    if not ctx.cache.get("done"):
        _subgraphs(ctx).call(int(ctx.attr("init_subgraph_index")), [])
        ctx.cache["done"] = True
    return []


@prepare_rule("WHILE")
def _while_shapes(op: OpCheck) -> list[Shape]:
    """A loop value keeps its shape when the file declares the same static shape for it
    before and after (else: known only at run time)."""
    return [op.shape(i) if static_input_shape(out) == op.shape(i) else None
            for i, out in enumerate(op.node.outputs)]


@prepare_rule("IF")
def _if_shapes(op: OpCheck) -> list[Shape]:
    op.need(0, "condition")
    cond = op.shape(0)
    if cond is not None and (len(cond) > 1 or math.prod(cond) != 1):
        raise op.fail(f"its condition has shape {list(cond)}, not one boolean")
    return [None] * len(op.node.outputs)


@prepare_rule("CALL_ONCE", arity=(0, 0), outputs=0)
def _call_once_shapes(op: OpCheck) -> list[Shape]:
    return []


# -- resource variables ----------------------------------------------------------------------------

def _text(value: object) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value or "")


def _variable(ctx: OpContext) -> int:
    """The resource id in input 0 (what VAR_HANDLE gave)."""
    handle = ctx.x(0)
    if handle.dtype != np.int32 or handle.size != 1:
        raise ctx.error("its input 0 is not a resource handle")
    return int(handle.reshape(-1)[0])


@kernel("VAR_HANDLE")
def _var_handle(ctx: OpContext) -> list[np.ndarray]:
    key = (_text(ctx.attr("container")), _text(ctx.attr("shared_name")))
    ids = _subgraphs(ctx).resource_ids
    return [np.asarray(ids.setdefault(key, len(ids)), np.int32)]


@kernel("READ_VARIABLE", int16=True)
def _read_variable(ctx: OpContext) -> list[np.ndarray]:
    value = _subgraphs(ctx).resources.get(_variable(ctx))
    if value is None:
        raise ctx.error("it reads a resource variable no ASSIGN_VARIABLE has set")
    if value.dtype != ctx.out_dtype():
        raise ctx.error(f"the variable holds {value.dtype} values, its output is {ctx.out_dtype()}")
    return [value]


@kernel("ASSIGN_VARIABLE")
def _assign_variable(ctx: OpContext) -> list[np.ndarray]:
    _subgraphs(ctx).resources[_variable(ctx)] = np.array(ctx.x(1))  # a copy: the variable outlives the run
    return []


@prepare_rule("VAR_HANDLE", arity=(0, 0))
def _var_handle_shape(op: OpCheck) -> list[Shape]:
    return [()]


@prepare_rule("READ_VARIABLE", arity=(1, 1))
def _read_variable_shape(op: OpCheck) -> list[Shape]:
    op.need(0, "resource")
    return [None]


@prepare_rule("ASSIGN_VARIABLE", arity=(2, 2), outputs=0)
def _assign_variable_shape(op: OpCheck) -> list[Shape]:
    op.need(0, "resource")
    op.need(1, "value")
    return []

