"""graphwright simplify --target onnxruntime against onnxruntime's transformer optimizer, on BERT, GPT-2, T5, ViT.

Usage (from the repo root)::

    python benchmarks/ort_transformers.py [--size bench|tiny] [--models bert_ts,...] [--runs 30] [--json out.json]

Models: ``tests/models/build_ort_transformers.py`` (transformers 5 from configs, random weights
with randomized biases and norms, eager attention; the TorchScript exporter at opset 14 and
the dynamo exporter, dynamic batch and sequence), ``bench`` size: 4 layers, hidden 256, 4 heads,
intermediate 1024 (ViT: 32×32 images, 8×8 patches, 17 tokens).

Per model, the variants: the original; ``graphwright.simplify(path, target="onnxruntime")``
(in this process, load + simplify, save excluded); ``graphwright +skip``, the same plus the two
fusions it leaves off by default because they are slower on onnxruntime's CPU kernels
(``fuse_skip_layer_norm(target=onnxruntime)`` after it); and onnxruntime's
``onnxruntime.transformers.optimizer.optimize_model(path, model_type=<arch>, num_heads,
hidden_size, use_gpu=False)`` at ``opt_level`` 0 (its Python fusions only) and 1 (onnxruntime's
basic graph optimizations first).  Reported: node count, the histogram of fused operators
(contrib ops and the normalization/Gelu ops), the tool's time, the largest difference of the
outputs against the original on onnxruntime at two shapes per dynamic dim (batch 2 × sequence
16 and batch 3 × sequence 7), and onnxruntime latency (the fastest of ``--runs`` runs, one intra-op
thread; the variants of a model run interleaved and what is timed is the calling thread's CPU
time, see ``latencies``) with graph optimizations disabled and with ``ORT_ENABLE_ALL``, at batch 1 and batch 8
(sequence 128 for text, decoder sequence 128 for T5).  A fused model that is slower than the
original under the same setting is a regression: the table marks latencies more than 5 %
above the original's with ``!``.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import graphwright as gw  # noqa: E402
from graphwright.simplify import simplify  # noqa: E402
from tests.models import build_ort_transformers as corpus  # noqa: E402

FUSED = ("com.microsoft::", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization", "Gelu")
LATENCY_SEQ = 128
BATCHES = (1, 8)


def histogram(proto: onnx.ModelProto) -> dict[str, int]:
    counts = collections.Counter((f"{n.domain}::" if n.domain else "") + n.op_type for n in proto.graph.node)
    return dict(sorted(counts.items()))


def fused_ops(hist: dict[str, int]) -> str:
    """``Attention×2 SkipLayerNormalization×5`` (the domain dropped) for the fused operators."""
    picked = {k.split("::")[-1]: v for k, v in hist.items() if k.startswith(FUSED) or k in FUSED}
    return " ".join(f"{k}×{v}" for k, v in picked.items()) or "-"


def session(path: Path, optimize: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def latency_shape(info: Any, batch: int) -> dict[str, tuple[int, ...]]:
    shape: dict[str, tuple[int, ...]] = {}
    for name, dims in info.inputs.items():
        dims = list(dims)
        dims[0] = batch
        if name != "pixel_values":
            dims[1] = LATENCY_SEQ
        shape[name] = tuple(dims)
    return shape


def max_diff(reference: Path, path: Path, info: Any) -> float:
    """The largest absolute output difference over the two test shapes, both models unoptimized."""
    a, b = session(reference, False), session(path, False)
    worst = 0.0
    for dims in corpus.shapes(info):
        data = corpus.feeds(info, dims, seed=1)
        for want, got in zip(a.run(None, data), b.run(None, data), strict=True):
            worst = max(worst, float(np.max(np.abs(np.asarray(want) - np.asarray(got)))))
    return worst


def latencies(paths: dict[str, Path], info: Any, runs: int) -> dict[str, dict[str, float]]:
    """{tool: {"ms_b<batch>_<none|all>": ms}}: each session's CPU time per run, the fastest of ``runs``.

    The sessions of one model run interleaved, round by round, so they all see the same machine
    load; what is timed is the calling thread's CPU time (``time.thread_time``: with one intra-op
    thread and the sequential executor, onnxruntime computes on the calling thread), which other
    processes on a shared machine disturb far less than wall time.
    """
    out: dict[str, dict[str, float]] = {tool: {} for tool in paths}
    for optimize in (False, True):
        sessions = {tool: session(path, optimize) for tool, path in paths.items()}
        for batch in BATCHES:
            key = f"ms_b{batch}_{'all' if optimize else 'none'}"
            data = corpus.feeds(info, latency_shape(info, batch), seed=2)
            best = dict.fromkeys(sessions, float("inf"))
            for _ in range(2):
                for sess in sessions.values():
                    sess.run(None, data)
            for _ in range(runs):
                for tool, sess in sessions.items():
                    start = time.thread_time()
                    sess.run(None, data)
                    best[tool] = min(best[tool], time.thread_time() - start)
            for tool in sessions:
                out[tool][key] = 1000 * best[tool]
    return out


def ort_optimize(info: Any, arch: str, size: str, level: int, out: Path) -> float:
    from onnxruntime.transformers.optimizer import optimize_model  # lazy: a peer, imported when measured

    _, hidden, heads, _ = corpus.SIZES[size]
    start = time.perf_counter()
    optimized = optimize_model(str(info.path), model_type=arch, num_heads=heads, hidden_size=hidden,
                               opt_level=level, use_gpu=False)
    seconds = time.perf_counter() - start
    optimized.save_model_to_file(str(out))
    return seconds


def graphwright_simplify(info: Any, out: Path, skips: bool = False, embed: bool = False) -> float:
    """``simplify(target="onnxruntime")``; ``skips``: then the two skip fusions it leaves off by default too;
    ``embed``: then ``fuse_embed_layer_norm`` (also on request only)."""
    start = time.perf_counter()
    model, _ = simplify(str(info.path), target="onnxruntime")
    extra = [f"{name}(target=onnxruntime)" for name, on in (("fuse_embed_layer_norm", embed),
                                                            ("fuse_skip_layer_norm", skips)) if on]
    if extra:
        gw.transform(model, " ".join([*extra, "eliminate_dead_code"]))
    seconds = time.perf_counter() - start
    gw.save(model, out)
    return seconds


def measure(name: str, size: str, runs: int, tmp: Path) -> list[dict[str, Any]]:
    info = corpus.get(name)
    arch = name.split("_")[0]
    variants: list[tuple[str, Path, float | None]] = [("original", info.path, None)]
    out = tmp / f"{name}_graphwright.onnx"
    variants.append(("graphwright", out, graphwright_simplify(info, out)))
    out = tmp / f"{name}_graphwright_skip.onnx"
    variants.append(("graphwright +skip", out, graphwright_simplify(info, out, skips=True)))
    if arch == "bert":  # the one architecture with an embedding LayerNorm fuse_embed_layer_norm takes
        out = tmp / f"{name}_graphwright_embed.onnx"
        variants.append(("graphwright +embed", out, graphwright_simplify(info, out, embed=True)))
        out = tmp / f"{name}_graphwright_skip_embed.onnx"
        variants.append(("graphwright +skip +embed", out, graphwright_simplify(info, out, skips=True, embed=True)))
    for level in (0, 1):
        out = tmp / f"{name}_ort{level}.onnx"
        variants.append((f"ort opt_level={level}", out, ort_optimize(info, arch, size, level, out)))
    timed = latencies({tool: path for tool, path, _ in variants}, info, runs)
    rows = []
    for tool, path, seconds in variants:
        proto = onnx.load(str(path), load_external_data=False)
        hist = histogram(proto)
        row: dict[str, Any] = {"model": name, "tool": tool, "nodes": len(proto.graph.node), "seconds": seconds,
                               "fused": fused_ops(hist), "histogram": hist,
                               "max_diff": 0.0 if tool == "original" else max_diff(info.path, path, info),
                               **timed[tool]}
        rows.append(row)
        print(f"  {name} {tool}: {row['nodes']} nodes, {row['fused']}", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    keys = [f"ms_b{b}_{o}" for b in BATCHES for o in ("none", "all")]
    head = ("model", "tool", "nodes", "time s", "max |diff|", *(f"b{b} {o}" for b in BATCHES for o in ("no-opt", "all")),
            "fused operators")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    original: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["tool"] == "original":
            original[row["model"]] = row
        base = original[row["model"]]

        def cell(key: str, row: dict[str, Any] = row, base: dict[str, Any] = base) -> str:
            mark = "!" if row["tool"] != "original" and row[key] > 1.05 * base[key] else ""
            return f"{row[key]:.2f}{mark}"

        seconds = "-" if row["seconds"] is None else f"{row['seconds']:.2f}"
        lines.append("| " + " | ".join([row["model"], row["tool"], str(row["nodes"]), seconds,
                                        f"{row['max_diff']:.1e}", *(cell(k) for k in keys), row["fused"]]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("bench", "tiny"), default="bench")
    parser.add_argument("--models", default=",".join(f"{a}_{e}" for a in corpus.ARCHS for e in corpus.EXPORTERS))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # onnxruntime's optimizer logs every fusion it tries
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            name = model if args.size == "tiny" else f"{model}_bench"
            rows += measure(name, args.size, args.runs, Path(tmp))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
