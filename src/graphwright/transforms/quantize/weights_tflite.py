"""Weight-only quantization of a float ``.tflite``: weights stored small, DEQUANTIZE'd to float at run time.

Two forms, both leaving every operator float (its version unchanged)::

    Before:  CONV_2D(x, W:f32, b:f32)
    int8:    W_q:int8 (scales) -> DEQUANTIZE -> W:f32 -> CONV_2D(x, W, b:f32)
    float16: W:f16 -> DEQUANTIZE -> f32 -> CONV_2D(x, ., b16 -> DEQUANTIZE -> .)

* :func:`quantize_weights_tflite` (``options.weight_type="int8"``): the weights the
  converter's dynamic-range pass would quantize (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
  TRANSPOSE_CONV, BATCH_MATMUL, GATHER; >= 1024 elements) become int8 with the same symmetric
  scales — per channel on the converter's axes when ``options.per_channel``, per tensor
  otherwise — and a DEQUANTIZE (version 5 per-channel, 2 per-tensor) feeds the float operator.
  This is the weight-only layout ai-edge-quantizer writes; it runs on any kernel set that has
  DEQUANTIZE (no hybrid kernels needed) — but TFLite Micro's DEQUANTIZE applies only the first
  scale of a per-channel tensor, so for TFLM use ``per_channel=False`` (TFLM has no float16
  DEQUANTIZE either).
* :func:`quantize_weights_float16_tflite`: what TFLiteConverter writes with
  ``target_spec.supported_types=[tf.float16]``: every float32 constant an operator reads
  (whatever its size) becomes float16 (clamped to ±65504, nearest even) with one DEQUANTIZE
  (version 3) per constant.

The DEQUANTIZE nodes go first in their graph, as the converter places them; the stored tensor
keeps the constant's name (the float value is ``<name>_dequantized``).  One difference from the
converter's float16 file: it also turns a sequence LSTM's zero initial state (a variable tensor)
into float16 + a DEQUANTIZE whose output it marks variable; graph states stay as they are here.  A constant
that is also a graph output is left alone.  O(nodes + weights).
"""

from __future__ import annotations

from collections import Counter

from ...errors import TransformError
from ...ir import DType, Graph, Model, Node, Tensor, Value
from ..registry import TransformResult
from ._tflite_weights import (
    WEIGHT_SLOTS,
    dequantize_node,
    float16_of,
    float_weight,
    has_float_constant,
    int8_value,
    raise_versions,
    symmetric_int8,
)
from .options import QuantOptions

__all__ = ["quantize_weights_float16_tflite", "quantize_weights_tflite"]


def quantize_weights_tflite(model: Model, options: QuantOptions) -> TransformResult:
    """Int8 weights + DEQUANTIZE for the converter's weight operators (see the module docstring)."""
    _require_tflite(model, "quantize_weights_tflite")
    if options.weight_type != "int8":
        raise TransformError(f"TFLite weight-only quantization writes int8 weights here; weight_type="
                             f"{options.weight_type!r} is not written yet (use int8, or float16 via "
                             "quantize_weights_float16_tflite)")
    counts: Counter[str] = Counter()
    bytes_before = bytes_after = 0
    for graph in model.graphs:
        made: dict[tuple[int, int | None], Value] = {}
        dequantized: list[Node] = []
        for node in list(graph):
            slot = WEIGHT_SLOTS.get(node.op)
            if slot is None:
                continue
            if options.excluded(node.op, node.name):
                counts["nodes_excluded"] += 1
                continue
            weight = float_weight(node, slot)
            if weight is None:
                counts["nodes_left_float"] += int(has_float_constant(node, slot.operand))
                continue
            axis = slot.axis if options.per_channel else None
            key = (id(weight), axis)
            if key not in made:
                codes, scales = symmetric_int8(weight.const.numpy(), axis)
                stored = int8_value(graph, weight, codes, scales, axis, f"{weight.name}_int8")
                floated = Value(f"{weight.name}_dequantized", DType.FLOAT32, weight.shape)
                dequantized.append(dequantize_node(stored, floated))
                made[key] = floated
                counts["weights_quantized"] += 1
                bytes_before += weight.const.size * 4
                bytes_after += codes.size + 4 * scales.size
            node.replace_input(slot.operand, made[key])
            counts["nodes_quantized"] += 1
            if not weight.uses() and not weight.is_graph_output:  # the int8 tensor takes its place and name
                graph.remove_initializer(weight)
                made[key].producer.inputs[0].name = weight.name
        _place_first(graph, dequantized)
    if counts["weights_quantized"]:
        raise_versions(model, {"DEQUANTIZE": 1})
    stats = {"nodes_quantized": counts["nodes_quantized"], "weights_quantized": counts["weights_quantized"],
             "nodes_left_float": counts["nodes_left_float"], "nodes_excluded": counts["nodes_excluded"],
             "bytes_before": bytes_before, "bytes_after": bytes_after}
    notes = [f"{counts['nodes_left_float']} node(s) kept a float weight: fewer than 1024 elements"] \
        if counts["nodes_left_float"] else []
    if counts["weights_quantized"] and options.per_channel:
        notes.append("per-channel DEQUANTIZE: LiteRT applies every scale, TFLite Micro only the first "
                     "(wrong weights there) — quantize with per_channel=False for TFLite Micro")
    return TransformResult(counts["weights_quantized"] > 0, stats, notes)


def quantize_weights_float16_tflite(model: Model) -> TransformResult:
    """Every float32 constant as float16 + DEQUANTIZE, as the converter's float16 mode writes it."""
    _require_tflite(model, "quantize_weights_float16_tflite")
    converted = elements = 0
    for graph in model.graphs:
        dequantized: list[Node] = []
        for value in list(graph.initializers):
            if value.dtype is not DType.FLOAT32 or value.quant is not None or not value.uses() \
                    or value.is_graph_output or value.meta.get("tflite.sparsity") is not None:
                continue
            half = float16_of(value.const.numpy())
            stored = Value(f"{value.name}_float16", DType.FLOAT16, value.shape,
                           const=Tensor.from_numpy(half, DType.FLOAT16, name=value.name))
            graph.add_initializer(stored)
            floated = Value(f"{value.name}_dequantized", DType.FLOAT32, value.shape)
            dequantized.append(dequantize_node(stored, floated))
            value.replace_all_uses_with(floated, graph_outputs=False)
            graph.remove_initializer(value)
            stored.name = value.name
            converted += 1
            elements += half.size
        _place_first(graph, dequantized)
    if converted:
        raise_versions(model, {"DEQUANTIZE": 1})
    stats = {"constants_converted": converted, "bytes_before": 4 * elements, "bytes_after": 2 * elements}
    return TransformResult(converted > 0, stats, [])


def _require_tflite(model: Model, what: str) -> None:
    if model.format != "tflite":
        raise TransformError(f"{what} works on TFLite models, not {model.format}")


def _place_first(graph: Graph, nodes: list[Node]) -> None:
    """Insert ``nodes`` at the start of ``graph`` (their inputs are constants), with unique names."""
    if not nodes:
        return
    first = next(iter(graph))
    for node in nodes:
        node.name = graph.unique_node_name(node.name)
        graph.insert_before(first, node)
