"""Real test models, built deterministically from code and cached.

Usage in tests::

    from tests.models import keras_graphdef, torch_onnx, tflite_model

    info = keras_graphdef("mobilenet_v2")   # builds on first use (~10 s), then cached
    info.path, info.inputs, info.outputs     # Path, {"input": (1, 96, 96, 3)}, ["Identity"]
    feeds, expected = info.reference_data()  # seeded input + reference-runtime output

Command line (from the repo root)::

    python -m tests.models build all         # or: build keras_graphdef tflite_model:int8
    python -m tests.models list | clean

Importing this package is cheap: TensorFlow/torch are only imported by the
build subprocess (see ``_cache.py``).
"""

from __future__ import annotations

import sys

from ._cache import (
    CACHE_DIR,
    FAMILIES,
    ModelBuildError,
    cached,
    ensure_built,
    missing_dependencies,
)
from ._info import ModelInfo

# transformers and timm import torchvision whenever it is installed.  PyPI's torchvision 0.28.0
# links a CUDA build of torch, so next to the CPU torch its compiled operators fail to load and
# the import raises, taking every transformers model down with it.  Only the export corpus needs
# torchvision: it is hidden here (the test process and every build subprocess import this
# package first), and build_onnx_corpus lifts this and defines the operators it needs in Python.
sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]

__all__ = [
    "CACHE_DIR",
    "MODEL_NAMES",
    "ModelBuildError",
    "ModelInfo",
    "build_all",
    "cached",
    "get_model",
    "keras_graphdef",
    "missing_dependencies",
    "tflite_model",
    "torch_onnx",
]

#: family -> model names it can build
MODEL_NAMES: dict[str, tuple[str, ...]] = {f: fam.names for f, fam in FAMILIES.items()}


def get_model(family: str, name: str, force: bool = False) -> ModelInfo:
    """Generic accessor: ``get_model("tflite_model", "int8")``."""
    return ensure_built(family, name, force=force)


def keras_graphdef(name: str) -> ModelInfo:
    """Frozen TF GraphDef (.pb) of a keras.applications model, batch 1.

    ``name``: "mobilenet_v2" (96x96x3), "resnet50" (64x64x3), "inception_v3" (75x75x3).
    """
    return ensure_built("keras_graphdef", name)


def torch_onnx(name: str) -> ModelInfo:
    """ONNX (opset 17) exported from torch with the TorchScript exporter.

    ``name``: "cnn" (BatchNormalization nodes kept) or "bert" (dynamic batch/sequence).
    """
    return ensure_built("torch_onnx", name)


def tflite_model(name: str) -> ModelInfo:
    """TFLite flatbuffer: "float", "int8" (full-integer) or "mobilenet_v2_float"."""
    return ensure_built("tflite_model", name)


def build_all(force: bool = False) -> list[ModelInfo]:
    """Build (or fetch from cache) every model, in registry order."""
    return [ensure_built(f, n, force=force) for f, names in MODEL_NAMES.items() for n in names]
