"""Output channels of contractions: geometry and arithmetic shared by batch-norm folding and the fusions.

ONNX (``fuse_bn_into_conv``, ``fuse_mul_add_into_conv``, ``fold_batch_norms``): output channel
``o`` of a convolution is computed with

- ``Conv``: ``W[o, ...]`` (W is ``[C_out, C_in/group, k...]``);
- ``ConvTranspose``: ``W[c, o mod (C_out/group), ...]`` for the input channels
  ``c`` of group ``o div (C_out/group)`` (W is ``[C_in, C_out/group, k...]``);
- ``Gemm`` (``Y = A·B``): column ``o`` of ``B`` (``B[:, o]``, or ``B[o, :]`` with ``transB``).

so multiplying output channel ``o`` by ``s[o]`` multiplies exactly those
weights.  Arithmetic is done in float64 and stored in the weight's dtype.

:func:`private_weight`, :func:`set_weight` and :func:`set_bias` edit an ONNX contraction's
constant inputs in place, as ``fuse_bn_into_conv`` and ``fuse_mul_add_into_conv`` do.

TF (``fold_batch_norms``, ``fold_old_batch_norms``, ``fuse_remapper``): :func:`output_channel_axis`
and :func:`channel_count` of Conv2D (HWIO), DepthwiseConv2dNative (``[H, W, Cin, M]``, channel
``i·M + m``) and MatMul (``transpose_b``), and the capture helpers :func:`node_of` /
:func:`value_name` of their rules.

:func:`per_channel` reads a constant that broadcasts along the channel axis only, TF and ONNX
alike.  All O(1), O(channels) or O(size of the weight).
"""

from __future__ import annotations

import numpy as np

from ..errors import TransformError
from ..ir import Node, Tensor, Value, set_constant_value
from ..patterns import Match
from ..patterns.predicates import weight_not_shared
from ._onnx import Names, const_array, new_initializer
from ._weights import scaled

__all__ = [
    "FLOAT_KINDS", "out_channels", "scale_out_channels", "private_weight", "set_weight", "set_bias",
    "data_format", "output_channel_axis", "channel_count", "node_of", "value_name", "per_channel",
]

FLOAT_KINDS = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})


# -- ONNX: Conv, ConvTranspose, Gemm -----------------------------------------------------


def out_channels(node: Node, weight: np.ndarray) -> int | None:
    """Number of output channels of ``node`` given its weight, or None if malformed."""
    if node.op == "Conv":
        return int(weight.shape[0]) if weight.ndim >= 2 else None
    if node.op == "ConvTranspose":
        return int(weight.shape[1]) * int(node.attr("group", 1)) if weight.ndim >= 2 else None
    if node.op == "Gemm":
        if weight.ndim != 2:
            return None
        return int(weight.shape[0] if node.attr("transB", 0) else weight.shape[1])
    return None


def scale_out_channels(node: Node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """``weight`` with output channel ``o`` multiplied by ``scale[o]`` (None if shapes disagree).

    Each product is computed in float64 and rounded once to the weight's dtype,
    but without a float64 copy of the weight: the multiplication writes
    straight into the result (numpy's ufunc loop converts a small buffer at a
    time).  Besides the result, the cost is O(channels) memory, not two
    float64 temporaries of 2x the weight each -- those made folding ResNet-50's
    batch norms peak at 2x the model's size and left the heap fragmented.
    The values are bit-identical to ``(weight.astype(f64) * s).astype(dtype)``.
    """
    channels = out_channels(node, weight)
    if channels is None or scale.shape != (channels,):
        return None
    s = scale.astype(np.float64)
    if node.op == "Conv":
        return scaled(weight, s.reshape((channels,) + (1,) * (weight.ndim - 1)))
    if node.op == "ConvTranspose":
        group = int(node.attr("group", 1))
        c_in, per_group = weight.shape[0], weight.shape[1]
        if group < 1 or c_in % group:
            return None
        grouped = (group, c_in // group, per_group) + weight.shape[2:]
        factor = s.reshape((group, 1, per_group) + (1,) * (weight.ndim - 2))
        return scaled(weight.reshape(grouped), factor).reshape(weight.shape)
    return scaled(weight, s[:, None] if node.attr("transB", 0) else s[None, :])


# -- ONNX: editing a contraction's weights in place ----------------------------------


def private_weight(value: Value | None) -> np.ndarray | None:
    """The float array of ``value`` when it is a constant only one node reads
    (:func:`~graphwright.patterns.predicates.weight_not_shared`), so it may be rewritten in place; else None."""
    if value is None or not weight_not_shared(value):
        return None
    array = const_array(value)
    return array if array is not None and array.dtype in FLOAT_KINDS else None


def set_weight(node: Node, index: int, array: np.ndarray) -> None:
    """Give the node's private constant input ``index`` new data (keeps its name and place)."""
    value = node.input(index)
    set_constant_value(value, Tensor.from_numpy(array, value.dtype))


def set_bias(node: Node, index: int, bias: np.ndarray, names: Names) -> None:
    """Make input ``index`` of ``node`` the constant ``bias``: in place if private, else a new initializer
    named ``<node>_bias`` (a ``Constant`` node at the head of the graph in IR < 4 models)."""
    graph = node.graph
    assert graph is not None
    current = node.inputs[index] if len(node.inputs) > index else None
    if current is not None and private_weight(current) is not None:
        set_constant_value(current, Tensor.from_numpy(bias, current.dtype))
        return
    value = new_initializer(graph, bias, f"{node.name or node.op}_bias", names)
    inputs = list(node.inputs) + [None] * (index + 1 - len(node.inputs))
    inputs[index] = value
    node.set_inputs(inputs)


# -- TF contractions ---------------------------------------------------------------


def data_format(node: Node) -> str:
    raw = node.attr("data_format", b"NHWC")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def output_channel_axis(conv: Node) -> tuple[int, int]:
    """``(rank, axis)`` of the output channel in the contraction's output."""
    if conv.op == "MatMul":
        return 2, 1
    return 4, (1 if data_format(conv).startswith("NC") else 3)


def channel_count(conv: Node, w: np.ndarray) -> int | None:
    """Number of output channels of a contraction with weights ``w`` (None: weights of the wrong rank)."""
    if w.ndim != (2 if conv.op == "MatMul" else 4):
        return None
    if conv.op == "MatMul":
        return int(w.shape[0] if conv.attr("transpose_b", False) else w.shape[1])
    if conv.op == "DepthwiseConv2dNative":
        return int(w.shape[2] * w.shape[3])
    return int(w.shape[3])


def node_of(m: Match, name: str | None = None) -> Node:
    """The node captured as ``name`` (the root when None); patterns here always bind one."""
    node = m.node if name is None else m[name].node
    if node is None:
        raise TransformError(f"internal: capture {name or 'root'!r} has no node")
    return node


def value_name(m: Match, name: str) -> str:
    value = m[name].value
    return value.name if value is not None else name


# -- both ----------------------------------------------------------------------------


def per_channel(arr: np.ndarray, rank: int, axis: int, channels: int | None) -> np.ndarray | None:
    """``arr`` as a ``[channels]`` float64 vector if, broadcast against a rank-``rank`` tensor, it
    varies only along ``axis``; else None (it would broadcast across other axes or grow the rank)."""
    if channels is None or arr.ndim > rank:
        return None
    shape = (1,) * (rank - arr.ndim) + tuple(arr.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(np.asarray(arr, np.float64).reshape(-1), (channels,))
