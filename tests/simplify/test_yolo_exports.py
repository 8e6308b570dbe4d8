"""simplify on YOLO-family detectors: the fewest nodes, the same outputs at every size, idempotent.

The models (``tests/models/build_onnx_yolo.py``): a YOLOv5-style detector (Focus, C3, SPPF, PANet,
anchor-based head decoding boxes on a grid made from the run-time feature size) and a YOLOv8-style one
(C2f, SPPF, decoupled anchor-free head, DFL, ``make_anchors`` / ``dist2bbox``), each from the
TorchScript and the dynamo exporter, at a fixed 320x320 input and with dynamic batch, height and
width.  For each: graphwright's node count is at most the best of onnxsim, onnxslim, onnxoptimizer
and onnxscript's optimizer among outputs that still match (``yolo_peers.json`` beside this file,
measured with the command in ``benchmarks/simplify_yolo.md``; the peers are not dependencies), the
simplified model gives onnxruntime's outputs of the original (at two sizes of every dynamic dim),
and simplifying the result again changes nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify
from tests.models import ModelInfo, _cache
from tests.simplify.test_dynamic_exports import run, sample_inputs

FAMILY = "onnx_yolo"
NAMES = _cache.names_of("build_onnx_yolo")
_LIBRARIES = (("torch", ("torch",)), ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)),
              ("onnxscript", ("onnxscript",)))
PEERS_JSON = Path(__file__).with_name("yolo_peers.json")
#: The default run: the two TorchScript exports with dynamic batch/height/width (~15 s each to build).
DEFAULT = {"yolov5_ts_dyn", "yolov8_ts_dyn"}


def _register() -> None:
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_onnx_yolo", NAMES, ".onnx", _LIBRARIES, batch=True))


def yolo_model(name: str, *, with_others: bool = False) -> ModelInfo:
    """The cached export ``name``; a build also builds the other missing default models (``with_others``:
    every missing model of the family) in the same subprocess."""
    _register()
    others = NAMES if with_others else DEFAULT
    return _cache.build_with_others(FAMILY, "build_onnx_yolo", name, others)


def _params() -> list[object]:
    return [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.wide) for n in NAMES]


@pytest.mark.parametrize("name", _params())
def test_fewest_nodes_same_outputs_at_every_size_and_idempotent(name: str) -> None:
    info = yolo_model(name)
    original = info.path.read_bytes()
    model, _ = simplify(info.path)
    data = onnx_format.serialize(model)
    result = onnx.load_from_string(data)
    onnx.checker.check_model(result, full_check=True)
    peers = json.loads(PEERS_JSON.read_text())["models"][name]
    best = min(n for n in peers.values() if isinstance(n, int))
    assert len(result.graph.node) <= best, (peers, Counter(n.op_type for n in result.graph.node))
    feeds_list = sample_inputs(info)
    assert len({feeds["input"].shape for feeds in feeds_list}) == (2 if info.dynamic_axes["input"] else 1)
    for feeds in feeds_list:
        want, got = run(original, feeds), run(data, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
    again, _ = simplify(onnx_format.load(Path("again.onnx"), data))
    assert onnx_format.serialize(again) == data
    assert info.path.read_bytes() == original


def test_dynamic_head_keeps_its_size_dependence() -> None:
    """The decoded boxes of a dynamic export depend on the run-time grid: at 256x384 the simplified
    YOLOv8 gives a different number of anchors than at 320x320, and its anchor-point arithmetic is
    still computed from the input's shape (a Shape read survives)."""
    info = yolo_model("yolov8_ts_dyn")
    model, _ = simplify(info.path)
    data = onnx_format.serialize(model)
    outs = [run(data, feeds)[0] for feeds in sample_inputs(info)]
    assert outs[0].shape == (1, 24, 40 * 40 + 20 * 20 + 10 * 10)
    assert outs[1].shape == (2, 24, 32 * 48 + 16 * 24 + 8 * 12)
    assert any(node.op == "Shape" for node in model.graph)


TOOLS = ("graphwright", "onnxsim", "onnxslim", "onnxoptimizer", "onnxscript")


def _compare(name: str, tools: tuple[str, ...], out_dir: Path) -> dict[str, object]:
    """Each tool in its own process (``benchmarks/simplify_onnx.py``'s ``run_tool``: seconds, peak RSS):
    nodes, whether its output matches the original's onnxruntime outputs at every sample size."""
    sys.path.insert(0, str(_cache.REPO_ROOT / "benchmarks"))
    import simplify_onnx  # lazy: the benchmark's per-tool subprocess runner, only for this script

    info = yolo_model(name, with_others=True)
    feeds_list = sample_inputs(info)
    want = [run(info.path.read_bytes(), feeds) for feeds in feeds_list]
    row: dict[str, object] = {"original": info.metadata["num_nodes"], "file_mb": info.path.stat().st_size / 2**20}
    for tool in tools:
        dst = out_dir / f"{name}.{tool}.onnx"
        result = simplify_onnx.run_tool(tool, info.path, dst)
        if "error" not in result:
            try:
                data = dst.read_bytes()
                result["matches"] = all(
                    len(g) == len(w) and all(a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-4)
                                             for a, b in zip(g, w))
                    for g, w in ((run(data, f), w) for f, w in zip(feeds_list, want)))
            except Exception as exc:  # an output that no longer runs is a result
                result["matches"] = f"fails: {type(exc).__name__}"
        row[tool] = result
    return row


def main(argv: list[str] | None = None) -> int:
    """Compare graphwright with the peers on every export; ``--peers-json`` rewrites yolo_peers.json."""
    import argparse  # lazy: script only

    parser = argparse.ArgumentParser(description="graphwright simplify vs peers on the YOLO exports")
    parser.add_argument("--models", default=",".join(NAMES))
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--peers-json", action="store_true", help="write the peers' node counts for the tests")
    args = parser.parse_args(argv)
    tools = tuple(args.tools.split(","))
    rows: dict[str, dict[str, object]] = {}
    print("| model | original | " + " | ".join(tools) + " | gw/onnxsim time | gw peak MB (file MB) |")
    print("|---" * (len(tools) + 4) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = rows[name] = _compare(name, tools, Path(tmp))
            cells = []
            for tool in tools:
                r = row[tool]
                cells.append(f"error: {r['error'][:40]}" if "error" in r else
                             f"{r['nodes']}{'' if r['matches'] is True else ' (' + str(r['matches'] or 'wrong') + ')'}"
                             f" {r['seconds']:.2f} s {r['peak_mb']:.0f} MB")
            gw, sim = row.get("graphwright", {}), row.get("onnxsim", {})
            ratio = f"{gw['seconds'] / sim['seconds']:.2f}" if "seconds" in gw and "seconds" in sim else "-"
            peak = f"{gw['peak_mb']:.0f} ({row['file_mb']:.1f})" if "peak_mb" in gw else "-"
            print(f"| {name} | {row['original']} | " + " | ".join(cells) + f" | {ratio} | {peak} |", flush=True)
    if args.peers_json:
        path = PEERS_JSON
        doc = {"command": "python -m tests.simplify.test_yolo_exports --peers-json",
               "versions": {t: _version(t) for t in tools if t != "graphwright"},
               "models": {name: {t: row[t]["nodes"] for t in tools if t != "graphwright"
                                 and row[t].get("matches") is True} for name, row in rows.items()}}
        path.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import version  # lazy: script only

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
