"""Whole converter-made models of the kinds people deploy (tests/models/build_tflite_real.py) on
the reference interpreter: every operator output as LiteRT's reference kernels — integers
identical, floats within 1e-5 of each tensor's magnitude (or LiteRT's own default kernels'
deviation) — on all-min, all-max and seeded inputs.

The default run covers each architecture once; ``--wide`` runs every mode of every model."""

from __future__ import annotations

import pytest

from graphwright.runtime.reference import Interpreter
from tests.models import MODEL_NAMES, get_model

from ._oracle import assert_matches_reference

pytestmark = pytest.mark.slow

#: one mode of each Keras application in the default run (NASNetMobile takes minutes to convert)
DEFAULT = ["landmarks_float", "landmarks_int8", "landmarks_int16x8", "landmarks_float16", "landmarks_dynamic",
           "unet_float", "unet_int8", "unet_int16x8", "unet_float16", "transformer_dynamic",
           "transformer_float", "transformer_int8", "transformer_int16x8", "resnet50_int8", "densenet121_float",
           "mobilenet_v3_large_int16x8"]
WIDE = [n for n in MODEL_NAMES["tflite_real"] if n not in DEFAULT]


@pytest.mark.parametrize("name", DEFAULT)
def test_every_tensor_matches_litert_reference_kernels(name: str) -> None:
    info = get_model("tflite_real", name)
    assert assert_matches_reference(info, seeds=range(4)) >= len(Interpreter(info.path).graph)


@pytest.mark.wide
@pytest.mark.parametrize("name", WIDE)
def test_wide_every_tensor_matches_litert_reference_kernels(name: str) -> None:
    info = get_model("tflite_real", name)
    assert assert_matches_reference(info, seeds=range(4)) >= len(Interpreter(info.path).graph)


@pytest.mark.parametrize(("name", "ops"), [
    ("landmarks_int8", {"PRELU", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "REDUCE_MAX", "CONCATENATION"}),
    ("unet_int8", {"TRANSPOSE_CONV", "RESIZE_BILINEAR", "CONCATENATION"}),
    ("transformer_int8", {"BATCH_MATMUL", "GELU", "SOFTMAX", "GATHER", "RSQRT", "SQUARED_DIFFERENCE"}),
    ("transformer_int16x8", {"BATCH_MATMUL", "GELU", "SOFTMAX", "RSQRT"}),
])
def test_corpus_has_the_operators_it_is_for(name: str, ops: set[str]) -> None:
    assert ops <= set(get_model("tflite_real", name).metadata["op_histogram"])
