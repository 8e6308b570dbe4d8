"""quantize_dynamic on ONNX: int8 weights, uint8 activations quantized at run time.

The graph ``onnxruntime.quantization.quantize_dynamic`` writes, with the same parameters::

  MatMul(x, W)  ->  DynamicQuantizeLinear(x) -> (x_q, x_s, x_zp)
                    MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(float) -> Mul(., Mul(x_s, W_s)) = y
  Gemm(x, W, b) ->  the same on MatMul(x, W) [+ Add(., b)]   (alpha = beta = 1, transA = 0;
                    transB = 1 reads a transposed copy ``W_Transposed`` of the initializer)
  Conv(x, W, b) ->  DynamicQuantizeLinear(x), ConvInteger(x_q, W_q, x_zp, W_zp) -> Cast -> Mul
                    [+ Add(., Reshape(b, [1, -1, 1, ...]))]   (W per tensor, as onnxruntime)
  Gather(T, ids) -> Gather(T_q: uint8, ids) -> DequantizeLinear(., T_s, T_zp)   (T per tensor)

Activations are always uint8 (``DynamicQuantizeLinear``'s only type; ``activation_type`` does
not apply).  onnxruntime's graph optimizer fuses the MatMul form into ``DynamicQuantizeMatMul`` /
``MatMulIntegerToFloat``.  Parameters follow onnxruntime's ``quantize_data``: the range is the
weight's own ``[min(W, 0), max(W, 0)]``; int8 symmetric ``s = 2·max|W| / 254`` (in float64,
stored as float32), zero point 0; uint8 (or ``symmetric_weights=False``)
``s = (max - min) / 255``, ``zp = round(-min / s)``; codes ``clip(round_half_even(W / s) + zp)``.
Per channel (``per_channel``) a MatMul weight has one scale per output column (its last
axis).  One ``DynamicQuantizeLinear`` serves every reader of the same activation; a weight read
by several nodes is quantized once.  Only the main graph is quantized (subgraphs stay float, as
onnxruntime by default).  ``LSTM(x, W, R, ...)`` becomes ``com.microsoft.DynamicQuantizeLSTM`` with
int8 W and R (symmetric per direction, or per gate row with ``per_channel``; always int8, as
onnxruntime); onnxruntime's fused ``com.microsoft`` ops too: ``Attention -> QAttention`` (QKV
weight as a MatMul weight) and ``EmbedLayerNormalization -> QEmbedLayerNormalization`` (tables,
gamma, beta as uint8 like a Gather table).  O(N + weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, Tensor, Value, constant_value
from .._onnx import OPSET_IMPORT, Names, is_standard, opset_version
from ..registry import TransformResult
from ._qdq_onnx_params import INT_TYPES, QParams, quantize, scale_zero_point
from .options import QuantOptions

__all__ = ["quantize_dynamic_onnx", "quantize_linear_params"]

#: First opset with DynamicQuantizeLinear (onnxruntime's fused dynamic form).
DYNAMIC_OPSET = 11
_ONNX_FLOAT = 1
#: A node that is not a quantization candidate (quietly left alone, as onnxruntime does).
_NOT_A_WEIGHT = "not a weight"
_MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class _Quantized:
    """A quantized tensor: its integer codes, scale and zero point values."""

    codes: Value
    scale: Value
    zero_point: Value


def quantize_linear_params(values: np.ndarray, dtype: str, symmetric: bool,
                           axis: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, float32 scale, zero point) of ``values`` as onnxruntime's ``quantize_data``: from the
    tensor's own range holding 0, on the whole tensor or per slice along ``axis`` (the QDQ
    parameter arithmetic of :mod:`._qdq_onnx_params`, so static and dynamic round alike)."""
    qtype = INT_TYPES[dtype]
    data = np.asarray(values, np.float32)
    others = None if axis is None else tuple(i for i in range(data.ndim) if i != axis)
    scale, zero = scale_zero_point(data.min(axis=others, initial=0.0), data.max(axis=others, initial=0.0),
                                   qtype, symmetric)
    return quantize(data, QParams(scale, zero, qtype, axis)), scale, zero


def quantize_dynamic_onnx(model: Model, options: QuantOptions) -> TransformResult:
    """The ONNX side of ``quantize_dynamic`` (see the module docstring)."""
    if options.weight_type not in ("int8", "uint8"):
        raise TransformError(f"quantize_dynamic on ONNX stores weights as int8 or uint8, not {options.weight_type}; "
                             "use quantize_weights for 4-bit weights")
    opset = opset_version(model, default=DYNAMIC_OPSET)
    if opset < DYNAMIC_OPSET:
        raise TransformError(f"quantize_dynamic needs opset >= {DYNAMIC_OPSET} (DynamicQuantizeLinear); "
                             f"the model imports opset {opset}: convert it to a newer opset first")
    run = _Dynamic(model, options)
    run.rewrite_gemms()
    for node in list(model.graph):
        run.visit(node)
    run.drop_unused()
    if run.uses_ms_domain:
        imports = dict(model.meta.get(OPSET_IMPORT) or {})
        imports.setdefault(_MS_DOMAIN, 1)
        model.meta[OPSET_IMPORT] = imports
    counts = run.counts
    stats = {"nodes_quantized": sum(counts.values()), **{f"{op}_quantized": n for op, n in sorted(counts.items())},
             "nodes_left_float": len(run.notes)}
    return TransformResult(bool(counts), stats, run.notes)


class _Dynamic:
    """One quantize_dynamic run over a model's main graph."""

    def __init__(self, model: Model, options: QuantOptions) -> None:
        self.graph: Graph = model.graph
        self.options = options
        self.names = Names(model)
        self.symmetric = options.symmetric_weights
        self.activations: dict[Value, _Quantized] = {}
        self.weights: dict[Value, _Quantized] = {}
        self.transposed: dict[Value, Value] = {}
        self.dequantized: list[Node] = []
        self.counts: dict[str, int] = {}
        self.notes: list[str] = []
        self.uses_ms_domain = False

    # -- Gemm -> MatMul (+ Add), as onnxruntime does before quantizing -------------
    def rewrite_gemms(self) -> None:
        for node in list(self.graph):
            if node.op != "Gemm" or not is_standard(node) or self.options.excluded(node.op, node.name):
                continue
            if (node.attr("alpha", 1.0), node.attr("beta", 1.0), node.attr("transA", 0)) != (1.0, 1.0, 0):
                self.notes.append(f"{node.name}: Gemm with alpha/beta != 1 or transA left float")
                continue
            weight = node.inputs[1]
            if _float_weight(weight) is None:
                self.notes.append(f"{node.name}: Gemm with a non-constant B left float")
                continue
            if node.attr("transB", 0):
                weight = self._transposed(weight)
            self._gemm_to_matmul(node, weight)

    def _transposed(self, weight: Value) -> Value:
        if weight not in self.transposed:
            array = np.ascontiguousarray(constant_value(weight).numpy().T)
            value = Value(self.names.fresh(f"{weight.name}_Transposed"), const=Tensor.from_numpy(array, DType.FLOAT32))
            self.transposed[weight] = self.graph.add_initializer(value)
        return self.transposed[weight]

    def _gemm_to_matmul(self, gemm: Node, weight: Value) -> None:
        out = gemm.output
        bias = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        name = gemm.name
        mm_out = Value(self.names.fresh(f"{out.name}_MatMul") if bias is not None else "", out.dtype)
        matmul = Node("MatMul", [gemm.inputs[0], weight], dialect="onnx", name=f"{name}_MatMul", outputs=[mm_out])
        nodes = [matmul]
        if bias is not None:
            nodes.append(Node("Add", [mm_out, bias], dialect="onnx", name=f"{name}_Add",
                              outputs=[Value("", out.dtype, out.shape)]))
        else:
            mm_out.shape = out.shape
        self.graph.insert_before(gemm, nodes)
        _take_over(self.graph, gemm, nodes[-1].output)

    # -- per node ----------------------------------------------------------------
    def visit(self, node: Node) -> None:
        if is_standard(node):
            rewrite = {"MatMul": self._matmul, "Conv": self._conv, "Gather": self._gather,
                       "LSTM": self._lstm}.get(node.op)
        elif node.domain == _MS_DOMAIN:
            rewrite = {"Attention": self._attention, "EmbedLayerNormalization": self._embed_layer_norm}.get(node.op)
        else:
            return
        if rewrite is None or self.options.excluded(node.op, node.name):
            return
        reason = rewrite(node)
        if reason is None:
            self.counts[node.op] = self.counts.get(node.op, 0) + 1
        elif reason is not _NOT_A_WEIGHT:
            self.notes.append(f"{node.name}: {node.op} left float ({reason})")

    def _matmul(self, node: Node) -> str | None:
        x, weight = node.inputs[0], node.inputs[1]
        array = _float_weight(weight)  # x has the weight's type (ONNX typing): float32
        if x is None or array is None:
            return "B is not a float32 initializer"
        qx = self._activation(node, x)
        axis = -1 if self.options.per_channel and array.ndim >= 2 else None
        qw = self._weight(weight, array, axis)
        self._integer_op(node, "MatMulInteger", qx, qw, {})
        return None

    def _conv(self, node: Node) -> str | None:
        x, weight = node.inputs[0], node.inputs[1]
        array = _float_weight(weight)  # x has the weight's type (ONNX typing): float32
        if x is None or array is None:
            return "W is not a float32 initializer"
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        qx = self._activation(node, x)
        qw = self._weight(weight, array, None)  # onnxruntime: ConvInteger weights per tensor
        attrs = dict(node.attrs)
        if bias is None:
            self._integer_op(node, "ConvInteger", qx, qw, attrs)
            return None
        out = node.output
        scaled = self._integer_op(node, "ConvInteger", qx, qw, attrs, final=False)
        shape = np.ones(array.ndim, np.int64)
        shape[1] = -1
        shape_value = self.graph.add_initializer(
            Value(self.names.fresh(f"{out.name}_bias_reshape_shape"), const=Tensor.from_numpy(shape, DType.INT64)))
        reshaped = Value(self.names.fresh(f"{out.name}_bias_reshape_output"), bias.dtype)
        reshape = Node("Reshape", [bias, shape_value], dialect="onnx",
                       name=self.graph.unique_node_name(f"{out.name}_bias_reshape"), outputs=[reshaped])
        add = Node("Add", [scaled, reshaped], dialect="onnx", name=self.graph.unique_node_name(f"{out.name}_bias_add"),
                   outputs=[Value("", out.dtype, out.shape)])
        self.graph.insert_before(node, [reshape, add])
        _take_over(self.graph, node, add.output)
        return None

    def _gather(self, node: Node) -> str | None:
        table = node.inputs[0]
        array = _float_weight(table)
        if array is None:  # a Gather of shapes or of activations: not an embedding, nothing to say
            return _NOT_A_WEIGHT
        q = self._constant_activation(table, array)
        out = node.output
        gathered = Value(self.names.fresh(f"{out.name}_quantized"), DType.UINT8, out.shape)
        gather = Node("Gather", [q.codes, node.inputs[1]], dialect="onnx", name=node.name, attrs=dict(node.attrs),
                      outputs=[gathered])
        dq = Node("DequantizeLinear", [gathered, q.scale, q.zero_point], dialect="onnx",
                  name=self.graph.unique_node_name(f"{out.name}_DequantizeLinear"),
                  outputs=[Value("", out.dtype, out.shape)])
        self.graph.insert_before(node, [gather, dq])
        _take_over(self.graph, node, dq.output)
        self.activations[dq.output] = _Quantized(gathered, q.scale, q.zero_point)
        self.dequantized.append(dq)
        return None

    def _lstm(self, node: Node) -> str | None:
        """LSTM -> com.microsoft.DynamicQuantizeLSTM: W, R int8 (per direction, or per gate row with
        ``per_channel``), stored transposed ``[dirs, in, 4·hidden]``; scales/zero points ``[dirs(, 4·hidden)]``."""
        inputs = list(node.inputs) + [None] * (8 - len(node.inputs))
        arrays = [_float_weight(inputs[1]), _float_weight(inputs[2])]
        if any(a is None or a.ndim != 3 for a in arrays):
            return "W and R are not 3-D float32 initializers"
        if node.attr("layout", 0):
            return "layout=1 (DynamicQuantizeLSTM has no layout attribute)"
        quantized = [self._lstm_weight(value, array) for value, array in zip(inputs[1:3], arrays)]
        node.attrs.pop("layout", None)
        self._replace_ms(node, "DynamicQuantizeLSTM", [
            inputs[0], quantized[0].codes, quantized[1].codes, *inputs[3:8],
            quantized[0].scale, quantized[0].zero_point, quantized[1].scale, quantized[1].zero_point])
        return None

    def _lstm_weight(self, weight: Value, array: np.ndarray) -> _Quantized:
        if weight not in self.weights:
            dirs, rows, cols = array.shape
            if self.options.per_channel:
                codes, scale, zp = quantize_linear_params(array.reshape(dirs * rows, cols), "int8", self.symmetric, 0)
                scale, zp = scale.reshape(dirs, rows), zp.reshape(dirs, rows)
            else:
                codes, scale, zp = quantize_linear_params(array, "int8", self.symmetric, 0)
            codes = np.ascontiguousarray(codes.reshape(dirs, rows, cols).transpose(0, 2, 1))
            self.weights[weight] = self._store(weight, codes, scale, zp)
        return self.weights[weight]

    def _attention(self, node: Node) -> str | None:
        """com.microsoft.Attention -> QAttention: input by DynamicQuantizeLinear, the QKV weight as a MatMul's."""
        if "qkv_hidden_sizes" in node.attrs:
            return "qkv_hidden_sizes is set (QAttention has none)"
        inputs = list(node.inputs) + [None] * (5 - len(node.inputs))
        array = _float_weight(inputs[1])
        if inputs[0] is None or array is None:
            return "the QKV weight is not a float32 initializer"
        qx = self._activation(node, inputs[0])
        qw = self._weight(inputs[1], array, -1 if self.options.per_channel else None)
        self._replace_ms(node, "QAttention", [qx.codes, qw.codes, inputs[2], qx.scale, qw.scale, inputs[3],
                                              qx.zero_point, qw.zero_point, inputs[4]])
        return None

    def _embed_layer_norm(self, node: Node) -> str | None:
        """com.microsoft.EmbedLayerNormalization -> QEmbedLayerNormalization: the three tables, gamma and
        beta stored as uint8 (each with its own scale and zero point), as onnxruntime."""
        if len(node.outputs) > 2:
            return "it has 3 outputs"
        inputs = list(node.inputs) + [None] * (8 - len(node.inputs))
        quantized: list[_Quantized | None] = []
        for value in inputs[2:7]:
            array = _float_weight(value)
            if value is not None and array is None:
                return f"{value.name} is not a float32 initializer"
            quantized.append(None if value is None else self._constant_activation(value, array))
        self._replace_ms(node, "QEmbedLayerNormalization", [
            *inputs[:2], *(q and q.codes for q in quantized), inputs[7],
            *(q and q.scale for q in quantized), *(q and q.zero_point for q in quantized)])
        return None

    def _replace_ms(self, node: Node, op: str, inputs: list[Value | None]) -> None:
        """``node`` replaced by the com.microsoft ``op`` on ``inputs``, with the same attributes and outputs."""
        new = Node(op, inputs, dialect="onnx", domain=_MS_DOMAIN, name=self.graph.unique_node_name(f"{node.name}_quant"),
                   attrs=dict(node.attrs), outputs=[Value("", v.dtype, v.shape) for v in node.outputs])
        self.graph.insert_before(node, new)
        for old, value in zip(node.outputs, new.outputs):
            name = old.name
            old.name = f"{name}__replaced"
            value.name = name
            old.replace_all_uses_with(value)
        self.graph.remove(node)
        self.uses_ms_domain = True

    # -- pieces ------------------------------------------------------------------
    def _constant_activation(self, value: Value, array: np.ndarray) -> _Quantized:
        """An initializer onnxruntime quantizes as an activation: uint8 per tensor, asymmetric
        (symmetric only when the weights are uint8 and symmetric)."""
        if value not in self.weights:
            symmetric = self.symmetric and self.options.weight_type == "uint8"
            self.weights[value] = self._store(value, *quantize_linear_params(array, "uint8", symmetric))
        return self.weights[value]

    def _activation(self, node: Node, x: Value) -> _Quantized:
        """x as uint8 from its own run-time range: one DynamicQuantizeLinear per value."""
        if x not in self.activations:
            outputs = [Value(self.names.fresh(f"{x.name}_quantized"), DType.UINT8, x.shape),
                       Value(self.names.fresh(f"{x.name}_scale"), DType.FLOAT32, ()),
                       Value(self.names.fresh(f"{x.name}_zero_point"), DType.UINT8, ())]
            dql = Node("DynamicQuantizeLinear", [x], dialect="onnx",
                       name=self.graph.unique_node_name(f"{x.name}_QuantizeLinear"), outputs=outputs)
            self.graph.insert_before(node, dql)
            self.activations[x] = _Quantized(*outputs)
        return self.activations[x]

    def _weight(self, weight: Value, array: np.ndarray, axis: int | None) -> _Quantized:
        """The weight's int8/uint8 codes, once per initializer (the first reader's granularity wins)."""
        if weight not in self.weights:
            dtype = self.options.weight_type
            codes, scale, zp = quantize_linear_params(array, dtype, self.symmetric,
                                                      None if axis is None else axis % array.ndim)
            self.weights[weight] = self._store(weight, codes, scale, zp)
        return self.weights[weight]

    def _store(self, weight: Value, codes: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> _Quantized:
        qtype = DType.INT8 if codes.dtype == np.int8 else DType.UINT8
        values = [Value(self.names.fresh(f"{weight.name}{suffix}"), const=Tensor.from_numpy(array, dtype))
                  for suffix, array, dtype in (("_quantized", codes, qtype), ("_scale", scale, DType.FLOAT32),
                                               ("_zero_point", zp, qtype))]
        return _Quantized(*(self.graph.add_initializer(v) for v in values))

    def _integer_op(self, node: Node, op: str, qx: _Quantized, qw: _Quantized, attrs: dict[str, Attr],
                    *, final: bool = True) -> Value:
        """``op`` on integers, Cast to float, times ``x_s · w_s``; takes over ``node``'s output when final."""
        out = node.output
        base = node.name or out.name
        acc = Value(self.names.fresh(f"{out.name}_output_quantized"), DType.INT32)
        integer = Node(op, [qx.codes, qw.codes, qx.zero_point, qw.zero_point], dialect="onnx",
                       name=self.graph.unique_node_name(f"{base}_quant"), attrs=attrs, outputs=[acc])
        as_float = Value(self.names.fresh(f"{acc.name}_cast_output"), DType.FLOAT32)
        cast = Node("Cast", [acc], dialect="onnx", name=self.graph.unique_node_name(f"{acc.name}_cast"),
                    attrs={"to": Attr.int(_ONNX_FLOAT)}, outputs=[as_float])
        scales_name = f"{integer.name}_scales_mul"
        scales = Value(self.names.fresh(f"{scales_name}:0"), DType.FLOAT32, qw.scale.shape)
        scales_mul = Node("Mul", [qx.scale, qw.scale], dialect="onnx", name=self.graph.unique_node_name(scales_name),
                          outputs=[scales])
        name = f"{integer.name}_output_scale_mul"
        result = Value("" if final else self.names.fresh(f"{out.name}quant_scaled_output"), DType.FLOAT32,
                       out.shape if final else None)
        output_mul = Node("Mul", [as_float, scales], dialect="onnx", name=self.graph.unique_node_name(name),
                          outputs=[result])
        self.graph.insert_before(node, [integer, cast, scales_mul, output_mul])
        if final:
            _take_over(self.graph, node, result)
        return result

    def drop_unused(self) -> None:
        """Float weights nobody reads any more, and DequantizeLinears only quantized readers needed: removed."""
        for dq in self.dequantized:
            if dq.output.num_uses == 0 and not dq.output.is_graph_output:
                self.graph.remove(dq)
        for weight in [*self.transposed, *self.weights]:
            if weight.num_uses == 0 and not weight.is_graph_output and weight.is_initializer:
                self.graph.remove_initializer(weight)


def _float_weight(value: Value | None) -> np.ndarray | None:
    """The float32 initializer array behind ``value`` (not an overridable graph input), or None."""
    if value is None or value.is_graph_input or not value.is_initializer:
        return None
    tensor = value.const
    if tensor is None or tensor.dtype is not DType.FLOAT32:
        return None
    return tensor.numpy()


def _take_over(graph: Graph, node: Node, result: Value) -> None:
    """``result`` replaces ``node``'s output (and takes its name); ``node`` is removed."""
    old = node.output
    name = old.name
    old.name = f"{name}__replaced"
    result.name = name
    if result.shape is None:
        result.shape = old.shape
    old.replace_all_uses_with(result)
    graph.remove(node)
