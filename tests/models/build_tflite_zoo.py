"""A zoo of deployed-model shapes, converted by the real TFLiteConverter with random weights
(randomized biases and batch-norm statistics), for the reference interpreter to run tensor for
tensor as LiteRT's reference kernels.  Each model exercises operators or conversion paths the
``tflite_real`` corpus does not:

* ``mobilenet_v1``: MobileNet v1 (alpha 0.25, 128x128), the classic int8 classifier;
* ``ds_cnn``: a DS-CNN keyword spotter on a 49x10 MFCC spectrogram (what TFLite Micro runs):
  a 10x4 strided stem, depthwise-separable blocks, average pooling, softmax;
* ``gru_kws``: a Keras-3 GRU keyword spotter (the recurrence becomes a WHILE loop);
* ``lstm_kws``: a tf_keras LSTM keyword spotter (fused UNIDIRECTIONAL_SEQUENCE_LSTM);
  ``bilstm_kws``: its first layer bidirectional;
* ``conv1d_audio``: a raw-waveform Conv1D classifier (EXPAND_DIMS/RESHAPE around CONV_2D,
  1-D max pooling, global average pooling);
* ``deeplab``: a DeepLabV3-style segmenter — explicit atrous convolution by SPACE_TO_BATCH_ND /
  BATCH_TO_SPACE_ND, dilated depthwise convolutions, ASPP with image pooling, bilinear resize
  back to the input size, per-pixel ARG_MAX;
* ``selfie``: a MediaPipe-selfie-style segmenter — HARD_SWISH, squeeze-excite (global pool,
  hard sigmoid, MUL), TRANSPOSE_CONV decoder, sigmoid mask;
* ``pose``: a BlazePose-style model — an FPN-like decoder with nearest resizing and adds,
  a heatmap head and a keypoint regression head from the same features;
* ``hand``: a hand-landmark-style model — 21x3 landmarks, handedness and presence scores;
* ``vit``: a ViT-tiny — patch convolution, class token, position embedding, MultiHeadAttention,
  LayerNorm, GELU MLP;
* ``autoencoder``: a convolutional autoencoder with a dense bottleneck (tanh code), a valid
  TRANSPOSE_CONV cropped by a slice, sigmoid output;
* ``batch4``: a small CNN with batch size 4;
* ``two_inputs``: an image (float) and a category id (int32, embedded) — inputs of two dtypes;
* ``image_ops``: tf.image preprocessing — resize with align_corners, nearest resize, crop,
  flip, grayscale, per-image standardization;
* ``stft``: tf.signal.stft magnitude and log-mel-like projection (RFFT2D, COMPLEX_ABS);
* ``yolo``: a tiny YOLO-style detector — SPACE_TO_DEPTH stem, LeakyReLU, SiLU, SPP max pool;
* ``super_res``: ESPCN-style — MIRROR_PAD (reflect, symmetric), instance norm, DEPTH_TO_SPACE;
* ``face_embed``: MobileFaceNet-style — PReLU, global depthwise convolution, L2_NORMALIZATION;
* ``bert_tiny``: a BERT-style classifier — int32 ids and attention mask, masked attention;
* ``postprocess``: in-graph decoding — heatmap peaks, TOPK_V2, non-maximum suppression;
* ``ocr``: a CRNN — a Keras-3 bidirectional GRU (WHILE, REVERSE_V2), greedy CTC decoding;
* ``video``: CONV_3D and CONV_3D_TRANSPOSE on an 8-frame clip;
* ``ds_cnn_uint8io``: the DS-CNN converted full-integer with uint8 input and output, as older
  deployment pipelines ask (QUANTIZE uint8 <-> int8 at the edges); ``ds_cnn_floatio``: with
  float input and output (QUANTIZE and DEQUANTIZE at the edges, the converter's default);
* ``wavenet``: causal dilated Conv1D, gated tanh x sigmoid activations;
* ``shufflenet``: channel split, 5-D channel shuffle, a grouped convolution;
* ``ssd``: an SSD head — reshaped multi-scale outputs, LOG_SOFTMAX, box decoding (SPLIT_V, EXP);
* ``uint8_classifier``: a raw uint8 image in (CAST), TOPK_V2 and int64 ARG_MAX out;
* ``legacy``: LOCAL_RESPONSE_NORMALIZATION (``legacy_elu``: ELU), RELU_N1_TO_1, MINIMUM, L2 pooling;
* ``multiplier``: depthwise convolutions with channel multipliers 2, 4 and 8;
* ``<model>_<variant>``: converter settings people use — ``bias32`` (16x8 with int32 biases;
  models without DEPTHWISE_CONV_2D, which LiteRT requires int64 biases of), ``pertensor``
  (per-tensor weights), ``oldquantizer`` / ``olddynamic`` (the older quantizers).
* ``xception`` / ``inception_v3`` / ``convnext_tiny`` / ``efficientnet_v2_b0``:
  Keras applications (weights=None) at small inputs.

Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ._info import ModelInfo
from ._keras_common import randomize_keras_model
from ._tflite_common import SEED, Spec, convert, info_of, mode_of

BUILDER_VERSION = 1

NAMES = (
    "mobilenet_v1_float", "mobilenet_v1_int8", "mobilenet_v1_dynamic",
    "ds_cnn_float", "ds_cnn_int8", "ds_cnn_int16x8",
    "gru_kws_float", "gru_kws_float16", "gru_kws_dynamic",
    "lstm_kws_float", "lstm_kws_int8", "lstm_kws_dynamic",
    "bilstm_kws_float", "bilstm_kws_int8",
    "conv1d_audio_float", "conv1d_audio_int8", "conv1d_audio_int16x8",
    "deeplab_float", "deeplab_int8", "deeplab_int16x8",
    "selfie_float", "selfie_int8", "selfie_float16", "selfie_int16x8",
    "pose_float", "pose_int8", "pose_dynamic",
    "hand_float", "hand_int8", "hand_int16x8",
    "vit_float", "vit_int8", "vit_dynamic",
    "autoencoder_float", "autoencoder_int8", "autoencoder_int16x8",
    "batch4_float", "batch4_int8", "batch4_dynamic",
    "two_inputs_float", "two_inputs_int8",
    "image_ops_float", "image_ops_int8",
    "stft_float",
    "yolo_float", "yolo_int8", "yolo_float16",
    "super_res_float", "super_res_int8", "super_res_float16",
    "face_embed_float", "face_embed_int8", "face_embed_dynamic",
    "bert_tiny_float", "bert_tiny_int8", "bert_tiny_dynamic",
    "postprocess_float",
    "ocr_float", "ocr_dynamic",
    "video_float", "video_float16",
    "ds_cnn_uint8io_int8",
    "vit_float16", "bert_tiny_float16", "deeplab_dynamic", "selfie_dynamic",
    "pose_int16x8",
    "ds_cnn_floatio_int8", "conv1d_audio_bias32_int16x8", "ds_cnn_pertensor_int8", "ds_cnn_oldquantizer_int8",
    "bert_tiny_olddynamic_dynamic", "selfie_oldquantizer_int8", "wavenet_bias32_int16x8",
    "wavenet_float", "wavenet_int8", "wavenet_int16x8",
    "shufflenet_float", "shufflenet_int8", "shufflenet_int16x8",
    "ssd_float", "ssd_int8", "ssd_dynamic",
    "uint8_classifier_float", "uint8_classifier_int8",
    "legacy_float", "legacy_elu_float",
    "multiplier_float", "multiplier_int8", "multiplier_int16x8",
    "xception_float", "xception_int8",
    "inception_v3_float", "inception_v3_int8",
    "convnext_tiny_float", "convnext_tiny_int8",
    "efficientnet_v2_b0_float", "efficientnet_v2_b0_int8",
)
L = keras.layers
Made = tuple[Any, list[Spec]]


def _conv_bn(x: keras.KerasTensor, filters: int, kernel: Any, name: str, strides: int = 1,
             activation: str | None = "relu") -> keras.KerasTensor:
    y = L.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False, name=f"{name}_conv")(x)
    y = L.BatchNormalization(name=f"{name}_bn")(y)
    return L.Activation(activation, name=f"{name}_act")(y) if activation else y


def _separable(x: keras.KerasTensor, filters: int, name: str, strides: int = 1, dilation: int = 1,
               activation: str = "relu") -> keras.KerasTensor:
    y = L.DepthwiseConv2D(3, strides=strides, dilation_rate=dilation, padding="same", use_bias=False,
                          name=f"{name}_dw")(x)
    y = L.BatchNormalization(name=f"{name}_dw_bn")(y)
    y = L.Activation(activation, name=f"{name}_dw_act")(y)
    return _conv_bn(y, filters, 1, f"{name}_pw", activation=activation)


def _mobilenet_v1() -> Made:
    model = keras.applications.MobileNet(weights=None, alpha=0.25, input_shape=(128, 128, 3), classes=10)
    return model, [Spec((1, 128, 128, 3))]


def _ds_cnn() -> Made:
    x = keras.Input((49, 10, 1), batch_size=1, name="mfcc")
    y = _conv_bn(x, 64, (10, 4), "stem", strides=2)
    for i in range(4):
        y = _separable(y, 64, f"ds{i}")
    y = L.AveragePooling2D((25, 5), name="pool")(y)
    y = L.Flatten(name="flat")(y)
    out = L.Softmax(name="probs")(L.Dense(12, name="logits")(y))
    return keras.Model(x, out, name="ds_cnn"), [Spec((1, 49, 10, 1), low=-4.0, high=4.0)]


def _gru_kws() -> Made:
    x = keras.Input((49, 10), batch_size=1, name="mfcc")
    y = L.GRU(24, return_sequences=True, name="gru0")(x)
    y = L.GRU(24, name="gru1")(y)
    out = L.Softmax(name="probs")(L.Dense(12, name="logits")(y))
    return keras.Model(x, out, name="gru_kws"), [Spec((1, 49, 10))]


def _lstm_kws(bidirectional: bool = False) -> Made:
    """tf_keras, whose LSTM the converter fuses into UNIDIRECTIONAL_SEQUENCE_LSTM (Keras 3's it does
    not); ``bidirectional``: the first layer wrapped in Bidirectional (a forward and a reversed
    fused LSTM, concatenated)."""
    import tf_keras

    tl = tf_keras.layers
    x = tf_keras.Input((49, 10), batch_size=1, name="mfcc")
    first = tl.LSTM(24, return_sequences=True, name="lstm0")
    y = (tl.Bidirectional(first, name="bilstm0") if bidirectional else first)(x)
    y = tl.LSTM(24, name="lstm1")(y)
    out = tl.Softmax(name="probs")(tl.Dense(12, name="logits")(y))
    model = tf_keras.Model(x, out, name="lstm_kws")
    rng = np.random.default_rng(SEED)
    for layer in model.layers:
        for weight in layer.weights:
            if "bias" in weight.name:
                weight.assign(weight.numpy() + rng.normal(0.0, 0.1, weight.shape).astype(np.float32))
    return model, [Spec((1, 49, 10))]


def _conv1d_audio() -> Made:
    x = keras.Input((1600, 1), batch_size=1, name="waveform")
    y = x
    for i, (filters, kernel, stride) in enumerate(((8, 40, 4), (16, 9, 1), (16, 9, 1))):
        y = L.Conv1D(filters, kernel, strides=stride, padding="same" if i else "valid", name=f"conv{i}")(y)
        y = L.BatchNormalization(name=f"bn{i}")(y)
        y = L.ReLU(name=f"relu{i}")(y)
        y = L.MaxPooling1D(4, name=f"pool{i}")(y)
    y = L.GlobalAveragePooling1D(name="gap")(y)
    out = L.Softmax(name="probs")(L.Dense(6, name="logits")(y))
    return keras.Model(x, out, name="conv1d_audio"), [Spec((1, 1600, 1))]


def _atrous(x: keras.KerasTensor, filters: int, rate: int, name: str) -> keras.KerasTensor:
    """An atrous 3x3 convolution spelled out as DeepLab's TF1 code did: SPACE_TO_BATCH_ND, a
    valid convolution, batch norm + ReLU, BATCH_TO_SPACE_ND (the activation between keeps the
    converter from folding the three into one dilated CONV_2D)."""
    pad = [[rate, rate], [rate, rate]]
    y = L.Lambda(lambda v: tf.space_to_batch_nd(v, [rate, rate], pad), name=f"{name}_s2b")(x)
    y = L.Conv2D(filters, 3, use_bias=False, name=f"{name}_conv")(y)
    y = L.BatchNormalization(name=f"{name}_bn")(y)
    y = L.ReLU(name=f"{name}_relu")(y)
    return L.Lambda(lambda v: tf.batch_to_space(v, [rate, rate], [[0, 0], [0, 0]]), name=f"{name}_b2s")(y)


def _deeplab() -> Made:
    size, classes = 64, 5
    x = keras.Input((size, size, 3), batch_size=1, name="image")
    y = _conv_bn(x, 16, 3, "stem", strides=2)
    y = _separable(y, 24, "enc0", strides=2)
    y = _separable(y, 32, "enc1", strides=2)                 # 8x8, output stride 8
    y = _separable(y, 32, "enc2", dilation=2)                 # dilated depthwise
    branches = [_conv_bn(y, 32, 1, "aspp0"), _atrous(y, 32, 2, "aspp1"), _atrous(y, 32, 4, "aspp2")]
    pooled = L.GlobalAveragePooling2D(keepdims=True, name="aspp_pool")(y)
    pooled = _conv_bn(pooled, 32, 1, "aspp_pool_proj")
    branches.append(L.UpSampling2D(8, interpolation="bilinear", name="aspp_pool_up")(pooled))
    y = _conv_bn(L.Concatenate(name="aspp_cat")(branches), 32, 1, "aspp_proj")
    logits = L.Conv2D(classes, 1, name="logits")(y)
    logits = L.Resizing(size, size, interpolation="bilinear", name="upsample")(logits)
    labels = L.Lambda(lambda v: tf.argmax(v, axis=-1, output_type=tf.int32), name="labels")(logits)
    return keras.Model(x, [logits, labels], name="deeplab"), [Spec((1, size, size, 3), low=0.0)]


def _squeeze_excite(x: keras.KerasTensor, name: str) -> keras.KerasTensor:
    channels = int(x.shape[-1])
    s = L.GlobalAveragePooling2D(keepdims=True, name=f"{name}_pool")(x)
    s = L.Conv2D(max(channels // 4, 8), 1, activation="relu", name=f"{name}_reduce")(s)
    s = L.Conv2D(channels, 1, activation="hard_sigmoid", name=f"{name}_expand")(s)
    return L.Multiply(name=f"{name}_scale")([x, s])


def _selfie() -> Made:
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    y = _conv_bn(x, 16, 3, "stem", strides=2, activation="hard_swish")
    skips = []
    for i, filters in enumerate((16, 24, 32)):
        skips.append(y)
        y = _separable(y, filters, f"enc{i}", strides=2, activation="hard_swish")
        y = _squeeze_excite(y, f"se{i}")
    for i, filters in zip((2, 1, 0), (24, 16, 16)):
        y = L.Conv2DTranspose(filters, 2, strides=2, name=f"up{i}")(y)
        y = L.Add(name=f"skip{i}")([y, _conv_bn(skips[i], filters, 1, f"lat{i}", activation=None)])
        y = L.Activation("hard_swish", name=f"dec{i}_act")(y)
    y = L.Conv2DTranspose(1, 2, strides=2, name="head")(y)
    return keras.Model(x, L.Activation("sigmoid", name="mask")(y), name="selfie"), [Spec((1, 64, 64, 3), low=0.0)]


def _pose() -> Made:
    keypoints = 17
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    y = _conv_bn(x, 16, 3, "stem", strides=2)
    feats = []
    for i, filters in enumerate((24, 32, 48)):
        y = _separable(y, filters, f"enc{i}", strides=2)
        feats.append(y)                                        # 16x16, 8x8, 4x4
    top = _conv_bn(feats[2], 32, 1, "lat2")
    for i in (1, 0):
        size = int(feats[i].shape[1])
        up = L.Resizing(size, size, interpolation="nearest", name=f"up{i}")(top)
        top = L.Add(name=f"fpn{i}")([up, _conv_bn(feats[i], 32, 1, f"lat{i}")])
    heatmap = L.Conv2D(keypoints, 3, padding="same", activation="sigmoid", name="heatmap")(top)
    r = _separable(feats[2], 64, "reg", strides=2)
    r = L.Flatten(name="reg_flat")(r)
    coords = L.Reshape((keypoints, 4), name="coords")(L.Dense(keypoints * 4, name="reg_fc")(r))
    presence = L.Dense(1, activation="sigmoid", name="presence")(L.GlobalAveragePooling2D(name="gap")(feats[2]))
    return keras.Model(x, [heatmap, coords, presence], name="pose"), [Spec((1, 64, 64, 3), low=0.0)]


def _hand() -> Made:
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    y = _conv_bn(x, 16, 3, "stem", strides=2, activation="relu6")
    for i, filters in enumerate((24, 32, 48, 64)):
        shortcut = y
        y = _separable(y, filters, f"b{i}", strides=2, activation="relu6")
        shortcut = L.MaxPooling2D(2, name=f"b{i}_pool")(shortcut)
        shortcut = L.Conv2D(filters, 1, name=f"b{i}_proj")(shortcut)
        y = L.Add(name=f"b{i}_add")([y, shortcut])
    flat = L.Flatten(name="flat")(y)
    landmarks = L.Dense(21 * 3, name="landmarks")(flat)
    handedness = L.Dense(1, activation="sigmoid", name="handedness")(flat)
    presence = L.Dense(1, activation="sigmoid", name="presence")(flat)
    return keras.Model(x, [landmarks, handedness, presence], name="hand"), [Spec((1, 64, 64, 3), low=0.0)]


class _ClassToken(L.Layer):
    """Prepends a learned class token and adds a learned position embedding."""

    def build(self, shape: tuple[int, ...]) -> None:
        self.token = self.add_weight(shape=(1, 1, shape[-1]), initializer="random_normal")
        self.position = self.add_weight(shape=(1, shape[1] + 1, shape[-1]), initializer="random_normal")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        token = tf.broadcast_to(self.token, (tf.shape(x)[0], 1, x.shape[-1]))
        return tf.concat([token, x], axis=1) + self.position


def _vit() -> Made:
    width, heads = 32, 4
    x = keras.Input((32, 32, 3), batch_size=1, name="image")
    y = L.Conv2D(width, 8, strides=8, name="patches")(x)          # 4x4 patches
    y = L.Reshape((16, width), name="tokens")(y)
    y = _ClassToken(name="class_token")(y)
    for b in range(2):
        h = L.LayerNormalization(epsilon=1e-6, name=f"ln{b}a")(y)
        y = L.Add(name=f"res{b}a")([y, L.MultiHeadAttention(heads, width // heads, name=f"attn{b}")(h, h)])
        h = L.LayerNormalization(epsilon=1e-6, name=f"ln{b}b")(y)
        h = L.Dense(2 * width, activation="gelu", name=f"mlp{b}a")(h)
        y = L.Add(name=f"res{b}b")([y, L.Dense(width, name=f"mlp{b}b")(h)])
    cls = L.Lambda(lambda v: v[:, 0], name="cls")(L.LayerNormalization(epsilon=1e-6, name="ln_out")(y))
    return keras.Model(x, L.Dense(10, name="head")(cls), name="vit"), [Spec((1, 32, 32, 3))]


def _autoencoder() -> Made:
    x = keras.Input((28, 28, 1), batch_size=1, name="image")
    y = L.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="enc0")(x)      # 14x14
    y = L.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="enc1")(y)     # 7x7
    code = L.Dense(16, activation="tanh", name="code")(L.Flatten(name="flat")(y))
    y = L.Reshape((7, 7, 16), name="unflat")(L.Dense(7 * 7 * 16, activation="relu", name="dec_fc")(code))
    y = L.Conv2DTranspose(8, 3, strides=2, activation="relu", name="dec0")(y)                # 15x15
    y = L.Cropping2D(((0, 1), (0, 1)), name="crop")(y)
    y = L.Conv2DTranspose(1, 3, strides=2, padding="same", activation="sigmoid", name="dec1")(y)
    return keras.Model(x, [y, code], name="autoencoder"), [Spec((1, 28, 28, 1), low=0.0)]


def _batch4() -> Made:
    x = keras.Input((24, 24, 3), batch_size=4, name="images")
    y = _conv_bn(x, 16, 3, "c0", strides=2)
    y = _separable(y, 24, "c1", strides=2)
    y = L.MaxPooling2D(2, name="pool")(y)
    y = L.GlobalAveragePooling2D(name="gap")(y)
    out = L.Softmax(name="probs")(L.Dense(7, name="logits")(y))
    return keras.Model(x, out, name="batch4"), [Spec((4, 24, 24, 3))]


def _two_inputs() -> Made:
    image = keras.Input((32, 32, 3), batch_size=1, name="image")
    category = keras.Input((1,), batch_size=1, dtype="int32", name="category")
    y = _conv_bn(image, 16, 3, "c0", strides=2)
    y = _separable(y, 32, "c1", strides=2)
    y = L.GlobalAveragePooling2D(name="gap")(y)
    e = L.Flatten(name="embed_flat")(L.Embedding(20, 8, name="embed")(category))
    y = L.Concatenate(name="join")([y, e])
    out = L.Dense(4, name="logits")(L.Dense(16, activation="relu", name="fc")(y))
    return keras.Model([image, category], out, name="two_inputs"), [Spec((1, 32, 32, 3), low=0.0),
                                                                    Spec((1, 1), "int32", 0, 20)]


def _image_ops() -> Made:
    def preprocess(x: tf.Tensor) -> tuple[tf.Tensor, ...]:
        big = tf.compat.v1.image.resize_bilinear(x, (61, 61), align_corners=True)
        near = tf.compat.v1.image.resize_nearest_neighbor(x, (20, 20), half_pixel_centers=True)
        crop = tf.image.crop_to_bounding_box(big, 5, 7, 48, 40)
        flipped = tf.image.flip_left_right(crop)
        gray = tf.image.rgb_to_grayscale(flipped)
        standard = tf.image.per_image_standardization(near)
        small = tf.compat.v1.image.resize_bilinear(gray, (24, 20), align_corners=False, half_pixel_centers=True)
        return small, standard, tf.image.flip_up_down(near)

    return preprocess, [Spec((1, 40, 40, 3), low=0.0)]


def _stft() -> Made:
    mel = np.random.default_rng(SEED).uniform(0.0, 1.0, (33, 10)).astype(np.float32)

    def spectrogram(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        magnitude = tf.abs(tf.signal.stft(x, frame_length=64, frame_step=32, fft_length=64))
        return magnitude, tf.math.log(tf.matmul(magnitude, mel) + 1e-6)

    return spectrogram, [Spec((1, 512))]


def _yolo() -> Made:
    """A tiny YOLO-style detector: a SPACE_TO_DEPTH ("focus") stem, LeakyReLU and SiLU
    activations, a stride-1 max pool, nearest resizing up, concatenated scales, sigmoid boxes."""
    anchors, classes = 3, 4
    x = keras.Input((64, 64, 3), batch_size=1, name="image")
    y = L.Lambda(lambda v: tf.nn.space_to_depth(v, 2), name="focus")(x)
    y = L.LeakyReLU(0.1, name="stem_leaky")(_conv_bn(y, 16, 3, "stem", activation=None))
    y = _conv_bn(y, 32, 3, "c1", strides=2, activation="silu")                 # 16x16
    mid = _conv_bn(y, 32, 3, "c2", activation="silu")
    y = L.MaxPooling2D(2, name="down")(mid)                                     # 8x8
    y = L.MaxPooling2D(5, strides=1, padding="same", name="spp")(_conv_bn(y, 48, 3, "c3", activation="silu"))
    low = L.LeakyReLU(0.1, name="low_leaky")(_conv_bn(y, 48, 1, "c4", activation=None))
    up = L.Resizing(16, 16, interpolation="nearest", name="up")(_conv_bn(low, 16, 1, "lat", activation="silu"))
    high = _conv_bn(L.Concatenate(name="join")([up, mid]), 32, 3, "c5", activation="silu")
    outputs = []
    for feat, tag in ((low, "8"), (high, "16")):
        raw = L.Conv2D(anchors * (5 + classes), 1, name=f"det{tag}")(feat)
        raw = L.Reshape((-1, 5 + classes), name=f"det{tag}_flat")(raw)
        outputs.append(L.Activation("sigmoid", name=f"det{tag}_sigmoid")(raw))
    return keras.Model(x, L.Concatenate(axis=1, name="detections")(outputs), name="yolo"), [
        Spec((1, 64, 64, 3), low=0.0)]


class _InstanceNorm(L.Layer):
    """Instance normalization as style-transfer models write it (per-image, per-channel moments)."""

    def build(self, shape: tuple[int, ...]) -> None:
        self.gamma = self.add_weight(shape=(shape[-1],), initializer="ones")
        self.beta = self.add_weight(shape=(shape[-1],), initializer="zeros")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[1, 2], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-3) * self.gamma + self.beta


def _super_res() -> Made:
    """An ESPCN-style x2 super-resolution / style-transfer hybrid: reflect padding (MIRROR_PAD),
    instance normalization, a pixel shuffle (DEPTH_TO_SPACE), clipped output."""
    x = keras.Input((24, 24, 3), batch_size=1, name="image")
    # a constant coordinate channel (CoordConv): a constant image must not leave the instance
    # norm only rounding noise to amplify
    grid = np.linspace(-1.0, 1.0, 24 * 24, dtype=np.float32).reshape(1, 24, 24, 1)
    y = L.Lambda(lambda v: tf.concat([v, grid], axis=-1), name="coords")(x)
    y = L.Lambda(lambda v: tf.pad(v, [[0, 0], [2, 2], [2, 2], [0, 0]], mode="REFLECT"), name="reflect")(y)
    y = L.Conv2D(16, 5, activation="tanh", name="feat")(y)
    y = L.ReLU(name="norm_relu")(_InstanceNorm(name="norm")(y))
    y = L.Lambda(lambda v: tf.pad(v, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC"), name="symmetric")(y)
    y = L.Conv2D(3 * 4, 3, name="subpixel")(y)
    y = L.Lambda(lambda v: tf.nn.depth_to_space(v, 2), name="shuffle")(y)
    return keras.Model(x, L.ReLU(1.0, name="clip")(y), name="super_res"), [Spec((1, 24, 24, 3), low=0.0)]


def _face_embed() -> Made:
    """A MobileFaceNet-style face embedder: PReLU, inverted residuals, a global depthwise
    convolution (the whole 4x4 map, valid), a linear 1x1 bottleneck, L2-normalized embedding."""
    x = keras.Input((64, 64, 3), batch_size=1, name="face")
    y = L.PReLU(shared_axes=[1, 2], name="stem_prelu")(_conv_bn(x, 16, 3, "stem", strides=2, activation=None))
    for i, (filters, stride) in enumerate(((16, 1), (24, 2), (32, 2), (32, 1), (48, 2))):
        shortcut = y
        h = L.PReLU(shared_axes=[1, 2], name=f"b{i}_prelu")(_conv_bn(y, 2 * filters, 1, f"b{i}_exp", activation=None))
        h = L.DepthwiseConv2D(3, strides=stride, padding="same", name=f"b{i}_dw")(h)
        h = _conv_bn(h, filters, 1, f"b{i}_proj", activation=None)
        y = L.Add(name=f"b{i}_add")([h, shortcut]) if stride == 1 and int(shortcut.shape[-1]) == filters else h
    y = L.DepthwiseConv2D(int(y.shape[1]), name="gdc")(y)                       # global depthwise
    y = L.Flatten(name="flat")(_conv_bn(y, 32, 1, "linear", activation=None))
    embedding = L.Lambda(lambda v: tf.math.l2_normalize(v, axis=-1), name="l2norm")(y)
    return keras.Model(x, embedding, name="face_embed"), [Spec((1, 64, 64, 3))]


def _bert_tiny() -> Made:
    """A BERT-style text classifier: token ids and an attention mask (int32 inputs), token +
    position embeddings, masked self-attention, a tanh pooler on the first token."""
    length, width, heads = 16, 32, 2
    ids = keras.Input((length,), batch_size=1, dtype="int32", name="input_ids")
    mask = keras.Input((length,), batch_size=1, dtype="int32", name="attention_mask")
    position = np.random.default_rng(SEED).normal(0.0, 0.1, (1, length, width)).astype(np.float32)
    y = L.Lambda(lambda v: v + position, name="position")(L.Embedding(100, width, name="embed")(ids))
    y = L.LayerNormalization(epsilon=1e-12, name="embed_ln")(y)
    pairs = L.Lambda(lambda v: tf.tile(tf.cast(v, tf.bool)[:, None, :], [1, length, 1]), name="mask_pairs")(mask)
    for b in range(2):
        a = L.MultiHeadAttention(heads, width // heads, name=f"attn{b}")(y, y, attention_mask=pairs)
        y = L.LayerNormalization(epsilon=1e-12, name=f"ln{b}a")(L.Add(name=f"res{b}a")([y, a]))
        h = L.Dense(2 * width, activation="gelu", name=f"ff{b}a")(y)
        y = L.LayerNormalization(epsilon=1e-12, name=f"ln{b}b")(L.Add(name=f"res{b}b")([y, L.Dense(width, name=f"ff{b}b")(h)]))
    pooled = L.Dense(width, activation="tanh", name="pooler")(L.Lambda(lambda v: v[:, 0], name="first")(y))
    return keras.Model([ids, mask], L.Dense(3, name="logits")(pooled), name="bert_tiny"), [
        Spec((1, length), "int32", 0, 100), Spec((1, length), "int32", 0, 2)]


def _postprocess() -> Made:
    """What detectors and pose models run in the graph after the network: keypoints decoded
    from heatmaps (ARG_MAX, FLOOR_DIV, FLOOR_MOD, CAST), the best boxes by TOPK_V2 and GATHER,
    non-maximum suppression (NON_MAX_SUPPRESSION_V4 and _V5)."""
    def decode(heatmap: tf.Tensor, boxes: tf.Tensor, scores: tf.Tensor) -> tuple[tf.Tensor, ...]:
        flat = tf.reshape(heatmap, (1, 16 * 16, 17))
        peak = tf.argmax(flat, axis=1, output_type=tf.int32)
        keypoints = tf.cast(tf.stack([peak // 16, peak % 16], axis=-1), tf.float32) * 4.0 + 2.0
        confidence = tf.reduce_max(flat, axis=1)
        top_scores, top = tf.math.top_k(scores[0], k=20)
        top_boxes = tf.gather(boxes[0], top)
        kept, kept_scores = tf.image.non_max_suppression_with_scores(
            top_boxes, top_scores, max_output_size=8, iou_threshold=0.5, score_threshold=-0.5, soft_nms_sigma=0.25)
        padded, valid = tf.image.non_max_suppression_padded(
            top_boxes, top_scores, max_output_size=6, iou_threshold=0.4, pad_to_max_output_size=True)
        return keypoints, confidence, tf.gather(top_boxes, kept), kept_scores, padded, valid

    return decode, [Spec((1, 16, 16, 17)), Spec((1, 100, 4)), Spec((1, 100))]


def _ocr() -> Made:
    """A CRNN text recognizer: convolutions over a 32x96 text line, columns as a sequence
    (TRANSPOSE, RESHAPE), a Keras-3 bidirectional GRU (two WHILE loops, REVERSE_V2), per-step
    softmax and greedy CTC decoding in the graph (ARG_MAX, NOT_EQUAL against the previous step)."""
    x = keras.Input((32, 96, 1), batch_size=1, name="line")
    y = _conv_bn(x, 16, 3, "c0")
    y = L.MaxPooling2D(2, name="p0")(y)                                          # 16x48
    y = _conv_bn(y, 32, 3, "c1")
    y = L.MaxPooling2D((4, 2), name="p1")(y)                                     # 4x24
    y = L.Permute((2, 1, 3), name="columns")(y)
    y = L.Reshape((24, 4 * 32), name="sequence")(y)
    y = L.Bidirectional(L.GRU(24, return_sequences=True, name="gru"), name="bigru")(y)
    probs = L.Softmax(name="probs")(L.Dense(11, name="logits")(y))

    def greedy(p: tf.Tensor) -> tf.Tensor:
        best = tf.argmax(p, axis=-1, output_type=tf.int32)
        previous = tf.pad(best[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
        return tf.where(tf.logical_and(best != previous, best != 0), best, -1)

    return keras.Model(x, [probs, L.Lambda(greedy, name="ctc_greedy")(probs)], name="ocr"), [
        Spec((1, 32, 96, 1), low=0.0)]


def _video() -> Made:
    """A tiny video classifier on 8 frames: CONV_3D (strided, same and valid), a 3-D transposed
    convolution back up, global average pooling over time and space."""
    x = keras.Input((8, 24, 24, 3), batch_size=1, name="clip")
    y = L.Conv3D(8, 3, strides=(1, 2, 2), padding="same", activation="relu", name="c0")(x)
    y = L.Conv3D(16, (3, 3, 3), strides=2, activation="relu", name="c1")(y)
    up = L.Conv3DTranspose(4, 2, strides=2, name="up")(y)
    pooled = L.GlobalAveragePooling3D(name="gap")(y)
    return keras.Model(x, [L.Dense(5, name="logits")(pooled), up], name="video"), [Spec((1, 8, 24, 24, 3))]


def _wavenet() -> Made:
    """A WaveNet-style audio model: causal dilated Conv1D (PAD + dilated CONV_2D), gated
    activations (tanh x sigmoid), residual and skip sums."""
    x = keras.Input((256, 1), batch_size=1, name="waveform")
    y = L.Conv1D(16, 2, padding="causal", name="input_conv")(x)
    skips = []
    for i, rate in enumerate((1, 2, 4, 8)):
        f = L.Conv1D(16, 2, padding="causal", dilation_rate=rate, activation="tanh", name=f"filter{i}")(y)
        g = L.Conv1D(16, 2, padding="causal", dilation_rate=rate, activation="sigmoid", name=f"gate{i}")(y)
        z = L.Multiply(name=f"gated{i}")([f, g])
        skips.append(L.Conv1D(16, 1, name=f"skip{i}")(z))
        y = L.Add(name=f"res{i}")([y, L.Conv1D(16, 1, name=f"res_conv{i}")(z)])
    y = L.ReLU(name="skip_relu")(L.Add(name="skips")(skips))
    return keras.Model(x, L.Conv1D(8, 1, activation="softmax", name="out")(y), name="wavenet"), [
        Spec((1, 256, 1))]


def _shuffle_unit(x: keras.KerasTensor, name: str) -> keras.KerasTensor:
    """A ShuffleNetV2 unit: channel split (SPLIT), a branch, concatenation, channel shuffle
    (RESHAPE to 5-D, TRANSPOSE, RESHAPE back)."""
    h, w, c = (int(d) for d in x.shape[1:])
    keep, branch = L.Lambda(lambda v: tf.split(v, 2, axis=-1), name=f"{name}_split")(x)
    branch = _conv_bn(branch, c // 2, 1, f"{name}_pw0")
    branch = _separable(branch, c // 2, f"{name}_dw")
    y = L.Concatenate(name=f"{name}_cat")([keep, branch])
    y = L.Reshape((h, w, 2, c // 2), name=f"{name}_groups")(y)
    y = L.Permute((1, 2, 4, 3), name=f"{name}_shuffle")(y)
    return L.Reshape((h, w, c), name=f"{name}_ungroup")(y)


def _shufflenet() -> Made:
    """ShuffleNetV2 units and a ResNeXt-style grouped convolution (CONV_2D whose filter depth
    is a quarter of the input's channels)."""
    x = keras.Input((48, 48, 3), batch_size=1, name="image")
    y = _conv_bn(x, 24, 3, "stem", strides=2)
    y = L.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(y)   # 12x12
    y = _shuffle_unit(_shuffle_unit(y, "u0"), "u1")
    y = L.Conv2D(48, 3, strides=2, padding="same", groups=4, name="grouped")(y)
    y = L.ReLU(name="grouped_relu")(L.BatchNormalization(name="grouped_bn")(y))
    y = _shuffle_unit(y, "u2")
    y = L.GlobalAveragePooling2D(name="gap")(y)
    return keras.Model(x, L.Dense(10, name="logits")(y), name="shufflenet"), [Spec((1, 48, 48, 3))]


def _ssd() -> Made:
    """An SSD-style detector head: per-scale class and box convolutions reshaped and
    concatenated, log-softmax class scores, boxes decoded against anchors in the graph
    (SPLIT_V of the encodings, EXP of the sizes), as TF Object Detection exports without the
    custom post-processing operator."""
    classes, anchors = 4, 3
    x = keras.Input((48, 48, 3), batch_size=1, name="image")
    y = _conv_bn(x, 16, 3, "stem", strides=2, activation="relu6")
    feats = []
    for i, filters in enumerate((24, 32)):
        y = _separable(y, filters, f"enc{i}", strides=2, activation="relu6")
        feats.append(y)                                                            # 12x12, 6x6
    scores, encodings = [], []
    for i, feat in enumerate(feats):
        c = L.Conv2D(anchors * classes, 3, padding="same", name=f"cls{i}")(feat)
        scores.append(L.Reshape((-1, classes), name=f"cls{i}_flat")(c))
        b = L.Conv2D(anchors * 4, 3, padding="same", name=f"box{i}")(feat)
        encodings.append(L.Reshape((-1, 4), name=f"box{i}_flat")(b))
    scores = L.Concatenate(axis=1, name="scores")(scores)
    encodings = L.Concatenate(axis=1, name="encodings")(encodings)
    count = int(encodings.shape[1])
    prior = np.random.default_rng(SEED).uniform(0.1, 0.9, (1, count, 4)).astype(np.float32)

    def decode(e: tf.Tensor) -> tf.Tensor:
        center, size = tf.split(e, [2, 2], axis=-1)
        center = center * 0.1 * prior[..., 2:] + prior[..., :2]
        half = 0.5 * tf.exp(size * 0.2) * prior[..., 2:]
        return tf.concat([center - half, center + half], axis=-1)

    boxes = L.Lambda(decode, name="decode")(encodings)
    log_probs = L.Lambda(lambda v: tf.nn.log_softmax(v, axis=-1), name="log_probs")(scores)
    return keras.Model(x, [boxes, log_probs], name="ssd"), [Spec((1, 48, 48, 3), low=0.0)]


def _uint8_classifier() -> Made:
    """A classifier as TF Hub and MediaPipe ship them: a raw uint8 image in (CAST, scaling in
    the graph), top-3 classes (TOPK_V2) and the best class as int64 (ARG_MAX) out."""
    x = keras.Input((32, 32, 3), batch_size=1, dtype="uint8", name="pixels")
    y = L.Lambda(lambda v: tf.cast(v, tf.float32) / 127.5 - 1.0, name="scale")(x)
    y = _conv_bn(y, 16, 3, "c0", strides=2, activation="relu6")
    y = _separable(y, 32, "c1", strides=2, activation="relu6")
    y = L.GlobalAveragePooling2D(name="gap")(y)
    probs = L.Softmax(name="probs")(L.Dense(10, name="logits")(y))
    top = L.Lambda(lambda v: tf.math.top_k(v, k=3), name="top3")(probs)
    best = L.Lambda(lambda v: tf.argmax(v, axis=-1), name="best")(probs)
    return keras.Model(x, [probs, top[0], top[1], best], name="uint8_classifier"), [
        Spec((1, 32, 32, 3), "uint8", 0, 256)]


def _legacy(elu: bool = False) -> Made:
    """Operators of older CNNs still deployed (GoogLeNet v1, AlexNet-era): local response
    normalization, ReLU clipped to [-1, 1] and [0, 1], L2 pooling (sqrt of a pooled square).
    ``elu``: ELU in place of the normalization (LiteRT's BUILTIN_REF has no ELU; and its
    reference LRN is not its optimized one, so the two stay in separate models)."""
    x = keras.Input((32, 32, 3), batch_size=1, name="image")
    y = L.ReLU(name="c0_relu")(L.Conv2D(16, 5, strides=2, padding="same", name="c0")(x))
    if elu:
        y = L.Activation("elu", name="elu")(y)
    else:
        y = L.Lambda(lambda v: tf.nn.local_response_normalization(v, depth_radius=2, bias=1.0, alpha=1e-2,
                                                                  beta=0.75), name="lrn")(y)
    y = L.Conv2D(24, 3, padding="same", name="c1")(y)
    a = L.Lambda(lambda v: tf.clip_by_value(v, -1.0, 1.0), name="relu_n1_to_1")(y)
    b = L.Lambda(lambda v: tf.clip_by_value(v, 0.0, 1.0), name="relu_0_to_1")(y)
    l2 = L.Lambda(lambda v: tf.sqrt(tf.nn.avg_pool2d(tf.square(v), 2, 2, "VALID") + 1e-6), name="l2_pool")(a)
    y = L.Concatenate(name="join")([L.MaxPooling2D(2, name="pool")(b), l2])
    return keras.Model(x, L.Dense(6, name="logits")(L.GlobalAveragePooling2D(name="gap")(y)), name="legacy"), [
        Spec((1, 32, 32, 3))]

def _multiplier() -> Made:
    """Depthwise convolutions with a channel multiplier (MobileNet's ``depth_multiplier``,
    Keras' SeparableConv2D with ``depth_multiplier=2``), strided and dilated, 3- and 1-channel inputs."""
    x = keras.Input((40, 40, 3), batch_size=1, name="image")
    y = L.DepthwiseConv2D(3, strides=2, depth_multiplier=4, padding="same", name="dw_x4")(x)   # 12 channels
    y = L.SeparableConv2D(16, 3, depth_multiplier=2, padding="same", activation="relu", name="sep_x2")(y)
    y = L.DepthwiseConv2D(3, dilation_rate=2, depth_multiplier=2, padding="same", name="dw_dilated_x2")(y)
    gray = L.Lambda(lambda v: tf.reduce_mean(v, axis=-1, keepdims=True), name="gray")(x)
    edges = L.DepthwiseConv2D(5, strides=2, depth_multiplier=8, padding="same", name="dw_1ch_x8")(gray)
    y = L.Concatenate(name="join")([L.ReLU(6.0, name="relu6")(y), edges])
    return keras.Model(x, L.Dense(5, name="logits")(L.GlobalAveragePooling2D(name="gap")(y)), name="multiplier"), [
        Spec((1, 40, 40, 3))]


_APPLICATIONS = {
    "xception": (keras.applications.Xception, (71, 71, 3)),
    "inception_v3": (keras.applications.InceptionV3, (75, 75, 3)),
    "convnext_tiny": (keras.applications.ConvNeXtTiny, (32, 32, 3)),
    "efficientnet_v2_b0": (keras.applications.EfficientNetV2B0, (32, 32, 3)),
}

_MAKERS: dict[str, Callable[[], Made]] = {
    "mobilenet_v1": _mobilenet_v1, "ds_cnn": _ds_cnn, "gru_kws": _gru_kws, "lstm_kws": _lstm_kws,
    "conv1d_audio": _conv1d_audio, "deeplab": _deeplab, "selfie": _selfie, "pose": _pose, "hand": _hand,
    "vit": _vit, "autoencoder": _autoencoder, "batch4": _batch4, "two_inputs": _two_inputs,
    "image_ops": _image_ops, "stft": _stft, "yolo": _yolo, "super_res": _super_res, "face_embed": _face_embed,
    "bert_tiny": _bert_tiny, "postprocess": _postprocess, "ocr": _ocr, "video": _video,
    "wavenet": _wavenet, "shufflenet": _shufflenet, "ssd": _ssd, "uint8_classifier": _uint8_classifier, "legacy": _legacy, "legacy_elu": lambda: _legacy(elu=True), "multiplier": _multiplier, "bilstm_kws": lambda: _lstm_kws(True),
}


def _application(kind: str) -> Made:
    make, shape = _APPLICATIONS[kind]
    return make(weights=None, input_shape=shape, classes=10), [Spec((1, *shape), low=0.0)]


def _uint8_io(converter: tf.lite.TFLiteConverter) -> None:
    converter.inference_input_type = converter.inference_output_type = tf.uint8


def _setting(attribute: str, value: Any) -> Callable[[tf.lite.TFLiteConverter], None]:
    return lambda converter: setattr(converter, attribute, value)


#: ``<model>_<variant>_<mode>``: the model converted with a converter setting people use
_VARIANTS: dict[str, Callable[[tf.lite.TFLiteConverter], None] | None] = {
    "uint8io": _uint8_io,
    "floatio": None,  # float input and output: ``convert(float_io=True)``
    "bias32": _setting("_experimental_full_integer_quantization_bias_type", tf.int32),
    "pertensor": _setting("_experimental_disable_per_channel", True),
    "oldquantizer": _setting("experimental_new_quantizer", False),
    "olddynamic": _setting("experimental_new_dynamic_range_quantizer", False),
}


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    keras.utils.set_random_seed(SEED)
    kind, mode = name[: -len(mode_of(name)) - 1], mode_of(name)
    base, _, variant = kind.rpartition("_")
    if variant in _VARIANTS:
        kind = base
    else:
        variant = ""
    model, specs = _MAKERS[kind]() if kind in _MAKERS else _application(kind)
    randomized = randomize_keras_model(model, SEED) if isinstance(model, keras.Model) else {}
    # 16x8 as people convert it: what the converter cannot make 16x8 stays float between
    # DEQUANTIZE and QUANTIZE
    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
           tf.lite.OpsSet.TFLITE_BUILTINS] if mode == "int16x8" else None
    model_path.write_bytes(convert(model, mode, specs, ops=ops, configure=_VARIANTS.get(variant),
                                   float_io=variant == "floatio"))
    return info_of("tflite_zoo", name, model_path, reference_path, specs, randomized=randomized)
