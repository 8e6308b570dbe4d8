"""Numeric comparison of two models on the same inputs.

``compare(A, B)`` runs A (the reference) and B on the same feeds, matches
their outputs and reports, per output: shapes, dtypes, the largest absolute
error ``|a - b|``, the largest relative error ``|a - b| / max(|a|, tiny)``
(``tiny``: the smallest normal number of A's float type, 1 for integers, so a
zero reference never divides by zero), the share of exactly equal elements,
and, for classifier scores (2-D ``[batch, classes]`` float or 8-bit
outputs), top-1 agreement.  An output passes when every element satisfies
``|b - a| <= atol + rtol * |a|`` (``numpy.isclose`` with NaN == NaN); the
default tolerances depend on the dtype (:data:`DEFAULT_TOLERANCES`).

Outputs are matched by name; when the two models' output names differ (e.g.
after ``obfuscate_names``) but their number is the same, by position, and the
report says so.  Inputs are matched the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..ir import Model
from ..runtime.base import ModelSource
from ..runtime.execute import Job, ModelLike, execute
from .report import CompareReport, OutputComparison

__all__ = [
    "DEFAULT_TOLERANCES", "compare", "compare_arrays", "compare_outputs", "looks_like_scores", "match_outputs",
    "tolerances_for",
]

#: ``(rtol, atol)`` used for an output of each kind when the caller gives none.
DEFAULT_TOLERANCES: Mapping[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-3, 1e-4),
    "float16": (1e-2, 1e-3),
    "complex128": (1e-7, 1e-9),
    "complex64": (1e-3, 1e-4),
    "other": (0.0, 0.0),  # integers, bools, strings: exact
}


def compare(
    model_a: ModelLike,
    model_b: ModelLike,
    *,
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    backend_a: str | None = None,
    backend_b: str | None = None,
    outputs: Sequence[str] | None = None,
    dim_values: Mapping[str, int] | None = None,
    options_a: Mapping[str, Any] | None = None,
    options_b: Mapping[str, Any] | None = None,
    isolate: bool = False,
    timeout: float | None = None,
) -> CompareReport:
    """Run ``model_a`` and ``model_b`` on the same inputs and compare their outputs.

    Inputs not in ``feeds`` get seeded random values (generated for A, reused
    for B).  ``rtol``/``atol`` override the per-dtype defaults for every
    output.  ``outputs`` restricts both runs to those output names.  Raises
    :class:`~graphwright.errors.VerificationError` only when a model cannot be
    run; numeric, shape and dtype differences are reported, not raised.
    """
    names = None if outputs is None else list(outputs)
    dims = dict(dim_values or {})
    run_a = execute(
        model_a, feeds,
        Job(backend=backend_a, options=dict(options_a or {}), outputs=names, seed=seed, dim_values=dims),
        isolate=isolate, timeout=timeout,
    )
    run_b = execute(
        model_b, run_a.feeds,
        Job(backend=backend_b, options=dict(options_b or {}), outputs=names, seed=seed, dim_values=dims,
            feed_by_position=True),
        isolate=isolate, timeout=timeout,
    )
    report = compare_outputs(run_a.outputs, run_b.outputs, rtol=rtol, atol=atol)
    report.model_a = _label(model_a)
    report.model_b = _label(model_b)
    report.backend_a = run_a.backend
    report.backend_b = run_b.backend
    report.seed = seed
    report.inputs = [
        {"name": n, "dtype": str(a.dtype), "shape": [int(d) for d in a.shape]} for n, a in run_a.feeds.items()
    ]
    report.notes = [*run_a.notes, *run_b.notes, *report.notes]
    return report


def compare_outputs(
    outputs_a: Mapping[str, np.ndarray],
    outputs_b: Mapping[str, np.ndarray],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> CompareReport:
    """Compare two sets of outputs already computed (A is the reference)."""
    pairs, matched_by, notes = match_outputs(list(outputs_a), list(outputs_b))
    results = []
    for a_name, b_name in pairs:
        if a_name is None or b_name is None:
            results.append(_unmatched(a_name, b_name, outputs_a, outputs_b))
        else:
            results.append(compare_arrays(a_name, outputs_a[a_name], outputs_b[b_name], name_b=b_name,
                                          rtol=rtol, atol=atol))
    return CompareReport(outputs=results, matched_by=matched_by, notes=notes)


def match_outputs(names_a: Sequence[str], names_b: Sequence[str]
                  ) -> tuple[list[tuple[str | None, str | None]], str, list[str]]:
    """Pairs of A's and B's output names (``None``: no partner), how they were matched, notes."""
    if set(names_a) == set(names_b):
        return [(n, n) for n in names_a], "name", []
    if len(names_a) == len(names_b):
        return list(zip(names_a, names_b)), "position", [
            "output names differ between the models; outputs matched by position"]
    pairs: list[tuple[str | None, str | None]] = [(n, n) for n in names_a if n in names_b]
    pairs += [(n, None) for n in names_a if n not in names_b]
    pairs += [(None, n) for n in names_b if n not in names_a]
    return pairs, "name", [f"the models have {len(names_a)} and {len(names_b)} outputs; unmatched ones fail"]


def _unmatched(a_name: str | None, b_name: str | None, outputs_a: Mapping[str, np.ndarray],
               outputs_b: Mapping[str, np.ndarray]) -> OutputComparison:
    present = outputs_a[a_name] if a_name is not None else outputs_b[b_name]  # type: ignore[index]
    side = "A" if a_name is not None else "B"
    return OutputComparison(
        name=a_name or "", name_b=b_name or "",
        shape_a=tuple(present.shape) if a_name else None, shape_b=tuple(present.shape) if b_name else None,
        dtype_a=str(present.dtype) if a_name else "", dtype_b=str(present.dtype) if b_name else "",
        ok=False, reason=f"output {(a_name or b_name)!r} exists only in model {side}",
    )


def tolerances_for(dtype: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    default = DEFAULT_TOLERANCES.get(np.dtype(dtype).name, DEFAULT_TOLERANCES["other"])
    return (default[0] if rtol is None else float(rtol), default[1] if atol is None else float(atol))


def looks_like_scores(a: np.ndarray) -> bool:
    """Classifier scores: 2-D ``[batch, classes]`` (classes >= 2), float or 8-bit quantized."""
    return a.ndim == 2 and a.shape[1] >= 2 and a.size > 0 and (
        a.dtype.kind in "f" or a.dtype in (np.dtype(np.int8), np.dtype(np.uint8))
    )


def compare_arrays(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    *,
    name_b: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> OutputComparison:
    """Compare one output array ``b`` against the reference ``a``."""
    a, b = np.asarray(a), np.asarray(b)
    r, t = tolerances_for(a.dtype, rtol, atol)
    result = OutputComparison(
        name=name, name_b=name if name_b is None else name_b,
        shape_a=tuple(a.shape), shape_b=tuple(b.shape), dtype_a=str(a.dtype), dtype_b=str(b.dtype),
        rtol=r, atol=t, ok=False,
    )
    if a.shape != b.shape:
        result.reason = f"shape differs: {list(a.shape)} vs {list(b.shape)}"
        return result
    result.elements = int(a.size)
    numeric = a.dtype.kind in "biufc" and b.dtype.kind in "biufc"
    if not numeric:
        equal = a == b
        result.exact = float(np.mean(equal)) if a.size else 1.0
        result.mismatched = int(a.size - np.count_nonzero(equal))
        result.ok = a.dtype == b.dtype and result.mismatched == 0
        if not result.ok:
            result.reason = "dtype differs" if a.dtype != b.dtype else f"{result.mismatched} elements differ"
        return result
    _numeric_stats(result, a, b, r, t)
    if a.dtype != b.dtype:
        result.ok = False
        result.reason = f"dtype differs: {a.dtype} vs {b.dtype}"
    return result


def _numeric_stats(result: OutputComparison, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> None:
    wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    if a.size == 0:
        result.max_abs = result.max_rel = 0.0
        result.exact = 1.0
        result.mismatched = 0
        result.ok = True
        return
    both_nan = np.isnan(a64) & np.isnan(b64)
    equal = (a64 == b64) | both_nan
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a64 - b64)
    diff = np.where(equal, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)  # one side NaN, or inf - inf of opposite signs
    tiny = float(np.finfo(a.dtype).tiny) if a.dtype.kind in "fc" else 1.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rel = np.where(equal, 0.0, diff / np.maximum(np.abs(a64), tiny))
    close = np.isclose(b64, a64, rtol=rtol, atol=atol, equal_nan=True)
    result.max_abs = float(diff.max())
    result.max_rel = float(np.nan_to_num(rel, nan=np.inf).max())
    result.exact = float(np.count_nonzero(equal)) / a.size
    result.mismatched = int(a.size - np.count_nonzero(close))
    result.ok = result.mismatched == 0
    if not result.ok:
        worst = int(np.argmax(np.where(close, -1.0, diff)))
        index = tuple(int(i) for i in np.unravel_index(worst, a.shape))
        result.reason = (
            f"{result.mismatched} of {a.size} elements outside atol={atol:g} + rtol={rtol:g}*|a| "
            f"(worst at {list(index)}: {a.flat[worst].item():.7g} vs {b.flat[worst].item():.7g})"
        )
    if looks_like_scores(a) and looks_like_scores(b):
        result.top1 = float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


def _label(model: Any) -> str:
    if isinstance(model, ModelSource):
        return model.label
    if isinstance(model, Model):
        return str(model.source_path) if model.source_path is not None else f"<in-memory {model.format} model>"
    if isinstance(model, (bytes, bytearray, memoryview)):
        return "<model bytes>"
    return str(model)
