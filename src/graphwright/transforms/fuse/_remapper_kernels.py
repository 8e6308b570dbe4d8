"""Which fused ops each TensorFlow 2.21 build can import and run: fuse_remapper's ``target`` tables.

Found by experiment (each fused node written into a GraphDef, imported by ``tf.import_graph_def``
and run with Grappler off, in a process with ``TF_ENABLE_ONEDNN_OPTS=1`` and one with ``=0``;
the tests re-run every form we emit the same way).  ``onednn`` is TF's default x86 build,
``eigen`` the same build with oneDNN off; ``gpu`` follows the GPU kernels TensorFlow's sources
register (cuDNN's conv+bias+relu for spatial filters, the batch-norm side input) and cannot be
run on this machine.  A node explicitly placed on a CPU is held to the CPU table of the target
(``eigen`` when the target is ``gpu``: its kernels run in both CPU builds); one placed on a GPU to
the ``gpu`` table, whatever the target.
"""

from __future__ import annotations

from ...ir import DType, Node

__all__ = ["CONV_ACTS", "MATMUL_ACTS", "TARGETS", "device_kind", "same_device", "why_no_kernel"]

TARGETS = ("onednn", "eigen", "gpu")

F32, F64, F16, BF16 = DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16
CONV_ACTS = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu"})
DEPTHWISE_ACTS = frozenset({"Relu", "Relu6", "Elu"})  # no LeakyRelu: the oneDNN kernel refuses it
MATMUL_ACTS = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"})
GELUS = frozenset({"GeluApproximate", "GeluExact"})


def device_kind(device: str) -> str:
    """``"gpu"``, ``"cpu"`` or ``""`` (not placed) for a node's device string."""
    text = device.upper()
    if "GPU" in text:
        return "gpu"
    if "CPU" in text:
        return "cpu"
    return ""


def _table(kind: str, target: str) -> str:
    if kind == "gpu" or (kind == "" and target == "gpu"):
        return "gpu"
    if kind == "cpu" and target == "gpu":
        return "eigen"
    return target


def why_no_kernel(op: str, fused_ops: list[str], dtype: DType | None, data_format: str, *, target: str,
                  device: str = "", filter_spatial: bool = True, channels: int | None = None) -> str | None:
    """Why ``op`` with ``fused_ops`` cannot be emitted for ``target`` on ``device``, or None when it can."""
    table = _table(device_kind(device), target)
    where = f"on {device}" if device else f"for target={target}"
    what = f"{op} [{', '.join(fused_ops)}] ({dtype.name.lower() if dtype else 'unknown type'}, {data_format})"
    reason = _check(table, op, fused_ops, dtype, data_format, filter_spatial, channels)
    return f"{what} has no kernel {where}: {reason}" if reason else None


def _check(table: str, op: str, fused_ops: list[str], dtype: DType | None, fmt: str, spatial: bool,
           channels: int | None) -> str | None:
    first, rest = fused_ops[0], fused_ops[1:]
    act = rest[-1] if rest and rest[-1] != "Add" else None
    if op == "_FusedConv2D":
        if table == "gpu":
            if fused_ops != ["BiasAdd", "Relu"] or dtype is not F32:
                return "TensorFlow fuses only float32 Conv2D+BiasAdd+Relu for cuDNN"
            return None if spatial else "cuDNN's fused kernel is slower than the graph for 1x1 filters"
        if dtype not in (F32, F64):
            return "the CPU kernels are float32/float64 only (the op definition has no bfloat16)"
        if fmt != "NHWC" and not (table == "onednn" and dtype is F32 and fmt == "NCHW"):
            return "NCHW runs only in the oneDNN build, in float32"
        if "Add" in rest and (table != "onednn" or dtype is not F32):
            return "the residual Add runs only in the oneDNN build, in float32"
        return None if act is None or act in CONV_ACTS else f"{act} is not a fused activation"
    if op == "_FusedDepthwiseConv2dNative":
        if table != "onednn":
            return "only the oneDNN build registers it"
        if dtype not in (F32, BF16) or fmt != "NHWC":
            return "oneDNN runs it in float32/bfloat16, NHWC"
        return None if act is None or act in DEPTHWISE_ACTS else f"{act} is not a fused activation"
    if op == "_FusedMatMul":
        if table == "gpu":
            return "TF 2.21's remapper does not fuse MatMul on a GPU"
        if act in GELUS:
            if table != "onednn" or dtype not in (F32, BF16):
                return "GELU runs only in the oneDNN build, float32/bfloat16"
            return None
        if dtype not in (F32, F16, BF16):
            return "the op definition allows float32/float16/bfloat16 only"
        return None if act is None or act in MATMUL_ACTS else f"{act} is not a fused activation"
    if op == "_FusedBatchNormEx":
        if channels is None or channels % 4:
            return f"its shape function needs a channel count divisible by 4 (got {channels})"
        if fmt != "NHWC":
            return "NHWC only"
        if table == "gpu":
            return None if dtype in (F32, F16) and act == "Relu" else "the GPU kernel takes float32/float16 with Relu"
        if table != "onednn":
            return "only the oneDNN build runs it on a CPU"
        if len(rest) > 1 or "Add" in rest or first != "FusedBatchNorm":
            return "the CPU kernel has no side input"
        return None if dtype is F32 and act == "Relu" else "the CPU kernel takes float32 with Relu only"
    return f"unknown fused op {op}"


def same_device(nodes: list[Node]) -> tuple[str | None, str | None]:
    """The one device all ``nodes`` share (``""``: none placed) and None, or None and the reason."""
    devices = sorted({n.device or "" for n in nodes})
    if len(devices) > 1:
        return None, f"the matched nodes are on different devices ({', '.join(repr(d) for d in devices)})"
    return devices[0], None
