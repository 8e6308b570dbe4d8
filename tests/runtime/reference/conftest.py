from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.models import ModelInfo, get_model, tflite_model

#: int8 models made by the real converter: (family, name)
INT8_MODELS = [
    ("tflite_model", "int8"),
    ("tflite_ops", "convs_int8"),
    ("tflite_ops", "acts_int8"),
    ("tflite_ops", "mobilenet_v2_int8"),
    ("tflite_ops", "misc_int8"),
    ("tflite_ops", "mobilenet_v3_small_int8"),
    ("tflite_ops", "efficientnet_b0_int8"),
]
FLOAT_MODELS = [
    ("tflite_model", "float"),
    ("tflite_model", "mobilenet_v2_float"),
    ("tflite_ops", "convs_float"),
    ("tflite_ops", "acts_float"),
    ("tflite_ops", "misc_float"),
]
SEEDS = range(20)


def model(family: str, name: str) -> ModelInfo:
    return tflite_model(name) if family == "tflite_model" else get_model(family, name)


def random_feeds(info_inputs: dict[str, tuple[int, ...]], dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs spanning each dtype's full range (uniform [0, 1) for floats)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape in info_inputs.items():
        dtype = np.dtype(dtypes[name])
        if dtype.kind == "f":
            feeds[name] = rng.random(shape, dtype=np.float32)
        else:
            lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
            feeds[name] = rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return feeds


@pytest.fixture(scope="session")
def uint8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uint8")
