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

Bounded memory (see ``formats/onnx/inference.py`` for why ONNX's data
propagation can ask for hundreds of GB on a 100-byte model).  Before ONNX
runs, one O(N) scan sizes every ``ConstantOfShape``/``Expand``/``Tile``/
``Range`` whose size inputs are constants (the would-be tensor, computed from
the constants, never allocated); a node whose result would be larger than
``size_limit``, or a 1-D result longer than data propagation can hold in
``fold_budget`` bytes (at least :data:`MIN_INFERENCE_BYTES`), has those inputs hidden from ONNX: its output shape is
left unknown, everything else is inferred as usual, and one warning line names
it.  What the scan cannot see (a size computed through data propagation, a
declared 1-D input of absurd length) is caught by running ONNX under an
address-space limit of ``fold_budget`` bytes over what the process maps; if
that trips, inference is rerun without data propagation and a warning says so.
Both are free on ordinary models (a dictionary look-up per node, two system
calls per run), so ``simplify`` does not get slower; a child process would
bound ONNX as well but costs a fork per run (measured: more than ONNX's whole
inference on the test BERT).
"""

from __future__ import annotations

import re

from ...formats.onnx.inference import InferenceFailed, InferenceOverBudget, infer_types
from ...ir import DType, Model, Node, Shape, Value
from ...runtime.numpy_onnx import output_nbytes, output_shape
from .._onnx import all_graphs, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform
from .onnx_fold_constants import (
    DEFAULT_FOLD_BUDGET,
    DEFAULT_SIZE_LIMIT,
    FLAGS,
    MAX_NAMED,
    SHAPE_MAKING,
    human_size,
    stand_in,
)

__all__ = ["infer_shapes", "merge_shape", "apply_types", "canonical_symbols", "size_bombs", "DIM_BYTES",
           "MIN_INFERENCE_BYTES"]

#: Dim symbols ONNX invents for unknown sizes.
_GENERATED = re.compile(r"unk__\d+")
#: Bytes ONNX's data propagation spends per element of a 1-D value (a TensorShapeProto dim, measured ~40).
DIM_BYTES = 64
#: The least memory shape inference is given, whatever ``fold_budget`` says (ONNX needs a few MB on any model).
MIN_INFERENCE_BYTES = 64 << 20
#: The inputs whose values set the output size of each shape-making op.
_SIZE_INPUTS = {"ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "Range": (0, 1, 2)}


def size_bombs(model: Model, size_limit: int, budget: int) -> list[tuple[Node, str]]:
    """Shape-making nodes whose constant inputs imply a result too large to infer, with the warning.

    Too large: more than ``size_limit`` bytes, or 1-D and longer than
    ``budget // DIM_BYTES`` elements.  O(N); nothing is allocated.
    """
    found = []
    for graph in all_graphs(model):
        for node in graph:
            if node.op not in SHAPE_MAKING or not is_standard(node):
                continue
            ins = [None if v is None else stand_in(v, values=True) for v in node.inputs]
            nbytes = output_nbytes(node, ins)
            if nbytes is None:
                continue
            shape = output_shape(node.op, ins) or ()
            name = f"{node.name or '(unnamed)'!r} ({node.op})"
            if nbytes > size_limit:
                found.append((node, f"{name} would make a tensor of {human_size(nbytes)}, larger than "
                                    f"{human_size(size_limit)} ({FLAGS['size_limit']})"))
            elif len(shape) == 1 and shape[0] * DIM_BYTES > budget:
                found.append((node, f"{name} would make a 1-D tensor of {shape[0]} elements, more than ONNX's data "
                                    f"propagation can hold in {human_size(budget)} ({FLAGS['fold_budget']})"))
    return found


def _long_vectors(model: Model, types: dict[Value, tuple[DType | None, Shape]], budget: int) -> list[str]:
    """Nodes making a 1-D value too long for data propagation in ``budget`` bytes (as inferred without it)."""
    found = []
    for graph in all_graphs(model):
        for node in graph:
            for value in node.outputs:
                shape = types.get(value, (None, None))[1]
                if shape is not None and len(shape) == 1 and isinstance(shape[0], int) \
                        and shape[0] * DIM_BYTES > budget:
                    found.append(f"{node.name or '(unnamed)'!r} ({node.op}) makes a 1-D tensor of {shape[0]} elements")
                    break
    return found

def merge_shape(known: Shape, inferred: Shape) -> Shape:
    """The more precise of two shapes of one value (see the module docstring).

    A dim kept from ``known`` never keeps a generated symbol (``unk__N``): that belongs to an
    earlier run's numbering, and could falsely equal this run's ``unk__N`` (which
    ``fold_symbolic_shapes`` would take for the same size)."""
    if inferred is None:
        return None if known is None else tuple(_forget_generated(d) for d in known)
    if known is None or len(known) != len(inferred):
        return inferred
    return tuple(_forget_generated(a) if b is None else b for a, b in zip(known, inferred))


def _forget_generated(dim: int | str | None) -> int | str | None:
    return None if isinstance(dim, str) and _GENERATED.fullmatch(dim) else dim


def canonical_symbols(types: dict[Value, tuple[DType | None, Shape]]) -> dict[Value, tuple[DType | None, Shape]]:
    """Renumber ONNX's generated dim symbols (``unk__N``) by first appearance, in graph order.

    ONNX numbers the symbols it invents per run; renumbered, the same model
    gets the same symbols every time, so a repeated inference changes nothing
    and the result is deterministic.
    """
    mapping: dict[str, str] = {}
    out: dict[Value, tuple[DType | None, Shape]] = {}
    fullmatch = _GENERATED.fullmatch
    for value, (dtype, shape) in types.items():
        if shape is not None and any(d.__class__ is str for d in shape):  # (most shapes are all ints)
            dims = []
            for d in shape:
                if d.__class__ is str and d.startswith("unk__") and fullmatch(d):
                    d = mapping.setdefault(d, f"unk__{len(mapping)}")
                dims.append(d)
            shape = tuple(dims)
        out[value] = (dtype, shape)
    return out


class _Renaming:
    """Whether the changes of one run are only a renumbering of generated symbols (``unk__N``).

    Removing nodes shifts the first appearances the numbering follows, so a run on a smaller
    model renames hundreds of values' symbols while every equality between dims stays as it
    was: a one-to-one renaming of generated symbols tells no pass anything new.  Anything
    else (a dim learned, forgotten or of another rank, a dtype, two symbols merged or split)
    is a real change."""

    __slots__ = ("old_to_new", "new_to_old", "real")

    def __init__(self) -> None:
        self.old_to_new: dict[str, str] = {}
        self.new_to_old: dict[str, str] = {}
        self.real = False

    def note(self, old_dtype: object, old: Shape, new_dtype: object, new: Shape) -> None:
        if self.real:
            return
        if old_dtype != new_dtype or old is None or new is None or len(old) != len(new):
            self.real = True
            return
        for a, b in zip(old, new):
            if a == b and not _generated(a):
                continue
            # a generated symbol on both sides, paired one to one over the whole run
            if not (_generated(a) and _generated(b)) or self.old_to_new.setdefault(a, b) != b \
                    or self.new_to_old.setdefault(b, a) != a:
                self.real = True
                return


def _generated(d: object) -> bool:
    return isinstance(d, str) and _GENERATED.fullmatch(d) is not None


def apply_types(model: Model, types: dict[Value, tuple[DType | None, Shape]],
                renaming: _Renaming | None = None) -> int:
    """Copy inferred types onto values; returns how many values changed.

    Generated symbols on values this run did not type are forgotten: they
    belong to an earlier run's numbering and could falsely equal this one's.
    ``renaming`` (if given) is told every change, to decide whether the run only renumbered.
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
                        if renaming is not None:
                            renaming.real = True
                    continue
                dtype, shape = found
                new_dtype = dtype if dtype is not None else value.dtype
                new_shape = merge_shape(value.shape, shape)
                if new_dtype != value.dtype or new_shape != value.shape:
                    if renaming is not None:
                        renaming.note(value.dtype, value.shape, new_dtype, new_shape)
                    value.dtype, value.shape = new_dtype, new_shape
                    updated += 1
                elif renaming is not None and new_shape is not None and not renaming.real:
                    renaming.note(value.dtype, value.shape, new_dtype, new_shape)  # a kept symbol stays itself
    return updated


@transform("infer_shapes", dialects={"onnx"})
def infer_shapes(
    model: Model,
    ctx: TransformContext,
    *,
    size_limit: int = DEFAULT_SIZE_LIMIT,
    fold_budget: int | None = None,
) -> TransformResult:
    """Run ONNX shape inference (with data propagation) and record the types on the values.

    Memory is bounded by ``size_limit`` and ``fold_budget`` (bytes; None: 256 MiB, at least 64 MiB), see the
    module docstring.
    """
    budget = max(DEFAULT_FOLD_BUDGET if fold_budget is None else fold_budget, MIN_INFERENCE_BYTES)
    bombs = size_bombs(model, size_limit, budget)
    cut = [(node, i) for node, _ in bombs for i in _SIZE_INPUTS[node.op] if i < len(node.inputs)]
    notes = [f"{message}: its shape is left unknown" for _, message in bombs[:MAX_NAMED]]
    if len(bombs) > MAX_NAMED:
        notes.append(f"and {len(bombs) - MAX_NAMED} more node(s) too large to infer")
    try:
        try:
            types = infer_types(model, cut=cut, memory_limit=budget)
        except InferenceOverBudget:
            types = infer_types(model, data_prop=False, cut=cut, memory_limit=budget)
            culprits = _long_vectors(model, types, budget)
            named = f": {'; '.join(culprits[:MAX_NAMED])}" if culprits else ""
            notes.append(f"ONNX's data propagation needed more than {human_size(budget)} "
                         f"({FLAGS['fold_budget']}), shapes inferred without it{named}")
    except InferenceFailed as e:
        ctx.warn(f"ONNX shape inference failed, shapes left as they were: {e}")
        return TransformResult(False, {"values_typed": 0}, [f"shape inference failed: {e}"])
    for note in notes:
        ctx.warn(note)
    renaming = _Renaming()
    updated = apply_types(model, canonical_symbols(types), renaming)
    stats = {"values_typed": updated, **({"cut": len(bombs)} if bombs else {})}
    # a run that only renumbered generated symbols (one to one) changed nothing a pass can see
    return TransformResult(updated > 0 and renaming.real, stats, notes)
