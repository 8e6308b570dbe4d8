"""The passes simplify runs, by name: each is a registered ONNX transform usable in pipelines.

``graphwright.simplify`` runs them to a fixed point (shape inference, then the
elimination and fusion passes in :data:`OPTIMIZATION_PASSES` order, then
constant folding).  Each pass is one file under ``graphwright/transforms/`` (by purpose:
``cleanup/``, ``fold/``, ``fuse/``, ``inline/``) with its before/after and maths:

=============================  =====================================================
``infer_shapes``               ONNX shape inference (data propagation) onto the IR
``onnx_fold_constants``        constant subgraphs -> initializers (NumPy + one ORT session)
``inline_constant_if``         If with a constant condition -> the taken branch
``eliminate_identity``         Identity, inference Dropout
``eliminate_nop``              x*1, x+0, same-shape Reshape/Expand, same-type Cast...
``fold_symbolic_shapes``       Shape glue with dynamic dims -> constant Reshape/Expand targets
``fuse_consecutive_transposes``  Transpose(Transpose(x)) -> one Transpose
``fuse_consecutive_reshapes``  Reshape/Flatten/Squeeze/Unsqueeze chains -> one Reshape
``fuse_consecutive_slices``    Slice(Slice(x)) -> one Slice (also into every Slice reading one)
``fuse_slices_into_split``     sibling Slices cutting disjoint pieces of one axis -> one Split
``fuse_bn_into_conv``          Conv/ConvTranspose/Gemm/MatMul + BatchNormalization
``fuse_mul_add_into_conv``     Conv/ConvTranspose + per-channel Mul/Add/Sub, MatMul + Mul
``fuse_pad_into_conv``         zero Pad + Conv -> Conv pads
``fuse_matmul_add_into_gemm``  2-D MatMul + Add -> Gemm
``eliminate_dead_code``        unread nodes and initializers
=============================  =====================================================

``inline_local_functions`` (on request) calls of model-local functions -> their bodies.
Common-subexpression elimination is the generic ``merge_duplicate_nodes``.
Every pass recurses into If/Loop/Scan bodies.
"""


#: The elimination and fusion passes of one simplify iteration, in order.
OPTIMIZATION_PASSES: tuple[str, ...] = (
    "inline_constant_if",
    "eliminate_identity",
    "eliminate_nop",
    "fold_symbolic_shapes",
    "fuse_consecutive_transposes",
    "fuse_consecutive_reshapes",
    "fuse_consecutive_slices",
    "fuse_slices_into_split",
    "fuse_bn_into_conv",
    "fuse_mul_add_into_conv",
    "fuse_pad_into_conv",
    "fuse_matmul_add_into_gemm",
    "merge_duplicate_nodes",
    "eliminate_dead_code",
)

#: The operator fusions run once the fixed point is reached, in this order.
#: fuse_reshape_gemm runs again after fuse_attention, whose output the output projection's
#: flattening then reads as (B, S, H) (GPT-2's c_proj).
ONNX_FUSIONS: tuple[str, ...] = ("fuse_layer_norm", "fuse_rms_norm", "fuse_gelu", "fuse_reshape_gemm", "fuse_attention",
                                 "fuse_reshape_gemm", "fuse_ort_contrib")

__all__ = ["OPTIMIZATION_PASSES", "ONNX_FUSIONS"]
