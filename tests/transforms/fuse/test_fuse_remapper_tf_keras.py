"""fuse_remapper on the Keras applications after the deployment recipe, against Grappler's remapper.

Grappler's count is taken as TF 2.21 takes it in a Session: the graph placed on the CPU, only the
remapper on (``RewriterConfig.optimizers = ["remap"]``, one iteration), the outputs preserved, in a
child process with oneDNN on.  Our graph must not have more nodes, must import and run with
Grappler off in a oneDNN-on and a oneDNN-off child process (target=eigen for the latter), and
agree with the unfused graph within 1e-5 relative.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
tf_oracle = pytest.importorskip("tests.tf_oracle")

import graphwright as gw  # noqa: E402
from graphwright.runtime.tensorflow import in_tf_process  # noqa: E402
from tests.models import keras_graphdef  # noqa: E402
from tests.models._info import ModelInfo  # noqa: E402

DEPLOY = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true) "
          "fold_batch_norms fold_old_batch_norms")
#: the applications the test and benchmark compare (build_keras._APPS)
APPS = ("mobilenet_v2", "mobilenet_v3_small", "resnet50", "inception_v3", "efficientnet_b0", "densenet121",
        "xception")


def keras_app(name: str) -> ModelInfo:
    """The cached frozen Keras application ``name`` (tests/models/build_keras.py)."""
    return keras_graphdef(name)


def _count(graph_bytes: bytes) -> int:
    return sum(tf_oracle.op_histogram(graph_bytes).values())


def _fused(model: gw.Model, target: str, info: ModelInfo) -> tuple[bytes, gw.PipelineReport]:
    report = gw.transform(model, f"fuse_remapper(target={target})", inputs=list(info.inputs), outputs=list(info.outputs))
    return gw.serialize(model), report


def compare_app(name: str, tmp: Path) -> dict:
    """The deployed app, fused for oneDNN and for Eigen, run in both builds with Grappler off; Grappler's count."""
    info = keras_app(name)
    deployed_model = gw.load(info.path)
    gw.transform(deployed_model, DEPLOY, inputs=list(info.inputs), outputs=list(info.outputs))
    deployed = gw.serialize(deployed_model)
    path = tmp / f"{name}.pb"
    path.write_bytes(deployed)
    ours = {target: _fused(gw.load(path), target, info) for target in ("onednn", "eigen")}
    # the features before global pooling too (the softmax output hides errors)
    model = gw.load(path)
    pool = [n for n in model.graph if n.op == "Mean"][-1]  # the global pool: the last Mean
    fetches = list(info.outputs) + [pool.inputs[0].producer.name]
    feeds = {k: np.random.default_rng(0).standard_normal(s).astype(np.float32) for k, s in info.inputs.items()}
    runs = {}
    for onednn, target in ((True, "onednn"), (False, "eigen")):
        calls = [("run_graphdef", (deployed, feeds, fetches), {"grappler": False}),
                 ("run_graphdef", (ours[target][0], feeds, fetches), {"grappler": False})]
        if onednn:
            calls.append(("grappler_optimize", (deployed, list(info.outputs)), {}))
        runs[target] = in_tf_process("batch", calls, onednn=onednn)
    result = {"deployed": _count(deployed), "grappler": _count(runs["onednn"][2])}
    for target in ("onednn", "eigen"):
        want, got = runs[target][0], runs[target][1]
        result[target] = {
            "nodes": _count(ours[target][0]),
            "fused": ours[target][1].steps[0].stats.get("fused", 0),
            "max_rel_err": max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12)) for a, b in zip(want, got)),
        }
    return result


def _check(name: str, tmp: Path) -> None:
    r = compare_app(name, tmp)
    assert r["onednn"]["nodes"] <= r["grappler"], r
    assert r["eigen"]["nodes"] <= r["deployed"] and r["onednn"]["nodes"] < r["deployed"], r
    for target in ("onednn", "eigen"):
        assert r[target]["max_rel_err"] <= 1e-5, r


def test_mobilenet_v2_reaches_grappler_and_runs_in_both_builds(tmp_path: Path) -> None:
    _check("mobilenet_v2", tmp_path)


@pytest.mark.wide
@pytest.mark.parametrize("name", [a for a in APPS if a != "mobilenet_v2"])
def test_keras_app_reaches_grappler_and_runs_in_both_builds(name: str, tmp_path: Path) -> None:
    _check(name, tmp_path)
