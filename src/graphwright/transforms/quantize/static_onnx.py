"""quantize_static on ONNX: QDQ format, as ``onnxruntime.quantization.quantize_static`` writes it.

Before::  x -> Conv(W, B) -> Relu -> y
After::   x -> QuantizeLinear(x_scale, x_zp) -> DequantizeLinear -> Conv(W', B') -> QuantizeLinear -> ...
          W' = DequantizeLinear(W_quantized[int8], W_scale[C], W_zero_point[C]; axis=0)
          B' = DequantizeLinear(B_quantized[int32], s_x * W_scale, 0; axis=0)
          (the Relu is gone: the Conv's output is quantized with the Relu's range)

Which tensors are quantized, per operator type, is :mod:`._qdq_onnx_plan`; the numbers
(scale and zero point from a ``(min, max)`` range, codes, int32 biases) are
:mod:`._qdq_onnx_params`.  Activations take their ranges from ``ranges`` (by value name of
the float model; a needed one missing is an error naming it, except the output of a
``Constant`` node, whose range is its own min/max, what calibration finds); weights from their own
values, symmetric per channel (axis 0 for Conv, 1 for ConvTranspose and MatMul, 0/1 for
Gemm by ``transB``).  Names follow onnxruntime: ``t_QuantizeLinear``/``t_DequantizeLinear``
nodes, ``t_scale``/``t_zero_point`` initializers, ``W_quantized``, ``B_quantized_scale``;
graph outputs keep their names and float type (the DequantizeLinear writes them).
onnxruntime's graph optimizer fuses the result into QLinearConv/QLinearMatMul/QGemm/...
Tensors the model already quantizes (outputs of its DequantizeLinear nodes, inputs of its
QuantizeLinear nodes) are left alone: a QDQ model comes out unchanged.  Where onnxruntime
would reuse an existing initializer that happens to carry the name it wants (``t_scale``),
fresh names are taken instead.

int16 activations need QuantizeLinear of opset 21; below it ``target=onnxruntime`` writes
onnxruntime's ``com.microsoft`` Q/DQ (as onnxruntime does), ``generic`` refuses.  Opset < 10
has no QuantizeLinear (refused); opset < 13 has no per-channel axis (weights per tensor,
with a note).  Tensors whose range no scale represents (non-finite, wider than float32, an
attention mask's ``finfo.min``: see :func:`._qdq_onnx_plan.unusable_range`) stay float, named in
a note.  Only the main graph is quantized.  O(N + E + weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, Tensor, Value, constant_value
from .._onnx import OPSET_IMPORT, Names, opset_version
from ..registry import TransformResult
from ._qdq_onnx_params import (
    INT_TYPES,
    QParams,
    quantize,
    quantize_bias,
    range_params,
    weight_params,
    widen_weight_scale_for_bias,
)
from ._qdq_onnx_plan import BiasMark, QdqPlan, adjust_ranges, is_weight, plan_qdq, unusable_range
from .options import QuantOptions, Ranges

__all__ = ["quantize_static_onnx", "unusable_range"]

MS_DOMAIN = "com.microsoft"
#: First opsets with QuantizeLinear, with its per-channel axis, and with 16-bit types.
QDQ_OPSET, AXIS_OPSET, INT16_OPSET = 10, 13, 21


def quantize_static_onnx(model: Model, ranges: Ranges, options: QuantOptions) -> TransformResult:
    """Insert QDQ pairs, quantize weights and biases (see the module docstring); mutates ``model``."""
    if model.format != "onnx":
        raise TransformError(f"quantize_static_onnx works on ONNX models, not {model.format}")
    opset = opset_version(model, default=AXIS_OPSET)
    domain, notes = _check_options(opset, options)
    if opset < AXIS_OPSET and options.per_channel:
        options = replace(options, per_channel=False)
        notes.append(f"opset {opset} has no per-channel DequantizeLinear (needs {AXIS_OPSET}): weights per tensor")
    graph = model.graph
    is_float = _float_values(model, notes)
    table = adjust_ranges(graph, ranges, options)
    plan = plan_qdq(graph, options, table, opset, is_float)
    writer = _Writer(model, options, table, domain)
    writer.write(plan)
    if domain == MS_DOMAIN and writer.pairs + writer.weights:
        imports = dict(model.meta.get(OPSET_IMPORT) or {})
        imports.setdefault(MS_DOMAIN, 1)
        model.meta[OPSET_IMPORT] = imports
    notes.extend(_float_notes(plan))
    stats = {
        "nodes_quantized": sum(plan.handled.values()), "qdq_pairs": writer.pairs,
        "weights_quantized": writer.weights, "biases_quantized": writer.biases,
        "activations_removed": sum(plan.fused.values()), "nodes_left_float": sum(plan.left_float.values()),
        "weight_scales_widened": writer.widened, "already_quantized": writer.existing,
        "unusable_ranges": len({name for names in plan.unusable.values() for name in names}),
    }
    if writer.existing:
        notes.append(f"{writer.existing} tensor(s) already quantized by the model's own Q/DQ nodes: left as they are")
    changed = bool(writer.pairs or writer.weights or writer.biases or plan.fused)
    return TransformResult(changed, stats, notes)


def _check_options(opset: int, options: QuantOptions) -> tuple[str, list[str]]:
    if opset < QDQ_OPSET:
        raise TransformError(f"quantize_static: opset {opset} has no QuantizeLinear (needs {QDQ_OPSET}); "
                             f"convert the model to opset 13 or later first")
    if options.weight_type not in ("int8", "uint8"):
        raise TransformError(f"quantize_static on ONNX quantizes weights to int8 or uint8, not "
                             f"{options.weight_type}; use quantize_weights for 4-bit weights")
    if options.activation_type == "int16" and opset < INT16_OPSET:
        if options.target != "onnxruntime":
            raise TransformError(f"quantize_static: int16 activations need QuantizeLinear of opset {INT16_OPSET} "
                                 f"(the model is opset {opset}); pass target=onnxruntime for onnxruntime's "
                                 f"com.microsoft QuantizeLinear, or convert the model to opset {INT16_OPSET}")
        return MS_DOMAIN, [f"int16 activations below opset {INT16_OPSET}: com.microsoft QuantizeLinear/"
                           f"DequantizeLinear (onnxruntime only)"]
    return "", []


def _float_values(model: Model, notes: list[str]) -> Callable[[Value], bool]:
    """A test: is this value a float32 tensor (types ONNX infers where the IR has none)."""
    graph = model.graph
    inferred: dict[Value, DType | None] = {}
    if any(v.dtype is None for node in graph for v in node.outputs):
        from ...formats.onnx.inference import InferenceFailed, infer_types  # lazy: loads onnx

        try:
            inferred = {value: dtype for value, (dtype, _) in infer_types(model, data_prop=False).items()}
        except InferenceFailed as exc:
            notes.append(f"ONNX shape inference failed ({exc}); values of unknown type are left float")

    def is_float(value: Value) -> bool:
        dtype = value.const.dtype if value.const is not None else (value.dtype or inferred.get(value))
        return dtype is DType.FLOAT32

    return is_float


def _float_notes(plan: QdqPlan) -> list[str]:
    notes = []
    if plan.excluded:
        shown = ", ".join(plan.excluded[:10]) + (" ..." if len(plan.excluded) > 10 else "")
        notes.append(f"{len(plan.excluded)} node(s) left float as excluded: {shown}")
    by_reason: dict[str, list[str]] = {}
    for (reason, op), count in sorted(plan.left_float.items()):
        if reason != "excluded":
            by_reason.setdefault(reason, []).append(f"{op} x{count}")
    notes.extend(f"left float ({reason}): {', '.join(ops)}" for reason, ops in by_reason.items())
    for reason, names in sorted(plan.unusable.items()):
        unique = list(dict.fromkeys(names))
        shown = ", ".join(unique[:5]) + (" ..." if len(unique) > 5 else "")
        notes.append(f"{len(unique)} tensor(s) left float ({reason}: no scale represents it; an attention mask "
                     f"added to scores gives one): {shown}")
    return notes


class _Writer:
    """Applies a :class:`QdqPlan`: initializers, Q/DQ nodes, rewired readers."""

    def __init__(self, model: Model, options: QuantOptions, ranges: dict[str, tuple[float, float]],
                 domain: str) -> None:
        self.graph: Graph = model.graph
        self.names = Names(model)
        self.options = options
        self.ranges = ranges
        self.domain = domain
        self.act_type = INT_TYPES[options.activation_type]
        self.weight_type = INT_TYPES[options.weight_type]
        self.head: Node | None = next(iter(self.graph), None)
        #: Quantized tensor (as in the float model) -> its scale and zero-point initializers.
        self.done: dict[Value, tuple[Value, Value, QParams]] = {}
        self.replaced: list[Value] = []
        self.pairs = self.weights = self.biases = self.widened = self.existing = 0

    def write(self, plan: QdqPlan) -> None:
        params = self.constant_params(plan)
        self.widen_for_biases(plan, params)
        shared = []
        for value, mark in list(plan.marks.items()):
            if mark.provider is not None:
                shared.append((value, mark.provider))
            elif value in params:
                self.dequantize_constant(value, params[value])
            elif not self.already_quantized(value):
                self.quantize_activation(value)
        while shared:
            ready = [(v, p) for v, p in shared if p in self.done]
            if not ready:
                raise TransformError(f"quantize_static: {shared[0][0].name!r} shares the quantization of "
                                     f"{shared[0][1].name!r}, which is not quantized")
            for value, provider in ready:
                if not self.already_quantized(value):
                    scale, zero, qp = self.done[provider]
                    self.insert_pair(value, scale, zero, qp)
                self.done.setdefault(value, self.done[provider])
            shared = [(v, p) for v, p in shared if v not in self.done]
        for bias, mark in plan.biases.items():
            self.dequantize_bias(bias, mark)
        for value in (*self.replaced, *plan.orphans):
            if not value.uses() and not value.is_graph_output and value.is_initializer:
                self.graph.remove_initializer(value)

    # -- parameters -------------------------------------------------------------
    def constant_params(self, plan: QdqPlan) -> dict[Value, QParams]:
        """Scale/zero point of every marked constant (weights: weight type; others: activation type)."""
        out = {}
        for value, mark in plan.marks.items():
            if mark.provider is not None or not is_weight(value):
                continue
            data = value.const.numpy()
            if mark.kind == "weight":
                symmetric = mark.axis is not None or self.options.symmetric_weights
                out[value] = weight_params(data, self.weight_type, symmetric, mark.axis)
            else:
                out[value] = weight_params(data, self.act_type, self.options.symmetric_activations, None)
        return out

    def widen_for_biases(self, plan: QdqPlan, params: dict[Value, QParams]) -> None:
        for bias, mark in plan.biases.items():
            weight = params.get(mark.weight)
            if weight is None or mark.input not in plan.marks or mark.input.name not in self.ranges:
                continue
            scale = self.activation_params(mark.input).scale
            self.widened += widen_weight_scale_for_bias(weight, scale, bias.const.numpy())

    def activation_params(self, value: Value) -> QParams:
        pair = self.ranges.get(value.name)
        constant = constant_value(value) if pair is None else None
        if constant is not None and constant.dtype is DType.FLOAT32 and constant.size:
            data = constant.numpy()  # a Constant node's output: the range calibration would find
            pair = (data.min(), data.max())
        if pair is None:
            readers = ", ".join(sorted({f"{n.op} {n.name!r}" for n in value.users()})[:3])
            raise TransformError(f"quantize_static: no calibrated range for {value.name!r} (read by {readers}); "
                                 f"add it to the ranges or exclude the node")
        return range_params(pair[0], pair[1], self.act_type, self.options.symmetric_activations)

    def already_quantized(self, value: Value) -> bool:
        """True for a tensor the model already quantizes (written by a DequantizeLinear, or read by a
        QuantizeLinear): left as it is, its scale recorded for the biases that need it."""
        producer = value.producer
        nodes = [producer] if producer is not None and producer.op == "DequantizeLinear" else \
            [n for n in value.users() if n.op == "QuantizeLinear" and n.inputs[0] is value]
        if not nodes:
            return False
        node = nodes[0]
        scale, zero = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else None
        scale_data = constant_value(scale) if scale is not None else None
        zero_data = constant_value(zero) if zero is not None else None
        if scale_data is not None and zero_data is not None and zero_data.dtype.numpy is not None:
            axis = node.attr("axis") if scale_data.size > 1 else None
            self.done[value] = (scale, zero, QParams(scale_data.numpy(), zero_data.numpy(), zero_data.dtype, axis))
        self.existing += 1
        return True

    # -- graph edits ------------------------------------------------------------
    def initializer(self, array: np.ndarray, base: str, dtype: DType) -> Value:
        value = Value(self.names.fresh(base), const=Tensor.from_numpy(np.array(array, order="C"), dtype))
        return self.graph.add_initializer(value)

    def scale_zero(self, base: str, qp: QParams) -> tuple[Value, Value]:
        return (self.initializer(qp.scale, f"{base}_scale", DType.FLOAT32),
                self.initializer(qp.zero_point, f"{base}_zero_point", qp.dtype))

    def node(self, op: str, inputs: list[Value], output: Value, name: str, axis: int | None) -> Node:
        attrs = {} if axis is None else {"axis": Attr.int(axis)}
        return Node(op, inputs, dialect="onnx", domain=self.domain, name=self.graph.unique_node_name(name),
                    attrs=attrs, outputs=[output])

    def at_head(self, nodes: list[Node]) -> None:
        if self.head is None:
            self.graph.extend(nodes)
        else:
            self.graph.insert_before(self.head, nodes)

    def redirect(self, value: Value, out: Value) -> None:
        """Readers of ``value`` in the main graph read ``out``; If/Loop bodies keep the float value."""
        for node, index in value.uses():
            if node.graph is self.graph:
                node.replace_input(index, out)

    def dequantize_constant(self, value: Value, qp: QParams) -> None:
        name = value.name
        codes = self.initializer(quantize(value.const.numpy(), qp), f"{name}_quantized", qp.dtype)
        scale, zero = self.scale_zero(name, qp)
        out = Value(self.names.fresh(f"{name}_DequantizeLinear_Output"), DType.FLOAT32, value.shape)
        self.redirect(value, out)
        self.at_head([self.node("DequantizeLinear", [codes, scale, zero], out, f"{name}_DequantizeLinear", qp.axis)])
        self.done[value] = (scale, zero, qp)
        self.replaced.append(value)
        self.weights += 1

    def quantize_activation(self, value: Value) -> None:
        qp = self.activation_params(value)
        scale, zero = self.scale_zero(value.name, qp)
        self.insert_pair(value, scale, zero, qp)

    def insert_pair(self, value: Value, scale: Value, zero: Value, qp: QParams) -> None:
        """x -> QuantizeLinear -> DequantizeLinear -> every reader of x (a graph output keeps its name)."""
        name = value.name
        out = Value(name if value.is_graph_output else self.names.fresh(f"{name}_DequantizeLinear_Output"),
                    DType.FLOAT32, value.shape)
        if value.is_graph_output:  # the DequantizeLinear takes the name: every reader follows it
            value.name = self.names.fresh(f"{name}_QuantizeLinear_Input")
            value.replace_all_uses_with(out)
        else:
            self.redirect(value, out)
        codes = Value(self.names.fresh(f"{name}_QuantizeLinear_Output"), qp.dtype, value.shape)
        pair = [self.node("QuantizeLinear", [value, scale, zero], codes, f"{name}_QuantizeLinear", None),
                self.node("DequantizeLinear", [codes, scale, zero], out, f"{name}_DequantizeLinear", None)]
        if value.producer is None:
            self.at_head(pair)
        else:
            self.graph.insert_after(value.producer, pair)
        self.done[value] = (scale, zero, qp)
        self.pairs += 1

    def dequantize_bias(self, bias: Value, mark: BiasMark) -> None:
        weight, source = self.done.get(mark.weight), self.done.get(mark.input)
        if weight is None or source is None:
            missing = mark.weight if weight is None else mark.input
            raise TransformError(f"quantize_static: bias {bias.name!r} of {mark.node.op} {mark.node.name!r} needs "
                                 f"the scale of {missing.name!r}, which is not quantized")
        name = bias.name
        codes, scale = quantize_bias(bias.const.numpy(), source[2].scale, weight[2].scale, mark.beta)
        per_channel = scale.size > 1
        q = self.initializer(codes, f"{name}_quantized", DType.INT32)
        s = self.initializer(scale, f"{name}_quantized_scale", DType.FLOAT32)
        z = self.initializer(np.zeros(scale.shape if per_channel else (), np.int32), f"{name}_quantized_zero_point",
                             DType.INT32)
        bias.name = self.names.fresh(f"{name}_float")
        out = Value(name, DType.FLOAT32, bias.shape)
        bias.replace_all_uses_with(out)
        self.at_head([self.node("DequantizeLinear", [q, s, z], out, f"{name}_DequantizeLinear",
                                0 if per_channel else None)])
        self.replaced.append(bias)
        self.biases += 1

