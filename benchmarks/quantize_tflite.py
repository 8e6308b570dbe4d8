"""graphwright quantize against the TFLite converter's PTQ and ai-edge-quantizer, side by side in one
run on the same data (issue 14, "Anchors to beat").

Usage:  python benchmarks/quantize_tflite.py [--models mobilenet_v2,resnet50,efficientnet_b0]
                                             [--modes int8,16x8,dynamic,weights] [--calib 200] [--eval 100]
                                             [--eval-16x8 30] [--runs 20] [--json out.json]

Models: tests/models ``quant_corpus`` (``tflite_<model>_float``: Keras applications MobileNetV2,
ResNet50, EfficientNet-B0 at 224, random weights with randomized BN statistics and biases, logits
out, converted by the TFLiteConverter).  ``tflite_<model>_int8`` / ``_int16x8`` are the converter's
own PTQ of the same Keras model whose representative dataset is ``samples(meta, "calib")`` — the
very samples ai-edge-quantizer and graphwright calibrate on here, from the float ``.tflite``.
The converter's time is the whole Keras -> TFLite conversion with calibration, measured when the
model was built (``metadata["quantize_s"]``; the float conversion's time is the float row's).

Tools per mode (float input and output everywhere):
* ``int8``: converter (``TFLITE_BUILTINS_INT8``), ai-edge-quantizer ``static_wi8_ai8``, graphwright
  int8 with minmax / entropy / percentile / mse ranges;
* ``16x8``: converter (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``),
  ai-edge-quantizer ``static_wi8_ai16``, graphwright 16x8 (minmax);
* ``dynamic``: ai-edge-quantizer ``dynamic_wi8_afp32`` vs graphwright dynamic;
* ``weights``: ai-edge-quantizer ``weight_only_wi8_afp32`` vs graphwright weights.

Columns as in ``quantize_onnx.py``; accuracy on LiteRT's default kernels against the float
``.tflite`` on the eval split (``--eval-16x8`` samples for 16x8: LiteRT's int16 kernels are slow),
latency the median of ``--runs`` invokes of LiteRT (default kernels, default threads) after a
warm-up.  A tool that fails is a row with its error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quantize_onnx import Row, accuracy, attempt, load_rows, median_ms, print_table

from tests.models.build_quant_corpus import quant_model, samples

MODELS = ("mobilenet_v2", "resnet50", "efficientnet_b0")
MODES = ("int8", "16x8", "dynamic", "weights")
_AEQ_RECIPES = {"int8": "static_wi8_ai8", "16x8": "static_wi8_ai16", "dynamic": "dynamic_wi8_afp32",
                "weights": "weight_only_wi8_afp32"}
_CONVERTER = {"int8": "int8", "16x8": "int16x8"}

Feeds = list[dict[str, np.ndarray]]


def interpreter(path: Path) -> Any:
    from ai_edge_litert.interpreter import Interpreter  # lazy: keeps --help fast

    interp = Interpreter(model_path=str(path))
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


def latency(path: Path, feed: dict[str, np.ndarray], runs: int) -> float:
    interp = interpreter(path)
    return median_ms(lambda: invoke(interp, feed), runs)


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
    if mode == "int8":
        tools += [(f"graphwright-{m}", graphwright_tool("int8", m)) for m in ("minmax", "entropy", "percentile", "mse")]
    elif mode == "16x8":
        tools.append(("graphwright-minmax", graphwright_tool("16x8", "minmax")))
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
    rows = [Row(name, "float", "converter-float", size=src.stat().st_size, quant_s=info.metadata["quantize_s"],
                top1=1.0, top1_centred=1.0,
                latency_ms=latency(src, one, args.runs))]
    for mode in modes:
        count = args.eval_16x8 if mode == "16x8" else args.eval
        for tool, fn in tools_for(mode):
            if not any(t in tool for t in args.tools.split(",")):
                continue
            row = Row(name, mode, tool)
            dst = tmp / f"{name}.{mode}.{tool}.tflite"
            if fn is None:
                built = attempt(row, lambda mode=mode: quant_model(f"tflite_{name}_{_CONVERTER[mode]}"))
                if built is not None:
                    dst, row.quant_s = built.path, built.metadata["quantize_s"]
            else:
                start = time.perf_counter()
                attempt(row, lambda fn=fn, dst=dst: fn(src, dst, calib))
                row.quant_s = time.perf_counter() - start
            if row.status == "ok":
                row.size = dst.stat().st_size
                got = attempt(row, lambda dst=dst, count=count: outputs(dst, evals[:count]))
                if got is not None:
                    for k, v in accuracy(reference[:count], got).items():
                        setattr(row, k, v)
                    row.notes["eval"] = count
                    row.latency_ms = attempt(row, lambda dst=dst: latency(dst, one, args.runs))
            print(f"  {name} {mode} {tool}: {row.status} sqnr={row.sqnr_db} t={row.quant_s}", flush=True)
            rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tools", default="", help="only the tools whose name contains one of these (comma list)")
    parser.add_argument("--calib", type=int, default=200)
    parser.add_argument("--eval", type=int, default=100)
    parser.add_argument("--eval-16x8", type=int, default=30)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--render", type=Path, nargs="+", help="print the tables of --json files and exit")
    args = parser.parse_args()
    if args.render:
        print_table(load_rows(args.render), lambda r: not r.tool.startswith("graphwright"))
        return 0
    rows: list[Row] = []
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
          f"runs {args.runs}\n")
    print_table(rows, lambda r: not r.tool.startswith("graphwright"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
