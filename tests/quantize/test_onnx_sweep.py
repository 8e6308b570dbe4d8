"""``gw.quantize`` over real ONNX exports: every mode on every export, run by onnxruntime at two sizes.

Models: the export corpus (``tests/models/build_onnx_corpus.py``: torchvision, timm, transformers,
detection with dynamic image sizes, control flow), the OCR/VAD exports (``build_onnx_ocr.py``) and
onnxruntime's transformer-optimizer models (``build_ort_transformers.py``).  Modes (:data:`CONFIGS`):
static QDQ (minmax; entropy on a few), dynamic, weight-only int8, int4 (generic DequantizeLinear
blocks and onnxruntime's MatMulNBits).

Each (model, mode) ends in one of: ``quantized`` or ``unchanged`` (the mode found nothing to
quantize: int4 on a network without MatMul weights; otherwise the same checks) (the saved model loads in onnxruntime, runs at the
export's size and at a second size of its dynamic dims, outputs finite; the SQNR of every float
output against the float model, run by onnxruntime on the same inputs, is recorded), ``refused``
(a one-line ``GraphwrightError``) or ``failing`` (anything else: a traceback, a model onnxruntime
refuses, NaN outputs, a failure at the second size).  The tests assert no ``failing`` and an SQNR
floor per mode (:data:`FLOORS`: random-weight models, calibrated on 8 random samples, evaluated on
others).  Detectors (:data:`DETECTORS`) are compared on their ``scores`` output only: their
``boxes`` and ``labels`` are NMS picks among near-tied random-weight classes, and any perturbation
(weight-only int8 too) flips a few labels and so moves the boxes (SSDlite, int8 weights: scores
48 dB, 7% labels flipped, boxes 5.5 dB); an output whose length changes is noted, not compared.

``python -m tests.quantize.test_onnx_sweep [NAME...] > sweep.jsonl`` runs the sweep (one JSON
record per line); ``python -m tests.quantize.test_onnx_sweep --summary sweep.jsonl`` prints the
tables of ``benchmarks/quantize_onnx_sweep.md``.  Default run: 3 small exports (:data:`DEFAULT`); the rest
with ``--wide``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import graphwright as gw
from graphwright.errors import GraphwrightError
from tests.models import build_ort_transformers as ortt
from tests.models.build_onnx_corpus import NAMES as CORPUS
from tests.models.build_onnx_corpus import corpus_model, feeds_for

CALIBRATION = 8
EVAL_SEEDS = (100, 101)
#: mode name -> gw.quantize keyword arguments
CONFIGS: dict[str, dict[str, Any]] = {
    "static": {"mode": "static", "method": "minmax"},
    "static-entropy": {"mode": "static", "method": "entropy"},
    "dynamic": {"mode": "dynamic"},
    "weights8": {"mode": "weights", "bits": 8},
    "weights4": {"mode": "weights", "bits": 4, "target": "generic"},
    "weights4-ort": {"mode": "weights", "bits": 4, "target": "onnxruntime"},
}
#: the entropy method only on these (it is the slow one)
ENTROPY = {"tv_resnet18-ts-fixed", "hf_bert-ts-dyn", "tv_mobilenet_v3_small-dynamo-dyn", "ocr:crnn_ts",
           "ortt:bert_ts"}
#: the lowest SQNR (dB, worst output, worst size) accepted per mode on these random-weight models, a few
#: dB under the sweep's worst (benchmarks/quantize_onnx_sweep.md): int4 is lowest on CLIP / T5 (9-14 dB,
#: onnxruntime's MatMulNBits the same), static on ViT-B/16 (18 dB: its head's weights are zeros, so the
#: logits are the bias, quantized as onnxruntime does on the scale s_x * 1 of an all-zero channel)
FLOORS = {"static": 12.0, "static-entropy": 12.0, "dynamic": 20.0, "weights8": 20.0, "weights4": 7.0,
          "weights4-ort": 7.0}
#: detection exports (name prefixes): only their ``scores`` output is compared
DETECTORS = ("tv_fasterrcnn", "tv_retinanet", "tv_ssdlite", "tv_fcos")
DEFAULT = ("tv_mobilenet_v3_small-ts-dyn", "hf_bert-ts-dyn", "ocr:crnn_ts")


@dataclass
class Record:
    model: str
    mode: str
    status: str  # quantized | unchanged | refused | failing
    detail: str = ""
    sqnr: list[float] = field(default_factory=list)  # worst output per size
    seconds: float = 0.0


# -- models and their inputs ----------------------------------------------------------------------
def all_models() -> list[str]:
    from tests.simplify.test_dynamic_exports import NAMES as OCR  # lazy: imports the simplify test module

    return [*CORPUS, *(f"ocr:{n}" for n in OCR), *(f"ortt:{n}" for n in ortt.NAMES if not n.endswith("_bench"))]


def load(name: str) -> tuple[Path, Any, Any]:
    """(path, calibration feeds(seed), evaluation feeds per size (seed)) of the model ``name``;
    calibration alternates the sizes (calibrated at one size, Llama-KV's rotary positions at the
    other fall outside their ranges: static 28.4 / 15.4 dB, alternating 24.9 / 27.0)."""
    if name.startswith("ortt:"):
        info = ortt.get(name[5:])
        shapes = list(ortt.shapes(info))
        return info.path, lambda s: ortt.feeds(info, shapes[s % 2], s), \
            lambda s: [ortt.feeds(info, x, s) for x in shapes]
    if name.startswith("ocr:"):
        from tests.simplify.test_dynamic_exports import ocr_model  # lazy: see all_models

        info = ocr_model(name[4:])
        other = info.metadata.get("other_shape")

        def ocr_eval(seed: int) -> list[dict[str, np.ndarray]]:
            rng = np.random.default_rng(seed)
            first = {"input": rng.standard_normal(info.inputs["input"]).astype(np.float32)} \
                if other is not None else info.sample_inputs(seed)
            return [first] + ([{"input": rng.standard_normal(other).astype(np.float32)}] if other else [])
        return info.path, lambda s: ocr_eval(s)[s % len(ocr_eval(s))], ocr_eval
    info = corpus_model(name)
    meta = info.metadata
    sizes = 2 if any(len(v) > 1 for v in meta["dims"].values()) else 1
    return info.path, lambda s: feeds_for(meta, s % sizes, seed=s * 7), \
        lambda s: [feeds_for(meta, k, seed=s * 7) for k in range(sizes)]


# -- one (model, mode) ----------------------------------------------------------------------------
def sqnr(reference: np.ndarray, got: np.ndarray) -> float:
    ref, out = reference.astype(np.float64), got.astype(np.float64)
    noise = float(np.sum((ref - out) ** 2))
    return float("inf") if noise == 0 else float(10 * np.log10(max(float(np.sum(ref ** 2)), 1e-300) / noise))


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _compare(float_outs: list[np.ndarray], quant_outs: list[np.ndarray], names: list[str]) -> tuple[float, str]:
    """Worst SQNR over the float outputs; a note for outputs that cannot be compared (NMS boxes)."""
    worst, notes = float("inf"), []
    for name, ref, got in zip(names, float_outs, quant_outs, strict=True):
        got = np.asarray(got)
        if got.dtype.kind == "f" and not np.all(np.isfinite(got)) and np.all(np.isfinite(ref)):
            raise AssertionError(f"output {name} is not finite")
        if np.asarray(ref).dtype.kind != "f":
            continue
        if ref.shape != got.shape:
            notes.append(f"{name}: {ref.shape} vs {got.shape} (NMS kept other boxes)")
            continue
        if ref.size:
            worst = min(worst, sqnr(ref, got))
    return worst, "; ".join(notes)


def evaluate(path: Path, model: Any, feeds_per_size: list[dict[str, np.ndarray]],
             detector: bool = False) -> tuple[list[float], str]:
    """Worst output SQNR per size of the quantized ``model`` against the float file ``path``, both run
    by onnxruntime (a size onnxruntime refuses raises, naming it), and the notes of outputs not compared."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q.onnx"
        gw.formats.save(model, out)
        reference, quantized = _session(path), _session(out)
        names = [o.name for o in reference.get_outputs()]
        compared = [n for n in names if n == "scores"] if detector else names
        sqnrs, notes = [], []
        for k, feeds in enumerate(feeds_per_size):
            try:
                got = quantized.run(None, feeds)
            except Exception as e:  # onnxruntime's errors: the record says which size failed
                raise AssertionError(f"size {k}: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e
            picked = [names.index(n) for n in compared]
            worst, note = _compare([reference.run(None, feeds)[i] for i in picked], [got[i] for i in picked], compared)
            sqnrs.append(round(worst, 2))
            notes += [note] if note else []
    return sqnrs, "; ".join(notes)


def run_one(name: str, mode: str) -> Record:
    started = time.perf_counter()
    record = Record(name, mode, "failing")
    try:
        path, calib, eval_feeds = load(name)
        try:
            model, report = gw.quantize(str(path), samples=[calib(i) for i in range(CALIBRATION)],
                                        calibration_samples=CALIBRATION, report=False, **CONFIGS[mode])
        except GraphwrightError as e:
            record.status, record.detail = "refused", str(e).splitlines()[0]
            return record
        record.sqnr, record.detail = evaluate(path, model, eval_feeds(EVAL_SEEDS[0]), name.startswith(DETECTORS))
        record.status = "quantized"
        if any(w.startswith("nothing was quantized") for w in report.warnings):
            record.status = "unchanged"  # ran fine, but the mode found nothing to quantize
    except Exception as e:  # the sweep records every failure instead of stopping
        record.detail = f"{type(e).__name__}: {str(e).splitlines()[0][:400] if str(e) else ''}"
    finally:
        record.seconds = round(time.perf_counter() - started, 1)
    return record


def _check(record: Record) -> None:
    assert record.status != "failing", f"{record.model} {record.mode}: {record.detail}"
    if record.status == "quantized" and record.sqnr and not record.detail:
        assert min(record.sqnr) >= FLOORS[record.mode], f"{record.model} {record.mode}: SQNR {record.sqnr}"


def _modes(name: str) -> Iterator[str]:
    yield from (m for m in CONFIGS if m != "static-entropy" or name in ENTROPY)


@pytest.mark.parametrize(("name", "mode"), [(n, m) for n in DEFAULT for m in _modes(n) if m != "static-entropy"])
def test_default(name: str, mode: str) -> None:
    _check(run_one(name, mode))


#: static SQNR (dB, worst size) before mask ranges were left float -> the floor asserted now
MASKED = {"hf_t5-ts-dyn": 18.0, "ortt:t5_ts": 18.0, "ortt:bert_ts": 20.0, "hf_llama_kv-ts-dyn": 12.0}


@pytest.mark.parametrize("name", list(MASKED))
def test_attention_masks_stay_float(name: str) -> None:
    """Exports adding ``finfo.min`` masks to attention scores (T5's causal and padding masks, BERT
    with a padded row, Llama's causal mask): every scale and zero point written is finite, the mask
    and its Adds stay float with a note, and the model is accurate at both sizes.  Before, the mask
    Adds were quantized on ``(-3.4e38, x)``: T5 gave 10.4 / 7.1 dB (corpus / ORT-optimizer export),
    Llama 16.6 / 15.0; onnxruntime's quantize_static writes NaN zero points on those ranges."""
    import onnx  # lazy: only this test reads the written initializers

    path, calib, eval_feeds = load(name)
    model, report = gw.quantize(str(path), mode="static", samples=[calib(i) for i in range(CALIBRATION)],
                                calibration_samples=CALIBRATION, report=False)
    assert report.stats["unusable_ranges"] >= 2
    assert any("mask-like range" in note for note in report.notes)
    proto = onnx.load_from_string(gw.formats.serialize(model))
    for init in proto.graph.initializer:
        if init.name.endswith(("_scale", "_zero_point")):
            assert np.all(np.isfinite(onnx.numpy_helper.to_array(init).astype(np.float64))), init.name
    sqnrs, _ = evaluate(path, model, eval_feeds(EVAL_SEEDS[0]))
    assert len(sqnrs) == 2 and min(sqnrs) >= MASKED[name], sqnrs


def _wide_cases() -> list[tuple[str, str]]:
    try:
        names = all_models()
    except Exception:  # the OCR family cannot be listed without its builder's imports: corpus only
        names = list(CORPUS)
    return [(n, m) for n in names for m in _modes(n) if n not in DEFAULT or m == "static-entropy"]


@pytest.mark.wide
@pytest.mark.parametrize(("name", "mode"), _wide_cases())
def test_wide(name: str, mode: str) -> None:
    _check(run_one(name, mode))


def summary(records: list[Record]) -> str:
    """The markdown tables of ``benchmarks/quantize_onnx_sweep.md``: per mode, counts by status and
    the SQNR distribution (worst output, worst size) of the quantized ones; then every non-quantized record."""
    lines = ["| mode | runs | quantized | unchanged | refused | failing | SQNR min | p10 | median | max |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode in CONFIGS:
        rows = [r for r in records if r.mode == mode]
        count = {k: sum(r.status == k for r in rows) for k in ("quantized", "unchanged", "refused", "failing")}
        worst = np.array([min(r.sqnr) for r in rows if r.status == "quantized" and r.sqnr], dtype=np.float64)
        worst = worst[np.isfinite(worst)]
        dist = [f"{np.percentile(worst, q):.1f}" for q in (0, 10, 50, 100)] if worst.size else ["-"] * 4
        lines.append(f"| {mode} | {len(rows)} | {count['quantized']} | {count['unchanged']} | {count['refused']} | "
                     f"{count['failing']} | {' | '.join(dist)} |")
    lines += ["", "| model | mode | status | SQNR dB per size | detail |", "|---|---|---|---|---|"]
    lines += [f"| {r.model} | {r.mode} | {r.status} | {r.sqnr} | {r.detail} |" for r in records
              if r.status != "quantized" or r.detail]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run the sweep (all models, or ``argv``), one JSON line per record on stdout; ``--modes A,B``
    first: only those modes; ``--summary FILE`` prints the tables of the JSON lines in FILE instead."""
    if argv[:1] == ["--summary"]:
        with open(argv[1]) as f:
            print(summary([Record(**json.loads(line)) for line in f if line.startswith("{")]))
        return 0
    modes = set(CONFIGS)
    if argv[:1] == ["--modes"]:
        modes, argv = set(argv[1].split(",")), argv[2:]
    for name in argv or all_models():
        for mode in (m for m in _modes(name) if m in modes):
            print(json.dumps(asdict(run_one(name, mode))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
