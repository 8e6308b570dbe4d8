"""The extraction manifest: every constant tensor, who uses it and how, and the
integer parameters of quantized TFLite layers.

For a quantized CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED the manifest gives
what an integer-only target needs per output channel ``c``::

    M[c] = s_in · s_w[c] / s_out ≈ multiplier[c] · 2^(shift[c] − 31)
    y = clamp(MBQM(Σ w·(x − zp_in) + bias[c], multiplier[c], shift[c]) + zp_out, act_min, act_max)

(``shift`` > 0 is a left shift); the other quantized operators' parameters are listed in
:mod:`.layers`.  A sparse TFLite constant is written dense, and its sparse form
(traversal order, block map, dimension metadata with segments and indices) is in the
manifest beside it, its stored values in a second file.  LSTM inputs are named by their
role (``input_to_forget_weights``, ``recurrent_to_cell_weights``, ``cell_to_output_weights``,
``projection_weights``, ``forget_gate_bias``, ``input_layer_norm_coefficients``...; ``fw_``/``bw_``
for BIDIRECTIONAL_SEQUENCE_LSTM), as do the RNN, SVDF and PRELU ones.
Building it is O(constants + operators).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GraphwrightError
from ..formats.tflite.sparsity import sparse_form, stored_values
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
#: UNIDIRECTIONAL_SEQUENCE_LSTM's (and LSTM's) inputs by index, as TFLite's lstm_shared.h names them
_LSTM_ROLES = dict(enumerate((
    "input",
    "input_to_input_weights", "input_to_forget_weights", "input_to_cell_weights", "input_to_output_weights",
    "recurrent_to_input_weights", "recurrent_to_forget_weights", "recurrent_to_cell_weights",
    "recurrent_to_output_weights",
    "cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights",
    "input_gate_bias", "forget_gate_bias", "cell_gate_bias", "output_gate_bias",
    "projection_weights", "projection_bias",
    "output_state", "cell_state",
    "input_layer_norm_coefficients", "forget_layer_norm_coefficients", "cell_layer_norm_coefficients",
    "output_layer_norm_coefficients",
)))
for _op in ("UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM"):
    _ROLES[("tflite", _op)] = _LSTM_ROLES
_CELL = [_LSTM_ROLES[i] for i in range(1, 18)]  # one direction's weights, peepholes, biases, projection
_AUX = ["aux_input_to_input_weights", "aux_input_to_forget_weights", "aux_input_to_cell_weights",
        "aux_input_to_output_weights"]
#: BIDIRECTIONAL_SEQUENCE_LSTM: input, forward cell, backward cell, the four states, aux input and weights
_ROLES[("tflite", "BIDIRECTIONAL_SEQUENCE_LSTM")] = dict(enumerate([
    "input", *(f"fw_{r}" for r in _CELL), *(f"bw_{r}" for r in _CELL),
    "fw_output_state", "fw_cell_state", "bw_output_state", "bw_cell_state", "aux_input",
    *(f"fw_{r}" for r in _AUX), *(f"bw_{r}" for r in _AUX),
]))
_RNN_ROLES = {0: "input", 1: "input_weights", 2: "recurrent_weights", 3: "bias", 4: "hidden_state"}
for _op in ("RNN", "UNIDIRECTIONAL_SEQUENCE_RNN"):
    _ROLES[("tflite", _op)] = _RNN_ROLES
_ROLES[("tflite", "SVDF")] = {0: "input", 1: "feature_weights", 2: "time_weights", 3: "bias", 4: "state"}
_ROLES[("tflite", "PRELU")] = {0: "input", 1: "alpha"}
_ROLES[("tflite", "BATCH_MATMUL")] = {0: "input", 1: "weights"}


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
    #: a sparse TFLite constant's sparse form (see :mod:`graphwright.formats.tflite.sparsity`),
    #: with ``values_file`` (its stored values, in traversal order) and ``values_count``
    sparsity: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"file": self.file, "name": self.name, "c_name": self.ident, "dtype": self.dtype,
               "shape": self.shape, "tensor_index": self.tensor_index,
               "quantization": self.quantization, "uses": self.uses}
        if self.sparsity is not None:
            doc["sparsity"] = self.sparsity
        return doc


@dataclass(slots=True)
class LayerParams:
    """The integer parameters of one quantized layer (``params``: see :mod:`.layers`); large
    arrays (the 65536-entry tables of int16 operators) are NumPy arrays, written to their own
    ``.npy`` files (:meth:`array_file`) and named in the JSON by ``{"file": ...}``."""

    operator_index: int
    op: str
    name: str
    ident: str
    params: dict[str, Any]

    def array_file(self, key: str) -> str:
        return f"layer{self.operator_index:04d}_{key}.npy"

    def to_json(self) -> dict[str, Any]:
        params = {k: {"file": self.array_file(k), "dtype": str(v.dtype), "shape": list(v.shape)}
                  if isinstance(v, np.ndarray) else v for k, v in self.params.items()}
        return {"operator_index": self.operator_index, "op": self.op, "name": self.name, "c_name": self.ident,
                **params}


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
        file = f"{n:04d}_{ident[6:][:60]}.npy"
        entry = ConstantEntry(
            file=file, name=value.name, ident=ident, dtype=tensor.dtype.value,
            shape=[int(d) for d in tensor.shape or ()], tensor_index=None if index is None else int(index),
            quantization=_quant_json(value),
            sparsity=_sparsity_json(value, tensor, file) if model.format == "tflite" else None,
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


def _sparsity_json(value: Value, tensor: Tensor, file: str) -> dict[str, Any] | None:
    try:
        form = sparse_form(value)
        if form is None:
            return None
        tensor.numpy()  # densifies: refuses metadata no runtime could read
        count = int(stored_values(tensor).size)
    except ValueError as e:
        raise GraphwrightError(f"cannot extract {value.name!r}: {e}") from None
    return {**form.to_json(), "values_file": file.removesuffix(".npy") + ".sparse_values.npy",
            "values_count": count}


def _layer_params(graph: Graph, order: list[Node], used: set[str]) -> Iterable[LayerParams]:
    from .layers import layer_params  # lazy: the reference interpreter (~15 ms) loads only for TFLite models

    for i, node in enumerate(order):
        params = layer_params(node)
        if params is not None:
            yield LayerParams(i, node.op, node.name, c_ident(node.name, f"op{i:03d}", used), params)
