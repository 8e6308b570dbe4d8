"""``simplify``: shape inference, elimination/fusion passes and constant folding to a fixed point.

One iteration is: ``infer_shapes``, the cheap passes of
:data:`~graphwright.simplify.passes.OPTIMIZATION_PASSES` (in order), then
``merge_duplicate_nodes`` (which tells weights apart by sampled fingerprints),
``onnx_fold_constants`` and ``eliminate_dead_code``.  A pass that changed nothing
is not run again until something else changed the model (see :class:`_FixedPoint`).
Iterations repeat until one changes nothing (shape inference alone does not
count as a change) or ``max_iterations`` is reached.  Because the last iteration changed nothing,
simplifying the result again changes nothing either (idempotence).  The
structural check runs after every pass: a pass that breaks the graph is a
bug and fails loudly, naming itself.

The model is never converted: its IR version and opsets stay as they were.
Cost: the passes are O(N + E) each; folding adds one onnxruntime session per
graph per iteration; shape inference is ONNX's, on a weight-less copy.  A model given as a path is
read with its inline weights memory-mapped (``formats/onnx/mapped.py``): only
the weights a pass reads are paged in, and the file is never held in memory.
"""

from __future__ import annotations

import functools
import gc
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from .. import formats
from ..errors import GraphwrightError, TransformError
from ..ir import Model, all_graphs
from ..runtime import ModelSource, prepare
from ..transforms import Params, StepRunner, TransformContext
from ..transforms.fold.onnx_fold_constants import DEFAULT_GROWTH_LIMIT, DEFAULT_SIZE_LIMIT, fold_budget_for
from ..transforms.runner import PROVENANCE_KEY
from .options import InputShapes, parse_size, resolve_skips
from .passes import ONNX_FUSIONS, OPTIMIZATION_PASSES
from .report import ModelStats, PassRecord, SimplifyReport

if TYPE_CHECKING:
    from ..verify import CompareReport

__all__ = ["simplify", "DEFAULT_MAX_ITERATIONS", "apply_input_shapes"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_ITERATIONS = 15
#: Passes run after the cheap ones and their dead-code pass (merge_duplicate_nodes compares initializers).
_EXPENSIVE = frozenset({"merge_duplicate_nodes"})


def apply_input_shapes(model: Model, shapes: InputShapes) -> None:
    """Give graph inputs new shapes; intermediate and output shapes are forgotten (re-inferred)."""
    graph = model.graph
    by_name = {v.name: v for v in graph.inputs if not v.is_initializer}
    for name, dims in shapes.items():
        value = by_name.get(name)
        if value is None:
            raise TransformError(
                f"overwrite_input_shapes names input {name!r}, which the model does not have; "
                f"its inputs are: {', '.join(by_name) or 'none'}"
            )
        if value.shape is not None and len(value.shape) != len(dims):
            raise TransformError(
                f"overwrite_input_shapes gives input {name!r} {len(dims)} dims, but it has rank {len(value.shape)}"
            )
        if any(isinstance(d, int) and d < 0 for d in dims):
            raise TransformError(f"overwrite_input_shapes: input {name!r} has a negative dim {tuple(dims)}")
        value.shape = tuple(dims)
    for g in all_graphs(model):
        for node in g:
            for value in node.outputs:
                value.shape = None


def _load(model_or_path: Model | str | os.PathLike[str]) -> tuple[Model, int | None]:
    if isinstance(model_or_path, Model):
        model = model_or_path
        size = None
    else:
        model = formats.load(model_or_path)  # large ONNX weights stay memory-mapped
        size = Path(model_or_path).stat().st_size
    if model.format != "onnx":
        raise TransformError(f"simplify works on ONNX models; this is a {model.format} model")
    return model, size


#: Passes that can change nothing in a model holding none of these ops (every graph, any domain):
#: each pass's rules are rooted at, or need, one of them.  Such a pass is not run (it counts as
#: run and clean), which saves its sweep and its step's bookkeeping.
_NEEDS: dict[str, frozenset[str]] = {
    "inline_constant_if": frozenset({"If"}),
    "eliminate_identity": frozenset({"Identity", "Dropout"}),
    "fuse_consecutive_transposes": frozenset({"Transpose"}),
    "fuse_consecutive_slices": frozenset({"Slice"}),
    "fuse_slices_into_split": frozenset({"Slice"}),
    "fuse_bn_into_conv": frozenset({"BatchNormalization"}),
    "fuse_mul_add_into_conv": frozenset({"Conv", "ConvTranspose", "MatMul"}),
    "fuse_pad_into_conv": frozenset({"Pad"}),
    "fuse_matmul_add_into_gemm": frozenset({"MatMul"}),
}


class _FixedPoint:
    """simplify's policy over the one step runner: passes that changed nothing are not re-run.

    A pass that changed nothing is not run again until another pass has changed the model
    (type refinements by shape inference count): passes are deterministic, so it would change
    nothing again.  This keeps the last, confirming iteration of the fixed point (and
    hashing-heavy passes such as merge_duplicate_nodes) nearly free.  Every step goes through
    :class:`~graphwright.transforms.StepRunner` (structural check of every graph after it).
    """

    def __init__(self, model: Model, report: SimplifyReport, *, provenance: bool = True) -> None:
        self.steps = StepRunner(model, provenance=provenance)
        self.report = report
        self.epoch = 0
        self.clean_at: dict[str, int] = {}
        self._ops: tuple[int, frozenset[str]] = (-1, frozenset())  # (epoch, ops in the model then)

    def ops(self) -> frozenset[str]:
        """The ops of every node of every graph, as of this epoch (recounted after a change)."""
        if self._ops[0] != self.epoch:
            self._ops = (self.epoch, frozenset(node.op for g in all_graphs(self.steps.model) for node in g))
        return self._ops[1]

    @property
    def ctx(self) -> TransformContext:
        return self.steps.ctx

    def stat_total(self, key: str) -> int:
        """The sum of one statistic over the passes run so far."""
        return sum(int(record.stats.get(key, 0)) for record in self.report.passes)

    def run(self, iteration: int, name: str, **kwargs: object) -> bool:
        if self.clean_at.get(name) == self.epoch:
            return False
        needs = _NEEDS.get(name)
        if needs is not None and needs.isdisjoint(self.ops()):
            self.clean_at[name] = self.epoch
            return False
        self.ctx.params = Params(name)  # warnings name the pass that raised them
        step = self.steps.run(name, dict(kwargs))
        self.report.passes.append(PassRecord(iteration, name, step.changed, step.seconds, step.stats,
                                             step.refusals))
        if step.changed:
            self.epoch += 1
        else:
            self.clean_at[name] = self.epoch
        return step.changed


def _old_objects_set_aside(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with the objects that exist before it (imported modules, the caller's data) set
    aside from the cyclic collector: its full collections would otherwise walk every one of them
    (~10% of a CLI run on Swin-T); the model's own objects are collected as usual.  Not when the
    caller froze objects itself (unfreezing would undo that)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        freeze = gc.isenabled() and gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            return fn(*args, **kwargs)
        finally:
            if freeze:
                gc.unfreeze()

    return wrapper


@_old_objects_set_aside
def simplify(
    model_or_path: Model | str | os.PathLike[str],
    *,
    overwrite_input_shapes: InputShapes | None = None,
    skip_optimizations: Iterable[str] = (),
    skip_all_optimizations: bool = False,
    skip_constant_folding: bool = False,
    skip_shape_inference: bool = False,
    size_limit: int | str = DEFAULT_SIZE_LIMIT,
    growth_limit: int | str = DEFAULT_GROWTH_LIMIT,
    fold_budget: int | str | None = None,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    check_n: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    target: str = "standard",
    inline_functions: bool = False,
    provenance: bool = True,
) -> tuple[Model, SimplifyReport]:
    """Simplify an ONNX model (a :class:`Model`, changed in place, or a path) and report what changed.

    ``skip_optimizations`` names passes or rules to leave out (see
    :func:`~graphwright.simplify.options.skippable_names`; onnxoptimizer's names
    are accepted); ``skip_all_optimizations`` leaves only shape inference and
    constant folding.  ``size_limit``/``growth_limit`` bound folded tensors
    (bytes or ``"1KB"``-style strings; see ``onnx_fold_constants``); ``fold_budget`` bounds
    what constant folding computes in all over the run (default: 256 MiB plus the model's weights),
    and the memory of ONNX's data propagation in shape inference (default 256 MiB; see ``infer_shapes``).
    A node over a limit is left in place, with one warning line naming it and the limit.
    ``check_n > 0`` runs the original and the result on that many seeded
    random inputs (``rtol``/``atol``, default per dtype) and records the
    comparisons in ``report.checks`` (it does not raise: see ``report.check_ok``).

    Once the fixed point is reached, the operator fusions of
    :data:`~graphwright.simplify.passes.ONNX_FUSIONS` run (LayerNorm
    and GELU into the standard ops where the opset has them; with
    ``target="onnxruntime"`` also onnxruntime's contrib fused ops), each
    skippable by name.

    Model-local functions are kept (their calls are opaque to every pass)
    unless ``inline_functions`` is set: then every call is first replaced by
    the function's body (``inline_local_functions``) and simplified with the rest.

    ``provenance`` records, step by step, which original nodes each node comes from (read by
    ``graphwright.diff.write_provenance``); off, no record is kept (any earlier one is dropped, it
    would no longer describe the model) and each step skips two snapshots of every node.
    """
    if max_iterations < 1:
        raise TransformError(f"simplify: max_iterations must be at least 1, got {max_iterations}")
    skipped_passes, skipped_rules = resolve_skips(skip_optimizations)
    limit, growth = parse_size(size_limit), parse_size(growth_limit)
    budget = None if fold_budget is None else parse_size(fold_budget)
    start = time.perf_counter()
    model, file_bytes = _load(model_or_path)
    reference = _reference(model_or_path, model) if check_n > 0 else None
    # Resolving an If can expose a branch onnxruntime refuses once it is no longer behind the
    # If (spec-invalid ops its optimizer tolerated); keep what is needed to give the model back.
    before_if = _original(model_or_path, model)
    report = SimplifyReport(ModelStats.of(model, file_bytes), ModelStats.of(model))
    if overwrite_input_shapes:
        apply_input_shapes(model, overwrite_input_shapes)
    # One budget for the whole run: each folding pass gets what the earlier ones left.
    fold_total = fold_budget_for(model.graph) if budget is None else budget
    limits: dict[str, object] = {"size_limit": limit, "fold_budget": budget}
    passes = [] if skip_all_optimizations else [p for p in OPTIMIZATION_PASSES if p not in skipped_passes]
    if not provenance:
        model.meta.pop(PROVENANCE_KEY, None)
    runner = _FixedPoint(model, report, provenance=provenance)
    if inline_functions:
        runner.run(0, "inline_local_functions")
    cheap = [p for p in passes if p not in _EXPENSIVE]
    expensive = [p for p in passes if p in _EXPENSIVE]
    for iteration in range(1, max_iterations + 1):
        # one round of everything: shape inference, the cheap passes, then the expensive ones, folding
        # and dead code.  (Running the cheap passes to a fixed point of their own first cost a whole
        # confirming round — shape inference and every pass — per iteration: 4-6 inferences instead
        # of 3 on the Swin and FCOS exports, for the same result.)
        changed = False
        if not skip_shape_inference:
            runner.run(iteration, "infer_shapes", **limits)
        for name in cheap:
            kwargs = {"skip": sorted(skipped_rules)} if name == "eliminate_nop" else {}
            changed |= runner.run(iteration, name, **kwargs)
        for name in expensive:
            changed |= runner.run(iteration, name)
        if not skip_constant_folding:
            changed |= runner.run(iteration, "onnx_fold_constants", size_limit=limit, growth_limit=growth,
                                  fold_budget=fold_total, budget_spent=runner.stat_total("bytes_computed"))
        if "eliminate_dead_code" in passes:
            changed |= runner.run(iteration, "eliminate_dead_code")
        report.iterations = iteration
        if not changed:
            report.converged = True
            break
    fusions = [] if skip_all_optimizations else [f for f in ONNX_FUSIONS if f not in skipped_passes]
    if fusions:
        # contrib fusions need known shapes; a converged loop's last pass changed nothing after its inference
        if not skip_shape_inference and not report.converged:
            runner.run(report.iterations, "infer_shapes", **limits)
        fused = [runner.run(report.iterations, name, target=target) for name in fusions]
        if any(fused) and "eliminate_dead_code" in passes:
            runner.run(report.iterations, "eliminate_dead_code")
    report.warnings.extend(dict.fromkeys(runner.ctx.warnings))
    if before_if is not None and _resolved_an_if(report) and not _loads(model) and _loads(before_if):
        model = _reload(before_if)
        report.warnings.append("the simplified model does not load in onnxruntime although the original does "
                               "(a resolved If exposed ops it refuses); the model is returned unchanged")
    report.after = ModelStats.of(model)
    report.seconds = time.perf_counter() - start
    if reference is not None:
        report.checks = _check(reference, model, check_n, rtol, atol, overwrite_input_shapes or {})
    return model, report


def _has_if(model: Model) -> bool:
    return any(node.op == "If" and node.domain in ("", "ai.onnx") for g in all_graphs(model) for node in g)


def _original(model_or_path: Model | str | os.PathLike[str], model: Model) -> ModelSource | None:
    """What gives the model back if a resolved If leaves it unloadable: None without an If, the
    file itself for a path (nothing read: a copy of the weights is what made simplify's peak 3x
    the file on detectors), a serialized snapshot for a Model given in memory (it changes in place)."""
    if not _has_if(model):
        return None
    if isinstance(model_or_path, Model):
        return ModelSource.from_model(model)
    return ModelSource.from_path(model_or_path, format="onnx")


def _reload(source: ModelSource) -> Model:
    if source.written:  # a snapshot of a Model given in memory
        return formats.onnx.load(Path("<simplify: original>"), source.data)
    assert source.path is not None
    return _load(source.path)[0]


def _resolved_an_if(report: SimplifyReport) -> bool:
    """Whether a pass replaced an If by its branch (only then can the result fail where the original loaded)."""
    return any(record.name == "inline_constant_if" and record.changed for record in report.passes)


def _loads(model: object) -> bool:
    """Whether onnxruntime accepts the model (creates a session with its default optimizations)."""
    try:
        prepare(model, backend="onnxruntime")
    except GraphwrightError:
        return False
    return True


def _reference(model_or_path: Model | str | os.PathLike[str], model: Model) -> ModelSource:
    """What the result is compared against: the file, or the model as it is now (serialized once)."""
    if isinstance(model_or_path, Model):
        return ModelSource.from_model(model)
    return ModelSource.from_path(model_or_path)


def _check(reference: ModelSource, model: Model, n: int, rtol: float | None, atol: float | None,
           shapes: InputShapes) -> list[CompareReport]:
    from ..verify import compare  # lazy: only --check runs models (verify's modules are not imported otherwise)

    dims = _dim_values(shapes)
    simplified = ModelSource.from_model(model)
    return [
        compare(reference, simplified, seed=seed, rtol=rtol, atol=atol, dim_values=dims)
        for seed in range(n)
    ]


def _dim_values(shapes: Mapping[str, Sequence[int | str | None]]) -> dict[str, int]:
    """Sizes the random inputs of the original model must have to fit the overwritten shapes."""
    dims: dict[str, int] = {}
    for name, shape in shapes.items():
        for axis, dim in enumerate(shape):
            if isinstance(dim, int):
                dims[f"{name}:{axis}"] = dim
    return dims

