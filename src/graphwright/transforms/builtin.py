"""The built-in transforms, imported explicitly by the registry on first use.

One module per transform, grouped by purpose; the format is in the file name
when a transform exists for one format only (``fuse_gelu_onnx``,
``fuse_remapper_tf``).  Importing a module registers its transform.
"""

from __future__ import annotations

from .cleanup import (  # noqa: F401 - imported to register
    eliminate_dead_code_onnx,
    eliminate_identity_onnx,
    eliminate_nop_onnx,
    merge_duplicate_nodes,
    remove_control_dependencies,
    remove_nodes,
    sort_by_execution_order,
    strip_unused_nodes,
)
from .compat import add_default_attributes_tf, backport_concatv2_tf, backport_tensor_array_v3_tf  # noqa: F401
from .debug import insert_logging  # noqa: F401
from .device import devices  # noqa: F401
from .fold import (  # noqa: F401
    fold_batch_norms,
    fold_constants,
    fold_old_batch_norms,
    fold_symbolic_shapes_onnx,
    infer_shapes_onnx,
    onnx_fold_constants,
)
from .fuse import (  # noqa: F401
    flatten_atrous_conv_tf,
    fuse_attention_onnx,
    fuse_bn_into_conv_onnx,
    fuse_composite_functions_tf,
    fuse_consecutive_reshapes_onnx,
    fuse_consecutive_slices_onnx,
    fuse_consecutive_transposes_onnx,
    fuse_convolutions_tf,
    fuse_embed_layer_norm_onnx,
    fuse_gelu_onnx,
    fuse_layer_norm_onnx,
    fuse_lstm_while_tf,
    fuse_matmul_add_into_gemm_onnx,
    fuse_matmul_gelu_tf,
    fuse_mkl_layer_norm_tf,
    fuse_mul_add_into_conv_onnx,
    fuse_ort_contrib_onnx,
    fuse_pad_and_conv_tf,
    fuse_pad_into_conv_onnx,
    fuse_remapper_tf,
    fuse_reshape_gemm_onnx,
    fuse_resize_and_conv_tf,
    fuse_resize_pad_and_conv_tf,
    fuse_rms_norm_onnx,
    fuse_skip_layer_norm_onnx,
    fuse_slices_into_split_onnx,
)
from .inline import inline_constant_if_onnx, inline_local_functions_onnx, inline_partitionedcall_tf  # noqa: F401
from .quantize import (  # noqa: F401
    freeze_requantization_ranges,
    quantize_dynamic,
    quantize_nodes,
    quantize_static,
    quantize_weights,
    round_weights,
    sparsify_gather_tf,
)
from .rename import attributes, obfuscate_names, rename_node, rename_op  # noqa: F401
