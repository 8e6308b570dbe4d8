"""The deployed-model zoo (tests/models/build_tflite_zoo.py) on the reference interpreter: every
operator output as LiteRT's reference kernels — integers identical, floats within 1e-5 of each
tensor's magnitude (or LiteRT's own default kernels' deviation) — on all-min, all-max and seeded
inputs; and ``graphwright extract`` writes each model's weights.

The default run covers the small models; ``--wide`` adds the other modes and the Keras
applications, which take minutes to convert."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphwright.formats import load
from tests.models import MODEL_NAMES, get_model

from ._oracle import assert_matches_reference

pytestmark = pytest.mark.slow

#: the default run: one or two modes of each small model (builder time about 2 minutes in all)
DEFAULT = ["ds_cnn_int8", "conv1d_audio_int8", "gru_kws_float", "deeplab_float", "deeplab_int8", "vit_int8",
           "two_inputs_int8", "image_ops_float", "image_ops_int8", "stft_float", "yolo_int8", "face_embed_int8",
           "super_res_float", "super_res_int8", "postprocess_float", "bert_tiny_float", "bert_tiny_int8",
           "batch4_dynamic", "pose_int8", "autoencoder_int8", "ds_cnn_uint8io_int8", "video_float", "ssd_int8",
           "shufflenet_int8", "wavenet_int8", "conv1d_audio_bias32_int16x8", "uint8_classifier_int8",
           "legacy_float", "legacy_elu_float", "multiplier_int8"]
WIDE = [n for n in MODEL_NAMES["tflite_zoo"] if n not in DEFAULT]

#: models with an operator (version) LiteRT's BUILTIN_REF resolver lacks: the int8 DEPTH_TO_SPACE
#: (v2) against TFLite Micro's reference kernels, the float ELU against LiteRT's default kernels
OTHER = {"super_res_int8": "tflm", "legacy_elu_float": "litert"}


def _matches(name: str) -> None:
    info = get_model("tflite_zoo", name)
    nodes = len(load(info.path).graph)
    for seed in range(4):  # one seed per interpreter: the fused LSTMs keep their state between runs
        assert assert_matches_reference(info, seeds=range(seed, seed + 1), other=OTHER.get(name, "litert-ref")) >= nodes


def _extracts(name: str, tmp_path: Path) -> None:
    info = get_model("tflite_zoo", name)
    out = tmp_path / "weights"
    cli = Path(sys.executable).with_name("graphwright")  # the console script installed beside this python
    done = subprocess.run([str(cli), "extract", str(info.path), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"graphwright extract {name}: {done.stderr.strip().splitlines()[-1:]}"
    assert any(out.iterdir())


@pytest.mark.parametrize("name", DEFAULT)
def test_every_tensor_matches_litert_reference_kernels(name: str) -> None:
    _matches(name)


@pytest.mark.parametrize("name", DEFAULT)
def test_extract_writes_the_weights(name: str, tmp_path: Path) -> None:
    _extracts(name, tmp_path)


@pytest.mark.wide
@pytest.mark.parametrize("name", WIDE)
def test_wide_every_tensor_matches_litert_reference_kernels(name: str) -> None:
    _matches(name)


@pytest.mark.wide
@pytest.mark.parametrize("name", WIDE)
def test_wide_extract_writes_the_weights(name: str, tmp_path: Path) -> None:
    _extracts(name, tmp_path)


@pytest.mark.parametrize(("name", "ops"), [
    ("ds_cnn_int8", {"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "SOFTMAX"}),
    ("gru_kws_float", {"WHILE"}),
    ("lstm_kws_int8", {"UNIDIRECTIONAL_SEQUENCE_LSTM"}),
    ("deeplab_int8", {"SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "RESIZE_BILINEAR", "ARG_MAX"}),
    ("selfie_int8", {"HARD_SWISH", "TRANSPOSE_CONV", "MUL", "LOGISTIC"}),
    ("vit_int8", {"BATCH_MATMUL", "SOFTMAX", "CONCATENATION"}),
    ("stft_float", {"RFFT2D", "COMPLEX_ABS"}),
    ("yolo_int8", {"SPACE_TO_DEPTH", "LEAKY_RELU", "RESIZE_NEAREST_NEIGHBOR"}),
    ("super_res_int8", {"MIRROR_PAD", "DEPTH_TO_SPACE", "RSQRT"}),
    ("face_embed_int8", {"PRELU", "L2_NORMALIZATION"}),
    ("postprocess_float", {"TOPK_V2", "NON_MAX_SUPPRESSION_V5", "ARG_MAX", "FLOOR_DIV", "FLOOR_MOD"}),
    ("bert_tiny_int8", {"GATHER", "SELECT_V2", "SOFTMAX", "BATCH_MATMUL"}),
    ("video_float", {"CONV_3D", "CONV_3D_TRANSPOSE"}),
    ("ds_cnn_uint8io_int8", {"QUANTIZE"}),
    ("ssd_int8", {"LOG_SOFTMAX", "EXP", "SPLIT_V"}),
    ("shufflenet_int8", {"SPLIT", "TRANSPOSE", "CONCATENATION"}),
    ("wavenet_int8", {"SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "TANH", "LOGISTIC", "MUL"}),
    ("uint8_classifier_int8", {"CAST", "TOPK_V2", "ARG_MAX"}),
    ("legacy_float", {"LOCAL_RESPONSE_NORMALIZATION", "RELU_N1_TO_1", "SQUARE", "SQRT"}),
    ("legacy_elu_float", {"ELU"}),
])
def test_corpus_has_the_operators_it_is_for(name: str, ops: set[str]) -> None:
    assert ops <= set(get_model("tflite_zoo", name).metadata["op_histogram"])


def test_bias32_variant_has_int32_biases_on_int16_activations() -> None:
    graph = load(get_model("tflite_zoo", "conv1d_audio_bias32_int16x8").path).graph
    biased = [node for node in graph if node.op in ("CONV_2D", "FULLY_CONNECTED")]
    assert biased and all(node.inputs[0].dtype.value == "int16" and node.inputs[2].dtype.value == "int32"
                          for node in biased)
