"""Frozen GraphDefs of Keras composite layers (issue 13 items 8 and 9), random weights.

* ``lstm``: tf-keras ``LSTM(8, return_sequences=True)`` then ``LSTM(6, go_backwards=True)`` then
  ``Dense(3)``, batch 2, 7 time steps, 5 features.  Frozen *keeping the function library*:
  each LSTM stays a ``PartitionedCall`` of tf-keras' ``standard_lstm`` function, which declares
  ``api_implements="lstm_<uuid>"`` (``convert_variables_to_constants_v2`` would inline it and
  lose the interface), the variables read by the calls replaced by constants.
* ``gru``: the same with tf-keras ``GRU(8)`` (``reset_after=True``, the only GRU that gets a
  ``gru_<uuid>`` function), frozen the same way.
* ``lstm_loop_keras3`` / ``lstm_loop_tf_keras``: the ``lstm`` model built with Keras 3 / tf-keras,
  its second layer returning its sequence and states (all concatenated into the head), and frozen by ``convert_variables_to_constants_v2(..., lower_control_flow=False)``: each LSTM
  inlined into a functional ``While`` / ``StatelessWhile`` loop (no interface left).
* ``lstm_time_major``: one tf-keras ``LSTM(4, time_major=True)`` returning its sequence and states,
  input ``[7 steps, 2, 5]``, frozen keeping its function library like ``lstm``.
* ``layer_norm_tf_keras``: tf-keras ``LayerNormalization`` twice, with its default epsilon 1e-3
  (frozen as the fused-batch-norm trick: Reshape, ``FusedBatchNormV3``, Reshape, Mul, Add) and
  with 1e-5 (below cuDNN's minimum, so frozen as Mean/SquaredDifference/Rsqrt/Mul/Sub), a
  ``Dense`` between them; batch 2, 6 tokens, width 16.
* ``encoder``: a hand-built Keras 3 transformer encoder block (multi-head self-attention,
  residual + ``LayerNormalization``, feed-forward ``Dense(gelu exact)`` and
  ``Dense(gelu tanh)``, residual + ``LayerNormalization``), batch 2, 6 tokens, width 16,
  frozen by ``convert_variables_to_constants_v2`` (everything inlined).

Each build checks the frozen graph, run in a v1 Session, against the Keras model.
Runs inside a build subprocess (see ``_cache.py``); imports TensorFlow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from ._info import ModelInfo, save_reference
from ._keras_common import freeze_keras_model, graphdef_facts, run_frozen_graph, write_graphdef

BUILDER_VERSION = 2  # bump to rebuild cached models made by this module

NAMES = ("lstm", "gru", "encoder", "lstm_loop_keras3", "lstm_loop_tf_keras", "layer_norm_tf_keras", "lstm_time_major")
SEED = 0
BATCH, STEPS, FEATURES = 2, 7, 5
TOKENS, WIDTH, HEADS = 6, 16, 2
MAX_ABS_DIFF = 1e-5


def freeze_keeping_functions(concrete: Any) -> tf.compat.v1.GraphDef:
    """The concrete function's graph with every variable read replaced by a constant of the
    variable's value; the function library (and the calls into it) kept as they are."""
    graph_def = concrete.graph.as_graph_def()
    values = {}
    for handle, placeholder in zip(concrete.captured_inputs, concrete.graph.internal_captures):
        if handle.dtype == tf.resource:
            values[placeholder.op.name] = handle
    readers = {}
    for node in graph_def.node:
        if node.op == "ReadVariableOp" and node.input[0] in values:
            readers[node.name] = values[node.input[0]]
    frozen = tf.compat.v1.GraphDef()
    frozen.versions.CopyFrom(graph_def.versions)
    frozen.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in values:
            continue  # the resource placeholder: nothing reads it any more
        if node.name in readers:
            array = tf.raw_ops.ReadVariableOp(resource=readers[node.name], dtype=node.attr["dtype"].type).numpy()
            const = frozen.node.add()
            const.name, const.op = node.name, "Const"
            const.attr["dtype"].type = node.attr["dtype"].type
            const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array))
            continue
        frozen.node.add().CopyFrom(node)
    return frozen


def _recurrent(kind: str) -> tuple[Any, tf.compat.v1.GraphDef, list[str], list[str]]:
    lib: Any = keras if kind == "lstm_loop_keras3" else tf_keras
    lib.utils.set_random_seed(SEED)
    if kind == "lstm_time_major":  # Keras' batch axis is the time axis here
        inp = lib.Input((BATCH, FEATURES), batch_size=STEPS, name="x")
        seq, h, c = lib.layers.LSTM(4, time_major=True, return_sequences=True, return_state=True, name=kind)(inp)
        model = lib.Model(inp, lib.layers.Concatenate(name="states")([h, c, seq[3]]))
        return _freeze_recurrent(kind, model, (STEPS, BATCH, FEATURES))
    inp = lib.Input((STEPS, FEATURES), batch_size=BATCH, name="x")
    cell = lib.layers.GRU if kind == "gru" else lib.layers.LSTM
    x = cell(8, return_sequences=True, name=f"{kind}_seq")(inp)
    if kind.startswith("lstm_loop"):  # every loop output read: the sequence, the last h and c
        seq, h, c = cell(6, go_backwards=True, return_sequences=True, return_state=True, name=f"{kind}_back")(x)
        x = lib.layers.Concatenate(name="states")([h, c, seq[:, 2]])
    else:
        x = cell(6, go_backwards=True, name=f"{kind}_back")(x)
    out = lib.layers.Dense(3, name="head")(x)
    model = lib.Model(inp, out)
    return _freeze_recurrent(kind, model, (BATCH, STEPS, FEATURES))


def _freeze_recurrent(kind: str, model: Any, shape: tuple[int, ...]) -> tuple[Any, tf.compat.v1.GraphDef, list[str],
                                                                                list[str]]:
    rng = np.random.default_rng(SEED)
    for var in model.weights:  # biases away from zero, weights large enough to saturate some gates
        var.assign(rng.normal(0.0, 0.6, tuple(var.shape)).astype(np.float32))
    fn = tf.function(lambda x: model(x, training=False))
    concrete = fn.get_concrete_function(tf.TensorSpec(shape, tf.float32, name="x"))
    if kind.startswith("lstm_loop"):
        graph_def = convert_variables_to_constants_v2(concrete, lower_control_flow=False).graph.as_graph_def()
    else:
        graph_def = freeze_keeping_functions(concrete)
    inputs = [t.op.name for t in concrete.inputs if t.dtype != tf.resource]
    outputs = [t.op.name for t in concrete.outputs]
    return model, graph_def, inputs, outputs


def _encoder() -> tuple[keras.Model, tf.compat.v1.GraphDef, list[str], list[str]]:
    keras.utils.set_random_seed(SEED)
    layers = keras.layers
    inp = keras.Input((TOKENS, WIDTH), batch_size=BATCH, name="tokens")
    att = layers.MultiHeadAttention(HEADS, WIDTH // HEADS, name="attention")(inp, inp)
    x = layers.LayerNormalization(epsilon=1e-6, name="norm_1")(inp + att)
    hidden = layers.Dense(32, activation=keras.activations.gelu, name="ffn_exact")(x)  # approximate=False
    hidden = layers.Dense(32, activation=lambda t: keras.activations.gelu(t, approximate=True), name="ffn_tanh")(hidden)
    ffn = layers.Dense(WIDTH, name="ffn_out")(hidden)
    out = layers.LayerNormalization(epsilon=1e-5, name="norm_2")(x + ffn)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(SEED)
    for var in model.weights:  # non-trivial γ, β and biases
        if "gamma" in var.path or "beta" in var.path or "bias" in var.path:
            var.assign(rng.normal(0.5 if "gamma" in var.path else 0.0, 0.3, tuple(var.shape)).astype(np.float32))
    graph_def, inputs, outputs = freeze_keras_model(model, (BATCH, TOKENS, WIDTH), input_name="tokens")
    return model, graph_def, inputs, outputs


def _layer_norms() -> tuple[tf_keras.Model, tf.compat.v1.GraphDef, list[str], list[str]]:
    tf_keras.utils.set_random_seed(SEED)
    layers = tf_keras.layers
    inp = tf_keras.Input((TOKENS, WIDTH), batch_size=BATCH, name="tokens")
    random = {"gamma_initializer": "random_normal", "beta_initializer": "random_normal"}
    x = layers.LayerNormalization(name="norm_fused", **random)(inp)  # epsilon 1e-3
    x = layers.Dense(WIDTH, name="dense")(x)
    out = layers.LayerNormalization(epsilon=1e-5, name="norm_plain", **random)(x)
    model = tf_keras.Model(inp, out)
    graph_def, inputs, outputs = freeze_keras_model(model, (BATCH, TOKENS, WIDTH), input_name="tokens")
    return model, graph_def, inputs, outputs


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Build, freeze, write and verify one model; return its ModelInfo."""
    if name in ("encoder", "layer_norm_tf_keras"):
        model, graph_def, inputs, outputs = _encoder() if name == "encoder" else _layer_norms()
        shape = (BATCH, TOKENS, WIDTH)
    else:
        model, graph_def, inputs, outputs = _recurrent(name)
        shape = (STEPS, BATCH, FEATURES) if name == "lstm_time_major" else (BATCH, STEPS, FEATURES)
    write_graphdef(graph_def, model_path)
    x = np.random.default_rng(SEED + 1).standard_normal(shape).astype(np.float32)
    expected = np.asarray(model(x, training=False))
    (got,) = run_frozen_graph(model_path, {inputs[0]: x}, outputs)
    diff = float(np.max(np.abs(got - expected)))
    if not diff < MAX_ABS_DIFF:
        raise AssertionError(f"{name}: frozen graph differs from Keras by {diff:g}")
    save_reference(reference_path, [x], [got])
    return ModelInfo(
        family="keras_composite", name=name, format="graphdef", path=model_path,
        inputs={inputs[0]: shape}, outputs=outputs, input_dtype="float32",
        input_dtypes={inputs[0]: "float32"}, output_shapes={outputs[0]: tuple(got.shape)},
        output_dtypes={outputs[0]: "float32"}, reference=reference_path,
        metadata={"max_abs_diff_vs_keras": diff, **graphdef_facts(graph_def)},
    )
