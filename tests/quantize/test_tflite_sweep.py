"""Every float model of the TFLite corpora through ``gw.quantize`` in the four TFLite modes.

For each (model, mode) one of two outcomes is a pass:

* quantized: the saved result loads and runs on LiteRT's default kernels, its outputs near the
  float model's on the same seeded inputs (SQNR floor per mode: the weights are random, the
  calibration data seeded uniform noise; where the corpus holds the converter's own int8 / 16x8
  file of the model, a worst output within 3 dB of that file's is accepted too — a 1000-class
  softmax at int8's fixed 1/256 output scale, comparisons and FLOOR_MOD on noise score as low
  there), and — int8 / 16x8 — graphwright's reference
  interpreter bit-exact with LiteRT's ``BUILTIN_REF`` kernels on every tensor, the two check
  seeds run one after the other on one interpreter as LiteRT runs them
  (``assert_matches_reference``: a QUANTIZE of a float operator one code off where the float input
  differs is re-checked on LiteRT's float value, an int8 SUM — wrong in ``BUILTIN_REF`` — against
  TFLM, both named in the outcome; where ``BUILTIN_REF`` has no kernel of that operator version —
  DEPTH_TO_SPACE 2, ELU, as in the converter's own files — that check is recorded as not run);
* refused: a ``TransformError`` of one line saying why.

Anything else (a traceback, a file LiteRT refuses, outputs far from float, a reference
mismatch) fails.  The default run covers a few small representative models; the whole corpus
runs with ``--wide`` (``python -m pytest --wide -m wide tests/quantize/test_tflite_sweep.py``);
``python -m tests.quantize.test_tflite_sweep`` prints the per-mode counts of
benchmarks/quantize_tflite_sweep.md.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
from graphwright.errors import TransformError, VerificationError
from graphwright.runtime import run
from tests.models import MODEL_NAMES, ModelInfo, get_model
from tests.runtime.reference._oracle import assert_matches_reference, feeds_for

MODES = ("int8", "16x8", "dynamic", "weights")
#: Lowest SQNR (dB, worst output) accepted per mode, or the documented reason a model is exempt.
SQNR_FLOOR = {"int8": 10.0, "16x8": 10.0, "dynamic": 10.0, "weights": 20.0}
CALIBRATION = 16
#: Models (family, name) whose outputs are not compared with a floor, and why.
NO_FLOOR: dict[tuple[str, str], str] = {
    ("tflite_model", "mobilenet_v2_float"): "a 1000-class SOFTMAX at int8's fixed 1/256 output scale: the converter's "
                                            "own int8 MobileNetV2 (tflite_real mobilenet_v2_224_int8) scores 1.6 dB too",
    ("tflite_zoo", "postprocess_float"): "its outputs are decisions on noise (ARG_MAX keypoints, TOPK_V2 and NMS "
                                         "picks): int8 ties move a peak to another cell",
}
FAMILIES = ("tflite_model", "tflite_real", "tflite_zoo", "tflite_ops", "tflite_math", "tflite_binary",
            "tflite_index", "tflite_reduce", "tflite_conv", "tflite_sequence", "tflite_control",
            "tflite_sparse", "tflite_misc")
#: The default run: a classifier, a keyword spotter, a segmenter-like decoder, an operator corpus.
SMALL = (("tflite_real", "landmarks_float"), ("tflite_zoo", "ds_cnn_float"), ("tflite_zoo", "autoencoder_float"),
         ("tflite_math", "unary_float"))


def float_models() -> list[tuple[str, str]]:
    return [(family, name) for family in FAMILIES for name in MODEL_NAMES[family] if name.endswith("_float")]


@dataclasses.dataclass
class Outcome:
    status: str  # "quantized" | "refused" | "failing"
    detail: str = ""
    sqnr_db: float | None = None


def _samples(info: ModelInfo, count: int, first_seed: int) -> list[dict[str, np.ndarray]]:
    return [feeds_for(info, seed) for seed in range(first_seed, first_seed + count)]


def _sqnr(want: np.ndarray, got: np.ndarray) -> float:
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    same = (want == got) | (np.isnan(want) & np.isnan(got))  # equal infinities and NaNs are no noise
    error = np.where(same, 0.0, want - got)
    if not np.isfinite(error).all():
        return -math.inf
    noise = float(np.sum(error**2))
    signal = float(np.sum(np.where(np.isfinite(want), want, 0.0) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def _converter_sqnr(family: str, name: str, mode: str, feeds_list: list[dict[str, np.ndarray]]) -> float | None:
    """The worst output SQNR of the converter's own file for this model and mode, if the corpus has it."""
    sibling = name.removesuffix("_float") + ("_int8" if mode == "int8" else "_int16x8")
    if mode not in ("int8", "16x8") or sibling not in MODEL_NAMES[family]:
        return None
    info, theirs = get_model(family, name), get_model(family, sibling)
    model = gw.load(theirs.path)
    worst = math.inf
    for feeds in feeds_list:
        want = run(info.path, feeds, backend="litert")
        given = {v.name: _to_type(feeds[v.name], v) for v in model.graph.inputs}
        got = run(theirs.path, given, backend="litert")
        for v in model.graph.outputs:
            if np.asarray(want[v.name]).dtype.kind == "f":
                worst = min(worst, _sqnr(want[v.name], _from_type(got[v.name], v)))
    return worst


def _to_type(array: np.ndarray, value: gw.ir.Value) -> np.ndarray:
    """A float feed quantized for an integer model input (the converter's int8/int16 io)."""
    if value.quant is None or not value.quant.scale.size or np.asarray(array).dtype.kind != "f":
        return array
    dtype = np.dtype(value.dtype.name.lower())
    scale, zero = float(value.quant.scale[0]), int(value.quant.zero_point[0])
    codes = np.round(np.asarray(array, np.float64) / scale) + zero
    return np.clip(codes, np.iinfo(dtype).min, np.iinfo(dtype).max).astype(dtype)


def _from_type(array: np.ndarray, value: gw.ir.Value) -> np.ndarray:
    if value.quant is None or not value.quant.scale.size or np.asarray(array).dtype.kind == "f":
        return array
    return (np.asarray(array, np.float64) - int(value.quant.zero_point[0])) * float(value.quant.scale[0])


def sweep_one(family: str, name: str, mode: str, workdir: Path) -> Outcome:
    """Quantize one model in one mode and check the result; never raises."""
    info = get_model(family, name)
    try:
        model, _ = gw.quantize(info.path, mode=mode, samples=_samples(info, CALIBRATION, 2),
                               calibration_samples=CALIBRATION, report=False)
    except TransformError as e:
        message = str(e)
        if "\n" in message or not message:
            return Outcome("failing", f"refusal not one line: {message!r}")
        return Outcome("refused", message)
    except Exception as e:  # the sweep records every crash as a failure
        return Outcome("failing", f"crash: {type(e).__name__}: {e} @ {_where(e)}")
    path = workdir / f"{family}-{name}-{mode}.tflite"
    try:
        gw.save(model, path)
        worst = math.inf
        dynamic = {v.name for v in gw.load(info.path).graph.outputs if v.shape is None or None in v.shape}
        checks = _samples(info, 2, 2 + CALIBRATION)
        for feeds in checks:
            want = run(info.path, feeds, backend="litert")
            got = run(path, feeds, backend="litert")
            for key, value in want.items():
                if np.shape(value) != np.shape(got[key]) and key in dynamic:
                    continue  # a data-dependent shape (WHERE, NMS): quantized values select other elements
                if np.asarray(value).dtype.kind in "f":
                    worst = min(worst, _sqnr(value, got[key]))
                else:
                    worst = min(worst, math.inf if np.array_equal(value, got[key]) else _sqnr(value, got[key]))
    except Exception as e:
        return Outcome("failing", f"LiteRT: {type(e).__name__}: {str(e)[:300]}")
    floor = SQNR_FLOOR[mode]
    if worst < floor and (family, name) not in NO_FLOOR:
        anchor = _converter_sqnr(family, name, mode, checks)
        if anchor is None or worst < anchor - 3.0:
            versus = "" if anchor is None else f" and the converter's {anchor:.1f} dB - 3"
            return Outcome("failing", f"SQNR {worst:.1f} dB < {floor} dB{versus}", worst)
    if mode in ("int8", "16x8"):
        quantized = dataclasses.replace(info, path=path, name=f"{name}_{mode}")
        try:  # BUILTIN_REF aborts the process on some int8 models (the converter's MobileNetV3-small too)
            run(path, checks[0], backend="litert-ref", isolate=True, timeout=600)
        except VerificationError as e:
            if "Didn't find op for builtin opcode" not in str(e):
                return Outcome("quantized", f"no oracle: BUILTIN_REF crashes on it ({str(e)[-80:]})", worst)
        boundaries: list[str] = []
        try:
            try:
                assert_matches_reference(quantized, seeds=range(2, 4), boundaries=boundaries)
            except VerificationError as e:
                if "Didn't find op for builtin opcode" not in str(e):
                    raise
                # BUILTIN_REF lacks this operator version (DEPTH_TO_SPACE 2, ELU), as for the
                # converter's own files; LiteRT's optimized kernels round differently: no oracle
                return Outcome("quantized", f"no BUILTIN_REF kernel: {str(e).split(': ', 1)[-1][:90]}", worst)
        except Exception as e:
            return Outcome("failing", f"reference vs BUILTIN_REF{_float_also_fails(info)}: {str(e)[:300]}", worst)
        if boundaries:  # where the oracle took LiteRT's values (see _oracle.assert_matches_reference)
            places: dict[str, int] = {}
            for b in boundaries:  # "seed S: name (what)" -> "name what", counted over seeds
                name, what = b.split(": ", 1)[1].split(" (", 1)
                key = f"{name} {'±1 on LiteRT float' if '±1' in what else 'on TFLM'}"
                places[key] = places.get(key, 0) + 1
            listed = "; ".join(f"{k} ({n}x)" for k, n in sorted(places.items()))
            return Outcome("quantized", f"oracle: {listed[:240]}", worst)
    return Outcome("quantized", "", worst)


def _float_also_fails(info: ModelInfo) -> str:
    """Where the reference check fails, whether the float model fails it too (then the cause is
    the interpreter's float kernel, not the quantization)."""
    try:
        assert_matches_reference(info, seeds=range(2, 4))
    except Exception:  # the float model's own mismatch
        return " (the float model fails it too)"
    return ""


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


def _check(family: str, name: str, mode: str, tmp_path: Path) -> None:
    outcome = sweep_one(family, name, mode, tmp_path)
    assert outcome.status != "failing", f"{family}:{name} {mode}: {outcome.detail}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("family", "name"), SMALL)
def test_small_models(family: str, name: str, mode: str, tmp_path: Path) -> None:
    _check(family, name, mode, tmp_path)


@pytest.mark.wide
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("family", "name"), [m for m in float_models() if m not in SMALL])
def test_corpus(family: str, name: str, mode: str, tmp_path: Path) -> None:
    _check(family, name, mode, tmp_path)


def main(argv: list[str]) -> None:
    """Run the sweep, print one line per (model, mode) and the counts per mode."""
    only = set(argv)
    counts = {mode: {"quantized": 0, "refused": 0, "failing": 0} for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for family, name in float_models():
            if only and name not in only and family not in only:
                continue
            for mode in MODES:
                outcome = sweep_one(family, name, mode, Path(tmp))
                counts[mode][outcome.status] += 1
                sqnr = "" if outcome.sqnr_db is None else f" {outcome.sqnr_db:.1f} dB"
                print(f"{family}:{name} {mode} {outcome.status}{sqnr} {outcome.detail}", flush=True)
    for mode, row in counts.items():
        print(mode, row)


if __name__ == "__main__":
    main(sys.argv[1:])
