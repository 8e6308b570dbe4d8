"""The built-in transforms, imported explicitly by the registry on first use."""

from __future__ import annotations

from . import onnx as _onnx_passes  # noqa: F401 - simplify's passes
from .cleanup import (  # noqa: F401 - imported to register
    merge_duplicate_nodes,
    remove_control_dependencies,
    remove_nodes,
    sort_by_execution_order,
    strip_unused_nodes,
)
from .debug import insert_logging  # noqa: F401
from .device import devices  # noqa: F401
from .fold import batch_norms, fold_constants  # noqa: F401
from .fuse import (  # noqa: F401
    onnx_gelu,
    onnx_layer_norm,
    onnx_ort_contrib,
    remapper,
)
from .quantize import freeze_requantization_ranges, quantize_nodes, quantize_weights, round_weights  # noqa: F401
from .rename import attributes, obfuscate_names, rename_node, rename_op  # noqa: F401
from .tf import (  # noqa: F401
    add_default_attributes,
    backport_concatv2,
    backport_tensor_array_v3,
    flatten_atrous_conv,
    fuse_composite_functions,
    fuse_convolutions,
    fuse_pad_and_conv,
    fuse_resize_and_conv,
    fuse_resize_pad_and_conv,
    inline_partitionedcall,
    sparsify_gather,
)
