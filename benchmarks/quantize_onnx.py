"""graphwright quantize against onnxruntime.quantization on ONNX models, side by side in one run on
the same data (issue 14, "Anchors to beat").

Usage:  python benchmarks/quantize_onnx.py [--models resnet50,bert_base,...] [--modes static,dynamic,int4]
                                           [--tools ort|graphwright|...] [--calib 200] [--eval 100]
                                           [--calib-hist 32] [--int4-method gptq|mse|rtn]
                                           [--runs 20] [--keep DIR] [--json out.json]
        python benchmarks/quantize_onnx.py --render A.json B.json ...

Models: tests/models ``quant_corpus`` (``onnx_<name>``: torchvision ResNet50, MobileNetV3-Large,
EfficientNet-B0, ViT-B/16 at 224; BERT-base masked-LM and GPT-2 small LM from their configs; random
weights with randomized biases and norms; built on first use).  Data: ``samples(meta, "calib")``
(natural-image-like smooth noise / Zipf token ids; every tool calibrates on the same samples) and
the held-out ``"eval"`` split for the accuracy columns.

Tools per mode:
* ``static`` (QDQ, int8 activations and per-channel int8 weights): onnxruntime's ``quantize_static``
  with MinMax, Entropy and Percentile calibration, on the model ``quant_pre_process`` made (the
  documented flow; its time is the ``ort-preprocess`` row); graphwright with minmax, entropy,
  percentile and mse.  MinMax calibrates on ``--calib`` samples; the histogram methods of both
  tools on the first ``--calib-hist`` of them: onnxruntime's Entropy/Percentile calibrators keep
  every intermediate tensor of every sample in memory before building histograms (200 samples of
  MobileNetV3-Large at 224 took 9.4 GB; ResNet50/ViT would not fit in 24 GB).
* ``dynamic``: ``quantize_dynamic`` (int8 weights) vs graphwright dynamic.
* ``int4``: ``MatMulNBitsQuantizer`` (4-bit, block 128, symmetric, round-to-nearest: no data) vs
  graphwright weights int4 ``--target onnxruntime`` on the same ``--calib`` samples, with
  ``--int4-method`` (default as ``graphwright quantize``'s: ``gptq``, since data is given; the tool
  is named ``graphwright-int4-<method>``).

Columns: top-1 agreement with the float model (raw, and on logits centred by the float model's
mean over the eval split — random-weight models put most inputs in a few classes, the centred view
shows whether the input-dependent part survives), SQNR dB of the output over the whole eval split
(raw, and centred: the error against the input-dependent part of the output only),
max abs error, quantization time (CPU seconds of this process, all its threads: the machine is
shared, so wall time would measure the other jobs; the wall time is in the row's notes), file size,
and onnxruntime latency: the calling thread's CPU time (``time.thread_time``) of one batch-1
``run`` on a session with one intra-op thread (no spinning), so it runs on the calling thread; median
of ``--runs`` rounds after a warm-up, every model of the row group measured once per round
(interleaved, so load changes hit all of them alike).  A tool that fails is a row with its error,
not a crash.

Quantized files are kept in ``--keep`` (default ``benchmarks/_runs/models``, not committed) so a
later run of other ``--tools`` measures their latency again in its own rounds: it writes them as
latency-only rows, which ``--render`` merges into the earlier rows (every other column of those
stays as first measured).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models.build_quant_corpus import quant_model, samples

MODELS = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vit_b_16", "bert_base", "gpt2")
MODES = ("static", "dynamic", "int4")
CALIB_BATCH = 8


@dataclass
class Row:
    model: str
    mode: str
    tool: str
    status: str = "ok"
    quant_s: float | None = None
    size: int | None = None
    top1: float | None = None
    top1_centred: float | None = None
    sqnr_db: float | None = None
    sqnr_centred_db: float | None = None
    max_abs: float | None = None
    latency_ms: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)


# -- metrics shared with quantize_tflite.py -----------------------------------------------------------
def accuracy(reference: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """Top-1 agreement, SQNR dB (each raw, and on outputs centred by the float model's mean over the
    split) and max abs error of ``got`` against ``reference`` (both [rows, classes] after flattening
    the leading axes)."""
    ref = reference.reshape(-1, reference.shape[-1]).astype(np.float64)
    out = got.reshape(-1, got.shape[-1]).astype(np.float64)
    centre = ref.mean(axis=0)
    noise = float(np.sum((ref - out) ** 2))

    def sqnr(signal: np.ndarray) -> float:
        return float(10 * np.log10(np.sum(signal ** 2) / noise)) if noise > 0 else float("inf")

    return {
        "top1": float(np.mean(ref.argmax(-1) == out.argmax(-1))),
        "top1_centred": float(np.mean((ref - centre).argmax(-1) == (out - centre).argmax(-1))),
        "sqnr_db": sqnr(ref),
        "sqnr_centred_db": sqnr(ref - centre),
        "max_abs": float(np.max(np.abs(ref - out))),
    }


def interleaved_ms(runners: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """Median calling-thread CPU milliseconds of each runner: one warm-up each, then ``runs``
    rounds that call every runner once (interleaved: load changes hit all of them alike)."""
    for run in runners.values():
        run()
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(runs):
        for key, run in runners.items():
            start = time.thread_time()
            run()
            times[key].append(time.thread_time() - start)
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


class Clock:
    """CPU seconds of this process (all threads) and wall seconds since creation."""

    def __init__(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def stop(self, row: Row) -> None:
        row.quant_s = time.process_time() - self.cpu
        row.notes["wall_s"] = round(time.perf_counter() - self.wall, 2)


def file_size(path: Path) -> int:
    """Bytes of a model file and its external data files next to it."""
    own = path.stat().st_size
    data = [p for p in path.parent.iterdir() if p != path and p.name.startswith(path.name)]
    return own + sum(p.stat().st_size for p in data)


def attempt(row: Row, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; a failure becomes the row's status (its first line) and None."""
    try:
        return fn()
    except Exception as exc:  # every tool's failure is a result
        row.status = f"failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        row.notes["traceback"] = traceback.format_exc(limit=3)[-1500:]
        return None


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _diff(a: float | None, b: float | None, spec: str = "+.2f") -> str:
    if a is None or b is None:
        return "-"
    return "0 (both exact)" if a == b == float("inf") else format(a - b, spec)


def table_lines(rows: list[Row]) -> list[str]:
    """The rows as a Markdown table."""
    lines = ["| model | mode | tool | top-1 | top-1 c | SQNR dB | SQNR c dB | max abs | quant s | MB | ms | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        size = None if r.size is None else r.size / 1e6
        lines.append(f"| {r.model} | {r.mode} | {r.tool} | {_fmt(r.top1, '.3f')} | {_fmt(r.top1_centred, '.3f')} | "
                     f"{_fmt(r.sqnr_db, '.2f')} | {_fmt(r.sqnr_centred_db, '.2f')} | {_fmt(r.max_abs, '.4f')} | {_fmt(r.quant_s, '.1f')} | "
                     f"{_fmt(size, '.2f')} | {_fmt(r.latency_ms, '.2f')} | {r.status.replace('|', '/')} |")
    return lines


def ratio_lines(rows: list[Row], anchors: Callable[[Row], bool]) -> list[str]:
    """Each graphwright row against the best anchor (highest SQNR) of its model and mode, as a Markdown table."""
    lines = ["| model | mode | graphwright | best anchor | d SQNR dB | d SQNR c dB | d top-1 | d top-1 c | time x | "
             "size x | latency x |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r.model, r.mode) for r in rows}):
        group = [r for r in rows if (r.model, r.mode) == key and r.status == "ok" and r.sqnr_db is not None]
        theirs = [r for r in group if anchors(r)]
        if not theirs:
            continue
        best = max(theirs, key=lambda r: r.sqnr_db)
        for r in (r for r in rows if (r.model, r.mode) == key and r.tool.startswith("graphwright")):
            if r.status != "ok" or r.sqnr_db is None:
                lines.append(f"| {key[0]} | {key[1]} | {r.tool} | {best.tool} | failed | | | | | | |")
                continue
            ratio = {k: (getattr(r, k) / getattr(best, k)) if getattr(r, k) and getattr(best, k) else None
                     for k in ("quant_s", "size", "latency_ms")}
            lines.append(f"| {key[0]} | {key[1]} | {r.tool} | {best.tool} | {_diff(r.sqnr_db, best.sqnr_db)} | "
                         f"{_diff(r.sqnr_centred_db, best.sqnr_centred_db)} | "
                         f"{_diff(r.top1, best.top1, '+.3f')} | {_diff(r.top1_centred, best.top1_centred, '+.3f')} | "
                         f"{_fmt(ratio['quant_s'], '.2f')} | {_fmt(ratio['size'], '.2f')} | "
                         f"{_fmt(ratio['latency_ms'], '.2f')} |")
    return lines


def print_table(rows: list[Row], anchors: Callable[[Row], bool]) -> None:
    """The rows, then the ratio view: graphwright / the best anchor of the same model and mode
    (SQNR and top-1 as differences; time, size, latency as ratios)."""
    print("\n".join(table_lines(rows)))
    print("\nratio view: graphwright / best anchor (highest SQNR) of the same model and mode\n")
    print("\n".join(ratio_lines(rows, anchors)))


def load_rows(paths: list[Path]) -> list[Row]:
    """Rows written by ``--json`` (to print them again: ``--render A.json B.json``); a row of a later
    file replaces the same (model, mode, tool) row of an earlier one (a re-run of some ``--tools``),
    but a latency-only row (a later run re-measuring an earlier run's kept file) replaces only the
    latency."""
    rows: dict[tuple[str, str, str], Row] = {}
    for path in paths:
        for r in json.loads(path.read_text()):
            key = (r["model"], r["mode"], r["tool"])
            if r.get("notes", {}).get("latency_only"):
                if key in rows:
                    rows[key].latency_ms = r["latency_ms"]
                    rows[key].notes["latency_run"] = str(path.name)
                continue
            rows[key] = Row(**r)
    return list(rows.values())


def latency_rows(name: str, measured: dict[Path, float], mine: dict[Path, Row]) -> list[Row]:
    """Latency of this run's rows (``mine``), and latency-only rows for kept files of other runs."""
    extra = []
    for path, ms in measured.items():
        if path in mine:
            mine[path].latency_ms = ms
            continue
        mode, tool = path.name[len(name) + 1:].split(".")[:2]
        extra.append(Row(name, mode, tool, latency_ms=ms, notes={"latency_only": True}))
    return extra


def kept_files(keep: Path, name: str, suffix: str) -> list[Path]:
    """Quantized files of model ``name`` in ``keep`` (``<name>.<mode>.<tool><suffix>``)."""
    return sorted(p for p in keep.glob(f"{name}.*{suffix}") if len(p.name[len(name) + 1:].split(".")) == 3)


# -- onnxruntime -----------------------------------------------------------------------------------------
def session(path: Path, threads: int = 0) -> Any:
    import onnxruntime as ort  # lazy: keeps --help fast

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def outputs(path: Path, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    sess = session(path)
    return np.concatenate([sess.run(None, f)[0] for f in feeds])


def latencies(paths: list[Path], feed: dict[str, np.ndarray], runs: int) -> dict[Path, float]:
    """Interleaved calling-thread CPU ms of each model (one-thread sessions); a model that does not
    load or run is left out."""
    runners = {}
    for path in paths:
        try:
            sess = session(path, threads=1)
            sess.run(None, feed)
        except Exception as exc:  # its accuracy row already says why
            print(f"  latency: {path.name} skipped: {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        runners[path] = lambda sess=sess: sess.run(None, feed)
    return interleaved_ms(runners, runs)


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds, self.pos = feeds, 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.pos >= len(self.feeds):
            return None
        self.pos += 1
        return self.feeds[self.pos - 1]

    def rewind(self) -> None:
        self.pos = 0


def ort_static(method: str) -> Callable[[Path, Path, list[dict[str, np.ndarray]]], None]:
    def run(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static  # lazy

        # No CalibMaxIntermediateOutputs for MinMax: onnxruntime 1.32 clears each full group of N feeds
        # without merging its ranges (only the last len % N feeds calibrate; 0 left raises "No data is
        # collected"), and MinMax reduces inside the graph anyway.  The histogram methods hold every
        # intermediate tensor of every sample (hence --calib-hist).
        extra: dict[str, object] = {}
        quantize_static(str(src), str(dst), _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), extra_options=extra)
    return run


def ort_dynamic(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
    from onnxruntime.quantization import quantize_dynamic  # lazy

    quantize_dynamic(str(src), str(dst))


def ort_int4(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
    import onnx  # lazy
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # lazy

    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)


# -- graphwright --------------------------------------------------------------------------------------------
def graphwright_tool(mode: str, method: str | None = None) -> Callable[[Path, Path, list[dict[str, np.ndarray]]], None]:
    """graphwright's public API, ``graphwright.quantize.quantize``, on the float file and the same
    calibration samples (all of them calibrate: ``report=False`` holds none out), int8 activations
    as onnxruntime's (graphwright's ONNX default is uint8).  ``mode="int4"``: ``method`` is the
    ``int4_method`` (None: the API's default, gptq since the samples are given), with the samples."""
    def run(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        import graphwright as gw  # lazy: measured with the tool
        from graphwright.quantize import quantize  # lazy: measured with the tool

        kwargs: dict[str, Any] = {"mode": mode, "report": False}
        # calibration_samples counts samples, not feeds (a feed holds a batch)
        count = sum(len(next(iter(f.values()))) for f in calib)
        if mode == "int4":
            kwargs.update(mode="weights", bits=4, block_size=128, target="onnxruntime", samples=calib,
                          calibration_samples=count, int4_method=method)
        elif method is not None:
            kwargs.update(samples=calib, calibration_samples=count, method=method, activation_type="int8")
        model, _ = quantize(str(src), **kwargs)
        gw.save(model, dst)
    return run


def tools_for(mode: str, int4_method: str | None = None) -> list[tuple[str, Callable[..., None]]]:
    if mode == "static":
        return [*((f"ort-{m.lower()}", ort_static(m)) for m in ("MinMax", "Entropy", "Percentile")),
                *((f"graphwright-{m}", graphwright_tool("static", m)) for m in ("minmax", "entropy", "percentile", "mse"))]
    if mode == "dynamic":
        return [("ort-dynamic", ort_dynamic), ("graphwright-dynamic", graphwright_tool("dynamic"))]
    # the name says which codes: the API's default with samples is gptq (graphwright quantize --data likewise)
    return [("ort-matmulnbits4", ort_int4),
            (f"graphwright-int4-{int4_method or 'gptq'}", graphwright_tool("int4", int4_method))]


def preprocess(src: Path, dst: Path) -> None:
    from onnxruntime.quantization.shape_inference import quant_pre_process  # lazy

    quant_pre_process(str(src), str(dst))


def bench_model(name: str, modes: list[str], args: argparse.Namespace, tmp: Path) -> list[Row]:
    info = quant_model(f"onnx_{name}")
    src = info.path
    calib = samples(info.metadata, "calib", args.calib, batch=CALIB_BATCH)
    evals = samples(info.metadata, "eval", args.eval)
    one = evals[0]
    reference = outputs(src, evals)
    rows = [Row(name, "float", "float", size=file_size(src), top1=1.0, top1_centred=1.0)]
    mine: dict[Path, Row] = {src: rows[0]}
    selected = [(mode, tool, fn) for mode in modes for tool, fn in tools_for(mode, args.int4_method)
                if any(t in tool for t in args.tools.split(","))]
    anchor_src = src
    if any(tool.startswith("ort") for _, tool, _ in selected):
        pre = tmp / f"{name}.pre.onnx"
        row = Row(name, "prep", "ort-preprocess")
        clock = Clock()
        attempt(row, lambda: preprocess(src, pre))
        clock.stop(row)
        rows.append(row)
        anchor_src = pre if row.status == "ok" else src
    keep = args.keep
    keep.mkdir(parents=True, exist_ok=True)
    for mode, tool, fn in selected:
        row = Row(name, mode, tool)
        dst = keep / f"{name}.{mode}.{tool}.onnx"
        for p in keep.glob(f"{dst.name}*"):
            p.unlink()
        data = calib if mode != "static" or tool.endswith("minmax") else calib[:args.calib_hist // CALIB_BATCH]
        row.notes["calibration_samples"] = sum(len(next(iter(f.values()))) for f in data)
        if mode == "int4" and tool.startswith("graphwright"):
            row.notes["int4_method"] = tool.rsplit("-", 1)[1]
        clock = Clock()
        done = attempt(row, lambda fn=fn, tool=tool, dst=dst, data=data: fn(
            anchor_src if tool.startswith("ort") else src, dst, data) or True)
        clock.stop(row)
        if done:
            row.size = file_size(dst)
            got = attempt(row, lambda dst=dst: outputs(dst, evals))
            if got is not None:
                for k, v in accuracy(reference, got).items():
                    setattr(row, k, v)
                mine[dst] = row
        if row.status != "ok":
            for p in keep.glob(f"{dst.name}*"):
                p.unlink()
        print(f"  {name} {mode} {tool}: {row.status} sqnr={row.sqnr_db} cpu={row.quant_s:.1f}s", flush=True)
        rows.append(row)
    if args.runs:
        paths = [src, *(p for p in kept_files(keep, name, ".onnx") if p.name.split(".")[1] in modes)]
        rows += latency_rows(name, latencies(paths, one, args.runs), mine)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tools", default="", help="only the tools whose name contains one of these (comma list)")
    parser.add_argument("--calib", type=int, default=200)
    parser.add_argument("--calib-hist", type=int, default=32,
                        help="calibration samples of the histogram methods (entropy, percentile, mse), both tools")
    parser.add_argument("--int4-method", choices=("gptq", "mse", "rtn"), default=None,
                        help="graphwright's 4-bit codes, on the --calib samples (default: graphwright quantize's "
                             "with data, gptq)")
    parser.add_argument("--eval", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20, help="latency rounds (0: no latency)")
    parser.add_argument("--keep", type=Path, default=Path(__file__).resolve().parent / "_runs" / "models",
                        help="directory of the quantized files (kept for later runs' latency rounds)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--render", type=Path, nargs="+", help="print the tables of --json files and exit")
    args = parser.parse_args()
    if args.render:
        print_table(load_rows(args.render), lambda r: r.tool.startswith("ort-"))
        return 0
    rows: list[Row] = []
    json_path = args.json.resolve() if args.json else None
    args.keep = args.keep.resolve()
    with tempfile.TemporaryDirectory(prefix="gw-quant-onnx-") as tmp:
        os.chdir(tmp)  # onnxruntime's pre-processing writes its external-data and temporary files to the cwd
        for name in args.models.split(","):
            row = Row(name, "-", "build")
            got = attempt(row, lambda name=name: bench_model(name, args.modes.split(","), args, Path(tmp)))
            rows.extend(got if got is not None else [row])
            if json_path:
                json_path.write_text(json.dumps([asdict(r) for r in rows], indent=1, default=str))
    print(f"\nonnxruntime {__import__('onnxruntime').__version__}, {os.cpu_count()} cpus, calib {args.calib}, "
          f"eval {args.eval}, runs {args.runs}, load average {os.getloadavg()}\n")
    print_table(rows, lambda r: r.tool.startswith("ort-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
