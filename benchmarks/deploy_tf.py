"""The seed's "optimizing for deployment" recipe on the three frozen Keras graphs: ours vs the original tool.

Usage:  python benchmarks/deploy_tf.py [--repeat 3] [--json out.json]     (from the repo root)

Pipeline (the seed's, also graphwright's ``optimize_for_deployment`` preset)::

    strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true)
    fold_batch_norms fold_old_batch_norms

Both tools run in this process on the same bytes; the original Graph Transform Tool is TensorFlow's
C++ (``TransformGraphWithStringInputs``); the whole-process time runs our CLI against a fresh
Python that imports TensorFlow and calls the original tool.  Reported per graph: node count before/after, batch-norm arithmetic nodes left (Rsqrt,
Sub, Mul/Add/AddV2 with a constant operand), max relative error against the unmodified graph
(TensorFlow v1 Session, seeded input) over the outputs and the features before global pooling, best-of-N in-process time, and ours/theirs ratios.
A last column shows ``fuse_remapper`` (target=onednn) applied after our pipeline: fused ops, error,
nodes against Grappler's remapper on the same graph (CPU-placed, only the remapper on, oneDNN on,
in a child process; and ``target=eigen`` against Grappler with oneDNN off), and TF latency (best of ``--latency-repeat`` single runs, one intra/inter-op
thread, in one oneDNN child process) of our fused graph with Grappler off against the graph before
fusion with Grappler on (the remapper then fuses at session start).  ``--all-apps`` adds the four
other Keras applications (MobileNetV3-Small, EfficientNetB0, DenseNet121, Xception).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import graphwright as gw
from benchmarks._common import best, whole_process_ratio
from graphwright.ir import Model, constant_value

KINDS = ("mobilenet_v2", "resnet50", "inception_v3")
MORE_KINDS = ("mobilenet_v3_small", "efficientnet_b0", "densenet121", "xception")
PREFIX = "strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true)"
BN_STEPS = "fold_batch_norms fold_old_batch_norms"


def bn_arithmetic(model: Model) -> int:
    count = 0
    for node in model.graph:
        if node.op in ("Rsqrt", "Sub"):
            count += 1
        elif node.op in ("Mul", "Add", "AddV2") and any(
                v is not None and constant_value(v) is not None for v in node.inputs):
            count += 1
    return count


def _load(data: bytes, tmp: Path) -> Model:
    path = tmp / "g.pb"
    path.write_bytes(data)
    return gw.load(path)


def _rel_err(tf_oracle: Any, ref: list[np.ndarray], data: bytes, feeds: dict[str, np.ndarray],
             outputs: list[str]) -> float:
    got = tf_oracle.run_graphdef(data, feeds, outputs)
    return max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12)) for a, b in zip(ref, got))


def remapper_vs_grappler(deployed: bytes, fused: bytes, feeds: dict[str, np.ndarray], outputs: list[str],
                         latency_repeat: int) -> dict[str, Any]:
    """Grappler's remapper count on ``deployed`` and the latency of both graphs, in one oneDNN child process."""
    from graphwright.runtime.tensorflow import in_tf_process
    from tests import tf_oracle

    timing = {"threads": 1, "repeat": latency_repeat}
    (grappler,) = in_tf_process("batch", [("grappler_optimize", (deployed, outputs), {})], onednn=True)
    (grappler_eigen,) = in_tf_process("batch", [("grappler_optimize", (deployed, outputs), {})], onednn=False)
    t_fused, t_deployed, t_fused_on, t_theirs_off = in_tf_process("batch", [
        ("time_graphdef", (fused, feeds, outputs), {"grappler": False, **timing}),
        ("time_graphdef", (deployed, feeds, outputs), {"grappler": True, **timing}),
        ("time_graphdef", (fused, feeds, outputs), {"grappler": True, **timing}),
        ("time_graphdef", (grappler, feeds, outputs), {"grappler": False, **timing}),
    ], onednn=True)
    return {"grappler_nodes": sum(tf_oracle.op_histogram(grappler).values()),
            "grappler_nodes_eigen": sum(tf_oracle.op_histogram(grappler_eigen).values()),
            "latency_ms_fused_grappler_off": t_fused * 1e3, "latency_ms_original_grappler_on": t_deployed * 1e3,
            "latency_ratio": t_fused / t_deployed,
            # the two controls: our graph with Grappler on, and Grappler's remapper output with Grappler off
            "latency_ms_fused_grappler_on": t_fused_on * 1e3,
            "latency_ms_grappler_remapped_grappler_off": t_theirs_off * 1e3}


def bench(kind: str, repeat: int, tmp: Path, latency_repeat: int = 20) -> dict[str, Any]:
    from tests import tf_oracle
    from tests.transforms.fuse.test_fuse_remapper_tf_keras import keras_app

    info = keras_app(kind)
    original = info.path.read_bytes()
    inputs, outputs = list(info.inputs), list(info.outputs)
    feeds = {k: np.random.default_rng(0).standard_normal(s).astype(np.float32) for k, s in info.inputs.items()}
    # errors are measured on the outputs and on the features before global pooling (softmax hides errors)
    pool = next(n for n in _load(original, tmp).graph if n.op == "Mean")
    fetches = outputs + [pool.inputs[0].producer.name]
    ref = tf_oracle.run_graphdef(original, feeds, fetches)

    start, pipeline = original, f"{PREFIX} {BN_STEPS}"
    start_model = _load(start, tmp)

    def ours() -> bytes:
        model = _load(start, tmp)
        gw.transform(model, pipeline, inputs=inputs, outputs=outputs)
        return gw.serialize(model)

    def theirs() -> bytes:
        return tf_oracle.original_tool(start, inputs, outputs, pipeline)

    t_ours, ours_bytes = best(ours, repeat)
    t_theirs, theirs_bytes = best(theirs, repeat)
    p_ours, p_theirs = whole_process_ratio(info.path, tmp, inputs, outputs, pipeline)
    ours_model, theirs_model = _load(ours_bytes, tmp), _load(theirs_bytes, tmp)
    fused = _load(ours_bytes, tmp)
    fuse_report = gw.transform(fused, "fuse_remapper", inputs=inputs, outputs=outputs)
    fused_bytes = gw.serialize(fused)
    fused_eigen = _load(ours_bytes, tmp)
    gw.transform(fused_eigen, "fuse_remapper(target=eigen)", inputs=inputs, outputs=outputs)
    return {
        "graph": kind,
        "nodes_original": len(_load(original, tmp).graph),
        "nodes_start": len(start_model.graph),
        "bn_nodes_start": bn_arithmetic(start_model),
        "ours": {"nodes": len(ours_model.graph), "bn_nodes_left": bn_arithmetic(ours_model),
                 "max_rel_err": _rel_err(tf_oracle, ref, ours_bytes, feeds, fetches), "seconds": t_ours},
        "theirs": {"nodes": len(theirs_model.graph), "bn_nodes_left": bn_arithmetic(theirs_model),
                   "max_rel_err": _rel_err(tf_oracle, ref, theirs_bytes, feeds, fetches), "seconds": t_theirs},
        "time_ratio_ours_over_theirs": t_ours / t_theirs if t_theirs else float("inf"),
        "process_seconds": {"ours": p_ours, "theirs": p_theirs, "ratio": p_ours / p_theirs},
        "fuse_remapper": {"nodes": len(fused.graph), "fused": fuse_report.steps[0].stats.get("fused", 0),
                          "nodes_eigen": len(fused_eigen.graph),
                          "max_rel_err": _rel_err(tf_oracle, ref, fused_bytes, feeds, fetches),
                          **remapper_vs_grappler(ours_bytes, fused_bytes, feeds, outputs, latency_repeat)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--latency-repeat", type=int, default=20)
    parser.add_argument("--all-apps", action="store_true", help="also the four other Keras applications")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS + (MORE_KINDS if args.all_apps else ()):
            row = bench(kind, args.repeat, Path(tmp), args.latency_repeat)
            rows.append(row)
            o, t, f = row["ours"], row["theirs"], row["fuse_remapper"]
            print(f"{kind:13s} nodes {row['nodes_start']:5d} -> ours {o['nodes']:5d} / theirs {t['nodes']:5d} | "
                  f"BN nodes {row['bn_nodes_start']:3d} -> ours {o['bn_nodes_left']:3d} / theirs {t['bn_nodes_left']:3d} | "
                  f"err ours {o['max_rel_err']:.1e} theirs {t['max_rel_err']:.1e} | "
                  f"time ours {o['seconds'] * 1e3:7.1f} ms theirs {t['seconds'] * 1e3:7.1f} ms "
                  f"(x{row['time_ratio_ours_over_theirs']:.2f}), whole process x{row['process_seconds']['ratio']:.2f} | +fuse_remapper {f['nodes']} nodes, "
                  f"{f['fused']} fused, err {f['max_rel_err']:.1e} | Grappler remapper {f['grappler_nodes']} nodes | "
                  f"target=eigen {f['nodes_eigen']} vs Grappler oneDNN off {f['grappler_nodes_eigen']} | "
                  f"latency fused/Grappler-off {f['latency_ms_fused_grappler_off']:.2f} ms vs original/Grappler-on "
                  f"{f['latency_ms_original_grappler_on']:.2f} ms (x{f['latency_ratio']:.2f}); controls: fused/Grappler-on "
                  f"{f['latency_ms_fused_grappler_on']:.2f} ms, Grappler's remapped graph/Grappler-off "
                  f"{f['latency_ms_grappler_remapped_grappler_off']:.2f} ms")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
