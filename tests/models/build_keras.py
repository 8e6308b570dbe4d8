"""Frozen TensorFlow GraphDefs of keras.applications models (random weights).

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import keras
import numpy as np

from ._info import ModelInfo, save_reference
from ._keras_common import (
    freeze_keras_model,
    graphdef_facts,
    randomize_keras_model,
    run_frozen_graph,
    write_graphdef,
)

BUILDER_VERSION = 1  # bump to rebuild cached models made by this module

SEED = 0
MAX_ABS_DIFF = 1e-4

# name -> (keras.applications constructor, input HWC). Shapes are the smallest
# comfortable sizes each architecture accepts, to keep build/run time low.
_APPS: dict[str, tuple[Callable[..., keras.Model], tuple[int, int, int]]] = {
    "mobilenet_v2": (keras.applications.MobileNetV2, (96, 96, 3)),
    "resnet50": (keras.applications.ResNet50, (64, 64, 3)),
    "inception_v3": (keras.applications.InceptionV3, (75, 75, 3)),
    # added for the Grappler remapper comparison (issue 13); the keys above keep their cache keys
    "mobilenet_v3_small": (keras.applications.MobileNetV3Small, (96, 96, 3)),
    "efficientnet_b0": (keras.applications.EfficientNetB0, (64, 64, 3)),
    "densenet121": (keras.applications.DenseNet121, (64, 64, 3)),
    "xception": (keras.applications.Xception, (75, 75, 3)),
}
NAMES = ("mobilenet_v2", "resnet50", "inception_v3", "mobilenet_v3_small", "efficientnet_b0", "densenet121",
         "xception")  # a literal: _cache.py reads it without importing TensorFlow
assert NAMES == tuple(_APPS)


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Build, freeze, write and verify one model; return its ModelInfo."""
    constructor, hwc = _APPS[name]
    keras.utils.set_random_seed(SEED)
    model = constructor(weights=None, input_shape=hwc, classes=1000)
    randomized = randomize_keras_model(model, SEED)

    input_shape = (1, *hwc)
    graph_def, in_names, out_names = freeze_keras_model(model, input_shape)
    write_graphdef(graph_def, model_path)

    info = ModelInfo(
        family="keras_graphdef",
        name=name,
        format="graphdef",
        path=model_path,
        inputs={in_names[0]: input_shape},
        outputs=out_names,
        input_dtype="float32",
        input_dtypes={in_names[0]: "float32"},
        output_shapes={out_names[0]: (1, 1000)},
        output_dtypes={out_names[0]: "float32"},
    )

    # Verify: the frozen graph, re-read from disk and run in a v1 Session,
    # must match the Keras model on a seeded input.
    feeds = info.sample_inputs(SEED)
    x = feeds[in_names[0]]
    expected = np.asarray(model(x, training=False))
    (got,) = run_frozen_graph(model_path, feeds, out_names)
    diff = float(np.max(np.abs(got - expected)))
    if not diff < MAX_ABS_DIFF:
        raise AssertionError(f"{name}: frozen graph differs from Keras by {diff:g}")
    # Softmax outputs of random-weight nets are nearly flat (~1e-3), so also
    # compare log-probabilities, which is as strict as comparing the logits.
    logp_diff = float(np.max(np.abs(np.log(got) - np.log(expected))))
    if not logp_diff < 10 * MAX_ABS_DIFF:
        raise AssertionError(f"{name}: log-probs differ from Keras by {logp_diff:g}")
    save_reference(reference_path, [x], [got])

    meta = {
        "keras_model_name": model.name,
        "num_params": int(model.count_params()),
        "randomized": randomized,
        "max_abs_diff_vs_keras": diff,
        "max_abs_logprob_diff_vs_keras": logp_diff,
        "output_stats": _prob_stats(got),
        **graphdef_facts(graph_def),
    }
    return replace(info, reference=reference_path, metadata=meta)


def _prob_stats(probs: np.ndarray) -> dict[str, float]:
    """Summary of a softmax output, to spot saturated (one-hot) outputs."""
    p = probs.reshape(-1).astype(np.float64)
    entropy = float(-(p * np.log(np.clip(p, 1e-30, None))).sum())
    return {"max_prob": float(p.max()), "entropy": entropy, "min_prob": float(p.min())}
