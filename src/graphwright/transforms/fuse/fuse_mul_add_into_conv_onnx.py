"""fuse_mul_add_into_conv: fold a per-channel Mul, Add or Sub after a Conv/ConvTranspose into it.

Before::  y = Conv(x, W, b); z = Mul(y, s[1, C, 1, 1]); u = Add(z, c[C, 1, 1])
After::   u = Conv(x, W', b')   with  W'[o] = W[o]·s[o],  b' = b·s + c

``Mul(y, s)``: ``W'[o] = W[o]·s[o]`` and ``b'[o] = b[o]·s[o]`` (weights private
to the Conv, as for batch-norm folding).  ``Add(y, c)`` / ``Add(c, y)``:
``b'[o] = b[o] + c[o]``; ``Sub(y, c)``: ``b'[o] = b[o] − c[o]`` (a missing bias
is zero; a shared bias is not modified, a new one is made).  The constant must
be per output channel or a scalar: after aligning it to the Conv output's
rank from the right, every dim but the channel dim (axis 1) is 1, so
broadcasting cannot change the output's shape.  The Conv output must be read
only by that node and not be a graph output.  Float only; arithmetic in
float64.

Rules of the rewrite engine, rooted at the Mul/Add/Sub: the Conv is the match's boundary
(``ANY``), edited in place (its weight keeps its name and place), and the arithmetic node is
bypassed (its output name survives when it is a graph output).  So a chain
``Conv → Mul → Add → Sub`` folds node after node in one sweep, in graph order.  Every
refused match says why.  All graphs; O(N + E) plus the weights' sizes.

A Mul by a constant per column of a MatMul by a constant ``W[K, C]`` folds too, through the
MatMul's bias Add when there is one (the layer scale after EfficientFormer's last-stage MLP)::

    Before::  z = Mul(Add(MatMul(x, W), b), s[C])      or  z = Mul(MatMul(x, W), s[C])
    After::   z = Add(MatMul(x, W'), b')                    z = MatMul(x, W')
              W'[:, c] = W[:, c]·s[c],  b' = b·s

``s`` must vary along the last axis only (aligned from the right, every other dim is 1, and it
has no more dims than the product), and ``b`` must not grow the product's shape either; the
MatMul (and Add) must be read only by the next node.  The new nodes keep the Mul's output name.

``fold_batch_norms`` folds the same per-channel arithmetic on ONNX graphs with the same
channel helpers (``transforms/_channels.py``) but rewrites differently: it takes ``Mul`` and
``Add`` together, handles ``Gemm`` and writes new initializers (see its module).
"""

from __future__ import annotations

import numpy as np

from ...ir import Model, Value
from ...patterns import (
    ANY,
    Match,
    P,
    Replacement,
    RuleSet,
    Skip,
    same_graph,
    why_not_editable,
    why_not_fusable,
)
from .._channels import FLOAT_KINDS, out_channels, per_channel, private_weight, scale_out_channels, set_bias, set_weight
from .._onnx import Names, const_array, is_const, is_standard
from ..context import TransformContext
from ..registry import TransformResult, transform
from ..rules import apply_rules, result_of

__all__ = ["fuse_mul_add_into_conv"]

_CONVS = frozenset({"Conv", "ConvTranspose"})


def _from_conv(value: Value) -> bool:
    """``value`` is produced by a standard-domain Conv or ConvTranspose."""
    node = value.producer
    return node is not None and node.op in _CONVS and is_standard(node)


_Y = ANY(name="y", where=_from_conv)
_C = ANY(name="c", where=is_const)  # not CONST, whose sweep would drop it once unread: it stays, as before
#: Mul(y, c), Add(y, c) in either order, Sub(y, c); y produced by a Conv/ConvTranspose, c constant.
#: Each order is its own rule (rather than ``commutative=True``): the matcher's direct path.
_PATTERNS = (
    ("mul_into_conv", P("Mul", _Y, _C, domain="")),
    ("mul_into_conv", P("Mul", _C, _Y, domain="")),
    ("add_into_conv", P("Add", _Y, _C, domain="")),
    ("add_into_conv", P("Add", _C, _Y, domain="")),
    ("sub_into_conv", P("Sub", _Y, _C, domain="")),
)


def _per_channel_const(const: Value, out_rank: int, channels: int) -> np.ndarray | None:
    """The float constant as one value per output channel (axis 1 of the output), or None."""
    array = const_array(const)
    if array is None or array.dtype not in FLOAT_KINDS:
        return None
    return per_channel(array, out_rank, 1, channels)


def _fold(m: Match, names: Names) -> Replacement | Skip:
    op_node = m.node
    y, const = m["y"].value, m["c"].value
    assert op_node is not None and y is not None and const is not None and y.producer is not None
    conv = y.producer
    reason = why_not_editable(conv, m.node)
    if reason:
        return m.skip(reason)
    weight_value = conv.inputs[1] if len(conv.inputs) > 1 else None
    weight = const_array(weight_value) if weight_value is not None else None
    if weight_value is None or weight is None or weight.dtype not in FLOAT_KINDS:
        return m.skip(f"the {conv.op} weight {getattr(weight_value, 'name', None)!r} is not a float constant")
    channels = out_channels(conv, weight)
    values = None if channels is None else _per_channel_const(const, weight.ndim, channels)
    if channels is None or values is None or const.dtype != weight_value.dtype:
        return m.skip(f"{const.name!r} is not one {weight.dtype} value per output channel of the {conv.op}")
    bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    bias = np.zeros(channels) if bias_value is None else const_array(bias_value)
    if bias is None or bias.shape != (channels,):
        return m.skip(f"the {conv.op} bias {getattr(bias_value, 'name', None)!r} is not a constant of {channels} values")
    if op_node.op == "Mul":
        if private_weight(weight_value) is None:
            return m.skip(f"the {conv.op} weight {weight_value.name!r} is shared; it cannot be scaled in place")
        new_w = scale_out_channels(conv, weight, values)
        if new_w is None:
            return m.skip(f"the {conv.op} weight does not match its output channels")
        set_weight(conv, 1, new_w)
        new_b = bias.astype(np.float64) * values
    elif op_node.op == "Add":
        new_b = bias.astype(np.float64) + values
    else:
        new_b = bias.astype(np.float64) - values
    if bias_value is not None or op_node.op != "Mul":
        set_bias(conv, 2, new_b.astype(weight.dtype), names)
    return Replacement.bypass_to(op_node.outputs[0], conv.output)


_MM = P("MatMul", ANY(name="x"), ANY(name="w", where=is_const), name="mm", domain="")
_B = ANY(name="b", where=is_const)
#: Mul(MatMul(x, W), s) and Mul(Add(MatMul(x, W), b), s), each operand order its own rule.
_MATMUL_PATTERNS = tuple(P("Mul", *operands, domain="") for inner in
                         (_MM, P("Add", _MM, _B, name="add", domain=""), P("Add", _B, _MM, name="add", domain=""))
                         for operands in ((inner, _C), (_C, inner)))


def _last_axis_const(value: Value, rank: int, columns: int) -> np.ndarray | None:
    """The float constant as a scalar or one value per last-axis column of a rank-``rank`` product, or None."""
    array = const_array(value)
    if array is None or array.dtype not in FLOAT_KINDS or array.ndim > rank or any(d != 1 for d in array.shape[:-1]):
        return None
    if array.ndim and array.shape[-1] not in (1, columns):
        return None
    return array.reshape(-1).astype(np.float64)


def _fold_matmul(m: Match, names: Names) -> Replacement | Skip:
    """``Mul(Add?(MatMul(x, W), b), s)`` -> ``Add?(MatMul(x, W·s), b·s)`` with the Mul's output name."""
    mul, mm = m.node, m["mm"].node
    assert mul is not None and mm is not None
    add = m["add"].node if "add" in m else None
    reason = why_not_fusable(m) or ("" if same_graph(mm, mul) else "the MatMul is in an enclosing graph")
    if reason:
        return m.skip(reason)
    w_value, out = m["w"].value, mm.output
    weight = private_weight(w_value)  # a shared weight would be copied: the model would grow
    if weight is None or weight.ndim != 2 or out.shape is None:
        return m.skip(f"the MatMul weight {getattr(w_value, 'name', None)!r} is not a 2-D float constant read "
                      "only by it (or the product's rank is unknown)")
    rank, columns = len(out.shape), weight.shape[1]
    scale = _last_axis_const(m["c"].value, rank, columns)
    if scale is None or m["c"].value.dtype != w_value.dtype:
        return m.skip(f"{m['c'].value.name!r} is not a {weight.dtype} scalar or one per column of the MatMul")
    scaled = m.constant((weight.astype(np.float64) * scale).astype(weight.dtype), name=names.fresh(f"{w_value.name}_scaled"))
    if add is None:
        return Replacement([m.clone(mul, op="MatMul", inputs=[m["x"].value, scaled])])
    b_value = m["b"].value
    bias = const_array(b_value)
    if bias is None or bias.dtype != weight.dtype or bias.ndim > rank or not _fits_product(bias.shape, out.shape):
        return m.skip(f"the bias {b_value.name!r} is not a {weight.dtype} constant broadcasting to the product's shape")
    new_bias = m.constant((bias.astype(np.float64) * scale).astype(weight.dtype), name=names.fresh(f"{b_value.name}_scaled"))
    new_mm = m.clone(mm, inputs=[m["x"].value, scaled])
    operands = [new_mm.output, new_bias] if add.inputs[0] is out else [new_bias, new_mm.output]
    return Replacement([new_mm, m.clone(mul, op="Add", inputs=operands)])


def _fits_product(shape: tuple[int, ...], product: tuple[object, ...]) -> bool:
    """Broadcasting a constant of ``shape`` against the product leaves the product's shape unchanged."""
    return all(d == 1 or d == p for d, p in zip(reversed(shape), reversed(product)))


def _rules(model: Model) -> RuleSet:
    names = Names(model)
    rules = RuleSet(name="fuse_mul_add_into_conv")
    for name, pattern in _PATTERNS:
        rules.add(pattern, lambda m: _fold(m, names), name=name)
    for pattern in _MATMUL_PATTERNS:
        rules.add(pattern, lambda m: _fold_matmul(m, names), name="mul_into_matmul")
    return rules


@transform("fuse_mul_add_into_conv", dialects={"onnx"})
def fuse_mul_add_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold per-channel constant Mul/Add/Sub after Conv or ConvTranspose (and per-column Mul after MatMul) into
    its weights and bias."""
    report = apply_rules(model, [_rules(model)])
    return result_of(report, stats={"nodes_fused": report.applied})
