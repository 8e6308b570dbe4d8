"""The three frozen Keras 3 graphs: batch norm folds away completely, then the Remapper fusions apply.

Batch-norm arithmetic is detected structurally: any ``Rsqrt`` or ``Sub`` node, or any
``Mul``/``Add``/``AddV2`` with a constant operand (the residual ``AddV2`` of ResNet50 and
MobileNetV2 add two computed tensors and do not count).  The original graphs have two such nodes
per batch norm (plus the Rsqrt/Sub sub-graph before constant folding); the target is zero.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import graphwright as gw
import graphwright.transforms.fold.fold_batch_norms
import graphwright.transforms.fold.fold_old_batch_norms
import graphwright.transforms.fuse.fuse_remapper_tf
from graphwright.ir import Model, constant_value

pytestmark = [pytest.mark.tf, pytest.mark.slow]
oracle = pytest.importorskip("tests.tf_oracle")

KINDS = ["mobilenet_v2", "resnet50", "inception_v3"]
PRE_FOLD = "remove_nodes(op=Identity) fold_constants(ignore_errors=true)"
FOLD = "fold_batch_norms fold_old_batch_norms"
HAVE_FOLD_CONSTANTS = importlib.util.find_spec("graphwright.transforms.fold.fold_constants") is not None


def bn_arithmetic(model: Model) -> int:
    """Nodes of batch-norm arithmetic left (see the module docstring)."""
    count = 0
    for node in model.graph:
        if node.op in ("Rsqrt", "Sub") or (node.op in ("Mul", "Add", "AddV2") and any(
                v is not None and constant_value(v) is not None for v in node.inputs)):
            count += 1
    return count


def _load(data: bytes, tmp: Path, name: str = "g.pb") -> Model:
    path = tmp / name
    path.write_bytes(data)
    return gw.load(path)


def _case(kind: str):
    from tests.models import keras_graphdef
    info = keras_graphdef(kind)
    data = info.path.read_bytes()
    inputs, outputs = list(info.inputs), list(info.outputs)
    feeds = {k: np.random.default_rng(0).standard_normal(s).astype(np.float32) for k, s in info.inputs.items()}
    # also fetch the features before global pooling: softmax outputs hide small errors
    model = gw.load(info.path)
    pool = next(n for n in model.graph if n.op == "Mean")
    features = pool.inputs[0].producer.name
    return data, inputs, outputs + [features], feeds


def _rel_err(want: list[np.ndarray], got: list[np.ndarray]) -> float:
    return max(float(np.abs(w - g).max() / max(np.abs(w).max(), 1e-12)) for w, g in zip(want, got))


def _check(kind: str, folded_input: bytes, tmp: Path) -> None:
    data, inputs, fetches, feeds = _case(kind)
    model = _load(folded_input, tmp)
    assert bn_arithmetic(model) > 0
    report = gw.transform(model, FOLD, inputs=inputs, outputs=fetches[:1])
    assert report.steps[0].stats["folded"] > 0 and report.steps[0].stats["weights_shared"] == 0
    assert bn_arithmetic(model) == 0
    dead = [n.name for n in model.graph if n.op == "Const"
            and not any(v.num_uses for v in n.outputs) and not n.control_users]
    assert dead == []
    ours = gw.serialize(model)
    want = oracle.run_graphdef(data, feeds, fetches)
    assert _rel_err(want, oracle.run_graphdef(ours, feeds, fetches)) <= 1e-4

    # the Remapper fusions on top: every conv fuses, TF runs it, same outputs
    fused = _load(ours, tmp, "f.pb")
    report = gw.transform(fused, "fuse_remapper", inputs=inputs, outputs=fetches[:1])
    convs = oracle.op_histogram(ours)["Conv2D"]
    fused_bytes = gw.serialize(fused)
    hist = oracle.op_histogram(fused_bytes)
    assert hist["_FusedConv2D"] == convs and hist["Conv2D"] == 0 and hist["_FusedMatMul"] == 1
    assert _rel_err(want, oracle.run_graphdef(fused_bytes, feeds, fetches)) <= 1e-4

    # the original tool on the same pipeline folds nothing on Keras 3 graphs
    theirs = oracle.original_tool(data, inputs, fetches[:1], f"{PRE_FOLD} {FOLD}")
    theirs_pre = oracle.original_tool(data, inputs, fetches[:1], PRE_FOLD)
    left = bn_arithmetic(_load(theirs, tmp, "t.pb"))
    assert left == bn_arithmetic(_load(theirs_pre, tmp, "tp.pb")) and left >= 2 * convs


@pytest.mark.parametrize("kind", KINDS)
def test_keras_graph_prefolded_by_tensorflow(kind: str, tmp_path: Path) -> None:
    """BN constants pre-folded by the original tool's TensorFlow-backed fold_constants."""
    data, inputs, fetches, _ = _case(kind)
    _check(kind, oracle.original_tool(data, inputs, fetches[:1], PRE_FOLD), tmp_path)


@pytest.mark.skipif(not HAVE_FOLD_CONSTANTS, reason="fold_constants has not landed yet")
@pytest.mark.parametrize("kind", KINDS)
def test_keras_graph_with_our_fold_constants(kind: str, tmp_path: Path) -> None:
    """The real pipeline, all graphwright: remove_nodes(op=Identity) fold_constants fold_batch_norms."""
    importlib.import_module("graphwright.transforms.fold.fold_constants")
    data, inputs, fetches, _ = _case(kind)
    model = _load(data, tmp_path, "orig.pb")
    gw.transform(model, PRE_FOLD, inputs=inputs, outputs=fetches[:1])
    _check(kind, gw.serialize(model), tmp_path)
