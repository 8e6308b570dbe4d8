"""DENSIFY: a sparse constant's dense values, as LiteRT's kernel gives them (float32, float16, int8).

The reader already densifies a sparse constant as LiteRT's FormatConverter does
(:func:`graphwright.formats.tflite.sparsity.densify`): every kernel that takes sparse
weights directly (FULLY_CONNECTED with block-sparse float weights) reads those dense
values, and DENSIFY hands them on.  O(1) per run (the constant is densified once).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel
from .prepare import OpCheck, Shape, prepare_rule

_DENSIFIED = frozenset({"float32", "float16", "int8"})


@prepare_rule("DENSIFY", arity=(1, 1))
def _densify_rule(op: OpCheck) -> list[Shape]:
    """As LiteRT's Prepare: one constant sparse input of a type the kernel densifies."""
    value = op.node.inputs[0]
    if value is None or value.const is None or value.meta.get("tflite.sparsity") is None:
        raise op.fail("its input is not a sparse constant")
    if value.dtype is None or value.dtype.value not in _DENSIFIED:
        raise op.fail(f"its input has type {value.dtype.value if value.dtype else 'none'}; "
                      "DENSIFY densifies float32, float16 and int8")
    return [tuple(value.const.shape)]


@kernel("DENSIFY")
def densify(ctx: OpContext) -> list[np.ndarray]:
    """The input's dense values (LiteRT's output is persistent and filled once)."""
    return [ctx.x(0)]
