"""The extraction manifest: every constant tensor, who uses it and how, and the
integer requantization parameters of quantized TFLite layers.

For a quantized CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED the manifest gives
what an integer-only target needs per output channel ``c``::

    M[c] = s_in · s_w[c] / s_out ≈ multiplier[c] · 2^(shift[c] − 31)
    y = clamp(MBQM(Σ w·(x − zp_in) + bias[c], multiplier[c], shift[c]) + zp_out, act_min, act_max)

(``shift`` > 0 is a left shift).  Building it is O(constants + operators).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir import Graph, Model, Node, Tensor, Value, constant_value, constant_values

__all__ = ["ConstantEntry", "LayerParams", "Manifest", "build_manifest", "role_of"]

#: (dialect, op) -> {input index: role}; other constant inputs have role "input"
_ROLES: dict[tuple[str, str], dict[int, str]] = {
    ("tflite", "CONV_2D"): {0: "input", 1: "weights", 2: "bias"},
    ("tflite", "DEPTHWISE_CONV_2D"): {0: "input", 1: "weights", 2: "bias"},
    ("tflite", "FULLY_CONNECTED"): {0: "input", 1: "weights", 2: "bias"},
    ("tflite", "TRANSPOSE_CONV"): {0: "output_shape", 1: "weights", 2: "input", 3: "bias"},
    ("onnx", "Conv"): {0: "input", 1: "weights", 2: "bias"},
    ("onnx", "ConvTranspose"): {0: "input", 1: "weights", 2: "bias"},
    ("onnx", "Gemm"): {0: "input", 1: "weights", 2: "bias"},
    ("onnx", "MatMul"): {0: "input", 1: "weights"},
    ("tf", "Conv2D"): {0: "input", 1: "weights"},
    ("tf", "DepthwiseConv2dNative"): {0: "input", 1: "weights"},
    ("tf", "MatMul"): {0: "input", 1: "weights"},
    ("tf", "BiasAdd"): {0: "input", 1: "bias"},
}
QUANTIZED_LAYERS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})


def role_of(node: Node, index: int) -> str:
    """``weights``, ``bias``, ``input``... of input ``index`` of ``node``."""
    return _ROLES.get((node.dialect, node.op), {}).get(index, "input")


@dataclass(slots=True)
class ConstantEntry:
    """One constant tensor as written: its file, identity, data type and uses."""

    file: str
    name: str
    ident: str  # C identifier
    dtype: str
    shape: list[int]
    tensor_index: int | None
    quantization: dict[str, Any] | None
    uses: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "name": self.name, "c_name": self.ident, "dtype": self.dtype,
                "shape": self.shape, "tensor_index": self.tensor_index,
                "quantization": self.quantization, "uses": self.uses}


@dataclass(slots=True)
class LayerParams:
    """Requantization of one quantized layer, per output channel."""

    operator_index: int
    op: str
    name: str
    ident: str
    input_zero_point: int
    output_zero_point: int
    weights_zero_point: int
    activation_min: int
    activation_max: int
    multiplier: list[int]
    shift: list[int]
    depth_multiplier: int | None = None
    strides: list[int] | None = None
    padding: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"operator_index": self.operator_index, "op": self.op, "name": self.name, "c_name": self.ident,
                "input_zero_point": self.input_zero_point, "output_zero_point": self.output_zero_point,
                "weights_zero_point": self.weights_zero_point, "activation_min": self.activation_min,
                "activation_max": self.activation_max, "multiplier": self.multiplier, "shift": self.shift,
                "depth_multiplier": self.depth_multiplier, "strides": self.strides, "padding": self.padding}


@dataclass(slots=True)
class Manifest:
    model: str
    format: str
    constants: list[ConstantEntry]
    layers: list[LayerParams]
    operators: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "format": self.format, "constants": [c.to_json() for c in self.constants],
                "layers": [p.to_json() for p in self.layers], "operators": self.operators}


def c_ident(name: str, prefix: str, used: set[str]) -> str:
    """A unique C identifier made from ``name`` (deterministic)."""
    base = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:48] or "tensor"
    ident = f"{prefix}_{base}"
    n = 1
    while ident in used:
        n += 1
        ident = f"{prefix}_{base}_{n}"
    used.add(ident)
    return ident


def _quant_json(value: Value) -> dict[str, Any] | None:
    q = value.quant
    if q is None or q.scale.size == 0:
        return None
    return {"scale": [float(s) for s in q.scale.reshape(-1)],
            "zero_point": [int(z) for z in q.zero_point.reshape(-1)], "axis": int(q.axis)}


def build_manifest(model: Model) -> tuple[Manifest, list[tuple[ConstantEntry, Tensor]]]:
    """The manifest of ``model``'s main graph, and each entry's tensor (to write)."""
    graph = model.graph
    order = list(graph)
    position = {node: i for i, node in enumerate(order)}
    used: set[str] = set()
    entries: list[tuple[ConstantEntry, Tensor]] = []
    for n, value in enumerate(_unique(constant_values(graph))):
        tensor = constant_value(value)
        if tensor is None:
            continue
        index = value.meta.get("tflite.tensor_index")
        ident = c_ident(value.name, f"t{n:04d}", used)
        entry = ConstantEntry(
            file=f"{n:04d}_{ident[6:][:60]}.npy", name=value.name, ident=ident, dtype=tensor.dtype.value,
            shape=[int(d) for d in tensor.shape or ()], tensor_index=None if index is None else int(index),
            quantization=_quant_json(value),
        )
        for node, i in _final_uses(value):
            entry.uses.append({"operator_index": position.get(node), "op": node.op, "operator": node.name,
                               "input_index": i, "role": role_of(node, i)})
        entries.append((entry, tensor))
    operators = [
        {"index": i, "op": node.op, "name": node.name,
         "inputs": [None if v is None else v.name for v in node.inputs],
         "outputs": [v.name for v in node.outputs]}
        for i, node in enumerate(order)
    ]
    layers = list(_layer_params(graph, order, used)) if model.format == "tflite" else []
    label = str(model.source_path) if model.source_path is not None else f"<in-memory {model.format} model>"
    return Manifest(label, model.format, [e for e, _ in entries], layers, operators), entries


def _final_uses(value: Value) -> list[tuple[Node, int]]:
    """``(node, input index)`` reading ``value``, looking through TF ``Identity`` chains
    (frozen Keras graphs read every weight through one).  Iterative, O(uses)."""
    found: list[tuple[Node, int]] = []
    stack = list(reversed(value.uses()))
    seen: set[int] = set()
    while stack:
        node, i = stack.pop()
        if node.dialect == "tf" and node.op == "Identity" and node.outputs and id(node) not in seen:
            seen.add(id(node))
            stack.extend(reversed(node.outputs[0].uses()))
            continue
        found.append((node, i))
    return found


def _unique(values: Iterable[Value]) -> list[Value]:
    seen: dict[int, Value] = {}
    for v in values:
        seen.setdefault(id(v), v)
    return list(seen.values())


def _layer_params(graph: Graph, order: list[Node], used: set[str]) -> Iterable[LayerParams]:
    # lazy: the reference interpreter (~15 ms) loads only when a TFLite model is extracted
    from ..runtime.reference import OpContext, activation_range, channel_multipliers, legacy_multiplier, quant_of

    for i, node in enumerate(order):
        if node.op not in QUANTIZED_LAYERS or len(node.inputs) < 2:
            continue
        x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if x is None or w is None or x.dtype is None or x.dtype.value not in ("int8", "uint8"):
            continue
        q_in, q_w, q_out = quant_of(x), quant_of(w), quant_of(y)
        if q_in is None or q_w is None or q_out is None or w.shape is None:
            continue
        dim = w.shape[3] if node.op == "DEPTHWISE_CONV_2D" else w.shape[0]
        if not isinstance(dim, int):
            continue
        channels = dim
        legacy = x.dtype.value == "uint8" and q_w.scale.size == 1
        m, s = (legacy_multiplier if legacy else channel_multipliers)(q_in.s, q_w, q_out.s, channels)
        ctx = OpContext(node, [], "double")
        act = int(node.attr("fused_activation_function", 0) or 0)
        lo, hi = activation_range(ctx, act, np.dtype(x.dtype.value))
        strides = None
        if node.op != "FULLY_CONNECTED":
            strides = [int(node.attr("stride_h", 1)), int(node.attr("stride_w", 1))]
        yield LayerParams(
            operator_index=i, op=node.op, name=node.name, ident=c_ident(node.name, f"op{i:03d}", used),
            input_zero_point=q_in.zp, output_zero_point=q_out.zp, weights_zero_point=q_w.zp,
            activation_min=int(lo), activation_max=int(hi),
            multiplier=[int(v) for v in m], shift=[int(v) for v in s],
            depth_multiplier=int(node.attr("depth_multiplier", 1) or 1) if node.op == "DEPTHWISE_CONV_2D" else None,
            strides=strides,
            padding=None if node.op == "FULLY_CONNECTED" else ("SAME" if int(node.attr("padding", 0)) == 0 else "VALID"),
        )
