"""sparsify_gather: a Gather from a mostly-zero constant table becomes a hash-table lookup.

Before::  t = Const([N, 1]) [-> Identity];  y = Gather(t, ids)  |  GatherV2(t, ids, axis=0)
After::   table = HashTable{key int64, value T}
          InitializeTable(table, keys = rows with t[k] != 0, values = t[keys])   (run by group_init_node)
          y = ExpandDims(LookupTableFind(table, ids, default=0), -1)

    y[i] = t[ids[i]] = (ids[i] in keys ? values[...] : 0)

so only the non-zero rows are stored.  Tables of shape ``[N]`` skip the
``ExpandDims``.  One hash table is built per constant table and shared by all
its gathers; the ``InitializeTable`` nodes become control inputs of the
``NoOp`` named ``group_init_node`` (created if missing), which the caller must
run once before the lookups, as with the original tool.  Differences from the
original (deliberate): a table also read by something other than a qualifying
gather is left in place for those readers (the original rewires them into
invalid nodes), int32 ids are cast to the int64 keys, ``[N]`` tables are
accepted, and ``input_checkpoint`` (variables restored from a checkpoint) is
not supported: freeze the graph first.  O(N + table sizes).
"""

from __future__ import annotations

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, Value, constant_value
from ...patterns import make_constant
from ..context import TransformContext
from ..registry import TransformResult, transform

DEFAULT_GROUP_INIT_NODE = "group_deps"


def _table_of(gather: Node) -> tuple[Node, np.ndarray] | None:
    """The Const behind the gather's params (through Identity nodes) and its data, if it qualifies."""
    if gather.op == "GatherV2":
        axis = constant_value(gather.input(2)) if len(gather.inputs) == 3 else None
        if axis is None or int(axis.numpy()) != 0 or gather.attr("batch_dims", 0) != 0:
            return None
    elif gather.op != "Gather" or len(gather.inputs) != 2:
        return None
    node = gather.input(0).producer
    while node is not None and node.op == "Identity" and node.inputs:
        node = node.input(0).producer
    if node is None or node.op != "Const":
        return None
    tensor = constant_value(node.output)
    if tensor is None or not (len(tensor.shape) == 1 or (len(tensor.shape) == 2 and tensor.shape[1] == 1)):
        return None
    if gather.attr("Tindices") not in (DType.INT32, DType.INT64) or tensor.dtype is DType.STRING:
        return None
    return node, tensor.numpy()


@transform("sparsify_gather", dialects={"tf"})
def sparsify_gather(model: Model, ctx: TransformContext, *, input_checkpoint: str = "",
                    group_init_node: str = DEFAULT_GROUP_INIT_NODE) -> TransformResult:
    """Replace Gather on a constant [N,1] table by a HashTable lookup of its non-zero rows."""
    if input_checkpoint:
        raise TransformError("sparsify_gather: input_checkpoint is not supported; freeze the variables into "
                             "the graph first (e.g. convert_variables_to_constants_v2) and run without it")
    graph = model.graph
    tables: dict[Node, Node] = {}  # table Const -> HashTable node
    inits: list[Node] = []
    rewritten = 0
    for gather in graph:
        if gather.op not in ("Gather", "GatherV2"):
            continue
        found = _table_of(gather)
        if found is None:
            continue
        const, data = found
        if const not in tables:
            hash_table, init = _hash_table(const, data)
            tables[const] = hash_table
            inits.append(init)
        _lookup(gather, tables[const], data)
        rewritten += 1
    if not rewritten:
        return TransformResult(False, {"gathers_sparsified": 0})
    for const in tables:
        _drop_dead_chain(const)
    _group_inits(graph, group_init_node, inits)
    return TransformResult(True, {"gathers_sparsified": rewritten, "tables": len(tables)},
                           [f"run the '{group_init_node}' node once before using the graph (it fills the tables)"])


def _hash_table(const: Node, data: np.ndarray) -> tuple[Node, Node]:
    graph = const.graph
    assert graph is not None
    flat = data.reshape(-1)
    keys = np.flatnonzero(flat).astype(np.int64)
    value_type = constant_value(const.output).dtype  # type: ignore[union-attr]
    keys_node, keys_value = make_constant(const, keys, f"{const.name}/indices", DType.INT64)
    graph.insert_after(const, keys_node)  # type: ignore[arg-type]
    values_node, values_value = make_constant(const, flat[keys], f"{const.name}/values", value_type)
    graph.insert_after(keys_node, values_node)  # type: ignore[arg-type]
    table = Node("HashTable", (), dialect="tf", name=graph.unique_node_name(f"{const.name}/HashTable"), attrs={
        "key_dtype": Attr.dtype(DType.INT64), "value_dtype": Attr.dtype(value_type),
        "container": Attr.string(""), "shared_name": Attr.string(""), "use_node_name_sharing": Attr.bool(False)})
    table.output.dtype = DType.STRING
    graph.insert_after(values_node, table)  # type: ignore[arg-type]
    init = Node("InitializeTable", (table.output, keys_value, values_value), dialect="tf",
                name=graph.unique_node_name(f"{const.name}/InitializeTable"), outputs=0,
                attrs={"Tkey": Attr.dtype(DType.INT64), "Tval": Attr.dtype(value_type)})
    graph.insert_after(table, init)
    return table, init


def _lookup(gather: Node, table: Node, data: np.ndarray) -> None:
    graph = gather.graph
    assert graph is not None
    value_type = table.attr("value_dtype")
    ids: Value = gather.input(1)
    new: list[Node] = []
    if gather.attr("Tindices") is DType.INT32:
        cast = Node("Cast", (ids,), dialect="tf", name=graph.unique_node_name(f"{gather.name}/Cast"), attrs={
            "SrcT": Attr.dtype(DType.INT32), "DstT": Attr.dtype(DType.INT64), "Truncate": Attr.bool(False)})
        cast.output.dtype = DType.INT64
        new.append(cast)
        ids = cast.output
    default_node, default = make_constant(gather, np.zeros((), data.dtype), f"{gather.name}/Const", value_type)
    new.append(default_node)  # type: ignore[arg-type]
    find = Node("LookupTableFind", (table.output, ids, default), dialect="tf",
                name=graph.unique_node_name(f"{gather.name}/LookupTableFind"),
                attrs={"Tin": Attr.dtype(DType.INT64), "Tout": Attr.dtype(value_type)})
    find.output.dtype = value_type
    new.append(find)
    result = find.output
    if data.ndim == 2:
        axis_node, axis = make_constant(gather, np.int32(-1), f"{gather.name}/ExpandDims/Const")
        expand = Node("ExpandDims", (find.output, axis), dialect="tf",
                      name=graph.unique_node_name(f"{gather.name}/ExpandDims"),
                      attrs={"T": Attr.dtype(value_type), "Tdim": Attr.dtype(DType.INT32)})
        expand.output.dtype = value_type
        new += [axis_node, expand]  # type: ignore[list-item]
        result = expand.output
    last = new[-1]
    for ctrl in gather.control_inputs:
        last.add_control_input(ctrl)
    graph.insert_before(gather, new)
    gather.output.replace_all_uses_with(result)
    for user in gather.control_users:
        user.remove_control_input(gather)
        user.add_control_input(last)
    extra = [v.producer for v in (gather.inputs[0], *gather.inputs[2:]) if v is not None]
    name = gather.name
    graph.remove(gather)
    for producer in extra:
        _drop_dead_chain(producer)
    last.name = name  # the result keeps the gather's name, as in the original
    last.output.name = name


def _drop_dead_chain(node: Node | None) -> None:
    """Remove a Const/Identity chain nothing reads any more."""
    while node is not None and node.graph is not None and node.op in ("Const", "Identity"):
        if any(v.num_uses or v.is_graph_output for v in node.outputs) or node.control_users:
            return
        parent = node.input(0).producer if node.op == "Identity" and node.inputs else None
        node.graph.remove(node)
        node = parent


def _group_inits(graph: Graph, name: str, inits: list[Node]) -> None:
    group = next((n for n in graph if n.name == name and n.op == "NoOp"), None)
    if group is None:
        group = Node("NoOp", (), dialect="tf", name=graph.unique_node_name(name), outputs=0)
        graph.append(group)
    for init in inits:
        group.add_control_input(init)
