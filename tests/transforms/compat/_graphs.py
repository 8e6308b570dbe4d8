"""The TF graph the add_default_attributes and backport_concatv2 tests share."""

from __future__ import annotations

import numpy as np

from .._tf import build, tf, v1


def _conv_graph() -> bytes:
    def fn() -> None:
        x = v1.placeholder(tf.float32, [1, 6, 6, 2], name="x")
        w = tf.constant(np.random.default_rng(0).standard_normal((3, 3, 2, 4)).astype(np.float32), name="w")
        y = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", name="conv")
        z = tf.concat([y, tf.nn.relu(y)], axis=3, name="cat")
        tf.identity(z, name="out")
    return build(fn)
