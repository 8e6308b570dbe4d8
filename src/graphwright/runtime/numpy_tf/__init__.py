"""NumPy reference kernels for TensorFlow ops (what constant folding evaluates, without TensorFlow).

A kernel is ``kernel(node, inputs) -> outputs``: the ``tf``-dialect node (for
its attributes) and its input arrays in, one array per output out.  The
kernels reproduce TensorFlow's CPU results: the same output types (float32
computed in float32), integer wrap-around, TF's rounding and division rules,
and TF's errors, raised as :class:`KernelError`.  Where TF's result is
undefined or unspecified (``INT_MIN / -1``, an out-of-range float-to-int
cast, NaN through ``Relu``), the kernel raises too: a caller that folds
constants leaves such a node alone rather than guess.

Families: :mod:`.elementwise` (arithmetic, comparisons, activations, Cast,
Select), :mod:`.shape_ops` (identities, Shape/Size/Rank, Reshape, Pack,
Concat, Transpose, Fill, Tile, Range...), :mod:`.indexing` (StridedSlice,
Slice, Gather, OneHot, Split, Pad...), :mod:`.reductions`, :mod:`.linalg`.

Use :func:`evaluate`, which also bounds output sizes and turns NumPy's
errors into :class:`KernelError`.  Importing this package never imports
TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from ...ir import Node
from . import elementwise, indexing, linalg, reductions, shape_ops
from ._common import BudgetExceeded, ConstantTooLarge, Kernel, KernelError, SizeEstimate
from .indexing import strided_slice

__all__ = [
    "KERNELS", "SIZES", "PASS_THROUGH", "BudgetExceeded", "ConstantTooLarge", "Kernel", "KernelError", "SizeEstimate",
    "evaluate", "supported_ops", "strided_slice", "predicted_bytes", "new_bytes",
]

#: op name -> kernel, for every TF op that has a NumPy kernel.
KERNELS: Mapping[str, Kernel] = MappingProxyType({
    **elementwise.KERNELS, **shape_ops.KERNELS, **indexing.KERNELS, **reductions.KERNELS, **linalg.KERNELS,
})
#: op name -> bytes of its largest output, for the ops whose output can outgrow their inputs.
SIZES: Mapping[str, SizeEstimate] = MappingProxyType({
    **elementwise.SIZES, **shape_ops.SIZES, **indexing.SIZES, **linalg.SIZES,
})
#: Ops that return their inputs unchanged.
PASS_THROUGH = shape_ops.PASS_THROUGH


def supported_ops() -> frozenset[str]:
    """The TF ops that have a NumPy kernel."""
    return frozenset(KERNELS)


def predicted_bytes(node: Node, inputs: Sequence[np.ndarray]) -> int:
    """Bytes ``node``'s outputs will take, from its inputs, before evaluating.

    Exact for the ops of :data:`SIZES` (those whose output can outgrow their
    inputs); for the others, the largest input (they make no more per output).
    """
    estimate = SIZES.get(node.op)
    if estimate is not None:
        return estimate(node, list(inputs))
    return max((a.nbytes for a in inputs), default=0)


def new_bytes(outputs: Sequence[np.ndarray], inputs: Sequence[np.ndarray] = ()) -> int:
    """Bytes the outputs hold of their own: an output that is a view of an input (a Reshape) holds none.

    (``np.may_share_memory`` compares address ranges only: O(1) per pair.)
    """
    return sum(out.nbytes for out in outputs if isinstance(out, np.ndarray)
               and not any(np.may_share_memory(out, a) for a in inputs if isinstance(a, np.ndarray)))


def evaluate(node: Node, inputs: Sequence[np.ndarray], *, max_bytes: int | None = None,
             budget: int | None = None) -> list[np.ndarray]:
    """Run ``node``'s kernel on ``inputs`` and return its outputs.

    Raises :class:`KernelError` when the op has no kernel or cannot be
    evaluated on these inputs, :class:`ConstantTooLarge` when an output
    would take more than ``max_bytes`` (checked before computing for the ops
    of :data:`SIZES`, after for the others), and :class:`BudgetExceeded` when
    the outputs together would take more than ``budget`` (what is left of a
    caller's total; predicted before computing by :func:`predicted_bytes`).
    """
    kernel = KERNELS.get(node.op)
    if kernel is None:
        raise KernelError(f"{node.op}: no NumPy kernel")
    arrays = [np.asarray(a) for a in inputs]
    estimate = SIZES.get(node.op)
    if max_bytes is not None and estimate is not None:
        expected = estimate(node, arrays)
        if expected > max_bytes:
            raise ConstantTooLarge(f"{node.op}: the output would take {expected} bytes (limit {max_bytes})", expected)
    if budget is not None:
        expected = predicted_bytes(node, arrays)
        if expected > budget:
            raise BudgetExceeded(f"{node.op}: the output would take {expected} bytes ({budget} left)", expected)
    try:
        with np.errstate(all="ignore"):
            outputs = [np.asarray(out) for out in kernel(node, arrays)]
    except (ValueError, TypeError, IndexError, ArithmeticError) as e:  # NumPy's own refusals
        raise KernelError(f"{node.op}: {e}") from None
    if max_bytes is not None:
        for out in outputs:
            if out.nbytes > max_bytes:
                raise ConstantTooLarge(f"{node.op}: an output takes {out.nbytes} bytes (limit {max_bytes})",
                                       out.nbytes)
    made = new_bytes(outputs, arrays) if budget is not None else 0
    if budget is not None and made > budget:
        raise BudgetExceeded(f"{node.op}: the outputs take {made} bytes ({budget} left)", made)
    return outputs
