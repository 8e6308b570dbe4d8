"""add_default_attributes: give every node the attributes its op defines but the file left out.

Before::  Conv2D(x, w) {T, strides, padding}
After::   Conv2D(x, w) {T, strides, padding, data_format="NHWC", dilations=[1,1,1,1],
                        use_cudnn_on_gpu=true, explicit_paddings=[]}

For every node whose op is in the shipped op-def table
(:mod:`graphwright.formats.graphdef.op_registry`, generated from TensorFlow),
each attribute that has a default value and is absent from the node is set to
that default.  Attributes already present are never touched.  Ops the table
does not know (custom ops) are left alone and listed in the notes.  O(N · A),
A the number of attributes of an op.
"""

from __future__ import annotations

from ...formats.graphdef import attr_from_proto
from ...formats.graphdef.op_registry import attr_defaults, op_def
from ...ir import Model
from ..context import TransformContext
from ..registry import TransformResult, transform

#: How many unknown op types are named in the notes before the list is shortened.
MAX_LISTED_UNKNOWN = 20


@transform("add_default_attributes", dialects={"tf"})
def add_default_attributes(model: Model, ctx: TransformContext) -> TransformResult:
    """Fill in missing attributes with their op-definition defaults."""
    added = nodes_changed = 0
    unknown: dict[str, None] = {}
    converted: dict[str, dict] = {}  # op -> {attr name: Attr}, converted once per op type
    for node in model.graph:
        if op_def(node.op) is None:
            unknown[node.op] = None
            continue
        defaults = converted.get(node.op)
        if defaults is None:
            defaults = {name: attr_from_proto(av)[0] for name, av in attr_defaults(node.op).items()}
            converted[node.op] = defaults
        missing = [name for name in defaults if name not in node.attrs]
        for name in missing:
            node.attrs[name] = defaults[name]
        added += len(missing)
        nodes_changed += bool(missing)
    notes = []
    if unknown:
        names = list(unknown)
        shown = ", ".join(names[:MAX_LISTED_UNKNOWN]) + (" ..." if len(names) > MAX_LISTED_UNKNOWN else "")
        notes.append(f"ops not in the TensorFlow op table, left unchanged: {shown}")
    stats = {"attributes_added": added, "nodes_changed": nodes_changed, "unknown_ops": len(unknown)}
    return TransformResult(added > 0, stats, notes)
