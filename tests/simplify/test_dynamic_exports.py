"""simplify on real exports with a dynamic width / sequence: the fewest nodes, the same outputs at every size.

The models (``tests/models/build_onnx_ocr.py``): CRNN, EasyOCR- and SVTR-style text recognizers
(dynamic width), a DBNet-style text detector (dynamic height and width), a GRU sequence model and a scripted LSTM loop (dynamic batch and
sequence), from the TorchScript and the dynamo exporter, with random weights and
randomized norms.  For each: graphwright's node count is at most the best of onnxsim
and onnxslim on the same file (:data:`PEER_BEST`, measured with the command in
``benchmarks/simplify_dynamic.md``; the peers are not dependencies, so their counts are
written down), the simplified model gives onnxruntime's outputs of the original at two
sizes of every dynamic dim, and simplifying the result again changes nothing.

Run as a script to compare with the peers (they must be installed)::

    python -m tests.simplify.test_dynamic_exports [--models crnn_ts,...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify
from tests.models import ModelInfo, _cache

FAMILY = "onnx_ocr"
NAMES = _cache.names_of("build_onnx_ocr")
_LIBRARIES = (("torch", ("torch",)), ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)),
              ("onnxscript", ("onnxscript",)))

#: The fewest nodes onnxsim 0.8.1, onnxslim 0.1.98, onnxoptimizer 0.4.2 or onnxscript 0.7.2's optimizer leave
#: (among outputs that still match), per model.
PEER_BEST = {"crnn_ts": 21, "crnn_dynamo": 19, "easy_crnn_ts": 39, "easy_crnn_dynamo": 41, "dbnet_ts": 60,
             "dbnet_dynamo": 44, "svtr_ts": 95, "svtr_dynamo": 86, "gru_ts": 20, "gru_dynamo": 27, "lstm_loop_ts": 11,
             "vad_ts": 15}
#: Slow exports (the dynamo exporter on attention blocks, stacked LSTMs, the FPN: 20 s to 2 min each): only with --wide.
WIDE = {"svtr_dynamo", "easy_crnn_dynamo", "dbnet_dynamo"}


def _register() -> None:
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_onnx_ocr", NAMES, ".onnx", _LIBRARIES, batch=True))


def ocr_model(name: str) -> ModelInfo:
    """The cached export ``name``, building every missing model of the family in one subprocess first."""
    _register()
    return _cache.build_with_others(FAMILY, "build_onnx_ocr", name, [n for n in NAMES if n not in WIDE])


def sample_inputs(info: ModelInfo) -> list[dict[str, np.ndarray]]:
    """Feeds at the export's sizes and at other sizes where every dynamic dim differs (a model with
    several inputs lists its feeds in ``metadata["samples"]``: per input its shape, dtype and a value
    for scalars)."""
    rng = np.random.default_rng(1)
    if "samples" in info.metadata:
        feeds = []
        for sample in info.metadata["samples"]:
            feed = {}
            for name, (shape, dtype, *value) in sample.items():
                feed[name] = (np.array(value[0], dtype) if value
                              else rng.standard_normal(shape).astype(dtype))
            feeds.append(feed)
        return feeds
    shapes = [tuple(info.inputs["input"]), tuple(info.metadata["other_shape"])]
    for axis in info.dynamic_axes["input"]:
        assert shapes[0][axis] != shapes[1][axis], f"dynamic dim {axis} has one size only"
    return [{"input": rng.standard_normal(s).astype(np.float32)} for s in shapes]


def run(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, feeds)]


def same(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(g.shape == w.shape and np.allclose(g, w, rtol=1e-4, atol=1e-5)
                                         for g, w in zip(got, want))


def _params() -> list[object]:
    return [pytest.param(n, marks=pytest.mark.wide) if n in WIDE else n for n in NAMES]


@pytest.mark.parametrize("name", _params())
def test_fewest_nodes_same_outputs_at_every_size_and_idempotent(name: str) -> None:
    info = ocr_model(name)
    original = info.path.read_bytes()
    model, _ = simplify(info.path)
    data = onnx_format.serialize(model)
    result = onnx.load_from_string(data)
    onnx.checker.check_model(result, full_check=True)
    assert len(result.graph.node) <= PEER_BEST[name], Counter(n.op_type for n in result.graph.node)
    for feeds in sample_inputs(info):
        want, got = run(original, feeds), run(data, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    again, _ = simplify(onnx_format.load(Path("again.onnx"), data))
    assert onnx_format.serialize(again) == data
    assert info.path.read_bytes() == original


@pytest.mark.parametrize("name", ["crnn_ts", "gru_ts"])
def test_shape_glue_of_static_dims_is_gone(name: str) -> None:
    """CRNN (batch 1, dynamic width): every Shape read folds (batch, channels and height are static; the
    width is copied by Reshape's 0 or -1), the LSTM's zero states go.  GRU (dynamic batch and sequence):
    one Shape slice is left for the ``[B, S, -1]`` target, nothing gathers a static dim."""
    model, _ = simplify(ocr_model(name).path)
    ops = Counter(n.op for n in model.graph)
    assert ops["ConstantOfShape"] == 0 and ops["Gather"] == 0 and ops["Unsqueeze"] == 0
    if name == "crnn_ts":
        assert ops["Shape"] == 0 and ops["Concat"] == 0
    else:
        shapes = [n for n in model.graph if n.op == "Shape"]
        assert len(shapes) == 1 and shapes[0].attr("end") == 2 and shapes[0].inputs[0].name == "input"
    for node in model.graph:
        if node.op in ("LSTM", "GRU"):
            assert len(node.inputs) <= 5  # initial_h / initial_c (zeros) dropped


# ----- the peer comparison (a script; the peers are not dependencies) ---------------------------------
PEERS = ("onnxsim", "onnxslim", "onnxoptimizer", "onnxscript")


def _peer(tool: str, path: Path) -> onnx.ModelProto:
    """A peer's output (each with its defaults; onnxoptimizer with its fuse and elimination passes)."""
    if tool == "onnxsim":
        import onnxsim  # lazy: a peer, installed for benchmarks only

        return onnxsim.simplify(onnx.load(str(path)))[0]
    if tool == "onnxslim":
        import onnxslim  # lazy: a peer, installed for benchmarks only

        return onnxslim.slim(onnx.load(str(path)))
    if tool == "onnxoptimizer":
        import onnxoptimizer  # lazy: a peer, installed for benchmarks only

        return onnxoptimizer.optimize(onnx.load(str(path)), onnxoptimizer.get_fuse_and_elimination_passes(),
                                      fixed_point=True)
    import onnx_ir  # lazy: a peer, installed for benchmarks only
    import onnxscript.optimizer  # lazy: a peer, installed for benchmarks only

    model = onnx_ir.load(str(path))
    onnxscript.optimizer.optimize(model)
    return onnx_ir.to_proto(model)


def latency_ms(model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimize: bool, runs: int = 30) -> float:
    """Median onnxruntime latency (one thread) of ``model`` on ``x``, graph optimizations off or all on."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(NAMES))
    args = parser.parse_args(argv)
    tools = ("graphwright", *PEERS)
    rules: list[str] = []
    latencies: list[str] = []
    print(f"{'model':14s} {'original':>8s} " + " ".join(f"{t:>14s}" for t in tools))
    for name in args.models.split(","):
        info = ocr_model(name)
        xs = sample_inputs(info)
        want = [run(info.path.read_bytes(), x) for x in xs]
        cells: list[str] = []
        speed: list[str] = [f"original {latency_ms(onnx.load(str(info.path)), xs[1], False):.2f}/"
                            f"{latency_ms(onnx.load(str(info.path)), xs[1], True):.2f}"]
        for tool in tools:
            start = time.perf_counter()
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    out = onnx.load_from_string(onnx_format.serialize(simplify(info.path)[0])) \
                        if tool == "graphwright" else _peer(tool, info.path)
            except Exception as exc:  # a peer failing is a result
                cells.append(f"error:{type(exc).__name__}")
                continue
            seconds = time.perf_counter() - start
            try:
                ok = "" if all(same(run(out, x), w) for x, w in zip(xs, want)) else "(wrong)"
            except Exception:  # the output does not run at another size: a result too
                ok = "(fails)"
            cells.append(f"{len(out.graph.node)}{ok} {seconds:5.2f}s")
            if not ok:
                speed.append(f"{tool} {latency_ms(out, xs[1], False):.2f}/{latency_ms(out, xs[1], True):.2f}")
        original = len(onnx.load(str(info.path)).graph.node)
        print(f"{name:14s} {original:>8d} " + " ".join(f"{c:>14s}" for c in cells), flush=True)
        without, _ = simplify(info.path, skip_optimizations=["fold_symbolic_shapes"])
        _, report = simplify(info.path)
        stats: Counter[str] = Counter()
        for record in report.passes:
            if record.name == "fold_symbolic_shapes":
                stats.update({k: int(v) for k, v in record.stats.items() if v})
        sizes = " ".join(str(tuple(v.shape)) for v in xs[1].values())
        latencies.append(f"{name} {sizes}: " + ", ".join(speed))
        rules.append(f"{name}: {len(without.graph)} nodes without fold_symbolic_shapes; its rewrites: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    print("\nonnxruntime ms (median of 30, one thread; optimizations off / all on), at the second size:")
    print("\n".join(latencies))
    print("\n".join(rules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
