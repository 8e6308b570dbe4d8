"""merge_duplicate_nodes: common-subexpression elimination.

Before::  k1 = Const[1.0]; k2 = Const[1.0]; a = Mul(h, h); b = Mul(h, h); Add(a, b)
After::   k1 = Const[1.0];                  a = Mul(h, h);             Add(a, a)

Two nodes are duplicates when dialect, op, domain, device, attributes (tensor
contents compared by digest), inputs and control inputs are the same; identical
initializers (ONNX, TFLite) merge too.  Weights are first told apart by shape and
a sampled fingerprint, so only possible duplicates are read in full.  Nodes are visited in topological order,
so merged inputs make their readers merge in the same pass.  Random and stateful
ops, nodes with subgraphs, and nodes producing graph inputs or outputs are
never merged.  O(N + E) plus one digest per constant byte.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ...ir import Attr, AttrKind, Model, Node, Tensor, Value, subgraphs, topological_order
from ...ir.tensor import FINGERPRINT_SAMPLES, FINGERPRINT_WINDOW
from ..context import TransformContext
from ..registry import TransformResult, transform

#: Ops whose repeated evaluation differs, or that have effects: never merged.
NEVER_MERGE = frozenset({
    # TensorFlow
    "RandomUniform", "RandomStandardNormal", "RandomUniformInt", "TruncatedNormal", "Multinomial",
    "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "StatelessRandomUniform",
    "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "VariableV2", "Variable", "Assign",
    "AssignVariableOp", "ReadVariableOp", "Print", "PrintV2", "NoOp", "Stage", "Unstage",
    "QueueDequeueV2", "Iterator", "IteratorGetNext",
    # ONNX
    "RandomNormal", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Dropout",
    # TFLite
    "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "CALL_ONCE", "VAR_HANDLE",
    "READ_VARIABLE", "ASSIGN_VARIABLE",
})


@transform("merge_duplicate_nodes")
def merge_duplicate_nodes(model: Model, ctx: TransformContext) -> TransformResult:
    """Merge identical constants and nodes with identical inputs and attributes."""
    merged_inits = merged_nodes = 0
    for graph in model.graphs:
        merged_inits += _merge_initializers(graph.initializers)
        seen: dict[Any, dict[Any, Node]] = {}
        for node in topological_order(graph):
            if not _mergeable(node):
                continue
            survivor = _find_equal(seen.setdefault(_key(node, cheap=True), {}), node)
            if survivor is None:
                continue
            for old, new in zip(node.outputs, survivor.outputs):
                old.replace_all_uses_with(new, graph_outputs=False)
            for user in node.control_users:
                user.remove_control_input(node)
                user.add_control_input(survivor)
            graph.remove(node)
            merged_nodes += 1
    return TransformResult(bool(merged_nodes or merged_inits),
                           {"nodes_merged": merged_nodes, "initializers_merged": merged_inits})


def _mergeable(node: Node) -> bool:
    if node.op in NEVER_MERGE or subgraphs(node):
        return False
    return not any(v.is_graph_output or v.is_graph_input for v in node.outputs)


def _key(node: Node, *, cheap: bool = False) -> tuple[Any, ...]:
    """What must be equal for two nodes to merge.  ``cheap`` stands tensors in by dtype and shape."""
    attrs = tuple(sorted((name, _cheap_attr_key(attr) if cheap else attr.key()) for name, attr in node.attrs.items()))
    inputs = tuple(id(v) if v is not None else None for v in node.inputs)
    control = tuple(sorted(id(n) for n in node.control_inputs))
    return (node.dialect, node.domain, node.op, node.device, len(node.outputs), attrs, inputs, control)


def _cheap_attr_key(attr: Attr) -> Any:
    if attr.kind is AttrKind.TENSOR:
        return (attr.kind, attr.value.dtype, attr.value.shape)
    return attr.key()


def _find_equal(bucket: dict[Any, Node], node: Node) -> Node | None:
    """An earlier node of the bucket equal to ``node`` (None: ``node`` joins the bucket).

    A bucket holds the nodes sharing a cheap key, by full key; the full key
    (which hashes tensor contents) is computed only once a bucket has a second
    candidate.  O(1) per node plus one digest per constant that could collide.
    """
    if not bucket:
        bucket[_LONE] = node
        return None
    lone = bucket.pop(_LONE, None)
    if lone is not None:
        bucket[_key(lone)] = lone
    full = _key(node)
    found = bucket.get(full)
    if found is None:
        bucket[full] = node
    return found


_LONE = object()  # key of a bucket's only member, whose full key is not computed yet


def _merge_initializers(values: tuple[Value, ...]) -> int:
    """Merge initializers with equal dtype, shape, quantization and bytes.

    Candidates are grouped by (dtype, shape, quantization) and then by a sampled
    fingerprint (:meth:`Tensor.fingerprint`), so a weight is read in full only
    when another one could really equal it; those are compared byte for byte.
    """
    groups: dict[Any, list[Value]] = {}
    for value in values:
        if value.is_graph_input or value.is_graph_output or value.const is None:
            continue
        groups.setdefault((value.const.dtype, value.const.shape, _quant_key(value)), []).append(value)
    merged = 0
    for group in groups.values():
        if len(group) < 2:
            continue
        by_print: dict[bytes, list[Value]] = {}
        for value in group:
            tensor = value.const
            assert tensor is not None
            survivors = by_print.setdefault(_fingerprint(tensor), [])
            survivor = next((s for s in survivors if s.const is not None and s.const.same_values(tensor)), None)
            if survivor is None:
                survivors.append(value)
                continue
            value.replace_all_uses_with(survivor, graph_outputs=False)
            owner = value.owner
            assert owner is not None
            owner.remove_initializer(value)
            merged += 1
    return merged


def _fingerprint(tensor: Tensor) -> bytes:
    """``tensor.fingerprint()``, reading the windows of a weight still in its file with the source's
    ``read_windows`` (``os.pread``; ONNX's memory-mapped and external weights) instead of through a
    memory map, where each 64-byte window pages in 64 KiB (the kernel's fault-around): fingerprinting
    RetinaNet's same-shape convolutions put 106 MB of its 123 MB file in memory.  Same digest."""
    read = getattr(tensor.source, "read_windows", None)
    np_type = tensor.dtype.numpy
    nbytes = tensor.nbytes
    if (tensor.is_loaded or read is None or np_type is None or not np_type.isnative or nbytes is None
            or nbytes != getattr(tensor.source, "length", None)
            or nbytes <= (FINGERPRINT_SAMPLES + 2) * FINGERPRINT_WINDOW):
        return tensor.fingerprint()
    starts = np.linspace(0, nbytes - FINGERPRINT_WINDOW, FINGERPRINT_SAMPLES + 2).astype(np.int64).tolist()
    digest = hashlib.blake2b(digest_size=16)
    for window in read(starts, FINGERPRINT_WINDOW):
        digest.update(window)
    return digest.digest()


def _quant_key(value: Value) -> Any:
    q = value.quant
    if q is None:
        return None
    return (q.scale.tobytes(), q.zero_point.tobytes(), q.axis)
