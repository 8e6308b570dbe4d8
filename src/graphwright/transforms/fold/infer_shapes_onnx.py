"""infer_shapes: ONNX shape inference, results copied onto the IR's values.

Before::  y = MatMul(x[4, 64], W[64, 32])            (y: type unknown)
          s = Shape(y); z = Reshape(y, [2, -1])
After::   y: float32[4, 32]; s: int64[2]; z: float32[2, 64]  (and a value_info entry for each)

ONNX's inference runs with data propagation (so Shape -> Gather -> Concat ->
Reshape chains give concrete output shapes) on a light copy of the model
(see ``_proto.py``: weights go as headers only).  Each node output gets the
inferred dtype and shape; where ONNX leaves a dim (or the whole shape)
unknown, what the IR knew before is kept.  Existing value_info may be stale
(exporters write traced sizes), so it never overrides an inferred dim.
Values ONNX cannot type (outputs of custom ops it has no schema for) keep
their declared type, and inference continues past them.  The types live on
the IR values for the other passes; no ``value_info`` entries are added to
the file (runtimes check them strictly, and models that run fine without
them, e.g. a Range fed a one-element vector, would then be refused).

ONNX invents symbols (``unk__N``) for sizes it cannot name; they are
renumbered by first appearance so that inference is deterministic and a
repeated run on the same model changes nothing.  ``changed`` is true when a
value's dtype or shape changed.
O(N + E) plus ONNX's own inference, over all graphs including If/Loop bodies.
"""

from __future__ import annotations

import re

from ...formats.onnx.inference import InferenceFailed, infer_types
from ...ir import DType, Model, Shape, Value
from .._onnx import all_graphs
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["infer_shapes", "merge_shape", "apply_types", "canonical_symbols"]

#: Dim symbols ONNX invents for unknown sizes.
_GENERATED = re.compile(r"unk__\d+")

def merge_shape(known: Shape, inferred: Shape) -> Shape:
    """The more precise of two shapes of one value (see the module docstring)."""
    if inferred is None:
        return known
    if known is None or len(known) != len(inferred):
        return inferred
    return tuple(a if b is None else b for a, b in zip(known, inferred))


def canonical_symbols(types: dict[Value, tuple[DType | None, Shape]]) -> dict[Value, tuple[DType | None, Shape]]:
    """Renumber ONNX's generated dim symbols (``unk__N``) by first appearance, in graph order.

    ONNX numbers the symbols it invents per run; renumbered, the same model
    gets the same symbols every time, so a repeated inference changes nothing
    and the result is deterministic.
    """
    mapping: dict[str, str] = {}
    out: dict[Value, tuple[DType | None, Shape]] = {}
    for value, (dtype, shape) in types.items():
        if shape is not None:
            dims = []
            for d in shape:
                if isinstance(d, str) and _GENERATED.fullmatch(d):
                    d = mapping.setdefault(d, f"unk__{len(mapping)}")
                dims.append(d)
            shape = tuple(dims)
        out[value] = (dtype, shape)
    return out


def apply_types(model: Model, types: dict[Value, tuple[DType | None, Shape]]) -> int:
    """Copy inferred types onto values; returns how many values changed.

    Generated symbols on values this run did not type are forgotten: they
    belong to an earlier run's numbering and could falsely equal this one's.
    """
    updated = 0
    for graph in all_graphs(model):
        for node in graph:
            for value in node.outputs:
                found = types.get(value)
                if found is None:
                    shape = value.shape
                    if shape is not None and any(isinstance(d, str) and _GENERATED.fullmatch(d) for d in shape):
                        value.shape = tuple(None if isinstance(d, str) and _GENERATED.fullmatch(d) else d
                                            for d in shape)
                        updated += 1
                    continue
                dtype, shape = found
                new_dtype = dtype if dtype is not None else value.dtype
                new_shape = merge_shape(value.shape, shape)
                if new_dtype != value.dtype or new_shape != value.shape:
                    value.dtype, value.shape = new_dtype, new_shape
                    updated += 1
    return updated


@transform("infer_shapes", dialects={"onnx"})
def infer_shapes(model: Model, ctx: TransformContext) -> TransformResult:
    """Run ONNX shape inference (with data propagation) and record the types on the values."""
    try:
        types = infer_types(model)
    except InferenceFailed as e:
        ctx.warn(f"ONNX shape inference failed, shapes left as they were: {e}")
        return TransformResult(False, {"values_typed": 0}, [f"shape inference failed: {e}"])
    updated = apply_types(model, canonical_symbols(types))
    return TransformResult(updated > 0, {"values_typed": updated})
