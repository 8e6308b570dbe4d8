"""The frozen Keras composite models of ``tests/models/build_keras_composite.py`` (LSTM, GRU,
transformer encoder), built once per builder version and cached, and TensorFlow run in a child
process with oneDNN on or off (``TF_ENABLE_ONEDNN_OPTS`` is read once, at TensorFlow's import).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests.models import ModelInfo, ensure_built

FAMILY = "keras_composite"


def composite_model(name: str) -> ModelInfo:
    """``lstm``, ``gru``, ``encoder``... (see the builder's docstring), built on first use with the
    rest of the family in one subprocess (the cache's batch build)."""
    return ensure_built(FAMILY, name)


_CHILD = """
import os, pickle, sys
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.util import _pywrap_util_port
jobs, grappler = pickle.load(open(sys.argv[1], "rb"))
config = tf.compat.v1.ConfigProto()
if not grappler:
    config.graph_options.rewrite_options.disable_meta_optimizer = True
results = []


def remap(graph_def, fetches, optimizers):
    # Grappler's meta-optimizer with only these optimizers on, nodes placed on the CPU as a Session does
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.grappler import tf_optimizer
    for node in graph_def.node:
        node.device = node.device or "/job:localhost/replica:0/task:0/device:CPU:0"
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    meta.collection_def["train_op"].node_list.value.extend(fetches)
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.optimizers.extend(optimizers)
    config.graph_options.rewrite_options.min_graph_nodes = -1
    config.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    return tf_optimizer.OptimizeGraph(config, meta).SerializeToString()


for graph_bytes, feeds, fetches in jobs:
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph_bytes)
    if isinstance(feeds, str):  # a Grappler job: feeds names the optimizers
        results.append((True, remap(graph_def, fetches, feeds.split(","))))
        continue
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(graph_def, name="")
    try:
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            out = session.run([f if ":" in f else f + ":0" for f in fetches],
                              {(k if ":" in k else k + ":0"): v for k, v in feeds.items()})
        results.append((True, [np.asarray(o) for o in out]))
    except Exception as e:
        results.append((False, type(e).__name__ + ": " + " ".join(str(e).split())[:400]))
pickle.dump((bool(_pywrap_util_port.IsMklEnabled()), results), open(sys.argv[2], "wb"))
"""


Job = tuple[bytes, dict[str, np.ndarray] | str, list[str]]


def run_in_child(graph_bytes: bytes, feeds: dict[str, np.ndarray], fetches: list[str], *, onednn: bool,
                 grappler: bool = False) -> tuple[bool, list[np.ndarray] | str]:
    """Run a GraphDef in a fresh Python with ``TF_ENABLE_ONEDNN_OPTS`` set (Grappler off unless asked):
    ``(True, outputs)`` or ``(False, the error's type and message)``.  Asserts the child's oneDNN state."""
    return run_all_in_child([(graph_bytes, feeds, fetches)], onednn=onednn, grappler=grappler)[0]


def run_all_in_child(jobs: list[Job], *, onednn: bool,
                     grappler: bool = False) -> list[tuple[bool, list[np.ndarray] | str]]:
    """:func:`run_in_child` for several GraphDefs in one child (one TensorFlow import).  A job whose
    feeds are a string instead runs Grappler with those optimizers (``"remap"``, ``"constfold,remap"``)
    on the CPU-placed graph, the fetches preserved, and returns the optimized GraphDef's bytes."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0")
    with tempfile.TemporaryDirectory(prefix="gw-composite-") as tmp:
        request, reply = Path(tmp) / "request.pkl", Path(tmp) / "reply.pkl"
        request.write_bytes(pickle.dumps((jobs, grappler)))
        done = subprocess.run([sys.executable, "-c", _CHILD, str(request), str(reply)], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0 and reply.exists(), done.stderr[-2000:]
        mkl, results = pickle.loads(reply.read_bytes())
    assert mkl == onednn, f"the child's TensorFlow has oneDNN {'on' if mkl else 'off'}"
    return results
