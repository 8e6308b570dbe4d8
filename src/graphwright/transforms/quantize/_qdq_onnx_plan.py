"""Which tensors of an ONNX graph get a QuantizeLinear/DequantizeLinear pair, and how.

One walk over the main graph in node order marks, per operator type, the tensors
onnxruntime's QDQ quantizer (``onnxruntime.quantization``, ``QuantFormat.QDQ``) marks:

==========================================  ===================================================
operators                                   marked
==========================================  ===================================================
Conv, ConvTranspose                         input, output, weight (per channel on axis 0 / 1),
                                            bias (int32)
Gemm                                        same; weight axis 0 with ``transB`` else 1; a
                                            constant bias takes ``beta`` (set to 1 after)
MatMul                                      each input and the output; a constant input is a
                                            weight, per channel on axis 1
Add, Mul, Concat, Softmax, Sigmoid,         every float input and output (a constant input
LeakyRelu, GlobalAveragePool, ArgMax,       quantized like an activation, from its own min/max)
CumSum, EmbedLayerNormalization
Relu, Clip                                  only after a quantized input: removed (the producer
                                            writes the output directly) when that input is read
                                            once and not a graph input/output and activations
                                            are asymmetric; otherwise input and output
Reshape, Transpose, Squeeze, Unsqueeze,     only after a quantized input: the output shares the
Flatten, Slice, TopK, AveragePool,          input's scale and zero point
MaxPool (opset >= 12), Resize (>= 11)
Split                                       input; every output shares its parameters
Gather, GatherElements                      a constant data input (as an activation) and the
                                            output sharing it; else only after a quantized input
Pad                                         every input; output shares input 0's parameters
                                            when padding repeats values or pads with 0
Where                                       the output, when both branches are quantized
Instance/Layer/BatchNormalization           input, scale (a weight), bias (int32), outputs
==========================================  ===================================================

"Quantized" means marked by an earlier node, so the order of the walk matters, as in
onnxruntime.  Nodes excluded by the options and operators not in the table are left float.

A tensor whose range gives no usable scale is never marked (:func:`unusable_range`): a
non-finite range, one whose width overflows float32, or a *mask-like* range — a minimum at or
below ``-MASK_MAGNITUDE`` with a maximum within ``MASK_RATIO`` of it in magnitude, what an
attention mask (``finfo.min``, ``-1e9``, ``-1e4`` added to scores) gives.  Quantizing such a
tensor on its range sends every real score to one code (onnxruntime writes NaN zero points or
useless scales there); clipping it to the scores' range would let the masked positions through
the Softmax.  Left float, it costs only that one tensor (its Add and the Softmax's input run
float), as onnxruntime's users get by excluding the mask Add by hand.
The Relu/Clip removal is the one graph edit made here; everything else is recorded for
:mod:`.static_onnx` to apply.  O(N + E).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ...ir import Attr, Graph, Node, Value, constant_value
from .options import QuantOptions

__all__ = ["Mark", "BiasMark", "QdqPlan", "plan_qdq", "adjust_ranges", "unusable_range", "QDQ_OPS",
           "MASK_MAGNITUDE", "MASK_RATIO"]

#: A range reaching this far below zero, with a maximum ``MASK_RATIO`` times smaller, is a mask's.
MASK_MAGNITUDE = 1e4
MASK_RATIO = 1e-3
_FLOAT32_MAX = float(np.finfo(np.float32).max)

_SELF_OPS = frozenset({"ArgMax", "Add", "Mul", "LeakyRelu", "Sigmoid", "GlobalAveragePool", "Concat",
                       "Softmax", "EmbedLayerNormalization", "CumSum"})
_CONV_AXIS = {"Conv": 0, "ConvTranspose": 1}
_SHARING_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "AveragePool", "Slice",
                          "TopK", "MaxPool", "Resize"})
_MIN_OPSET = {"MaxPool": 12, "Resize": 11}
_REMOVABLE = frozenset({"Relu", "Clip"})
_NORMS = frozenset({"InstanceNormalization", "LayerNormalization", "BatchNormalization"})
_OTHERS = frozenset({"Gemm", "MatMul", "Pad", "Split", "Gather", "GatherElements", "Where"})
#: Every operator type the walk quantizes.
QDQ_OPS = _SELF_OPS | set(_CONV_AXIS) | _SHARING_OPS | _REMOVABLE | _NORMS | _OTHERS
_DOMAINS = {"EmbedLayerNormalization": "com.microsoft"}


@dataclass
class Mark:
    """A tensor to quantize: an activation or a weight (``axis``: per channel), or one sharing the
    scale and zero point of ``provider``."""

    kind: str = "activation"
    axis: int | None = None
    provider: Value | None = None


@dataclass
class BiasMark:
    node: Node
    input: Value
    weight: Value
    beta: float = 1.0


@dataclass
class QdqPlan:
    marks: dict[Value, Mark] = field(default_factory=dict)
    biases: dict[Value, BiasMark] = field(default_factory=dict)
    #: Relu/Clip nodes removed (their producer now writes their output), by op type.
    fused: Counter[str] = field(default_factory=Counter)
    #: Nodes handled, by op type.
    handled: Counter[str] = field(default_factory=Counter)
    #: Nodes left float: (reason, op) -> count; and the excluded node names.
    left_float: Counter[tuple[str, str]] = field(default_factory=Counter)
    excluded: list[str] = field(default_factory=list)
    #: Tensors not quantized because their range is unusable: reason -> value names.
    unusable: dict[str, list[str]] = field(default_factory=dict)
    #: Other inputs of removed nodes (a Clip's bounds): dropped when nothing reads them any more.
    orphans: list[Value] = field(default_factory=list)

    def quantized(self, value: Value | None) -> bool:
        return value is not None and (value in self.marks or value in self.biases)


def unusable_range(lo: float, hi: float) -> str | None:
    """Why the range ``[lo, hi]`` cannot be quantized (None when it can; see the module docstring)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "non-finite range"
    if lo <= -MASK_MAGNITUDE and hi <= -lo * MASK_RATIO:
        return "mask-like range"
    if max(hi, 0.0) - min(lo, 0.0) > _FLOAT32_MAX:
        return "range wider than float32"
    return None


def is_weight(value: Value) -> bool:
    """A constant the quantizer may rewrite: an initializer no caller can override."""
    return value.is_initializer and not value.is_graph_input


def _supported(node: Node) -> bool:
    return node.op in QDQ_OPS and node.domain in ({"", "ai.onnx"} if node.op not in _DOMAINS
                                                  else {_DOMAINS[node.op]})


def adjust_ranges(graph: Graph, ranges: Mapping[str, tuple[float, float]],
                  options: QuantOptions) -> dict[str, tuple[float, float]]:
    """The ranges the quantizer uses: a Relu/Clip input read only there takes the output's range
    (the activation is folded into the producer's quantization); a Softmax output is [0, 1]."""
    table = dict(ranges)
    for node in graph:
        if not _supported(node) or options.excluded(node.op, node.name):
            continue
        if node.op in _REMOVABLE:
            source = node.inputs[0] if node.inputs else None
            if source is not None and source.num_uses == 1 and source.name in table \
                    and node.output.name in table:
                table[source.name] = table[node.output.name]
        elif node.op == "Softmax":
            table[node.output.name] = (0.0, 1.0)
    return table


class _Walk:
    def __init__(self, graph: Graph, options: QuantOptions, ranges: Mapping[str, object], opset: int,
                 is_float: Callable[[Value], bool]) -> None:
        self.graph = graph
        self.options = options
        self.ranges = ranges
        self.opset = opset
        self.is_float = is_float
        self.plan = QdqPlan()

    # -- marking ---------------------------------------------------------------
    def quantizable(self, value: Value | None) -> bool:
        return value is not None and self.is_float(value)

    def activation(self, value: Value | None, kind: str = "activation") -> None:
        if self.quantizable(value) and value not in self.plan.marks and self.usable(value):
            self.plan.marks[value] = Mark(kind)

    def usable(self, value: Value) -> bool:
        """False (and recorded) for a value whose range (calibrated, or a constant's own) is unusable."""
        pair = self.ranges.get(value.name)
        if pair is None:
            data = constant_value(value)
            if data is None or not data.size or data.dtype.numpy is None or data.dtype.numpy.kind != "f":
                return True
            array = data.numpy()
            pair = (float(array.min()), float(array.max()))
        lo, hi = pair  # type: ignore[misc]
        reason = unusable_range(float(lo), float(hi))
        if reason is not None:
            self.plan.unusable.setdefault(reason, []).append(value.name)
        return reason is None

    def shared(self, value: Value | None, provider: Value) -> None:
        if self.quantizable(value):
            self.plan.marks[value] = Mark(provider=provider)

    def weight(self, value: Value | None, default_axis: int | None) -> None:
        """A weight input: per channel along ``default_axis`` (normalised; None or out of range:
        per tensor) when it is a constant and per-channel is on."""
        if value is None:
            return
        axis = None
        if default_axis is not None and self.options.per_channel and is_weight(value) and value.shape is not None:
            rank = len(value.shape)
            axis = default_axis + rank if -rank <= default_axis < 0 else default_axis
            axis = axis if 0 <= axis < rank else None
        if axis is None:
            self.activation(value, "weight")
        elif self.quantizable(value):
            self.plan.marks[value] = Mark("weight", axis)

    def bias(self, node: Node, index: int, weight_index: int, beta: float = 1.0) -> bool:
        value = node.inputs[index] if len(node.inputs) > index else None
        if value is None or not is_weight(value) or not self.is_float(value):
            return False
        if value in self.plan.biases:  # read by two nodes: each gets its own copy (its own scale)
            copy = Value(_copy_name(self.graph, value.name), const=value.const)
            self.graph.add_initializer(copy)
            node.replace_input(index, copy)
            value = copy
        self.plan.biases[value] = BiasMark(node, node.input(0), node.input(weight_index), beta)
        return True

    # -- the walk -------------------------------------------------------------
    def run(self) -> QdqPlan:
        for node in self.graph:
            if node.op in ("QuantizeLinear", "DequantizeLinear"):
                continue
            if self.options.excluded(node.op, node.name):
                self.plan.excluded.append(node.name)
                self.plan.left_float[("excluded", node.op)] += 1
                continue
            if not _supported(node):
                self.plan.left_float[("no QDQ rule", node.op)] += 1
                continue
            if _MIN_OPSET.get(node.op, 0) > self.opset:
                self.plan.left_float[(f"needs opset {_MIN_OPSET[node.op]}", node.op)] += 1
                continue
            if self.handle(node):
                self.plan.handled[node.op] += 1
            else:
                data = node.inputs[0] if node.inputs else None
                reason = "input not quantized" if self.quantizable(data) else "input not float32"
                self.plan.left_float[(reason, node.op)] += 1
        return self.plan

    def handle(self, node: Node) -> bool:
        op = node.op
        if op in _SELF_OPS:
            for value in (*node.inputs, *node.outputs):
                self.activation(value)
            return True
        if op in _CONV_AXIS or op == "Gemm":
            return self.conv_like(node)
        if op == "MatMul":
            for value in node.inputs:
                if value is not None and is_weight(value):
                    self.weight(value, 1)
                else:
                    self.activation(value)
            self.activation(node.output)
            return True
        if op in _REMOVABLE:
            return self.removable(node)
        if op in _SHARING_OPS:
            if not self.plan.quantized(node.inputs[0]):
                return False
            self.shared(node.output, node.input(0))
            return True
        if op in _NORMS:
            self.activation(node.inputs[0])
            self.weight(node.inputs[1], 1)
            self.bias(node, 2, 1)
            for value in node.outputs:
                self.activation(value)
            return True
        return getattr(self, f"op_{op.lower()}")(node)

    def conv_like(self, node: Node) -> bool:
        self.activation(node.inputs[0])
        self.activation(node.output)
        if node.op == "Gemm":
            self.weight(node.inputs[1], 0 if node.attr("transB", 0) else 1)
            if self.bias(node, 2, 1, float(node.attr("beta", 1.0))) and "beta" in node.attrs:
                node.attrs["beta"] = Attr.float(1.0)  # folded into the bias codes
        else:
            self.weight(node.inputs[1], _CONV_AXIS[node.op])
            if len(node.inputs) == 3:
                self.bias(node, 2, 1)
        return True

    def removable(self, node: Node) -> bool:
        source = node.inputs[0]
        if not self.plan.quantized(source):
            return False
        out = node.output
        if not self.options.symmetric_activations and self.fold_into_producer(node, source, out):
            self.plan.fused[node.op] += 1
            self.activation(source)  # ``source`` now carries ``out``'s name and readers
        else:
            self.activation(source)
            self.activation(out)
        return True

    def fold_into_producer(self, node: Node, source: Value, out: Value) -> bool:
        """Remove ``node``: its producer writes ``out`` (name and readers) directly."""
        if out.name not in self.ranges or source.num_uses != 1 or source.is_graph_output \
                or source.is_graph_input or source.producer is None:
            return False
        self.plan.marks.pop(source, None)
        name = out.name
        out.replace_all_uses_with(source)
        self.plan.orphans.extend(v for v in node.inputs[1:] if v is not None)
        self.graph.remove(node)
        out.name = f"{name}__removed"
        source.name = name
        return True

    def op_pad(self, node: Node) -> bool:
        for value in node.inputs:
            self.activation(value)
        if self.pad_repeats_values(node):
            self.shared(node.output, node.input(0))
        else:
            self.activation(node.output)
        return True

    def pad_repeats_values(self, node: Node) -> bool:
        mode = node.attr("mode", "constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode in ("reflect", "edge", "wrap"):
            return True
        if mode != "constant":
            return False
        if self.opset < 11:
            return float(node.attr("value", 0.0)) == 0.0
        if len(node.inputs) < 3 or node.inputs[2] is None:
            return True
        tensor = constant_value(node.inputs[2])
        if tensor is None or tensor.dtype.numpy is None or tensor.dtype.numpy.kind != "f":
            return False
        return float(tensor.numpy().reshape(-1)[0]) == 0.0

    def op_split(self, node: Node) -> bool:
        if not self.plan.quantized(node.inputs[0]):
            self.activation(node.inputs[0])
        for value in node.outputs:
            self.shared(value, node.input(0))
        return True

    def op_gather(self, node: Node) -> bool:
        data = node.inputs[0]
        if data is not None and is_weight(data) and self.is_float(data):
            self.activation(data)
        elif not self.plan.quantized(data):
            return False
        self.shared(node.output, node.input(0))
        return True

    op_gatherelements = op_gather

    def op_where(self, node: Node) -> bool:
        if not (self.plan.quantized(node.inputs[1]) and self.plan.quantized(node.inputs[2])):
            return False
        for value in node.outputs:
            self.activation(value)
        return True


def _copy_name(graph: Graph, base: str) -> str:
    taken = {v.name for v in graph.initializers}
    i = 0
    while f"{base}{i}" in taken:
        i += 1
    return f"{base}{i}"


def plan_qdq(graph: Graph, options: QuantOptions, ranges: Mapping[str, object], opset: int,
             is_float: Callable[[Value], bool]) -> QdqPlan:
    """Mark the tensors to quantize (see the module docstring); removes folded Relu/Clip nodes."""
    return _Walk(graph, options, ranges, opset, is_float).run()
