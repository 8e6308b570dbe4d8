"""fold_old_batch_norms: fold the monolithic inference batch-norm ops into the weights before them.

TF dialect::

    before:  x ─► [Conv2D|DepthwiseConv2dNative|MatMul(·, W) [─► BiasAdd(·, b)] ─►]
             FusedBatchNorm{,V2,V3}(·, γ, β, μ, σ²)  |  BatchNormWithGlobalNormalization(·, μ, σ², β, γ)
    after:   Conv2D(x, W') ─► BiasAdd(·, b')          (after a contraction), else
             Mul(x, s) ─► BiasAdd(·, t)               (NCHW: s shaped [C,1,1])

with ``s = γ/√(σ²+ε)`` (``1/√(σ²+ε)`` when BatchNormWithGlobalNormalization has
``scale_after_normalization=false``), ``t = β − μ·s``, then ``W' = W·s`` and ``b' = b·s + t``
(the rewrite ``fold_batch_norms`` makes, see ``_batch_norm_common.py``).  Unlike the original
tool, V2/V3 are folded too, weights read through an ``Identity`` or carrying control edges fold,
and a weight another node also reads is never rewritten.  Training-mode FusedBatchNorm, and
any FusedBatchNorm whose batch statistics (outputs 1..5) are read, are left alone and reported.

On ONNX the monolithic batch-norm op is ``BatchNormalization``: the same folding is
simplify's ``fuse_bn_into_conv`` (Conv, ConvTranspose, Gemm), which this delegates to.

Two rule sets, run in turn on the main graph by :func:`~graphwright.transforms.rules.apply_rules`:
into a contraction first, then the rest to ``Mul``/``BiasAdd``.  Cost: each sweep is O(N) plus
O(size of the weights folded), at most :data:`~graphwright.transforms.rules.MAX_SWEEPS` sweeps
per rule set.
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, DType, Model, Node
from ...patterns import ANY, CONST, Match, P, Pattern, Replacement, RuleSet, Skip
from .._channels import channel_count, data_format, node_of
from ..context import TransformContext
from ..fuse.fuse_bn_into_conv_onnx import fuse_bn_into_conv
from ..registry import TransformResult, transform
from ..rules import MAX_SWEEPS, apply_rules, result_of
from ._batch_norm_common import BIASED, FLOAT_DTYPES, fold_into_contraction

__all__ = ["fold_old_batch_norms"]

_FUSED_BN_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
_OLD_BN_OPS = frozenset(_FUSED_BN_OPS + ("BatchNormWithGlobalNormalization",))


def _old_bn(x: Pattern) -> list[Pattern]:
    """The two monolithic batch-norm ops reading ``x``, constants captured by role."""
    return [
        P("|".join(_FUSED_BN_OPS), x, CONST(name="gamma"), CONST(name="beta"), CONST(name="mean"),
          CONST(name="var"), name="bn"),
        P("BatchNormWithGlobalNormalization", x, CONST(name="mean"), CONST(name="var"),
          CONST(name="beta"), CONST(name="gamma"), name="bn"),
    ]


def _bn_scale_offset(m: Match) -> tuple[np.ndarray, np.ndarray] | str:
    """``s = γ/√(σ²+ε)``, ``t = β − μ·s`` of a FusedBatchNorm* / BatchNormWithGlobalNormalization."""
    bn = node_of(m, "bn")
    if bn.op.startswith("FusedBatchNorm"):
        if bn.attr("is_training", True):
            return f"{bn.op} {bn.name!r} is in training mode (is_training=true); only inference batch norm folds"
        used = [i for i, v in enumerate(bn.outputs) if i and (v.num_uses or v.is_graph_output)]
        if used:
            return f"{bn.op} {bn.name!r} has its batch statistics (outputs {used}) read; they would be lost"
        eps = float(bn.attr("epsilon", 1e-4))
        gamma: np.ndarray | None = m.array("gamma")
    else:
        eps = float(bn.attr("variance_epsilon", 0.0))
        gamma = m.array("gamma") if bn.attr("scale_after_normalization", True) else None
    arrays = [m.array(k) for k in ("mean", "var", "beta")]
    if any(a.ndim != 1 for a in arrays) or (gamma is not None and gamma.ndim != 1):
        return f"{bn.op} {bn.name!r}: gamma/beta/mean/variance must be 1-D"
    mean, var, beta = (np.asarray(a, np.float64) for a in arrays)
    s = 1.0 / np.sqrt(var + eps)
    if gamma is not None:
        s = s * np.asarray(gamma, np.float64)
    return s, beta - mean * s


def _fold_old_into_contraction(m: Match) -> Replacement | Skip:
    found = _bn_scale_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    bn = node_of(m, "bn")
    conv = node_of(m, "conv")
    if conv.op != "MatMul" and data_format(bn) != data_format(conv):
        return m.skip(f"{bn.name!r} and {conv.name!r} disagree on data_format")
    s, t = found
    if s.shape[0] != channel_count(conv, m.array("w")):
        return m.skip(f"{bn.name!r} has {s.shape[0]} channels, {conv.name!r} produces a different count")
    return fold_into_contraction(m, s, t)


def _old_to_arithmetic(m: Match) -> Replacement | Skip:
    """No contraction before it: ``bn(x) -> BiasAdd(Mul(x, s), t)``."""
    found = _bn_scale_offset(m)
    if isinstance(found, str):
        return m.skip(found)
    s, t = found
    bn = node_of(m, "bn")
    dtype = bn.outputs[0].dtype or DType.FLOAT32
    if dtype not in FLOAT_DTYPES or dtype.numpy is None:
        return m.skip(f"{bn.name!r} computes {dtype.value}, not float")
    nchw = data_format(bn).startswith("NC")
    s_value = m.constant((s.reshape(-1, 1, 1) if nchw else s).astype(dtype.numpy), name=f"{bn.name}/scale", dtype=dtype)
    t_value = m.constant(t.astype(dtype.numpy), name=f"{bn.name}/offset", dtype=dtype)
    mul = Node("Mul", [m["x"].value, s_value], dialect="tf", name=f"{bn.name}/mul",
               attrs={"T": Attr.dtype(dtype)}, device=bn.device, control_inputs=bn.control_inputs)
    add = Node("BiasAdd", [mul.output, t_value], dialect="tf", name=bn.name, device=bn.device,
               attrs={"T": Attr.dtype(dtype), "data_format": Attr.string("NCHW" if nchw else "NHWC")})
    mul.output.dtype = add.output.dtype = dtype
    add.output.shape = bn.outputs[0].shape
    return Replacement([mul, add], {bn.outputs[0]: add.output})


@transform("fold_old_batch_norms", dialects={"tf", "onnx"})
def fold_old_batch_norms(model: Model, ctx: TransformContext) -> TransformResult:
    """Fold FusedBatchNorm{,V2,V3} / BatchNormWithGlobalNormalization (inference) into weights.

    On ONNX the monolithic batch-norm op is ``BatchNormalization``: the same folding is
    simplify's ``fuse_bn_into_conv`` (Conv, ConvTranspose, Gemm), which this delegates to.
    """
    if model.graph.dialect == "onnx":
        return fuse_bn_into_conv(model, ctx)
    into_conv, alone = RuleSet(name="fold_old_batch_norms"), RuleSet(name="fold_old_batch_norms")
    for pattern in _old_bn(BIASED):
        into_conv.add(pattern, _fold_old_into_contraction, name="into_contraction")
    for pattern in _old_bn(ANY(name="x")):
        alone.add(pattern, _old_to_arithmetic, name="to_mul_add")
    before = sum(1 for n in model.graph if n.op in _OLD_BN_OPS)
    report = apply_rules(model, [into_conv, alone], subgraphs=False, sweeps=MAX_SWEEPS)
    folded, converted = report.by_rule.get("into_contraction", 0), report.by_rule.get("to_mul_add", 0)
    return result_of(report, stats={"folded_into_weights": folded, "to_mul_add": converted,
                                    "left": before - folded - converted})
