"""extract's integer SVDF parameters (int8 input and feature weights, int16 time weights and
state): the multipliers recomputed here from the flatbuffer as TensorFlow's schema reads it
(LiteRT's Prepare: float32 effective scales, QuantizeMultiplier), and one step from a zero state
recomputed with integers only from the extracted parameters and weights, equal to LiteRT's
reference kernels on several inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from tensorflow.lite.python import schema_py_generated as fb

from graphwright.extract import extract
from graphwright.runtime.execute import Job, execute
from tests.models import get_model
from tests.runtime.reference._oracle import feeds_for

pytestmark = pytest.mark.slow


def _quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: ``real = q·2^(shift−31)``, q in [2^30, 2^31) rounded half away."""
    fraction, shift = math.frexp(real)
    q = math.floor(fraction * 2**31 + 0.5)
    return (q // 2, shift + 1) if q == 2**31 else (q, shift)


def _mbqm(x: np.ndarray, m: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (two roundings) on int32 values held in int64."""
    x = np.asarray(x, np.int64) * (1 << max(shift, 0))
    ab = x * m
    high = np.trunc((ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))) / 2**31).astype(np.int64)
    exponent = max(-shift, 0)
    mask = (1 << exponent) - 1
    return (high >> exponent) + ((high & mask) > ((mask >> 1) + (high < 0)))


def test_integer_svdf_parameters_match_litert_prepare_and_reproduce_a_step(tmp_path: Path) -> None:
    info = get_model("tflite_sequence", "svdf_int8")
    model = fb.ModelT.InitFromPackedBuf(info.path.read_bytes(), 0)
    graph = model.subgraphs[0]
    (op,) = graph.operators
    scales = [np.float32(graph.tensors[op.inputs[i]].quantization.scale[0]) for i in (0, 1, 2, 4)]
    s_out = np.float32(graph.tensors[op.outputs[0]].quantization.scale[0])
    s_in, s_feature, s_time, s_state = scales
    extract(info.path, tmp_path)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    (layer,) = [x for x in doc["layers"] if x["op"] == "SVDF"]
    assert (layer["feature_multiplier"], layer["feature_shift"]) == \
        _quantize_multiplier(float(np.float32(np.float32(s_in * s_feature) / s_state)))
    assert (layer["output_multiplier"], layer["output_shift"]) == \
        _quantize_multiplier(float(np.float32(np.float32(s_state * s_time) / s_out)))
    assert layer["rank"] == op.builtinOptions.rank and layer["memory_size"] == graph.tensors[op.inputs[2]].shape[1]
    files = {c["name"]: c["file"] for c in doc["constants"]}
    operator = doc["operators"][layer["operator_index"]]
    features, times, bias = (np.load(tmp_path / files[operator["inputs"][i]]).astype(np.int64) for i in (1, 2, 3))
    names = [operator["inputs"][0], operator["outputs"][0]]
    for seed in range(4):
        tensors = execute(info.path, feeds_for(info, seed), Job(backend="litert-ref", outputs=names)).outputs
        x = np.asarray(tensors[names[0]]).astype(np.int64)
        # from a zero state, each filter's memory holds only the newest feature, in its last slot
        newest = np.clip(_mbqm((x - layer["input_zero_point"]) @ features.T, layer["feature_multiplier"],
                               layer["feature_shift"]), -32768, 32767)
        per_filter = newest * times[:, -1]
        acc = bias + per_filter.reshape(x.shape[0], -1, layer["rank"]).sum(axis=2)
        y = np.clip(_mbqm(acc, layer["output_multiplier"], layer["output_shift"]) + layer["output_zero_point"],
                    -128, 127)
        np.testing.assert_array_equal(y, tensors[names[1]], err_msg=f"seed {seed}")
