"""backport_tensor_array_v3: rewrite the TensorArray V3 ops as their V2 forms for old runtimes.

Before::  ta, flow = TensorArrayV3(size)           ; w = TensorArrayWriteV3(ta, i, v, flow)
After::   ta = TensorArrayV2(size); one = Const(1.0) ; w = TensorArrayWriteV2(ta, i, v, one)

Every ``TensorArray*V3`` op whose ``V2`` form exists becomes that form.  The V3
creators (``TensorArrayV3``, ``TensorArrayGradV3``) have a second output, the
scalar float ``flow``, that the V2 creators lack; as the original tool does,
its readers get a scalar ``Const`` 1.0 instead (``<name>/replacement_flow_node``:
flow values only order the ops, their value is never read).  Attributes the
V2 op does not define (``identical_element_shapes``) are dropped so TensorFlow
accepts the node.  The V2 ops were removed at GraphDef version 26, so when the
graph's producer version is above 25 it is lowered to 25 (the original drops
the version entirely).  O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...formats.graphdef.meta import MODEL_VERSIONS
from ...formats.graphdef.op_registry import op_def
from ...ir import DType, Model
from ...patterns import make_constant
from ..context import TransformContext
from ..registry import TransformResult, transform

#: V3 ops that create a tensor array and output ``(handle, flow)``.
CREATORS = frozenset({"TensorArrayV3", "TensorArrayGradV3"})
#: The last GraphDef producer version in which the V2 ops still run.
LAST_V2_VERSION = 25


@transform("backport_tensor_array_v3", dialects={"tf"})
def backport_tensor_array_v3(model: Model, ctx: TransformContext) -> TransformResult:
    """Replace TensorArray*V3 ops by their V2 equivalents."""
    renamed = flows = 0
    for node in model.graph:
        if not (node.op.startswith("TensorArray") and node.op.endswith("V3")):
            continue
        new_op = node.op[:-2] + "V2"
        definition = op_def(new_op)
        if definition is None:
            continue
        if node.op in CREATORS:
            if len(node.outputs) > 1 and node.outputs[1].num_uses:
                const, one = make_constant(node, np.float32(1.0), f"{node.name}/replacement_flow_node")
                assert const is not None
                node.graph.insert_after(node, const)  # type: ignore[union-attr]
                node.outputs[1].replace_all_uses_with(one)
                flows += 1
            node.output.dtype = DType.STRING
        allowed = {a.name for a in definition.attr}
        for name in [n for n in node.attrs if n not in allowed]:
            del node.attrs[name]
        node.op = new_op
        renamed += 1
    notes: list[str] = []
    versions = model.meta.get(MODEL_VERSIONS)
    if renamed and versions is not None and versions.producer > LAST_V2_VERSION:
        lowered = type(versions)()
        lowered.CopyFrom(versions)
        lowered.producer = LAST_V2_VERSION
        model.meta[MODEL_VERSIONS] = lowered
        notes.append(f"GraphDef producer version lowered from {versions.producer} to {LAST_V2_VERSION} "
                     "(TensorArray V2 ops do not run in later versions)")
    return TransformResult(renamed > 0, {"ops_backported": renamed, "flows_replaced": flows}, notes)
