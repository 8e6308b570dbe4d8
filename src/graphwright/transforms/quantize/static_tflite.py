"""quantize_static_tflite: a float ``.tflite`` becomes the TFLite converter's full-integer model.

Before: a float32 model (as ``TFLiteConverter`` writes it without optimizations) and the
calibrated ``(min, max)`` of its tensors (by IR value name).  After: what the converter's
post-training integer quantization writes for the same ranges —

* int8 (MLIR quantizer): asymmetric int8 activations (scales in float32); symmetric per-channel
  int8 weights (axis 0 for CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV, axis 3 for
  DEPTHWISE_CONV_2D, one scale for PRELU's alpha); int32 biases with scale ``s_in * s_w[c]``
  (a bias several operators share is copied per reader); other float constants asymmetric per
  tensor; the fixed output ranges of LOGISTIC / SOFTMAX / TANH / LOG_SOFTMAX /
  L2_NORMALIZATION; operators that need one scale on inputs and outputs (MAX_POOL_2D, RESHAPE,
  PAD, SPLIT, CONCATENATION, MAXIMUM...) share it the converter's way: a calibrated range a
  same-scale operator overrides is dropped (forward through single-input ones, backward from
  the output of multi-input ones, so those ranges are not needed), then scales propagate from
  the last operator back; a fixed-range kernel's output another scale reaches is requantized
  right after it (``<name>1``, version 1), as is an input calibrated apart; comparisons read
  int8 inputs at their own scales into a bool, SELECT_V2 shares one scale between its selected
  inputs and output; the results of a multi-output operator (SPLIT, TOPK_V2) the graph does not
  return are named after its fused location (``<out0>;<out1>``, then numbered);
* 16x8 (flatbuffer quantizer): symmetric int16 activations with zero point 0 and the calibrated
  range recorded as min/max, int8 weights, int64 biases (``quantized_bias_type`` INT64), the
  output of a same-scale operator takes its input's scale, CONCATENATION's inputs of another
  scale are requantized just before it (``<name>_requantized``).

Operators LiteRT has no integer kernel for (or that ``exclude_ops``/``exclude_nodes`` name)
stay float between DEQUANTIZE and QUANTIZE (MLIR: one of each per value, after its producer,
``tfl.dequantize<n>``/``tfl.quantize<n>``; 16x8: one per reader, just before it,
``<name>_float``/``<name>_int16``), with a note.  ``io_type`` float32 keeps float graph
inputs/outputs (QUANTIZE after inputs, DEQUANTIZE before outputs, which keep their names);
int8/int16 makes them integer with their tensors' scale and zero point.  Operator versions
become the converter's.

Cost: O(nodes + edges + weight elements); the model is changed in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, QuantParams, Tensor, Value
from ..registry import TransformResult
from ._tflite_quant_math import (
    activation_int8,
    activation_int16,
    bias_codes,
    constant_codes,
    quantize_weight,
    widen_near_zero,
)
from ._tflite_quant_ops import FIXED_OUTPUT, SHAPE_ONLY, OpSpec, spec_of
from .options import QuantOptions, Ranges

__all__ = ["check_static_tflite", "quantize_static_tflite"]

#: (scale, zero point) of one activation.
Params = tuple[float, int]


def quantize_static_tflite(model: Model, ranges: Ranges, options: QuantOptions) -> TransformResult:
    """Quantize ``model`` (float TFLite) in place with ``ranges``; see the module docstring."""
    mode = check_static_tflite(model, options)
    planner = _Planner(model.graph, ranges, options, mode)
    planner.select()
    planner.resolve()
    _Rewriter(planner).run()
    stats = {"nodes_quantized": len(planner.quantized), "nodes_float": len(planner.float_notes),
             "requantized": len(planner.requant) + len(planner.requant_results)}
    notes = [f"{name} ({op}) stays float: {why}" for name, op, why in planner.float_notes]
    return TransformResult(changed=True, stats=stats, notes=notes)


def check_static_tflite(model: Model, options: QuantOptions) -> str:
    """Raise the one-line TransformError that quantizing ``model`` with ``options`` would raise
    (wrong options, a model already quantized), before any calibration; returns the mode."""
    if model.format != "tflite":
        raise TransformError(f"quantize_static_tflite needs a TFLite model, got {model.format}")
    if options.activation_type not in ("int8", "int16"):
        raise TransformError(f"TFLite full-integer activations are int8 or int16 (16x8), not "
                             f"{options.activation_type}; use --activation-type int8 or int16")
    if options.weight_type != "int8":
        raise TransformError(f"TFLite full-integer weights are int8, not {options.weight_type}")
    if options.symmetric_activations and options.activation_type == "int8":
        raise TransformError("TFLite int8 activations are asymmetric (16x8 is the symmetric scheme); "
                             "drop symmetric_activations or use activation_type int16")
    if options.io_type not in ("float32", options.activation_type):
        raise TransformError(f"io_type must be float32 or {options.activation_type} for "
                             f"{options.activation_type} activations, got {options.io_type}")
    for graph in model.graphs:
        for value in graph.initializers:
            if value.quant is not None and value.quant.scale.size:
                raise TransformError(f"the model is already quantized (tensor {value.name!r} has a scale); "
                                     "quantize its float original")
        for node in graph:
            if node.op in ("QUANTIZE", "DEQUANTIZE"):
                raise TransformError(f"the model already converts types ({node.op} {node.name!r}: float16 or "
                                     "quantized weights); quantize its float32 original")
    return options.activation_type


@dataclass
class _State:
    """The quantization of one activation value while parameters are resolved."""

    params: Params | None = None
    immutable: bool = False


@dataclass
class _Planner:
    graph: Graph
    ranges: Ranges
    options: QuantOptions
    mode: str
    quantized: dict[Node, OpSpec] = field(default_factory=dict)
    float_notes: list[tuple[str, str, str]] = field(default_factory=list)
    states: dict[Value, _State] = field(default_factory=dict)
    #: (node, input index) -> params the input is requantized to
    requant: dict[tuple[Node, int], Params] = field(default_factory=dict)
    #: a fixed-range kernel's output -> the params every reader gets it requantized to (MLIR)
    requant_results: dict[Value, Params] = field(default_factory=dict)

    # -- which operators -------------------------------------------------------
    def select(self) -> None:
        for node in self.graph:
            if not _is_float(node):
                continue
            spec = spec_of(node.op) if not node.domain else None
            why = self._why_float(node, spec)
            if why is None and spec is not None:
                self.quantized[node] = spec
            else:
                self.float_notes.append((node.name, node.op, why or ""))

    def _why_float(self, node: Node, spec: OpSpec | None) -> str | None:
        if self.options.excluded(node.op, node.name):
            return "excluded"
        if spec is None:
            return "the converter has no integer kernel for it"
        if self.mode == "int16" and not spec.int16:
            return "LiteRT has no 16x8 kernel for it"
        if self.mode == "int8" and not spec.int8:
            return "the converter keeps it float in int8 models"
        constant = {i for i in (*spec.weights, *(spec.bias[:1] if spec.bias else ())) if i < len(node.inputs)}
        for i in constant:
            value = node.inputs[i]
            if value is not None and (value.const is None or value.dtype is not DType.FLOAT32):
                return f"input {i} ({value.name!r}) is not a float constant"
        for i, value in enumerate(node.inputs):
            if value is not None and value.const is not None and value.dtype is DType.FLOAT32 \
                    and not np.isfinite(value.const.numpy()).all():
                return f"input {i} ({value.name!r}) holds inf or NaN"
        return None

    def activations(self, node: Node) -> list[tuple[int, Value]]:
        """(index, value) of the node's float inputs that are not its weights or bias."""
        spec = self.quantized[node]
        skip = set(spec.weights) | ({spec.bias[0]} if spec.bias else set())
        return [(i, v) for i, v in enumerate(node.inputs)
                if v is not None and i not in skip and v.dtype is DType.FLOAT32]

    # -- which scales ------------------------------------------------------------
    def resolve(self) -> None:
        values = self._activation_values()
        if self.mode == "int8":
            self._resolve_mlir(values)
        else:
            self._resolve_legacy()
        if self.options.io_type != "float32":  # integer inputs even where only float operators read them
            for value in self.graph.inputs:
                if value.dtype is DType.FLOAT32 and value not in self.states:
                    self.states[value] = _State(self.own(value), immutable=True)

    def _activation_values(self) -> list[Value]:
        seen: dict[Value, None] = {}
        for node in self.quantized:
            for _, v in self.activations(node):
                seen.setdefault(v)
            for v in node.outputs:
                if v.dtype is DType.FLOAT32:
                    seen.setdefault(v)
        return list(seen)

    def own(self, value: Value) -> Params:
        """The parameters of ``value`` from its calibrated range (or its data, for a constant)."""
        if value.const is not None:
            data = value.const.numpy().astype(np.float64)
            lo, hi = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
            if self.mode == "int8":
                lo, hi = widen_near_zero(min(lo, 0.0), max(hi, 0.0))
        elif value.name in self.ranges:
            lo, hi = self.ranges[value.name]
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise TransformError(f"the calibrated range of tensor {value.name!r} is not finite ({lo}, {hi}); "
                                     "exclude the operator that writes it (--exclude-node) or calibrate on other data")
        else:
            raise TransformError(f"no calibrated range for tensor {value.name!r}; calibrate the model again "
                                 "(every tensor an operator to quantize reads or writes needs one)")
        if not np.isfinite(np.float32(max(hi, 0.0)) - np.float32(min(lo, 0.0))):
            raise TransformError(f"the range of tensor {value.name!r}, ({lo}, {hi}), is wider than float32 holds: "
                                 "exclude the operator that reads or writes it (--exclude-node)")
        return activation_int8(lo, hi) if self.mode == "int8" else activation_int16(lo, hi)

    def _fixed(self, node: Node) -> Params:
        scale, zero = FIXED_OUTPUT[node.op][self.mode]
        return scale, zero

    def _resolve_mlir(self, values: list[Value]) -> None:
        """The MLIR quantizer: drop the calibrated ranges a same-scale operator overrides
        (forward through single-input ones, backward from multi-input ones), then propagate."""
        stats = [v for v in values if v.const is None]
        redundant = self._redundant(set(stats))
        for v in values:
            if v.const is not None:
                self.states[v] = _State(self.own(v))
            elif v in redundant:
                self.states[v] = _State()
            else:
                self.states[v] = _State(self.own(v), immutable=True)
        fixed = [n for n, spec in self.quantized.items() if spec.scale == "fixed"]
        # MLIR's work list runs from the last operator back, and a fixed-range kernel's output is
        # set only when nothing downstream decided it: a CONCATENATION's scale wins, and the
        # kernel's output is requantized to it
        pending = [n for n, spec in self.quantized.items() if spec.scale in ("same", "concat")][::-1]
        while pending:
            waiting = [n for n in pending if not self._propagate(n)]
            if len(waiting) == len(pending):
                unset = [n for n in fixed if self.states[n.output].params is None]
                if not unset:
                    names = ", ".join(repr(n.name) for n in waiting[:3])
                    raise TransformError(f"cannot choose a scale for {names}: no calibrated range reaches them")
                for node in unset:
                    self.states[node.output].params = self._fixed(node)
            pending = waiting[::-1]  # alternate directions: chains resolve forward and backward alike
        for node in fixed:
            state, params = self.states[node.output], self._fixed(node)
            if state.params is not None and state.params != params:
                self.requant_results[node.output] = state.params
            state.params = params

    def _redundant(self, stats: set[Value]) -> set[Value]:
        redundant: set[Value] = set()
        work = self._ordered(stats)
        while work:  # forward: a single-input same-scale operator's output takes its input's range
            v = work.pop()
            producer = v.producer
            if producer in self.quantized and self.quantized[producer].scale == "fixed":
                redundant.add(v)
            for user in v.users():
                spec = self.quantized.get(user)
                floats = sum(1 for x in user.inputs if x is not None and x.dtype is DType.FLOAT32)
                if spec is None or spec.scale not in ("same", "concat") or floats > 1:
                    continue
                for out in user.outputs:
                    if out in stats and out not in redundant:
                        redundant.add(out)
                        work.append(out)
        work = [v for v in self._ordered(stats) if v not in redundant]
        visited = set(work)
        while work:  # backward: a kept range flows up through same-scale producers, redundant or not
            v = work.pop()
            producer = v.producer
            if producer not in self.quantized or self.quantized[producer].scale not in ("same", "concat"):
                continue
            for x in producer.inputs:
                if x is not None and x in stats:
                    redundant.add(x)
                    if x not in visited:
                        visited.add(x)
                        work.append(x)
        return redundant

    def _ordered(self, values: set[Value]) -> list[Value]:
        order = [v for v in self.graph.inputs if v in values]
        order += [v for node in self.graph for v in node.outputs if v in values]
        return order

    def _propagate(self, node: Node) -> bool:
        """Give a same-scale operator's inputs and outputs one scale; False: none known yet."""
        operands = self.activations(node)
        results = [self.states[v] for v in node.outputs if v in self.states]
        tensors = [self.states[v] for _, v in operands if v.const is None]
        params = _same_scale_params(tensors, results)
        if params is None:  # a constant's own scale only when nothing else reaches the operator
            params = next((self.states[v].params for _, v in operands if v.const is not None), None)
        if params is None:
            return False
        for i, v in operands:
            state = self.states[v]
            if state.params is None:
                state.params = params
            elif state.params != params:
                if v.const is not None:
                    state.params = params  # a constant is simply quantized with the shared scale
                else:
                    self.requant[(node, i)] = params
        for result in results:
            if result.params is None:
                result.params = params
        return True

    def _resolve_legacy(self) -> None:
        """The flatbuffer quantizer (16x8): in graph order, an output's parameters come from its
        range, its input (same-scale operators) or the kernel (fixed ranges)."""
        for value in self.graph.inputs:
            if value.dtype is DType.FLOAT32 and any(u in self.quantized for u in value.users()):
                self.states[value] = _State(self.own(value))
        for node in self.graph:
            spec = self.quantized.get(node)
            if spec is None:
                continue
            for _, v in self.activations(node):
                if v not in self.states:
                    self.states[v] = _State(self.own(v))
            params = None
            for out in (v for v in node.outputs if v.dtype is DType.FLOAT32):
                if spec.scale == "fixed":
                    params = self._fixed(node)
                elif spec.scale == "same":
                    params = self.states[self.activations(node)[0][1]].params
                else:
                    params = self.own(out)
                self.states[out] = _State(params)
            if spec.scale == "concat":
                for i, v in self.activations(node):
                    if self.states[v].params != params:
                        self.requant[(node, i)] = params

    def params(self, value: Value) -> Params:
        state = self.states[value]
        assert state.params is not None
        return state.params


def _same_scale_params(operands: list[_State], results: list[_State]) -> Params | None:
    """The scale a same-scale operator shares, chosen as the MLIR quantizer chooses it: a lone
    calibrated input's, else a lone calibrated output's, else the first calibrated one's, else a
    lone input's or output's already propagated, else the first propagated one's (a SPLIT whose
    one output a CONCATENATION set); None while nothing is known."""
    fixed_in = [s for s in operands if s.immutable]
    fixed_out = [s for s in results if s.immutable]
    if len(operands) == 1 and fixed_in:
        return fixed_in[0].params
    if len(results) == 1 and fixed_out:
        return fixed_out[0].params
    if fixed_in or fixed_out:
        return (fixed_in or fixed_out)[0].params
    if len(operands) == 1 and operands[0].params is not None:
        return operands[0].params
    if len(results) == 1 and results[0].params is not None:
        return results[0].params
    return next((s.params for s in (*operands, *results) if s.params is not None), None)


def _extent(data: np.ndarray, axis: int | None) -> dict[str, np.ndarray]:
    """The per-channel (or whole-tensor) min and max of a weight, as the 16x8 quantizer records them."""
    if axis is None:
        return {"min": data.min(keepdims=True).reshape(1), "max": data.max(keepdims=True).reshape(1)}
    moved = np.moveaxis(data, axis, 0).reshape(data.shape[axis], -1)
    return {"min": moved.min(axis=1), "max": moved.max(axis=1)}


def _is_float(node: Node) -> bool:
    if node.op in SHAPE_ONLY:
        return False
    return any(v is not None and v.dtype is DType.FLOAT32 for v in (*node.inputs, *node.outputs))


class _Rewriter:
    """Writes the plan into the graph: integer tensors, weights, biases, boundary ops, versions."""

    def __init__(self, plan: _Planner) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.mode = plan.mode
        self.dtype = DType.INT8 if plan.mode == "int8" else DType.INT16
        self.counters: dict[str, int] = {}
        #: the float data of the constants quantized so far (a shared bias is copied from it)
        self.float_data: dict[Value, np.ndarray] = {}
        self.names = ({v.name for v in plan.graph.initializers} | {v.name for v in plan.graph.inputs}
                      | {v.name for n in plan.graph for v in n.outputs})
        #: a requantized value -> the value it requantizes; (value, params) -> a reader's own requantization
        self.requantized_from: dict[Value, Value] = {}
        self.extra_requant: dict[tuple[Value, Params], Value] = {}
        #: the activations that become integer: outputs of quantized operators, graph inputs they read
        self.integer: set[Value] = set()

    def run(self) -> None:
        plan = self.plan
        self.integer = {v for v in plan.states if v.const is None
                        and (v.producer in plan.quantized or v.is_graph_input)}
        inputs_float = [v for v in self.graph.inputs if v in self.integer]
        outputs = [v for v in self.graph.outputs if v in self.integer]
        boundary = self._boundary_uses()
        for node, spec in plan.quantized.items():
            self._constants(node, spec)
        for value in self.integer:
            self._retype(value)
        self._float_edges(boundary)
        # the 16x8 quantizer inserts each requantization at the operator's position, so the last
        # input's comes first
        order = sorted(plan.requant, key=lambda k: -k[1]) if self.mode == "int16" else list(plan.requant)
        for node, index in order:
            self._requantize(node, index, plan.requant[(node, index)])
        for value, params in plan.requant_results.items():
            self._requantize_value(value, params)
        if self.mode == "int8":
            self._fused_result_names()
        self._graph_io(inputs_float, outputs)
        self._versions()

    def _fused_result_names(self) -> None:
        """MLIR names the results of a quantized multi-output operator (SPLIT, SPLIT_V, TOPK_V2)
        after the operator's fused location, ``<out0>;<out1>...``: each result the graph does not
        return takes that name, the next ones numbered (``...1``); returned ones keep theirs."""
        for node in self.plan.quantized:
            if len(node.outputs) < 2:
                continue
            fused = ";".join(v.name for v in node.outputs)
            for value in node.outputs:
                if value.is_graph_output:
                    continue
                if fused not in self.names:
                    self.names.add(fused)
                    value.name = fused
                else:
                    value.name = self._unique(fused)

    def _versions(self) -> None:
        """The converter's operator versions (a float operator already higher keeps its own) and
        16x8 options; the 16x8 quantizer versions the operators it knows but left float or
        integer too; and one operator code per builtin quantized, at the highest version its
        operators need (every node of that builtin gets it)."""
        plan = self.plan
        for node in self.graph if self.mode == "int16" else ():
            spec = spec_of(node.op) if not node.domain and node not in plan.quantized else None
            if spec is not None:
                node.meta["tflite.version"] = max(int(node.meta.get("tflite.version", 1)), spec.version)
        for node, spec in plan.quantized.items():
            version = spec.version16 if self.mode == "int16" and spec.version16 is not None else spec.version
            node.meta["tflite.version"] = max(int(node.meta.get("tflite.version", 1)), version)
            if self.mode == "int16":
                for key, value in spec.int16_attrs.items():
                    if key in node.attrs:
                        node.attrs[key] = Attr.bool(value) if isinstance(value, bool) else Attr.int(value)
        ops = {node.op for node in self.plan.quantized}
        highest: dict[str, int] = {}
        for node in self.graph:
            if node.op in ops:
                highest[node.op] = max(highest.get(node.op, 1), int(node.meta.get("tflite.version", 1)))
        for node in self.graph:
            if node.op in highest:
                node.meta["tflite.version"] = highest[node.op]

    # -- constants -----------------------------------------------------------------
    def _constants(self, node: Node, spec: OpSpec) -> None:
        legacy = self.mode == "int16"
        self._private_constants(node)
        weights: dict[int, np.ndarray] = {}
        for index, axis in spec.weights.items():
            value = node.inputs[index] if index < len(node.inputs) else None
            if value is None:
                continue
            if value.dtype is DType.INT8:  # shared, already quantized for another reader
                weights[index] = value.quant.scale if value.quant is not None else np.ones(1)
                continue
            axis_used = axis if self.plan.options.per_channel and axis is not None else None
            data = value.const.numpy()
            codes, scales = quantize_weight(data, axis_used, legacy=legacy)
            zeros = np.zeros(scales.size, np.int64)
            extent = _extent(data, axis_used) if legacy else {}
            self._set_const(value, codes, QuantParams(scales, zeros, axis_used or 0, **extent))
            weights[index] = scales
        if spec.bias is not None:
            b, a, w = spec.bias
            bias = node.inputs[b] if b < len(node.inputs) else None
            if bias is not None and bias.dtype is not DType.FLOAT32 and not legacy:
                bias = self._own_copy(node, b, bias)
            if bias is not None and bias.dtype is DType.FLOAT32 and w in weights:
                scale_in = self.plan.params(node.inputs[a])[0]
                codes, scales = bias_codes(bias.const.numpy(), scale_in, weights[w], bits=64 if legacy else 32)
                self._set_const(bias, codes, QuantParams(scales, np.zeros(scales.size, np.int64), 0))
        for _, value in self.plan.activations(node):
            if value.const is not None and value.dtype is DType.FLOAT32:
                self._quantize_constant(value)

    def _private_constants(self, node: Node) -> None:
        """A float constant an operator left float reads too keeps its float data: the quantized
        reader gets its own copy (``<name>1``, the next free name) to quantize."""
        for index, value in enumerate(node.inputs):
            if value is None or value.const is None or value.dtype is not DType.FLOAT32:
                continue
            if all(user in self.plan.quantized for user in value.users()):
                continue
            name = self._unique(value.name)
            copy = Value(name, DType.FLOAT32, value.shape, const=Tensor.from_numpy(value.const.numpy(), name=name))
            self.graph.add_initializer(copy)
            node.replace_input(index, copy)
            if value in self.plan.states:
                self.plan.states[copy] = self.plan.states[value]

    def _own_copy(self, node: Node, index: int, value: Value) -> Value | None:
        """A bias another operator quantized already: the MLIR quantizer gives each reader its own
        copy (``<name>1``, ``<name>2``... the next free names), quantized with its own scales."""
        source = self.float_data.get(value)
        if source is None:
            return value
        name = self._unique(value.name)
        copy = Value(name, DType.FLOAT32, value.shape, const=Tensor.from_numpy(source, name=name))
        self.graph.add_initializer(copy)
        node.replace_input(index, copy)
        return copy

    def _quantize_constant(self, value: Value) -> None:
        scale, zero = self.plan.params(value)
        data = value.const.numpy()
        codes = constant_codes(data, scale, zero, bits=8 if self.dtype is DType.INT8 else 16)
        extent = {"min": [float(data.min())], "max": [float(data.max())]} if self.mode == "int16" and data.size else {}
        self._set_const(value, codes, QuantParams([scale], [zero], **extent))

    def _set_const(self, value: Value, codes: np.ndarray, quant: QuantParams) -> None:
        self.float_data.setdefault(value, value.const.numpy())
        value.meta.pop("tflite.sparsity", None)  # a pruned weight is written dense once quantized
        tensor = Tensor.from_numpy(np.array(codes, order="C"), name=value.name)
        value.const = tensor
        value.dtype = tensor.dtype
        value.quant = quant

    def _retype(self, value: Value) -> None:
        value.dtype = self.dtype
        value.quant = self._activation_quant(value, self.plan.params(value))

    def _activation_quant(self, value: Value, params: Params) -> QuantParams:
        """Scale and zero point; in 16x8 also the calibrated range widened to hold 0, which that
        quantizer records."""
        found = self.plan.ranges.get(value.name) if self.mode == "int16" else None
        extent = {"min": [min(found[0], 0.0)], "max": [max(found[1], 0.0)]} if found is not None else {}
        return QuantParams([params[0]], [params[1]], **extent)

    # -- float edges -----------------------------------------------------------------
    def _boundary_uses(self) -> list[tuple[Node, int, Value, bool]]:
        """(reader, input index, value, reader quantized) where a float and an integer side meet."""
        found = []
        for node in list(self.graph):
            quantized = node in self.plan.quantized
            if not quantized and not _is_float(node):
                continue  # integer operators (and SHAPE) read integer tensors as they are
            wanted = dict(self.plan.activations(node)) if quantized else {}
            for i, v in enumerate(node.inputs):
                if v is None or v.const is not None:
                    continue
                if quantized and i in wanted and v not in self.integer:
                    found.append((node, i, v, True))
                elif not quantized and v in self.integer:
                    found.append((node, i, v, False))
        return found

    def _float_edges(self, boundary: list[tuple[Node, int, Value, bool]]) -> None:
        shared: dict[Value, Value] = {}
        for node, index, value, into_quantized in boundary:
            if into_quantized:
                self._insert_quantize(node, index, value, shared)
            else:
                self._insert_dequantize(node, index, value, shared)

    def _insert_quantize(self, node: Node, index: int, value: Value, shared: dict[Value, Value]) -> None:
        """A float value read by a quantized operator: QUANTIZE (once per value in int8, once per
        reader in 16x8, as the two quantizers do)."""
        key = ("q", value)
        if self.mode == "int8" and key in shared:
            node.replace_input(index, shared[key])
            return
        params = self.plan.own(value) if value not in self.plan.states else self.plan.params(value)
        out = Value(self._name(value, "quantize"), self.dtype, value.shape, quant=self._activation_quant(value, params))
        quantize = Node("QUANTIZE", [value], dialect="tflite", name=out.name, outputs=[out])
        quantize.meta["tflite.version"] = 1 if self.mode == "int8" else 2
        self._place(quantize, node, value)
        node.replace_input(index, out)
        shared[key] = out

    def _insert_dequantize(self, node: Node, index: int, value: Value, shared: dict[Value, Value]) -> None:
        key = ("d", value)
        if self.mode == "int8" and key in shared:
            node.replace_input(index, shared[key])
            return
        out = Value(self._name(value, "dequantize"), DType.FLOAT32, value.shape)
        dequantize = Node("DEQUANTIZE", [value], dialect="tflite", name=out.name, outputs=[out])
        dequantize.meta["tflite.version"] = 2
        self._place(dequantize, node, value)
        node.replace_input(index, out)
        shared[key] = out

    def _place(self, new: Node, reader: Node, value: Value) -> None:
        """MLIR writes a boundary op right after the value's producer (a graph input's first of
        all); the 16x8 quantizer right before the reader."""
        if self.mode == "int16":
            self.graph.insert_before(reader, new)
        elif value.producer is not None:
            self.graph.insert_after(value.producer, new)
        else:
            self.graph.insert_before(next(iter(self.graph)), new)

    def _name(self, value: Value, kind: str) -> str:
        if self.mode == "int16":
            return f"{value.name}_{'int16' if kind == 'quantize' else 'float'}"
        count = self.counters.get(kind, 0)
        self.counters[kind] = count + 1
        return f"tfl.{kind}{count or ''}"

    def _requantize(self, node: Node, index: int, params: Params) -> None:
        """An input of a same-scale operator at another scale: a QUANTIZE to the shared scale,
        ``<name>_requantized`` just before the operator, for it alone (16x8); MLIR requantizes
        the value for every reader (:meth:`_requantize_value`)."""
        value = node.inputs[index]
        assert value is not None
        if self.mode == "int8":
            self._requantize_reader(node, index, value, params)
            return
        out = Value(f"{value.name}_requantized", self.dtype, value.shape, quant=QuantParams([params[0]], [params[1]]))
        quantize = Node("QUANTIZE", [value], dialect="tflite", name=out.name, outputs=[out])
        quantize.meta["tflite.version"] = 2
        self.graph.insert_before(node, quantize)
        node.replace_input(index, out)

    def _requantize_reader(self, node: Node, index: int, value: Value, params: Params) -> None:
        """MLIR requantizes a value once for all its readers; a reader wanting yet another scale
        (same-scale operators of different scales reading one value) gets its own QUANTIZE of
        the original value to that scale."""
        source = self.requantized_from.get(value, value)
        current = value.quant
        if current is not None and (float(current.scale[0]), int(current.zero_point[0])) == params:
            return
        if source is value:
            self._requantize_value(value, params, keep=self._wants_own_scale)
            return
        key = (source, params)
        if key not in self.extra_requant:
            out = Value(self._unique(source.name), self.dtype, source.shape,
                        quant=QuantParams([params[0]], [params[1]]))
            quantize = Node("QUANTIZE", [source], dialect="tflite", name=out.name, outputs=[out])
            quantize.meta["tflite.version"] = 1
            self.graph.insert_after(value.producer, quantize)
            self.extra_requant[key] = out
        node.replace_input(index, self.extra_requant[key])

    def _wants_own_scale(self, reader: Node, index: int) -> bool:
        """A same-scale operator planned on the value's own scale (not requantized itself)."""
        spec = self.plan.quantized.get(reader)
        return spec is not None and spec.scale in ("same", "concat") and (reader, index) not in self.plan.requant

    def _requantize_value(self, value: Value, params: Params,
                          keep: Callable[[Node, int], bool] = lambda reader, index: False) -> None:
        """MLIR: a QUANTIZE right after the value's producer, named after the value plus a
        number, read by every reader instead (and returned instead, when the graph returns it);
        readers ``keep`` names (same-scale operators planned on the value's own scale) go on
        reading the value."""
        if value.quant is not None and (float(value.quant.scale[0]), int(value.quant.zero_point[0])) == params:
            return  # another reader already requantized it to this scale
        out = Value(self._unique(value.name), self.dtype, value.shape, quant=QuantParams([params[0]], [params[1]]))
        readers = [(reader, i) for reader, i in value.uses() if not keep(reader, i)]
        quantize = Node("QUANTIZE", [value], dialect="tflite", name=out.name, outputs=[out])
        quantize.meta["tflite.version"] = 1
        if value.producer is not None:
            self.graph.insert_after(value.producer, quantize)
        else:
            self.graph.insert_before(next(iter(self.graph)), quantize)
        for reader, i in readers:
            reader.replace_input(i, out)
        self.requantized_from[out] = value
        if value.is_graph_output:
            self.graph.set_outputs([out if v is value else v for v in self.graph.outputs])

    def _unique(self, name: str) -> str:
        k = 1
        while f"{name}{k}" in self.names:
            k += 1
        self.names.add(f"{name}{k}")
        return f"{name}{k}"

    # -- graph inputs and outputs --------------------------------------------------------
    def _graph_io(self, inputs: list[Value], outputs: list[Value]) -> None:
        if self.plan.options.io_type != "float32":
            for value in self.graph.outputs:
                if value.dtype is DType.FLOAT32 and value.producer is not None:
                    self._integer_output(value)
            return
        for value in inputs:
            self._float_input(value)
        for value in outputs:
            self._float_output(value)

    def _float_input(self, value: Value) -> None:
        params = QuantParams(value.quant.scale, value.quant.zero_point) if value.quant is not None else None
        readers = value.uses()
        inner = Value(self._name(value, "quantize"), self.dtype, value.shape, quant=params)
        value.dtype, value.quant = DType.FLOAT32, None
        quantize = Node("QUANTIZE", [value], dialect="tflite", name=inner.name, outputs=[inner])
        quantize.meta["tflite.version"] = 1 if self.mode == "int8" else 2
        first = readers[0][0] if readers else None
        if first is None:
            return
        self.graph.insert_before(first, quantize)
        for reader, i in readers:
            reader.replace_input(i, inner)

    def _integer_output(self, value: Value) -> None:
        """A float operator's result the graph returns, with integer outputs: a QUANTIZE takes over
        its name (the float tensor becomes ``<name>1``, or the next free number)."""
        inner = Value(value.name, self.dtype, value.shape, quant=self._activation_quant(value, self.plan.own(value)))
        inner.meta.update({k: v for k, v in value.meta.items() if k == "tflite.tensor_index"})
        value.meta.pop("tflite.tensor_index", None)
        value.name = self._unique(value.name)
        quantize = Node("QUANTIZE", [value], dialect="tflite", name=inner.name, outputs=[inner])
        quantize.meta["tflite.version"] = 1 if self.mode == "int8" else 2
        self.graph.insert_after(value.producer, quantize)
        self.graph.set_outputs([inner if v is value else v for v in self.graph.outputs])

    def _float_output(self, value: Value) -> None:
        if value.dtype is DType.FLOAT32:
            return
        outer = Value(value.name, DType.FLOAT32, value.shape)
        outer.meta.update({k: v for k, v in value.meta.items() if k == "tflite.tensor_index"})
        value.meta.pop("tflite.tensor_index", None)
        value.name = self._unique(value.name)
        dequantize = Node("DEQUANTIZE", [value], dialect="tflite", name=outer.name, outputs=[outer])
        dequantize.meta["tflite.version"] = 2
        producer = value.producer
        if producer is not None:
            self.graph.insert_after(producer, dequantize)
        else:
            self.graph.append(dequantize)
        self.graph.set_outputs([outer if v is value else v for v in self.graph.outputs])
