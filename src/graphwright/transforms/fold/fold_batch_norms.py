"""fold_batch_norms: fold an arithmetic inference batch norm (a per-channel Mul, then Add) into the weights before it.

On TF graphs (arithmetic batch norm, as graphs frozen from Keras 3 carry it once
``fold_constants`` has turned its Rsqrt/Sub sub-graphs into constants)::

    before:  x ─► Conv2D|DepthwiseConv2dNative|MatMul(x, W) [─► BiasAdd|Add(·, b)] ─► Mul(·, s) [─► Add|AddV2(·, t)]
    after:   x ─► Conv2D|DepthwiseConv2dNative|MatMul(x, W') [─► BiasAdd(·, b')]

with ``s``, ``b``, ``t`` one value per output channel (shape ``[C]``, ``[1,1,1,C]``, a scalar,
or anything that broadcasts along the channel axis only), and::

    W' = W·s   along the output-channel axis (Conv2D: axis 3 of HWIO; MatMul: axis 1, or 0 with
               transpose_b; DepthwiseConv2dNative [H,W,Cin,M]: channel c = i·M + m)
    b' = b·s + t   (missing b or t count as 0; no BiasAdd when both are missing)

On ONNX graphs (per-channel constants on axis 1, the NCHW channel)::

    before:  Conv(x, W[, B]) | Gemm(a, B[, C]) ─► Mul(·, s) [─► Add(·, t)]
    after:   Conv(x, W·s, B·s + t)            | Gemm(a, B·s, C·s + t/β)

The ONNX rewrite shares its channel arithmetic with ``fuse_mul_add_into_conv``
(``transforms/_channels.py``: channel count, per-channel constants, weight scaling) but not its
rewrite: this one takes ``Mul`` and ``Add`` as one match, also folds into ``Gemm``, and writes
the folded weights as new initializers ``<conv>_folded_w``/``_folded_b`` on a new Conv that
stands where the ``Add`` stood, dropping the old constants; ``fuse_mul_add_into_conv`` edits
the Conv's weight in place and bypasses each ``Mul``/``Add``/``Sub`` in turn.

Unlike the original tool, this transform:

- is not blocked by control edges on the weights (in Keras 3 frozen graphs a ``NoOp`` depends on
  every weight, which makes the original silently fold nothing): the weights may be read through
  an ``Identity``, and their control edges move to the folded weights;
- accepts a ``BiasAdd`` (or per-channel ``Add``) between the contraction and the ``Mul``
  (ResNet50) and scales of shape ``[1,1,1,C]`` (InceptionV3);
- handles ``data_format=NCHW`` (channel axis 1) and ``MatMul`` with ``transpose_b``;
- never rewrites a weight another node also reads: such a match is refused and listed in the
  result's notes (``weights_shared``), the graph is left as it was there.

The maths is exact up to float rounding (the products are computed in float64 and rounded once
to the weight's dtype).  Two rule sets (the full chain rooted at the ``Add`` first, then a lone
scale rooted at the ``Mul``), run on the main graph by :func:`~graphwright.transforms.rules.apply_rules`.
Cost: each sweep is O(N) (pattern matching indexed by root op) plus O(size of the weights
folded); sweeps repeat until nothing changes (chained scales), at most :data:`MAX_SWEEPS` times.
"""

from __future__ import annotations

import numpy as np

from ...ir import Model
from ...patterns import ANY, CONST, Match, P, Replacement, RuleSet, Skip, weight_not_shared, why_not_fusable
from .._channels import (
    channel_count,
    node_of,
    out_channels,
    output_channel_axis,
    per_channel,
    scale_out_channels,
    value_name,
)
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import MAX_SWEEPS, apply_rules, result_of
from ._batch_norm_common import BIASED, FLOAT_DTYPES, fold_into_contraction

__all__ = ["fold_batch_norms", "MAX_SWEEPS"]

# -- TF: contraction [+ bias] followed by a per-channel Mul (+ Add) --------------------

_SCALED = P("Mul", BIASED, CONST(name="s"), name="mul", commutative=True)
#: The full chain (root Add) first, then a lone scale (root Mul).
_BN_FULL = P("Add|AddV2", _SCALED, CONST(name="t"), name="add", commutative=True)
_BN_SCALE = _SCALED


def _scale_and_offset(m: Match) -> tuple[np.ndarray, np.ndarray | None] | str:
    """``(s, t)`` of the contraction chain's ``Mul``/``Add`` constants as [C] vectors, or why not."""
    conv = node_of(m, "conv")
    channels = channel_count(conv, m.array("w"))
    rank, axis = output_channel_axis(conv)
    s = per_channel(m.array("s"), rank, axis, channels)
    if s is None:
        return f"scale {value_name(m, 's')!r} of shape {list(m.const('s').shape)} is not one value per output channel"
    t = None
    if m.get("t") is not None:
        t = per_channel(m.array("t"), rank, axis, channels)
        if t is None:
            return f"offset {value_name(m, 't')!r} is not one value per output channel"
    return s, t


def _fold_arithmetic(m: Match) -> Replacement | Skip:
    found = _scale_and_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    s, t = found
    return fold_into_contraction(m, s, t)


# -- ONNX: Conv / Gemm followed by a per-channel Mul (+ Add) ------------------------------

_ONNX_CONTRACTION = (
    P("Conv", ANY(name="x"), CONST(name="w"), CONST(name="b"), name="conv", dialect="onnx")
    | P("Conv", ANY(name="x"), CONST(name="w"), name="conv", dialect="onnx")
    | P("Gemm", ANY(name="x"), CONST(name="w"), CONST(name="b"), name="conv", dialect="onnx")
    | P("Gemm", ANY(name="x"), CONST(name="w"), name="conv", dialect="onnx")
)
_ONNX_SCALED = P("Mul", _ONNX_CONTRACTION, CONST(name="s"), name="mul", commutative=True, dialect="onnx")
_ONNX_FULL = P("Add", _ONNX_SCALED, CONST(name="t"), name="add", commutative=True, dialect="onnx")


def _fold_onnx(m: Match) -> Replacement | Skip:
    """``Mul(Conv(x, W, b), s) [+ t] -> Conv(x, W·s, b·s + t)``; Gemm alike (``C' = C·s + t/β``).

    Conv weights are ``[M, C/group, k...]`` (output channel on axis 0, on axis 1 of the output);
    Gemm's ``B`` is ``[K, N]`` (``[N, K]`` with transB) and its output channel is axis 1.
    """
    conv = node_of(m, "conv")
    w_tensor = m.const("w")
    if w_tensor.dtype not in FLOAT_DTYPES:
        return m.skip(f"weights of {conv.name!r} are {w_tensor.dtype.value}, not float")
    reason = why_not_fusable(m)
    if reason:
        return m.skip(reason)
    for key in ("w", "b"):
        value = m[key].value if m.get(key) is not None else None
        if value is not None and not weight_not_shared(value):
            return m.skip(f"weights {value.name!r} of {conv.name!r} are also read elsewhere; "
                          "not folding into shared weights")
    w = w_tensor.numpy()
    gemm = conv.op == "Gemm"
    beta = 1.0
    if gemm:
        beta = float(conv.attr("beta", 1.0))
        if w.ndim != 2 or beta == 0.0 or float(conv.attr("alpha", 1.0)) == 0.0:
            return m.skip(f"Gemm {conv.name!r}: unsupported B rank or alpha/beta of 0")
    channels = out_channels(conv, w)
    if channels is None:
        return m.skip(f"weights of {conv.name!r} have rank {w.ndim}, not what {conv.op} takes")
    rank = 2 if gemm else w.ndim
    s = per_channel(m.array("s"), rank, 1, channels)
    t = per_channel(m.array("t"), rank, 1, channels) if m.get("t") is not None else np.zeros(channels)
    b: np.ndarray | None = np.zeros(channels)
    if m.get("b") is not None:
        raw = m.array("b")
        if gemm:  # C broadcasts against the [M, N] output
            b = per_channel(raw, rank, 1, channels)
        else:  # Conv's B is the [M] bias itself
            b = np.asarray(raw, np.float64).reshape(-1) if raw.size == channels else None
    if s is None or t is None or b is None:
        return m.skip(f"scale, offset or bias of {conv.name!r} is not one value per output channel")
    new_w = scale_out_channels(conv, w, s)
    assert new_w is not None  # channels and s agree by construction
    root = m.node
    assert root is not None
    w_value = m.constant(new_w, name=f"{conv.name or 'conv'}_folded_w", dtype=w_tensor.dtype)
    b_value = m.constant((b * s + t / beta).astype(w.dtype), name=f"{conv.name or 'conv'}_folded_b",
                         dtype=w_tensor.dtype)
    new = m.clone(conv, inputs=[conv.inputs[0], w_value, b_value])
    out, old = new.output, root.outputs[0]
    out.name, out.dtype, out.shape = old.name, old.dtype, old.shape  # stands for the root's value
    return Replacement([new], {old: out})


@transform("fold_batch_norms", dialects={"tf", "onnx"})
def fold_batch_norms(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold per-channel Mul (+ Add) after a contraction (TF Conv2D/Depthwise/MatMul, ONNX Conv/Gemm)."""
    full, scale = RuleSet(name="fold_batch_norms"), RuleSet(name="fold_batch_norms")
    if model.graph.dialect == "onnx":
        full.add(_ONNX_FULL, _fold_onnx, name="scale_and_offset")
        scale.add(_ONNX_SCALED, _fold_onnx, name="scale")
    else:
        full.add(_BN_FULL, _fold_arithmetic, name="scale_and_offset")
        scale.add(_BN_SCALE, _fold_arithmetic, name="scale")
    report = apply_rules(model, [full, scale], subgraphs=False, sweeps=MAX_SWEEPS)
    result = result_of(report)
    result.stats = {"folded": report.applied, "weights_shared": sum("shared weights" in n for n in result.notes)}
    return result
