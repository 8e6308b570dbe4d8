"""graphwright quantize against the TFLite converter's PTQ and ai-edge-quantizer, side by side in one
run on the same data (issue 14, "Anchors to beat").

Usage:  python benchmarks/quantize_tflite.py [--models mobilenet_v2,resnet50,efficientnet_b0]
                                             [--modes int8,16x8,dynamic,weights] [--calib 200] [--eval 100]
                                             [--eval-16x8 30] [--tools converter,aeq|graphwright]
                                             [--runs 20] [--keep DIR] [--json out.json]
        python benchmarks/quantize_tflite.py --render A.json B.json ...

Models: tests/models ``quant_corpus`` (``tflite_<model>_float``: Keras applications MobileNetV2,
ResNet50, EfficientNet-B0 at 224, random weights with randomized BN statistics and biases, logits
out, converted by the TFLiteConverter).  ``tflite_<model>_int8`` / ``_int16x8`` are the converter's
own PTQ of the same Keras model whose representative dataset is ``samples(meta, "calib")`` — the
very samples ai-edge-quantizer and graphwright calibrate on here, from the float ``.tflite``.
The converter's time is the whole Keras -> TFLite conversion with calibration, measured when the
model was built (``metadata["quantize_cpu_s"]``, CPU seconds of the build process; the float
conversion's time is the float row's).

Tools per mode (float input and output everywhere):
* ``int8``: converter (``TFLITE_BUILTINS_INT8``), ai-edge-quantizer ``static_wi8_ai8``, graphwright
  int8 with minmax / entropy / percentile / mse ranges;
* ``16x8``: converter (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``),
  ai-edge-quantizer ``static_wi8_ai16``, graphwright 16x8 with minmax / entropy / percentile / mse ranges;
* ``dynamic``: ai-edge-quantizer ``dynamic_wi8_afp32`` vs graphwright dynamic;
* ``weights``: ai-edge-quantizer ``weight_only_wi8_afp32`` vs graphwright weights.

Columns as in ``quantize_onnx.py``; accuracy on LiteRT's default kernels against the float
``.tflite`` on the eval split (``--eval-16x8`` samples for 16x8: LiteRT's int16 kernels are slow);
quantization time in CPU seconds of this process; latency the calling thread's CPU time of one
``invoke`` of a one-thread LiteRT interpreter (default kernels: XNNPACK where it applies), median
of ``--runs`` interleaved rounds over every file of the model (``quantize_onnx.py``: files kept in
``--keep``, the converter's copied there, re-measured by later runs as latency-only rows).  A tool
that fails is a row with its error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quantize_onnx import (
    Clock,
    Row,
    accuracy,
    attempt,
    interleaved_ms,
    kept_files,
    latency_rows,
    load_rows,
    print_table,
)

from tests.models.build_quant_corpus import quant_model, samples

MODELS = ("mobilenet_v2", "resnet50", "efficientnet_b0")
MODES = ("int8", "16x8", "dynamic", "weights")
_AEQ_RECIPES = {"int8": "static_wi8_ai8", "16x8": "static_wi8_ai16", "dynamic": "dynamic_wi8_afp32",
                "weights": "weight_only_wi8_afp32"}
_CONVERTER = {"int8": "int8", "16x8": "int16x8"}

Feeds = list[dict[str, np.ndarray]]


def interpreter(path: Path, threads: int | None = None) -> Any:
    from ai_edge_litert.interpreter import Interpreter  # lazy: keeps --help fast

    interp = Interpreter(model_path=str(path), num_threads=threads)
    interp.allocate_tensors()
    return interp


def invoke(interp: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    detail = interp.get_input_details()[0]
    x = next(iter(feed.values()))
    if detail["dtype"] != np.float32:  # integer input: quantize as the model says
        scale, zero = detail["quantization"]
        info = np.iinfo(detail["dtype"])
        x = np.clip(np.round(x / scale) + zero, info.min, info.max).astype(detail["dtype"])
    interp.set_tensor(detail["index"], x)
    interp.invoke()
    out = interp.get_output_details()[0]
    y = interp.get_tensor(out["index"])
    if out["dtype"] != np.float32:
        scale, zero = out["quantization"]
        y = (y.astype(np.float32) - zero) * scale
    return y.copy()


def outputs(path: Path, feeds: Feeds) -> np.ndarray:
    interp = interpreter(path)
    return np.concatenate([invoke(interp, f) for f in feeds])


def latencies(paths: list[Path], feed: dict[str, np.ndarray], runs: int) -> dict[Path, float]:
    """Interleaved calling-thread CPU ms of each model (one-thread interpreters)."""
    runners = {}
    for path in paths:
        try:
            interp = interpreter(path, threads=1)
            invoke(interp, feed)
        except Exception as exc:  # its accuracy row already says why
            print(f"  latency: {path.name} skipped: {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        runners[path] = lambda interp=interp: invoke(interp, feed)
    return interleaved_ms(runners, runs)


def aeq_tool(mode: str) -> Callable[[Path, Path, Feeds], None]:
    """ai-edge-quantizer from the float .tflite, calibrated (static modes) on the same samples."""
    def run(src: Path, dst: Path, calib: Feeds) -> None:
        from ai_edge_quantizer import quantizer, recipe  # lazy: measured with the tool

        qt = quantizer.Quantizer(str(src), getattr(recipe, _AEQ_RECIPES[mode])())
        result = None
        if mode in ("int8", "16x8"):
            signature = interpreter(src).get_signature_list()
            key = next(iter(signature))
            name = signature[key]["inputs"][0]
            result = qt.calibrate({key: [{name: next(iter(f.values()))} for f in calib]})
        qt.quantize(result, enable_progress_bar=False, enable_progress_report=False).export_model(str(dst))
    return run


def graphwright_tool(mode: str, method: str | None = None) -> Callable[[Path, Path, Feeds], None]:
    """``graphwright.quantize.quantize`` from the float .tflite on the same calibration samples."""
    def run(src: Path, dst: Path, calib: Feeds) -> None:
        import graphwright as gw  # lazy: measured with the tool
        from graphwright.quantize import quantize  # lazy: measured with the tool

        kwargs: dict[str, Any] = {"mode": mode, "report": False}
        if method is not None:
            kwargs.update(samples=calib, calibration_samples=len(calib), method=method)
        model, _ = quantize(str(src), **kwargs)
        gw.save(model, dst)
    return run


def tools_for(mode: str) -> list[tuple[str, Callable[[Path, Path, Feeds], None] | None]]:
    """(tool, function); None for the converter (its model was made at build time)."""
    tools: list[tuple[str, Callable[[Path, Path, Feeds], None] | None]] = []
    if mode in _CONVERTER:
        tools.append(("converter", None))
    tools.append((f"aeq-{_AEQ_RECIPES[mode]}", aeq_tool(mode)))
    if mode in ("int8", "16x8"):
        tools += [(f"graphwright-{m}", graphwright_tool(mode, m)) for m in ("minmax", "entropy", "percentile", "mse")]
    else:
        tools.append((f"graphwright-{mode}", graphwright_tool(mode)))
    return tools


def bench_model(name: str, modes: list[str], args: argparse.Namespace, tmp: Path) -> list[Row]:
    info = quant_model(f"tflite_{name}_float")
    src = info.path
    calib = samples(info.metadata, "calib", args.calib)
    evals = samples(info.metadata, "eval", args.eval)
    reference = outputs(src, evals)
    one = evals[0]
    meta = info.metadata
    rows = [Row(name, "float", "converter-float", size=src.stat().st_size,
                quant_s=meta.get("quantize_cpu_s", meta["quantize_s"]), top1=1.0, top1_centred=1.0,
                notes={"wall_s": meta["quantize_s"], "eval_top1_distinct": meta.get("eval_top1_distinct")})]
    mine: dict[Path, Row] = {src: rows[0]}
    keep = args.keep
    keep.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        count = args.eval_16x8 if mode == "16x8" else args.eval
        for tool, fn in tools_for(mode):
            if not any(t in tool for t in args.tools.split(",")):
                continue
            row = Row(name, mode, tool)
            dst = keep / f"{name}.{mode}.{tool}.tflite"
            dst.unlink(missing_ok=True)
            if fn is None:
                built = attempt(row, lambda mode=mode: quant_model(f"tflite_{name}_{_CONVERTER[mode]}"))
                if built is not None:
                    dst.write_bytes(built.path.read_bytes())
                    row.quant_s = built.metadata.get("quantize_cpu_s", built.metadata["quantize_s"])
                    row.notes["wall_s"] = built.metadata["quantize_s"]
            else:
                clock = Clock()
                attempt(row, lambda fn=fn, dst=dst: fn(src, dst, calib))
                clock.stop(row)
            if row.status == "ok":
                row.size = dst.stat().st_size
                got = attempt(row, lambda dst=dst, count=count: outputs(dst, evals[:count]))
                if got is not None:
                    for k, v in accuracy(reference[:count], got).items():
                        setattr(row, k, v)
                    row.notes["eval"] = count
                    mine[dst] = row
            if row.status != "ok":
                dst.unlink(missing_ok=True)
            print(f"  {name} {mode} {tool}: {row.status} sqnr={row.sqnr_db} cpu={row.quant_s}", flush=True)
            rows.append(row)
    if args.runs:
        paths = [src, *(p for p in kept_files(keep, name, ".tflite") if p.name.split(".")[1] in modes)]
        rows += latency_rows(name, latencies(paths, one, args.runs), mine)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tools", default="", help="only the tools whose name contains one of these (comma list)")
    parser.add_argument("--calib", type=int, default=200)
    parser.add_argument("--eval", type=int, default=100)
    parser.add_argument("--eval-16x8", type=int, default=30)
    parser.add_argument("--runs", type=int, default=20, help="latency rounds (0: no latency)")
    parser.add_argument("--keep", type=Path, default=Path(__file__).resolve().parent / "_runs" / "models",
                        help="directory of the quantized files (kept for later runs' latency rounds)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--render", type=Path, nargs="+", help="print the tables of --json files and exit")
    args = parser.parse_args()
    if args.render:
        print_table(load_rows(args.render), lambda r: not r.tool.startswith("graphwright"))
        return 0
    rows: list[Row] = []
    args.keep = args.keep.resolve()
    with tempfile.TemporaryDirectory(prefix="gw-quant-tflite-") as tmp:
        for name in args.models.split(","):
            row = Row(name, "-", "build")
            got = attempt(row, lambda name=name: bench_model(name, args.modes.split(","), args, Path(tmp)))
            rows.extend(got if got is not None else [row])
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1, default=str))
    from importlib.metadata import version  # lazy: only for the footer

    print(f"\ntensorflow {version('tensorflow')}, ai-edge-litert {version('ai-edge-litert')}, ai-edge-quantizer "
          f"{version('ai-edge-quantizer')}; calib {args.calib}, eval {args.eval} (16x8: {args.eval_16x8}), "
          f"runs {args.runs}, load average {__import__('os').getloadavg()}\n")
    print_table(rows, lambda r: not r.tool.startswith("graphwright"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
