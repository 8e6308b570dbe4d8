"""Legacy uint8 (per-tensor asymmetric) TFLite models, made from int8 ones with
graphwright's own writer (today's converter no longer emits them).

Activations: ``q_u8 = q_i8 + 128``, ``zp_u8 = zp_i8 + 128`` (same scale, so the
same reals).  Weights: requantized per tensor, ``S = max|W| / 127``,
``q = round(W / S) + 128`` (zero point 128).  Biases: rescaled to
``s_in · S`` from ``s_in · s_w[c]``: ``b' = round(b · s_w[c] / S)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import graphwright as gw
from graphwright.ir import DType, QuantParams, Tensor

WEIGHT_OPS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}


def _per_channel(values: np.ndarray, axis: int, size: int) -> np.ndarray:
    shape = [1] * size
    shape[axis] = -1
    return values.reshape(shape)


def write_uint8_model(int8_path: Path, out_path: Path) -> Path:
    """Convert the int8 model at ``int8_path`` into a uint8 one at ``out_path``."""
    model = gw.load(int8_path)
    graph = model.graph
    weight_scale: dict[str, tuple[np.ndarray, float]] = {}
    for node in graph:
        if node.op not in WEIGHT_OPS:
            continue
        w = node.inputs[1]
        assert w is not None and w.const is not None and w.quant is not None
        q = w.const.numpy().astype(np.float64)
        axis = WEIGHT_OPS[node.op] if w.quant.scale.size > 1 else 0
        scales = w.quant.scale.astype(np.float64)
        real = q * (_per_channel(scales, axis, q.ndim) if scales.size > 1 else scales[0])
        big = float(np.abs(real).max()) or 1.0
        s_new = float(np.float32(big / 127.0))
        qu = np.clip(np.round(real / s_new) + 128, 0, 255).astype(np.uint8)
        w.const = Tensor.from_numpy(qu)
        w.dtype = DType.UINT8
        w.quant = QuantParams([s_new], [128])
        per_channel = scales if scales.size > 1 else np.repeat(scales, qu.shape[axis])
        weight_scale[node.name] = (per_channel, s_new)
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            b = node.inputs[2]
            assert b.const is not None and b.quant is not None
            s_in = float(node.inputs[0].quant.scale[0])  # type: ignore[union-attr]
            bias = b.const.numpy().astype(np.float64) * per_channel / s_new
            b.const = Tensor.from_numpy(np.round(bias).astype(np.int32))
            b.quant = QuantParams([np.float32(s_in * s_new)], [0])
    for value in _all_values(graph):
        if value.dtype is DType.INT8 and value.quant is not None and value.quant.scale.size == 1:
            value.dtype = DType.UINT8
            value.quant = QuantParams(value.quant.scale, value.quant.zero_point + 128)
            if value.const is not None:
                value.const = Tensor.from_numpy((value.const.numpy().astype(np.int16) + 128).astype(np.uint8))
    gw.save(model, out_path)
    return out_path


def _all_values(graph: gw.Graph) -> list[gw.Value]:
    seen: dict[int, gw.Value] = {}
    for v in [*graph.inputs, *graph.initializers]:
        seen.setdefault(id(v), v)
    for node in graph:
        for v in [*node.inputs, *node.outputs]:
            if v is not None:
                seen.setdefault(id(v), v)
    return list(seen.values())
