"""Whole converter-made models of the kinds people deploy (tests/models/build_tflite_real.py) on
the reference interpreter: every operator output as LiteRT's reference kernels — integers
identical, floats within 1e-5 of each tensor's magnitude (or LiteRT's own default kernels'
deviation) — on all-min, all-max and seeded inputs.

The default run covers each architecture once; ``--wide`` runs every mode of every model."""

from __future__ import annotations

import numpy as np
import pytest

from graphwright.errors import GraphwrightError
from graphwright.runtime import prepare, run
from graphwright.runtime.reference import Interpreter
from tests.models import MODEL_NAMES, get_model

from ._oracle import assert_matches_reference, feeds_for

pytestmark = pytest.mark.slow

#: one mode of each Keras application in the default run (NASNetMobile takes minutes to convert)
DEFAULT = ["landmarks_float", "landmarks_int8", "landmarks_int16x8", "landmarks_float16", "landmarks_dynamic",
           "unet_float", "unet_int8", "unet_int16x8", "unet_float16", "transformer_dynamic",
           "transformer_float", "transformer_int8", "transformer_int16x8", "resnet50_int8", "densenet121_float",
           "mobilenet_v3_large_int16x8", "segmenter256_float"]
#: LiteRT's BUILTIN_REF aborts the process inside invoke() on this model (so does TFLM): judged apart
REF_ABORTS = "mobilenet_v3_small_224_int8"
WIDE = [n for n in MODEL_NAMES["tflite_real"] if n not in DEFAULT and n != REF_ABORTS]


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
    ("unet256_float", {"TRANSPOSE_CONV", "RESIZE_BILINEAR", "CONCATENATION", "LOGISTIC"}),
    ("segmenter256_float", {"TRANSPOSE_CONV", "RESIZE_BILINEAR", "MEAN", "HARD_SWISH", "MUL", "LOGISTIC"}),
])
def test_corpus_has_the_operators_it_is_for(name: str, ops: set[str]) -> None:
    assert ops <= set(get_model("tflite_real", name).metadata["op_histogram"])


@pytest.mark.parametrize("name", ["unet256_float", "segmenter256_float"])
def test_a_256_mask_stays_within_1e5_of_litert_reference_kernels(name: str) -> None:
    """The issue's float drift (a 256x256 mask 1.2e-3 off BUILTIN_REF where LiteRT's default
    kernels are 1.3e-4 off): on U-Nets with TRANSPOSE_CONV, bilinear resize and (segmenter256)
    global average pools over 128x128 maps, the mask is within 1e-5 of its magnitude of
    LiteRT's reference kernels on every seed, without leaning on the default kernels' deviation."""
    info = get_model("tflite_real", name)
    interp = Interpreter(info.path)
    (mask,) = interp.outputs
    for seed in range(4):
        feeds = feeds_for(info, seed)
        theirs = run(info.path, feeds, backend="litert-ref")[mask]
        assert theirs.shape == (1, 256, 256, 1)
        deviation = float(np.abs(interp.run(feeds)[mask] - theirs).max() / np.abs(theirs).max())
        assert deviation <= 1e-5, f"{name} seed {seed}: {deviation:.2e}"


@pytest.mark.wide
def test_wide_where_litert_reference_kernels_abort_single_rounding_matches_the_default_kernels() -> None:
    """LiteRT's reference kernels abort on int8 MobileNetV3-Small at 224 (run in a child process
    here); the interpreter runs it, and with single rounding its outputs are within 1 LSB of
    LiteRT's default kernels on every seed."""
    info = get_model("tflite_real", REF_ABORTS)
    feeds = feeds_for(info, 2)
    with pytest.raises(GraphwrightError, match=r"crash|signal|abort"):
        run(info.path, feeds, backend="litert-ref", isolate=True)
    interp = Interpreter(info.path, rounding="single")
    with prepare(info.path, backend="litert") as session:
        for seed in range(4):
            feeds = feeds_for(info, seed)
            mine, theirs = interp.run(feeds), session.run(feeds)
            for key, value in mine.items():
                assert int(np.abs(value.astype(np.int64) - theirs[key].astype(np.int64)).max()) <= 1, key
