"""4-bit ONNX weights: graphwright's int4 methods (mse without data, gptq on calibration samples)
against onnxruntime's ``MatMulNBitsQuantizer`` (round-to-nearest, and its GPTQ) on a quant-corpus model — held-out SQNR and top-1 against the float model on
onnxruntime, each tool's quantization CPU time (all threads of this process) and wall time, the
quantized file's size and its onnxruntime latency (one thread, calling-thread CPU ms, median of
``--runs`` interleaved rounds), in one process.

    python benchmarks/quantize_int4.py gpt2 --calib 128 --eval 50 --tools ort,mse,gptq
    python benchmarks/quantize_int4.py bert_base --coverage matmul --json benchmarks/_runs/int4_bert_base.json

``--coverage matmul`` gives graphwright the anchor's layers: ``MatMulNBitsQuantizer`` quantizes MatMul
weights only (a CNN's classifier and GPT-2's Conv1D layers are ``Gemm``s it leaves float), which is
graphwright's ``exclude_ops=("Gemm",)`` / ``--exclude-op Gemm``; ``all`` (default) is graphwright's own
default, MatMul and Gemm.  ``--rounds N`` quantizes N times, tools interleaved, and reports each
tool's median time (the machine is shared: single runs are noisy).

Tools: ``ort`` (``MatMulNBitsQuantizer``, block 128, symmetric, on the float file as given: its 4-bit
path needs no pre-processing), ``ort-gptq`` (the same with ``GPTQWeightOnlyQuantConfig``: Intel Neural
Compressor's GPTQ, which onnxruntime 1.32 carries in ``onnxruntime.quantization.neural_compressor``;
the same calibration samples), graphwright ``rtn``, ``mse``, ``gptq``
(``graphwright.quantize.quantize``, ``--target onnxruntime``: MatMulNBits with ``accuracy_level`` 4).

Models and data: ``tests/models/build_quant_corpus.py`` (as ``quantize_onnx.py``); quantized files
go to ``--out`` (default ``benchmarks/_runs/models``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from quantize_onnx import accuracy, file_size, latencies, outputs  # noqa: E402

from tests.models.build_quant_corpus import quant_model, samples  # noqa: E402

COVERAGE = {"all": (), "matmul": ("Gemm",)}


def ort_rtn(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
    import onnx  # lazy: measured with the tool
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # lazy: measured with the tool

    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)


def ort_gptq(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
    """``MatMulNBitsQuantizer`` with GPTQ (Intel Neural Compressor's implementation, vendored in
    onnxruntime 1.32 as ``onnxruntime.quantization.neural_compressor``): block 128, symmetric, 1 %
    dampening, no act-order, on the same samples."""
    import onnx  # lazy: measured with the tool
    from onnxruntime.quantization import CalibrationDataReader  # lazy: measured with the tool
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq  # lazy: measured with the tool

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(calib)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

        def rewind(self) -> None:
            self.feeds = iter(calib)

    config = mnq.GPTQWeightOnlyQuantConfig(calibration_data_reader=Reader(), block_size=128, percdamp=0.01,
                                           actorder=False, mse=False, perchannel=True)
    quantizer = mnq.MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True, algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)


def graphwright(method: str, exclude: tuple[str, ...], target: str):
    def run(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        import graphwright as gw  # lazy: measured with the tool
        from graphwright.quantize import quantize  # lazy: measured with the tool

        given = {"samples": calib} if method == "gptq" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, _ = quantize(str(src), mode="weights", bits=4, block_size=128, target=target, report=False,
                                int4_method=method, exclude_ops=exclude, **given)
        gw.save(model, dst)
    return run


def count_nbits(path: Path) -> int:
    import onnx  # lazy: after the timings

    return sum(1 for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type == "MatMulNBits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a quant-corpus ONNX model: gpt2, bert_base, vit_b_16, mobilenet_v3_large, ...")
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--eval", type=int, default=50)
    parser.add_argument("--tools", default="ort,mse,gptq", help="comma list of ort, ort-gptq, rtn, mse, gptq")
    parser.add_argument("--coverage", default="all", choices=sorted(COVERAGE),
                        help="graphwright's layers: all (MatMul and Gemm) or matmul (the anchor's: --exclude-op Gemm)")
    parser.add_argument("--target", default="onnxruntime", choices=("onnxruntime", "generic"))
    parser.add_argument("--rounds", type=int, default=1, help="quantize this many times, tools interleaved")
    parser.add_argument("--runs", type=int, default=10, help="latency rounds (0: no latency)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "_runs" / "models"))
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # one INFO line per node otherwise
    load = os.getloadavg()
    info = quant_model(f"onnx_{args.model}")
    calib = samples(info.metadata, "calib", args.calib)
    evals = samples(info.metadata, "eval", args.eval)
    reference = outputs(info.path, evals)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exclude = COVERAGE[args.coverage]
    suffix = "" if args.coverage == "all" else f".{args.coverage}"
    makers = {"ort": ort_rtn, "ort-gptq": ort_gptq}
    tools = args.tools.split(",")
    times: dict[str, list[tuple[float, float]]] = {tool: [] for tool in tools}
    failed: dict[str, str] = {}
    paths = {tool: out / f"{args.model}.int4.{tool}{'' if tool.startswith('ort') else suffix}.onnx" for tool in tools}
    for _ in range(args.rounds):
        for tool in tools:
            if tool in failed:
                continue
            make = makers.get(tool) or graphwright(tool, exclude, args.target)
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                make(info.path, paths[tool], calib)
            except Exception as exc:  # a tool that cannot run is a result
                failed[tool] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
                print(f"{args.model} {tool}: failed: {failed[tool]}", flush=True)
                continue
            times[tool].append((time.process_time() - cpu, time.perf_counter() - wall))
            print(f"{args.model} {tool}: CPU {times[tool][-1][0]:.1f} s, wall {times[tool][-1][1]:.1f} s", flush=True)
    done = [tool for tool in tools if tool not in failed]
    ms = latencies([info.path, *(paths[t] for t in done)], evals[0], args.runs) if args.runs else {}
    rows: list[dict[str, Any]] = [{"model": args.model, "tool": "float", "size_mb": file_size(info.path) / 1e6,
                                   "ms": ms.get(info.path)}]
    for tool in tools:
        row: dict[str, Any] = {"model": args.model, "tool": tool,
                               "coverage": "matmul (anchor)" if tool.startswith("ort") else args.coverage}
        if tool in failed:
            row["status"] = f"failed: {failed[tool]}"
            rows.append(row)
            continue
        acc = accuracy(reference, outputs(paths[tool], evals))
        cpu = [c for c, _ in times[tool]]
        wall = [w for _, w in times[tool]]
        row.update(status="ok", sqnr_db=acc["sqnr_db"], sqnr_centred_db=acc["sqnr_centred_db"], top1=acc["top1"],
                   top1_centred=acc["top1_centred"], quant_cpu_s=statistics.median(cpu), quant_wall_s=statistics.median(wall),
                   quant_cpu_all=cpu, quant_wall_all=wall, size_mb=file_size(paths[tool]) / 1e6,
                   ms=ms.get(paths[tool]), matmulnbits=count_nbits(paths[tool]))
        rows.append(row)
    print("\n| model | tool | coverage | MatMulNBits | SQNR dB | SQNR c dB | top-1 | quant CPU s | wall s | MB | ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["tool"] == "float":
            print(f"| {row['model']} | float | - | - | - | - | - | - | - | {row['size_mb']:.2f} | "
                  f"{row['ms'] or float('nan'):.2f} |")
        elif row["status"] != "ok":
            print(f"| {row['model']} | {row['tool']} | {row['coverage']} | {row['status']} |")
        else:
            print(f"| {row['model']} | {row['tool']} | {row['coverage']} | {row['matmulnbits']} | {row['sqnr_db']:.2f} | "
                  f"{row['sqnr_centred_db']:.2f} | {row['top1']:.3f} | {row['quant_cpu_s']:.1f} | {row['quant_wall_s']:.1f} | "
                  f"{row['size_mb']:.2f} | {row['ms'] or float('nan'):.2f} |")
    if args.json:
        doc = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "calib": args.calib, "eval": args.eval,
               "rounds": args.rounds, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "env": {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if k in os.environ},
               "load_before": load, "load_after": os.getloadavg(), "machine": platform.machine(), "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
