"""inline_partitionedcall: replace function calls by the body of the function they call.

Before::  y0, y1 = PartitionedCall(x, w){f=fn}        library: fn(a, b) {m = MatMul(a, b); ...}
After::   call/MatMul = MatMul(x, w); ...; readers of y0, y1 read the body's return values

Every ``PartitionedCall`` / ``StatefulPartitionedCall`` whose function is in
the graph's library is replaced by a copy of the function body, its nodes named
``<call>/<body node>`` (as the original tool names them); body inputs that
name function arguments read the call's inputs, ``node:out_arg:i`` references
are resolved through the op table, control inputs of the call become control
inputs of every inlined node, and control users of the call wait on a ``NoOp``
that depends on the whole body.  Calls inside inlined bodies are inlined in
turn (up to :data:`MAX_DEPTH` levels).  Functions no longer called are then
removed from the library (the original tool keeps them; they are dead weight
in the file).  Calls that cannot be inlined (polymorphic bodies, ops unknown
to the op table) are left alone and reported.  O(N + inlined nodes + edges).
"""

from __future__ import annotations

from ...errors import TransformError
from ...ir import Model, Node
from .._tf_library import called_function, drop_unused_functions, functions, instantiate
from ..context import TransformContext
from ..registry import TransformResult, transform

#: Nested calls deeper than this are left alone (guards against recursive functions).
MAX_DEPTH = 32


@transform("inline_partitionedcall", dialects={"tf"})
def inline_partitionedcall(model: Model, ctx: TransformContext) -> TransformResult:
    """Inline PartitionedCall/StatefulPartitionedCall nodes whose function is in the library."""
    library = functions(model)
    graph = model.graph
    inlined = 0
    notes: list[str] = []
    failed: set[Node] = set()
    for _ in range(MAX_DEPTH):
        calls = [n for n in graph if n not in failed and called_function(n) in library]
        if not calls:
            break
        for call in calls:
            fdef = library[called_function(call)]  # type: ignore[index]
            try:
                body, results = instantiate(fdef, graph, call.name, call.inputs, call.control_inputs)
            except TransformError as e:
                failed.add(call)
                notes.append(f"{call.name}: not inlined ({e})")
                continue
            graph.insert_before(call, body)
            for old, new in zip(call.outputs, results):
                old.replace_all_uses_with(new)
            if call.control_users:
                done = Node("NoOp", (), dialect="tf", name=graph.unique_node_name(f"{call.name}/done"),
                            outputs=0, control_inputs=body)
                graph.insert_before(call, done)
                for user in call.control_users:
                    user.remove_control_input(call)
                    user.add_control_input(done)
            graph.remove(call)
            inlined += 1
    else:
        notes.append(f"calls nested deeper than {MAX_DEPTH} levels were left alone")
    dropped = drop_unused_functions(model) if inlined else []
    stats = {"calls_inlined": inlined, "functions_removed": len(dropped)}
    return TransformResult(inlined > 0, stats, notes)
