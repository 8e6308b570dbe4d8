"""Dynamic-range quantization of a float ``.tflite``: int8 weights, float activations, hybrid kernels.

What TFLiteConverter writes with ``optimizations=[tf.lite.Optimize.DEFAULT]`` and no
representative dataset, from the float model alone::

    Before:  x:f32 -> CONV_2D(x, W:f32[O,H,W,I], b:f32)              (version 1)
    After:   x:f32 -> CONV_2D(x, Wq:int8[O,H,W,I] scales[O], b:f32)  (version 5: hybrid per-channel)

* CONV_2D (axis 0, v5; per-tensor v2), DEPTHWISE_CONV_2D (axis 3, v6; per-tensor v4),
  FULLY_CONNECTED (axis 0, v12 and ``asymmetric_quantize_inputs=True``; per-tensor v9, v5
  with ``keep_num_dims``), TRANSPOSE_CONV (axis 0, v2) read their int8 filter directly —
  LiteRT's hybrid kernels quantize the float input at run time;
* BATCH_MATMUL's constant right operand is int8 per tensor (v4, ``asymmetric_quantize_inputs``);
* GATHER gathers from an int8 table (per tensor, v2) and a DEQUANTIZE (v2) follows it; a table
  several GATHERs read is DEQUANTIZE'd once instead and its GATHERs stay float (v1);
* UNIDIRECTIONAL_SEQUENCE_LSTM: all its gate weights int8 per tensor (v3,
  ``asymmetric_quantize_inputs``), or none when one has fewer than 1024 elements;
* weights below 1024 elements stay float, and so do the operators the converter leaves alone
  (CONV_3D) or that are not done here (LSTM, SVDF, RNNs, EMBEDDING_LOOKUP: named in the notes); each operator code gets the highest version any of its nodes needs, as the
  converter writes it (a float CONV_2D next to a hybrid one is version 5 too).

Scales are symmetric (zero point 0, codes in [-127, 127]); see :mod:`._tflite_weights` for the
rounding.  ``options.per_channel=False`` gives the converter's ``_experimental_disable_per_channel``
output.  A weight read by several quantized operators with the same scales is stored once; a
float weight other operators still read stays beside its int8 copy.  Every subgraph is done
(WHILE bodies).  O(nodes + weights).

LiteRT runs the result with its hybrid kernels; TFLite Micro has no hybrid kernels (a float
input with int8 filter is refused there), so a dynamic-range model is a LiteRT-only format.
"""

from __future__ import annotations

from collections import Counter

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, QuantParams, Value
from ..registry import TransformResult
from ._tflite_weights import (
    WEIGHT_SLOTS,
    WeightSlot,
    dequantize_node,
    float_weight,
    has_float_constant,
    int8_value,
    raise_versions,
    symmetric_int8,
)
from .options import QuantOptions

__all__ = ["hybrid_version", "quantize_dynamic_tflite"]

#: Operators with a weight operand the converter's dynamic-range pass leaves in float.
_LEFT_FLOAT = ("CONV_3D", "EMBEDDING_LOOKUP", "LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "SVDF",
               "UNIDIRECTIONAL_SEQUENCE_RNN", "RNN")
#: Operators whose weights are quantized together or not at all: the weight operands (gate,
#: peephole and projection weights), and the hybrid version (with asymmetric_quantize_inputs).
_ALL_OR_NOTHING = {"UNIDIRECTIONAL_SEQUENCE_LSTM": ((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16), 3)}
_ASYMMETRIC_INPUTS = ("FULLY_CONNECTED", "BATCH_MATMUL")


def quantize_dynamic_tflite(model: Model, options: QuantOptions) -> TransformResult:
    """Int8 weights for the converter's hybrid operators (see the module docstring)."""
    if model.format != "tflite":
        raise TransformError(f"quantize_dynamic_tflite works on TFLite models, not {model.format}")
    if options.weight_type != "int8":
        raise TransformError(f"TFLite dynamic-range quantization stores int8 weights (LiteRT's hybrid kernels "
                             f"read nothing else); got weight_type={options.weight_type!r}: use int8")
    run = _Run(options)
    for graph in model.graphs:
        for node in list(graph):
            run.visit(graph, node)
    raise_versions(model, run.versions)
    return run.result()


def hybrid_version(node: Node, per_channel: bool) -> int:
    """The operator version the converter gives a hybrid (float input, int8 weight) node."""
    op = node.op
    if op == "CONV_2D":
        return 5 if per_channel else 2
    if op == "DEPTHWISE_CONV_2D":
        return 6 if per_channel else 4
    if op == "FULLY_CONNECTED":
        if per_channel:
            return 12
        if len(node.inputs) == 2:
            return 6
        return 5 if node.attr("keep_num_dims", False) else 9
    if op == "BATCH_MATMUL":
        return 4
    return 2  # TRANSPOSE_CONV with an int8 filter, GATHER from an int8 table


class _Run:
    """One pass over the model: counters, notes and the int8 tensors made so far."""

    def __init__(self, options: QuantOptions) -> None:
        self.options = options
        self.made: dict[tuple[int, int | None], Value] = {}
        self.versions: dict[str, int] = {}
        self.counts: Counter[str] = Counter()
        self.bytes_before = self.bytes_after = 0
        self.left: Counter[str] = Counter()

    def visit(self, graph: Graph, node: Node) -> None:
        if node.op in _ALL_OR_NOTHING:
            self._all_or_nothing(graph, node)
            return
        slot = WEIGHT_SLOTS.get(node.op)
        if slot is None:
            if node.op in _LEFT_FLOAT:
                self.left[f"{node.op}: left float (the converter's dynamic-range pass does not quantize it "
                          f"here)"] += 1
            return
        if self.options.excluded(node.op, node.name):
            self.counts["nodes_excluded"] += 1
            return
        if not _float_activations(node):
            return
        weight = float_weight(node, slot)
        if weight is None:
            self.counts["nodes_left_float"] += int(has_float_constant(node, slot.operand))
            return
        axis = slot.axis if self.options.per_channel else None
        if node.op == "GATHER" and ((id(weight), -1) in self.made or self._gathers(weight) > 1):
            self._dequantized_table(graph, node, weight)
            return
        quantized = self._int8(graph, weight, axis)
        if node.op == "GATHER":
            _gather_int8(graph, node, quantized)
            self.versions["DEQUANTIZE"] = 2
        else:
            node.replace_input(slot.operand, quantized)
        if node.op in _ASYMMETRIC_INPUTS:
            node.attrs["asymmetric_quantize_inputs"] = Attr.bool(True)
        per_channel = quantized.quant is not None and quantized.quant.per_channel
        self.versions[node.op] = max(self.versions.get(node.op, 1), hybrid_version(node, per_channel))
        self.counts["nodes_quantized"] += 1
        _retire(graph, weight, quantized)

    def _gathers(self, table: Value) -> int:
        """How many GATHERs this pass quantizes read ``table`` (other readers keep the float table)."""
        return sum(1 for user, index in table.uses() if user.op == "GATHER" and index == 0
                   and not self.options.excluded(user.op, user.name) and _float_activations(user))

    def _all_or_nothing(self, graph: Graph, node: Node) -> None:
        """A sequence LSTM: every gate weight int8 per tensor, or none (the converter's rule)."""
        if self.options.excluded(node.op, node.name) or not _float_activations(node):
            self.counts["nodes_excluded"] += int(self.options.excluded(node.op, node.name))
            return
        operands, version = _ALL_OR_NOTHING[node.op]
        present = [i for i in operands if i < len(node.inputs) and has_float_constant(node, i)]
        if not present:
            return
        weights = [float_weight(node, WeightSlot(i, None)) for i in present]
        if any(w is None for w in weights):
            self.left[f"{node.op}: left float (a gate weight has fewer than 1024 elements; the converter "
                      "quantizes all or none)"] += 1
            return
        for i, weight in zip(present, weights):
            assert weight is not None
            quantized = self._int8(graph, weight, None)
            node.replace_input(i, quantized)
            _retire(graph, weight, quantized)
        node.attrs["asymmetric_quantize_inputs"] = Attr.bool(True)
        self.versions[node.op] = max(self.versions.get(node.op, 1), version)
        self.counts["nodes_quantized"] += 1

    def _dequantized_table(self, graph: Graph, node: Node, table: Value) -> None:
        """A table several operators read: int8 + one DEQUANTIZE, the GATHERs stay float."""
        key = (id(table), -1)
        floated = self.made.get(key)
        if floated is None:
            stored = self._int8(graph, table, None)
            floated = Value(f"{table.name}_dequantized", DType.FLOAT32, table.shape)
            dequantize = dequantize_node(stored, floated)
            dequantize.name = graph.unique_node_name(dequantize.name)
            graph.insert_before(node, dequantize)
            self.made[key] = floated
            self.versions["DEQUANTIZE"] = 2
        node.replace_input(0, floated)
        self.counts["nodes_quantized"] += 1
        if not table.uses():
            graph.remove_initializer(table)

    def _int8(self, graph: Graph, weight: Value, axis: int | None) -> Value:
        key = (id(weight), axis)
        found = self.made.get(key)
        if found is None:
            codes, scales = symmetric_int8(weight.const.numpy(), axis)
            found = int8_value(graph, weight, codes, scales, axis, _int8_name(graph, weight.name))
            self.made[key] = found
            self.counts["weights_quantized"] += 1
            self.bytes_before += weight.const.size * 4
            self.bytes_after += codes.size + 4 * scales.size
        return found

    def result(self) -> TransformResult:
        stats = {"nodes_quantized": self.counts["nodes_quantized"],
                 "weights_quantized": self.counts["weights_quantized"],
                 "nodes_left_float": self.counts["nodes_left_float"] + sum(self.left.values()),
                 "nodes_excluded": self.counts["nodes_excluded"],
                 "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}
        notes = []
        if self.counts["nodes_left_float"]:
            notes.append(f"{self.counts['nodes_left_float']} node(s) kept a float weight: fewer than 1024 elements "
                         "(as the converter)")
        notes += [f"{count} x {reason}" for reason, count in sorted(self.left.items())]
        return TransformResult(self.counts["nodes_quantized"] > 0, stats, notes)


def _retire(graph: Graph, weight: Value, quantized: Value) -> None:
    """A float weight nothing reads any more: the int8 tensor takes its place and name."""
    if not weight.uses() and not weight.is_graph_output:
        graph.remove_initializer(weight)
        quantized.name = weight.name


def _float_activations(node: Node) -> bool:
    """A float model's node: float32 output (a quantized model's int8 nodes are not hybrid)."""
    return bool(node.outputs) and node.outputs[0].dtype is DType.FLOAT32 and node.outputs[0].quant is None


def _gather_int8(graph: Graph, node: Node, table: Value) -> None:
    """GATHER(table:f32, ids) -> DEQUANTIZE(GATHER(table:int8, ids)); the float output keeps its name."""
    old = node.output
    assert table.quant is not None
    gathered = Value(f"{old.name}_int8", DType.INT8, old.shape,
                     quant=QuantParams(table.quant.scale, table.quant.zero_point, table.quant.axis))
    inputs = [table, *node.inputs[1:]]
    name = node.name
    new = Node("GATHER", inputs, dialect="tflite", name=graph.unique_node_name(name), attrs=node.attrs,
               outputs=[gathered])
    new.meta.update(node.meta)
    floated = Value(old.name, DType.FLOAT32, old.shape)
    dequantize = dequantize_node(gathered, floated)
    dequantize.name = graph.unique_node_name(f"{name}_dequantize")
    graph.insert_before(node, [new, dequantize])
    old.replace_all_uses_with(floated)
    graph.remove(node)
    new.name = name


def _int8_name(graph: Graph, base: str) -> str:
    taken = {v.name for v in graph.initializers}
    name = f"{base}_int8"
    i = 1
    while name in taken:
        name, i = f"{base}_int8_{i}", i + 1
    return name
