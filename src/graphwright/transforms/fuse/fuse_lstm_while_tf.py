"""fuse_lstm_while: a Keras LSTM layer frozen as a functional ``While`` loop becomes one ``BlockLSTMV2``.

Keras 3's LSTM (TF backend, no cuDNN) and tf-keras' inlined ``standard_lstm`` freeze, when
control flow is kept functional (``convert_variables_to_constants_v2(...,
lower_control_flow=False)``), to::

    xs  = TensorListFromTensor(x_tm)                       x_tm: [T, B, I], time-major (reversed: go_backwards)
    (…, out, h, c, …) = While(counter=0, max, time=0, out=TensorListReserve(.., n), h0, c0, xs, K, R, b)
    body:  z = MatMul(xs[time], K) + MatMul(h, R) + b;  i, f, g, o = Split(z, 4, axis=1)
           c' = σ(f)·c + σ(i)·tanh(g);  h' = σ(o)·tanh(c');  out[time or 0] = h';  time += 1
    cond:  time < T  (and counter < max)

After::

    hs, cs = BlockLSTMV2(T, x_tm, c0, h0, concat(K, R), 0, 0, 0, b)     (i, f, c, o gates, no clip)
    h = hs[-1];  c = cs[-1];  out = TensorListFromTensor(hs | hs[-1:])  (what the loop wrote)

so the readers of the loop (``TensorListStack``, the slices Keras takes) are unchanged.  The
body must be exactly that step (checked op by op through ``Identity`` nodes: the two
MatMuls without transposes, the bias, a 4-way split of the last axis, sigmoid/tanh in Keras'
places, every other loop variable passed through or counted up by one); the cond's bounds
must make the loop run ``T`` times (``T`` = the static time length of ``x_tm``; a constant
bound is read, a small constant expression — Keras 3's ``Max`` — is evaluated); ``time``
and ``counter`` start at 0, the output list has as many elements as the loop writes.
Anything else is left alone with the reason.  The loop's inputs nothing reads any more
(the input list, the reserved list, ``Identity``-wrapped weights, constants) are removed.
BlockLSTMV2 has CPU kernels with oneDNN on and off (TF 2.21).  Loops lowered to
``Enter``/``Merge``/``Switch`` (the default of ``convert_variables_to_constants_v2``) are not
recognised.  Cost: O(N) to find loops, O(body) per loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...formats.graphdef import attr_from_proto
from ...ir import Attr, AttrKind, DType, FuncRef, Model, Node, Value, constant_value
from ...patterns import Match, P, Replacement, RuleSet, Skip, make_constant
from ...runtime.numpy_tf import KernelError, evaluate
from .._tf_library import drop_unused_functions, functions
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["constant_expression", "drop_unread_producers", "fuse_lstm_while"]

#: BlockLSTMV2's outputs: i, cs, f, o, ci, co, h.
_CS, _H = 1, 6
_PASS = ("Identity",)


class _Body:
    """A FunctionDef read as a data-flow graph: each input reference resolved through Identity nodes."""

    def __init__(self, fdef: Any) -> None:
        self.fdef = fdef
        self.nodes = {nd.name: nd for nd in fdef.node_def}
        self.args = [a.name for a in fdef.signature.input_arg]

    def src(self, ref: str) -> tuple[str, int]:
        """``(name, output index)`` behind a reference: an argument (index -1) or a non-Identity node."""
        name, _, rest = ref.lstrip("^").partition(":")
        index = int(rest.rpartition(":")[2]) if rest else 0
        while name in self.nodes and self.nodes[name].op in _PASS:
            name, _, rest = self.nodes[name].input[0].partition(":")
            index = int(rest.rpartition(":")[2]) if rest else 0
        return (name, -1) if name in self.args else (name, index)

    def node(self, ref: str, op: str) -> Any | None:
        name, _ = self.src(ref)
        nd = self.nodes.get(name)
        return nd if nd is not None and nd.op == op else None

    def arg(self, ref: str) -> int | None:
        """The position of the argument ``ref`` reads (through Identity), or None."""
        name, index = self.src(ref)
        return self.args.index(name) if index == -1 else None

    def const(self, ref: str) -> np.ndarray | None:
        nd = self.node(ref, "Const")
        if nd is None:
            return None
        attr = attr_from_proto(nd.attr["value"])[0]
        return attr.value.numpy() if attr.kind is AttrKind.TENSOR else None

    def data(self, nd: Any) -> list[str]:
        return [i for i in nd.input if not i.startswith("^")]

    def ret(self, position: int) -> str:
        return self.fdef.ret[self.fdef.signature.output_arg[position].name]


def _pair(body: _Body, nd: Any, op_a: str, op_b: str) -> tuple[Any, Any] | None:
    """The two producers of a binary node, ordered (op_a, op_b) whichever input holds which."""
    a, b = (body.nodes.get(body.src(r)[0]) for r in body.data(nd)[:2])
    if a is not None and b is not None and a.op == op_a and b.op == op_b:
        return a, b
    if a is not None and b is not None and a.op == op_b and b.op == op_a:
        return b, a
    return None


def _step(body: _Body) -> dict[str, Any] | str:
    """The roles of the body's arguments when the body is exactly a Keras LSTM step, or why not."""
    writes = [nd for nd in body.nodes.values() if nd.op == "TensorListSetItem"]
    if len(writes) != 1:
        return f"the loop body writes {len(writes)} tensor lists, not one"
    write = writes[0]
    out_list, index_ref, item_ref = body.data(write)[:3]
    roles: dict[str, Any] = {"out": body.arg(out_list)}
    h_new = body.node(item_ref, "Mul")
    pair = _pair(body, h_new, "Sigmoid", "Tanh") if h_new is not None else None
    if pair is None:
        return "the value written is not sigmoid(o)·tanh(c)"
    o_gate, tanh_c = pair
    c_new = body.node(body.data(tanh_c)[0], "AddV2") or body.node(body.data(tanh_c)[0], "Add")
    terms = [body.node(r, "Mul") for r in body.data(c_new)[:2]] if c_new is not None else []
    if len(terms) != 2 or None in terms:
        return "the cell state is not f·c + i·g"
    forget = input_term = None
    for term in terms:
        first, second = body.data(term)[:2]
        for gate_ref, other_ref in ((first, second), (second, first)):
            gate = body.node(gate_ref, "Sigmoid")
            if gate is None:
                continue
            if body.arg(other_ref) is not None:
                forget, roles["c"] = gate, body.arg(other_ref)
            elif body.node(other_ref, "Tanh") is not None:
                input_term = (gate, body.node(other_ref, "Tanh"))
    if forget is None or input_term is None:
        return "the cell state is not σ(f)·c + σ(i)·tanh(g) with c a loop variable"
    gates = {"i": input_term[0], "f": forget, "g": input_term[1], "o": o_gate}
    split_name = None
    for slot, (gate, want) in enumerate(((gates["i"], 0), (gates["f"], 1), (gates["g"], 2), (gates["o"], 3))):
        name, index = body.src(body.data(gate)[0])
        if body.nodes.get(name) is None or body.nodes[name].op != "Split" or index != want:
            return f"gate {'ifgo'[slot]} is not output {want} of one Split"
        if split_name not in (None, name):
            return "the gates come from different Splits"
        split_name = name
    split = body.nodes[split_name]
    if int(split.attr["num_split"].i) != 4:
        return "the Split is not 4-way"
    dim = body.const(body.data(split)[0])
    if dim is None or int(dim.reshape(-1)[0]) not in (1, -1):
        return "the Split is not along the last axis"
    z = body.nodes.get(body.src(body.data(split)[1])[0])
    if z is None or z.op not in ("BiasAdd", "AddV2", "Add"):
        return "the gates are not z = x·K + h·R + b"
    inner = None
    for a_ref, b_ref in ((body.data(z)[0], body.data(z)[1]), (body.data(z)[1], body.data(z)[0])):
        if body.arg(b_ref) is not None and body.nodes.get(body.src(a_ref)[0]) is not None:
            inner, roles["b"] = body.nodes[body.src(a_ref)[0]], body.arg(b_ref)
            break
        if z.op == "BiasAdd":
            break
    if inner is None or inner.op not in ("AddV2", "Add"):
        return "the gates are not z = x·K + h·R + b (bias not a loop variable)"
    products = [body.node(r, "MatMul") for r in body.data(inner)[:2]]
    if None in products:
        return "x·K + h·R are not two MatMuls"
    for mm in products:
        if mm.attr["transpose_a"].b or mm.attr["transpose_b"].b:
            return f"MatMul {mm.name!r} transposes an operand"
        left, right = body.data(mm)[:2]
        read = body.node(left, "TensorListGetItem")
        if read is not None:
            roles["K"], roles["xs"], roles["time"] = body.arg(right), body.arg(body.data(read)[0]), \
                body.arg(body.data(read)[1])
        else:
            roles["h"], roles["R"] = body.arg(left), body.arg(right)
    if any(roles.get(k) is None for k in ("K", "xs", "time", "h", "R", "b", "c", "out")):
        return "the step's inputs are not all loop variables"
    index_arg = body.arg(index_ref)
    index_const = body.const(index_ref)
    if index_arg == roles["time"]:
        roles["writes"] = "every"
    elif index_const is not None and index_const.size == 1 and int(index_const.reshape(-1)[0]) == 0:
        roles["writes"] = "last"
    else:
        return "the output list is written neither at the time index nor at 0"
    # what the loop carries to the next iteration
    for position in range(len(body.args)):
        name, index = body.src(body.ret(position))
        if position == roles["h"]:
            ok = body.nodes.get(name) is h_new
        elif position == roles["c"]:
            ok = body.nodes.get(name) is c_new
        elif position == roles["out"]:
            ok = body.nodes.get(name) is write
        elif index == -1:
            ok = name == body.args[position]
        else:  # a counter: arg + 1
            nd = body.nodes.get(name)
            data = body.data(nd) if nd is not None and nd.op in ("AddV2", "Add") else []
            one = body.const(data[1]) if len(data) == 2 else None
            ok = (len(data) == 2 and body.arg(data[0]) == position and one is not None and one.size == 1
                  and one.reshape(-1)[0] == 1)
            if ok:
                roles.setdefault("counters", []).append(position)
        if not ok:
            return f"loop variable {position} is not carried as a Keras LSTM step carries it"
    if roles["time"] not in roles.get("counters", []):
        return "the time index does not advance by one"
    return roles


def _cond_bounds(cond: _Body) -> dict[int, str] | str:
    """``{argument position: what it is compared below}`` for a cond made of Less and LogicalAnd."""
    bounds: dict[int, str] = {}
    pending = [cond.ret(0)]
    while pending:
        name, _ = cond.src(pending.pop())
        nd = cond.nodes.get(name)
        if nd is None:
            return "the loop condition is an argument"
        if nd.op == "LogicalAnd":
            pending.extend(cond.data(nd)[:2])
        elif nd.op == "Less":
            left, right = cond.data(nd)[:2]
            position = cond.arg(left)
            if position is None:
                return "the loop condition compares something other than a loop variable"
            bounds[position] = right
        else:
            return f"the loop condition uses {nd.op}"
    return bounds


def constant_expression(value: Value | None, depth: int = 8, max_bytes: int = 1 << 22) -> np.ndarray | None:
    """The value of a small constant expression (Consts combined by ops the NumPy folding kernels
    know: Keras' ``Max(T, Range(0, 0))``, ``Fill(Pack(Prod(..)), 1)``...), or None.  O(expression)."""
    if value is None or depth < 0:
        return None
    tensor = constant_value(value)
    if tensor is not None:
        return tensor.numpy()
    node = value.producer
    if node is None or node.op in ("Placeholder", "While", "StatelessWhile") or node.control_inputs:
        return None
    inputs = [constant_expression(v, depth - 1, max_bytes) for v in node.inputs]
    if any(a is None for a in inputs):
        return None
    try:
        return evaluate(node, inputs, max_bytes=max_bytes)[value.index]  # type: ignore[arg-type]
    except (KernelError, ValueError):
        return None


def _steps(xs: Value) -> tuple[Value, int] | None:
    """``(x_tm, T)`` for ``TensorListFromTensor(x_tm)`` with a static time length, or None."""
    node = xs.producer
    if node is None or node.op != "TensorListFromTensor":
        return None
    x_tm = node.inputs[0]
    assert x_tm is not None
    if x_tm.shape is not None and x_tm.shape and isinstance(x_tm.shape[0], int):
        return x_tm, int(x_tm.shape[0])
    origin = x_tm.producer  # Transpose(x, perm) of an input whose shape is known (and ReverseV2 of it)
    while origin is not None and origin.op == "ReverseV2":
        origin = origin.inputs[0].producer if origin.inputs[0] is not None else None
    if origin is None or origin.op != "Transpose" or origin.inputs[0] is None:
        return None
    perm, shape = constant_expression(origin.inputs[1]), origin.inputs[0].shape
    if perm is None or shape is None or len(shape) != perm.size or not isinstance(shape[int(perm[0])], int):
        return None
    return x_tm, int(shape[int(perm[0])])  # type: ignore[arg-type]


def _make_rule(library: dict[str, Any], former: list[Value | None]):
    def rule(m: Match) -> Replacement | Skip:
        """Check the loop (body, cond, initial values) and emit BlockLSTMV2 and the values the loop gave."""
        loop = m.node
        assert loop is not None
        refs = [loop.attr("body"), loop.attr("cond")]
        if not all(isinstance(r, FuncRef) and r.name in library for r in refs):
            return m.skip("the loop's body or cond is not in the function library")
        body, cond = _Body(library[refs[0].name]), _Body(library[refs[1].name])
        try:
            roles = _step(body)
        except (IndexError, KeyError, ValueError) as e:  # a malformed body: not ours to fix, left alone
            return m.skip(f"the loop body could not be read as an LSTM step ({type(e).__name__}: {e})")
        if isinstance(roles, str):
            return m.skip(f"not a Keras LSTM loop: {roles}")
        if len(body.args) != len(loop.inputs):
            return m.skip("the loop and its body disagree on the loop variables")
        inputs = loop.inputs
        xs = inputs[roles["xs"]]
        if xs is None or xs.producer is None or xs.producer.op != "TensorListFromTensor":
            return m.skip("the input sequence is not a TensorListFromTensor")
        found = _steps(xs)
        x_tm, steps = found if found is not None else (xs.producer.inputs[0], None)
        for position in roles["counters"]:
            start = constant_expression(inputs[position])
            if start is None or start.size != 1 or start.reshape(-1)[0] != 0:
                return m.skip(f"loop variable {position} (a counter) does not start at 0")
        try:
            bounds = _cond_bounds(cond)
        except (IndexError, KeyError, ValueError) as e:
            return m.skip(f"the loop condition could not be read ({type(e).__name__}: {e})")
        if isinstance(bounds, str):
            return m.skip(bounds)
        if roles["time"] not in bounds:
            return m.skip("the loop condition does not bound the time index")
        limits: dict[int, int] = {}
        for position, ref in bounds.items():
            limit = cond.const(ref)
            if limit is None and cond.arg(ref) is not None:
                limit = constant_expression(inputs[cond.arg(ref)])  # type: ignore[index]
            if position not in roles["counters"] or limit is None or limit.size != 1:
                return m.skip("the loop condition's bound is not a constant on a counter")
            limits[position] = int(limit.reshape(-1)[0])
        sliced = steps is None  # the time length is only known at run time: take the first T steps
        steps = limits[roles["time"]] if steps is None else steps
        if limits[roles["time"]] != steps or min(limits.values()) < steps or steps < 1:
            return m.skip(f"the loop runs {min(limits.values())} times, not the sequence's {steps}")
        reserve = inputs[roles["out"]].producer if inputs[roles["out"]] is not None else None  # type: ignore[union-attr]
        count = constant_expression(reserve.inputs[1]) if reserve is not None and reserve.op == "TensorListReserve" else None
        wanted = steps if roles["writes"] == "every" else 1
        if count is None or count.size != 1 or int(count.reshape(-1)[0]) != wanted:
            return m.skip(f"the output list is not a TensorListReserve of {wanted} elements")
        assert x_tm is not None
        dtypes = {v.dtype for v in (x_tm, loop.outputs[roles["h"]], loop.outputs[roles["c"]])}
        if dtypes != {DType.FLOAT32}:
            return m.skip("the LSTM is not float32")
        graph = loop.graph
        assert graph is not None
        made: list[Node] = []
        f32, i32 = DType.FLOAT32, DType.INT32

        def const(array: Any, name: str, dtype: DType) -> Value:
            node, value = make_constant(loop, array, f"{loop.name}/{name}", dtype)
            assert node is not None
            made.append(node)
            return value

        def op(kind: str, args: list[Value], name: str, outputs: int = 1, **attrs: Attr) -> Node:
            node = Node(kind, args, dialect="tf", name=graph.unique_node_name(f"{loop.name}/{name}"),
                        attrs=attrs, outputs=outputs, device=loop.device)
            for value in node.outputs:
                value.dtype = f32
            made.append(node)
            return node

        kernel, recurrent = inputs[roles["K"]], inputs[roles["R"]]
        arrays = [constant_expression(kernel), constant_expression(recurrent)]
        if arrays[0] is not None and arrays[1] is not None and arrays[0].ndim == arrays[1].ndim == 2:
            w = const(np.concatenate(arrays, axis=0).astype(np.float32), "w", f32)  # type: ignore[arg-type]
            units = arrays[1].shape[0]
        else:
            return m.skip("the kernels are not constants")
        t32 = Attr.dtype(f32)
        no_peephole = const(np.zeros(units, np.float32), "no_peephole", f32)
        masks = {k: Attr.int(0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask")}
        if sliced:  # x_tm[:T] (a shorter sequence fails in BlockLSTMV2 as the loop's read fails)
            x_tm = op("StridedSlice", [x_tm, const(np.array([0], np.int32), "steps/begin", i32),
                                       const(np.array([steps], np.int32), "steps/end", i32),
                                       const(np.array([1], np.int32), "steps/stride", i32)], "steps", T=t32,
                      Index=Attr.dtype(i32), **masks, shrink_axis_mask=Attr.int(0)).output
        block = op("BlockLSTMV2", [const(np.int64(steps), "seq_len_max", DType.INT64), x_tm,
                                   inputs[roles["c"]], inputs[roles["h"]], w, no_peephole, no_peephole,  # type: ignore[list-item]
                                   no_peephole, inputs[roles["b"]]], "block_lstm", outputs=7,  # type: ignore[list-item]
                   T=t32, cell_clip=Attr.float(0.0), use_peephole=Attr.bool(False))
        last = [const(np.array([v], np.int32), f"last_step/{n}", i32) for n, v in (("begin", -1), ("end", 0),
                                                                                  ("stride", 1))]
        mapping: dict[Value, Value] = {}

        def read(position: int) -> bool:
            out = loop.outputs[position]
            return bool(out.num_uses or out.is_graph_output)

        for role, index in (("h", _H), ("c", _CS)):
            if read(roles[role]):
                mapping[loop.outputs[roles[role]]] = op(
                    "StridedSlice", [block.outputs[index], *last], f"last_{role}", T=t32, Index=Attr.dtype(i32),
                    **masks, shrink_axis_mask=Attr.int(1)).output
        if read(roles["out"]):
            written = block.outputs[_H]
            if roles["writes"] == "last":  # hs[-1:]
                tail = {**masks, "end_mask": Attr.int(1), "shrink_axis_mask": Attr.int(0)}
                written = op("StridedSlice", [written, last[0], last[1], last[2]], "tail", T=t32,
                             Index=Attr.dtype(i32), **tail).output
            assert reserve is not None
            lst = op("TensorListFromTensor", [written, reserve.input(0)], "outputs", element_dtype=t32,
                     shape_type=Attr.dtype(reserve.input(0).dtype or i32))
            lst.output.dtype = DType.VARIANT
            mapping[loop.outputs[roles["out"]]] = lst.output
        for position in roles["counters"]:
            if read(position):
                mapping[loop.outputs[position]] = const(np.array(steps, np.int32), f"count_{position}", i32)
        for position, out in enumerate(loop.outputs):
            if out not in mapping and read(position):
                if position in (roles["h"], roles["c"], roles["out"]):
                    continue
                mapping[out] = inputs[position]  # type: ignore[assignment]  # passed through unchanged
        former.extend(inputs)
        return Replacement(made, mapping, control_to=block)

    return rule


def drop_unread_producers(value: Value | None) -> None:
    """Remove the producers of ``value`` nothing reads any more, recursively, side-effect-free ops only."""
    pending = [value]
    while pending:
        value = pending.pop()
        node = value.producer if value is not None else None
        if (node is None or node.graph is None or node.op in ("Placeholder", "While", "StatelessWhile")
                or node.control_users or node.control_inputs
                or any(out.num_uses or out.is_graph_output for out in node.outputs)):
            continue
        inputs = list(node.inputs)
        node.graph.remove(node)
        pending.extend(inputs)


@transform("fuse_lstm_while", dialects={"tf"})
def fuse_lstm_while(model: Model, ctx: TransformContext) -> TransformResult:
    """Fuse Keras LSTM layers frozen as functional While loops into BlockLSTMV2."""
    former: list[Value | None] = []
    rules = RuleSet(name="fuse_lstm_while")
    rules.add(P("While|StatelessWhile", dialect="tf"), _make_rule(functions(model), former), name="lstm_loop")
    report = apply_rules(model, [rules], subgraphs=False)
    for value in dict.fromkeys(former):
        drop_unread_producers(value)
    if report.applied:
        drop_unused_functions(model)
    frames = {n.attr("frame_name") for n in model.graph if n.op in ("Enter", "RefEnter")}
    notes = [f"{len(frames)} lowered while loop(s) (Enter/Merge/Switch/Exit) left alone: only functional While "
             "loops are recognised (freeze with lower_control_flow=False to keep them)"] if frames else []
    return result_of(report, stats={"loops_fused": report.applied}, notes=notes)
