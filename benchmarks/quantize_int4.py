"""4-bit ONNX weights: graphwright's int4 methods (mse without data, gptq on calibration samples)
against onnxruntime's ``MatMulNBitsQuantizer`` on a quant-corpus model — held-out SQNR and top-1
against the float model on onnxruntime, and each tool's CPU time, in one process.

    python benchmarks/quantize_int4.py vit_b_16 --calib 32 --eval 32
    python benchmarks/quantize_int4.py gpt2 --calib 128 --eval 50 --tools ort,mse,gptq

Models and data: ``tests/models/build_quant_corpus.py`` (as ``quantize_onnx.py``); quantized files
go to ``--out`` (default ``benchmarks/_runs/models``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from quantize_onnx import accuracy, ort_int4, outputs, preprocess  # noqa: E402

import graphwright as gw  # noqa: E402
from graphwright.quantize import quantize  # noqa: E402
from tests.models.build_quant_corpus import quant_model, samples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a quant-corpus ONNX model: gpt2, bert_base, vit_b_16, ...")
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--eval", type=int, default=50)
    parser.add_argument("--tools", default="ort,mse,gptq", help="comma list of ort, mse, gptq, rtn")
    parser.add_argument("--target", default="onnxruntime", choices=("onnxruntime", "generic"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "_runs" / "models"))
    args = parser.parse_args()
    info = quant_model(f"onnx_{args.model}")
    calib = samples(info.metadata, "calib", args.calib)
    evals = samples(info.metadata, "eval", args.eval)
    reference = outputs(info.path, evals)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for tool in args.tools.split(","):
        dst = out / f"{args.model}.int4.{tool}.onnx"
        cpu, wall = time.process_time(), time.perf_counter()
        if tool == "ort":
            pre = out / f"{args.model}.pre.onnx"
            try:
                preprocess(info.path, pre)
            except Exception:  # onnxruntime's pre-processing fails on some exports: the raw model, as its warning says
                pre = info.path
            ort_int4(pre, dst, calib)
        else:
            given = {"samples": calib} if tool == "gptq" else {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, _ = quantize(str(info.path), mode="weights", bits=4, block_size=128, target=args.target,
                                    report=False, int4_method=tool, **given)
            gw.save(model, dst)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        acc = accuracy(reference, outputs(dst, evals))
        print(f"{args.model} {tool}: SQNR {acc['sqnr_db']:.2f} dB (centred {acc['sqnr_centred_db']:.2f}), "
              f"top-1 {acc['top1']:.3f}, CPU {cpu:.1f} s, wall {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
