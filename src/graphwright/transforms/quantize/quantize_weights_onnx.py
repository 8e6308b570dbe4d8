"""quantize_weights on ONNX: large float initializers stored as int8 plus ``DequantizeLinear``.

Before::  W = initializer[float32, >= minimum_size elements]          -> Conv(x, W)
After::   W_quantized = initializer[int8], W_scale = initializer[float32],
          W_zero_point = initializer[int8 zeros]
          W = DequantizeLinear(W_quantized, W_scale, W_zero_point[, axis=0]) -> Conv(x, W)

Symmetric: ``s = max|W| / 127`` and ``q = clamp(round_half_even(W / s), -127, 127)``,
so ``|W - s·q| <= s/2``.  With opset >= 13 and a tensor of rank >= 2 the scale
is per slice along axis 0 (per output channel of a Conv/Gemm weight); before
opset 13 DequantizeLinear has no axis, so one scale per tensor.  The value
``W`` keeps its name, so readers and graph outputs are unchanged.  Initializers
that are graph inputs (overridable) are left alone.  O(N + weights).

With ``options.weight_type`` ``int4`` / ``uint4`` only MatMul and Gemm weights (2-D float32
initializers of at least ``minimum_size`` elements) are quantized, in blocks of ``options.block_size``
along K, the reduction axis: a MatMul's B ``[K, N]``; a Gemm's B ``[K, N]``, or ``[N, K]`` with
transB (torch's Linear; GPT-2's Conv1D has no transB); a MatMul's A ``[M, K]`` when only A is
constant (``y = W @ x``).  Block scales by ``options.int4_method`` (arithmetic in :mod:`._nbits_onnx`):
``mse`` (default) or ``rtn``, onnxruntime's ``MatMulNBitsQuantizer`` byte for byte.  Symmetric
(``int4`` with ``symmetric_weights``): int4 codes, no zero points; otherwise uint4 codes with zero
points.  Conv and other weights stay float under 4-bit (a note says so; use 8 bits for them).

``target="generic"``::  B_DQ_Q4[int4|uint4, K x N], B_DQ_scales[kb x N] (, B_DQ_zero_points[uint4])
                       -> DequantizeLinear(axis=0, block_size) -> MatMul(x, .)
    (a ``[N, K]`` weight — Gemm with transB, MatMul's A — gets ``axis=1`` and codes/scales ``N x K`` /
    ``N x kb``; the Gemm keeps transA/transB/alpha/beta/C as they are.)
    (opset 21: a model of opset 13..20 is raised to 21 — reductions' ``axes`` attributes become
    inputs — when no other operator it uses changed meaning in between, else a TransformError says
    what to do; IR version raised to 10 for int4.)
``target="onnxruntime"``::  MatMul(x, B) -> com.microsoft.MatMulNBits(x, B_Q4[uint8 N x kb x block/2],
                       B_scales[N x kb] (, B_zero_points[uint8 N x ceil(kb/2)]), K, N, bits=4, block_size)
    (nibbles low first; symmetric blocks have no zero point input: the kernel's default 8;
    ``accuracy_level`` = ``options.accuracy_level``, default 4: int8 activations at run time).  A Gemm
    becomes MatMulNBits too: transB reads B as stored (MatMulNBits' layout is ``B.T``'s blocks),
    alpha multiplies that node's scales, a constant C becomes the bias ``beta·C`` of N elements (a
    non-constant C: as is, with beta 1 and N elements only).  transA, a weight-first MatMul and other
    biases stay float with a note saying target=generic quantizes them.
Each MatMul/Gemm weight that cannot be quantized gets a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...errors import TransformError
from ...ir import Attr, DType, Graph, Model, Node, Tensor, Value, all_graphs
from .._onnx import OPSET_IMPORT, Names, is_standard, opset_version
from ..registry import TransformResult
from ._nbits_onnx import FOURBIT_OPSET, check_opset_raise, dq_blocks, int4_tensor, move_reduce_axes, nbits_blocks
from .options import QuantOptions

__all__ = ["quantize_onnx_initializers", "symmetric_int8"]

#: First default-domain opset whose DequantizeLinear takes an ``axis``.
PER_CHANNEL_OPSET = 13
_QMAX = 127


def symmetric_int8(values: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scales) of ``values``: one scale, or one per slice along ``axis``."""
    if axis is None:
        peak = np.abs(values).max(initial=0.0)
    else:
        peak = np.abs(values).max(axis=tuple(i for i in range(values.ndim) if i != axis), initial=0.0)
    scale = np.where(peak > 0, peak / _QMAX, 1.0).astype(np.float32)
    shaped = scale if axis is None else scale.reshape([-1 if i == axis else 1 for i in range(values.ndim)])
    codes = np.clip(np.rint(values / shaped), -_QMAX, _QMAX).astype(np.int8)
    return codes, np.asarray(scale, np.float32)


def quantize_onnx_initializers(model: Model, *, minimum_size: int, options: QuantOptions | None = None,
                               hessians: Mapping[str, np.ndarray] | None = None) -> TransformResult:
    """The ONNX side of ``quantize_weights`` (see the module docstring); ``hessians`` (4-bit
    ``int4_method="gptq"``): ``{weight name: H[K, K]}`` of :func:`.gptq_onnx.collect_hessians`."""
    if options is not None and options.weight_type in ("int4", "uint4"):
        return _quantize_matmuls_4bit(model, minimum_size, options, hessians or {})
    if options is not None and options.weight_type != "int8":
        raise TransformError(f"quantize_weights on ONNX stores int8, int4 or uint4 weights, not {options.weight_type}")
    opset = opset_version(model, default=PER_CHANNEL_OPSET)  # none imported: as before, assume 13
    if opset < 10:
        return TransformResult(False, {"initializers_quantized": 0},
                               [f"opset {opset} has no DequantizeLinear (needs 10); nothing quantized"])
    quantized = elements = 0
    excluded: list[str] = []
    for graph in model.graphs:
        first = next(iter(graph), None)
        for value in graph.initializers:
            tensor = value.const
            if tensor is None or tensor.dtype is not DType.FLOAT32 or tensor.size < max(minimum_size, 1):
                continue
            if value.is_graph_input:
                continue
            if options is not None and _only_excluded_readers(value, options):
                excluded.append(value.name)
                continue
            axis = 0 if opset >= PER_CHANNEL_OPSET and len(tensor.shape) >= 2 else None
            codes, scale = symmetric_int8(tensor.numpy(), axis)
            name = value.name
            q = graph.add_initializer(Value(f"{name}_quantized", const=Tensor.from_numpy(codes, DType.INT8)))
            s = graph.add_initializer(Value(f"{name}_scale", const=Tensor.from_numpy(scale, DType.FLOAT32)))
            zp = graph.add_initializer(
                Value(f"{name}_zero_point", const=Tensor.from_numpy(np.zeros(scale.shape, np.int8), DType.INT8)))
            attrs = {} if axis is None else {"axis": Attr.int(axis)}
            out = Value(name, DType.FLOAT32, tensor.shape)
            node = Node("DequantizeLinear", [q, s, zp], dialect="onnx", name=f"{name}_dequantize",
                        attrs=attrs, outputs=[out])
            value.name = f"{name}_float"
            value.replace_all_uses_with(out)
            graph.remove_initializer(value)
            if first is None:
                graph.append(node)
            else:
                graph.insert_before(first, node)
            quantized += 1
            elements += tensor.size
    notes = [f"{name}: left float (every reader is excluded)" for name in excluded]
    return TransformResult(quantized > 0, {"initializers_quantized": quantized, "elements_quantized": elements,
                                           "bytes_saved": 3 * elements}, notes)


def _only_excluded_readers(value: Value, options: QuantOptions) -> bool:
    users = value.users()
    return bool(users) and all(options.excluded(user.op, user.name) for user in users)


#: Where the IR keeps an ONNX model's IR version; int4 tensors need 10.
_IR_VERSION = "onnx.ir_version"
_INT4_IR_VERSION = 10
_MS_DOMAIN = "com.microsoft"


@dataclass
class _FourBit:
    """One 4-bit run: options, fresh names, the weights done (a weight read twice is quantized once)."""

    model: Model
    options: QuantOptions
    symmetric: bool
    names: Names
    done: dict[tuple[Value, bool], list[Value]] = field(default_factory=dict)  # (weight, transposed) -> inputs
    notes: list[str] = field(default_factory=list)
    elements: int = 0
    hessians: Mapping[str, np.ndarray] = field(default_factory=dict)

    def hessian(self, weight: Value, site: _Site) -> np.ndarray | None:
        return self.hessians.get(weight.name) if site.index == 1 else None


def _quantize_matmuls_4bit(model: Model, minimum_size: int, options: QuantOptions,
                           hessians: Mapping[str, np.ndarray]) -> TransformResult:
    graphs = list(all_graphs(model))
    candidates = [(graph, node) for graph in graphs for node in graph if node.op in _FOURBIT_OPS and is_standard(node)]
    generic = options.target == "generic"
    opset = opset_version(model, default=FOURBIT_OPSET)
    if generic:
        check_opset_raise(opset, {node.op for graph in graphs for node in graph if is_standard(node)})
    run = _FourBit(model, options, options.weight_type == "int4" and options.symmetric_weights, Names(model),
                   hessians=hessians)
    if options.int4_method == "gptq" and not hessians:
        run.notes.append("int4_method gptq without calibration Hessians: every weight quantized by mse")
    others = sum(1 for graph in graphs for v in graph.initializers
                 if v.const is not None and v.const.dtype is DType.FLOAT32 and v.const.size >= max(minimum_size, 1)
                 and v.users() and all(u.op not in _FOURBIT_OPS for u in v.users()))
    if others:
        run.notes.append(f"{others} other float initializers of >= {minimum_size} elements left float "
                         "(4-bit applies to MatMul and Gemm weights only; Conv and others: use 8 bits)")
    quantized = 0
    for graph, node in candidates:
        reason, site = _why_not_4bit(node, graph, minimum_size, options)
        if site is None:
            if reason != _NOT_CONSTANT:
                run.notes.append(f"{node.name}: {node.op} left float ({reason})")
            continue
        (_dequantize_linear if generic else _matmul_nbits)(run, graph, node, site)
        quantized += 1
    if quantized and generic:
        if moved := move_reduce_axes(graphs, opset, run.names):
            run.notes.append(f"opset {opset} -> {FOURBIT_OPSET}: {moved} reductions take their axes as an input")
        imports = dict(model.meta.get(OPSET_IMPORT) or {})
        key = "ai.onnx" if "ai.onnx" in imports and "" not in imports else ""
        imports[key] = max(int(imports.get(key) or 0), FOURBIT_OPSET)
        model.meta[OPSET_IMPORT] = imports
        model.meta[_IR_VERSION] = max(int(model.meta.get(_IR_VERSION) or 0), _INT4_IR_VERSION)
    if quantized and not generic:
        imports = dict(model.meta.get(OPSET_IMPORT) or {})
        imports.setdefault(_MS_DOMAIN, 1)
        model.meta[OPSET_IMPORT] = imports
    for weight, _ in run.done:
        graph = weight.owner
        if graph is not None and weight.num_uses == 0 and not weight.is_graph_output:
            graph.remove_initializer(weight)
    stats = {"matmuls_quantized": quantized, "weights_quantized": len(run.done), "elements_quantized": run.elements,
             "bytes_saved": 4 * run.elements - run.elements // 2,
             "matmuls_left_float": sum(1 for note in run.notes if " left float (" in note and ": " in note)}
    return TransformResult(quantized > 0, stats, run.notes)


#: A MatMul whose B is an activation: not a weight, nothing to report.
_NOT_CONSTANT = "B is not constant"
#: Operators whose weight input may become 4-bit: MatMul (its B, or its A when only A is constant) and Gemm.
_FOURBIT_OPS = ("MatMul", "Gemm")


@dataclass(frozen=True)
class _Site:
    """Where a node reads its weight: input ``index``, and whether the weight is stored ``[N, K]``
    (reduction along axis 1: a Gemm with transB, a MatMul's constant A ``[M, K]``) instead of ``[K, N]``."""

    index: int
    transposed: bool


def _weight_site(node: Node, graph: Graph) -> _Site | None:
    """The 2-D weight a MatMul/Gemm multiplies by, or None when it has none (both inputs activations)."""
    def constant(i: int) -> bool:
        value = node.inputs[i] if len(node.inputs) > i else None
        return value is not None and value.is_initializer and not value.is_graph_input and value.const is not None

    if constant(1):
        return _Site(1, bool(node.op == "Gemm" and node.attr("transB", 0)))
    if node.op == "MatMul" and constant(0):
        return _Site(0, True)  # y = W[M, K] @ x[K, ...]: blocks along W's axis 1
    return None


def _nbits_form(node: Node, site: _Site) -> str:
    """Why ``node`` cannot become ``MatMulNBits(A, B) (+ bias)``; empty when it can."""
    if site.index == 0:
        return "MatMulNBits takes the weight as B only (the weight here is A); target=generic quantizes it"
    if node.op != "Gemm":
        return ""
    if node.attr("transA", 0):
        return "transA: MatMulNBits has no transposed A; target=generic quantizes it"
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None:
        n = node.inputs[1].const.shape[0 if site.transposed else 1]
        if bias.const is not None:
            ok = tuple(bias.const.shape) in ((), (1,), (n,), (1, 1), (1, n))  # broadcast over rows: a bias
        else:
            ok = float(node.attr("beta", 1.0)) == 1.0 and bias.shape is not None and tuple(bias.shape) == (n,)
        if not ok:
            return "MatMulNBits takes a bias of N elements only; target=generic quantizes it"
    return ""


def _why_not_4bit(node: Node, graph: Graph, minimum_size: int, options: QuantOptions) -> tuple[str, _Site | None]:
    site = _weight_site(node, graph)
    if site is None:
        return _NOT_CONSTANT, None
    if options.excluded(node.op, node.name):
        return "excluded", None
    tensor = node.inputs[site.index].const
    role = "A" if site.index == 0 else "B"
    if tensor.dtype is not DType.FLOAT32:
        return f"{role} is {tensor.dtype.value}, not float32", None
    if len(tensor.shape) != 2:
        return f"{role} has rank {len(tensor.shape)}, 4-bit blocks need a 2-D weight", None
    if tensor.size < max(minimum_size, 1):
        return f"{role} has {tensor.size} elements, fewer than minimum_size={minimum_size}", None
    if node.inputs[site.index].owner is not graph:
        return f"{role} belongs to an enclosing graph", None
    if options.target != "generic":
        reason = _nbits_form(node, site)
        if reason:
            return reason, None
    return "", site


def _add(run: _FourBit, graph: Graph, base: str, tensor: Tensor) -> Value:
    return graph.add_initializer(Value(run.names.fresh(base), const=tensor))


def _blocks_of(run: _FourBit, weight: Value, transposed: bool) -> np.ndarray:
    """The weight as ``[K, N]`` (K the reduction axis the blocks run along)."""
    w = weight.const.numpy()
    return w.T if transposed else w


def _dequantize_linear(run: _FourBit, graph: Graph, node: Node, site: _Site) -> None:
    weight, key = node.inputs[site.index], (node.inputs[site.index], site.transposed)
    if key not in run.done:
        codes, scale, zp = dq_blocks(_blocks_of(run, weight, site.transposed), run.options.block_size, run.symmetric,
                                     run.options.int4_method, run.hessian(weight, site))
        if site.transposed:  # stored [N, K]: blocks along axis 1
            codes, scale, zp = codes.T, scale.T, None if zp is None else zp.T
        inputs = [_add(run, graph, f"{weight.name}_DQ_Q4", int4_tensor(np.ascontiguousarray(codes), run.symmetric)),
                  _add(run, graph, f"{weight.name}_DQ_scales",
                       Tensor.from_numpy(np.ascontiguousarray(scale), DType.FLOAT32))]
        if zp is not None:
            inputs.append(_add(run, graph, f"{weight.name}_DQ_zero_points",
                               int4_tensor(np.ascontiguousarray(zp), signed=False)))
        out = Value(run.names.fresh(f"{inputs[0].name}_output"), DType.FLOAT32, weight.const.shape)
        dq = Node("DequantizeLinear", inputs, dialect="onnx", name=graph.unique_node_name(f"{node.name}_DQ_Q4"),
                  attrs={"axis": Attr.int(1 if site.transposed else 0),
                         "block_size": Attr.int(run.options.block_size)}, outputs=[out])
        graph.insert_before(node, dq)
        run.done[key] = [out]
        run.elements += weight.const.size
    node.replace_input(site.index, run.done[key][0])


def _matmul_nbits(run: _FourBit, graph: Graph, node: Node, site: _Site) -> None:
    weight, key = node.inputs[1], (node.inputs[1], site.transposed)
    w = _blocks_of(run, weight, site.transposed)
    k, n = w.shape
    if key not in run.done:
        packed, scale, zp = nbits_blocks(w, run.options.block_size, run.symmetric, run.options.int4_method,
                                         run.hessian(weight, site))
        inputs = [_add(run, graph, f"{weight.name}_Q4", Tensor.from_numpy(packed, DType.UINT8)),
                  _add(run, graph, f"{weight.name}_scales", Tensor.from_numpy(scale, DType.FLOAT32))]
        if zp is not None:
            inputs.append(_add(run, graph, f"{weight.name}_zero_points", Tensor.from_numpy(zp, DType.UINT8)))
        run.done[key] = inputs
        run.elements += weight.const.size
    weights = run.done[key]
    alpha = float(node.attr("alpha", 1.0)) if node.op == "Gemm" else 1.0
    if alpha != 1.0:  # alpha·(A·B) = A·(alpha·B): scale this node's copy of the block scales
        scaled = weights[1].const.numpy() * np.float32(alpha)
        weights = [weights[0], _add(run, graph, f"{weight.name}_scales_alpha", Tensor.from_numpy(scaled, DType.FLOAT32)),
                   *weights[2:]]
    old = node.output
    out = Value(old.name, old.dtype, old.shape)
    inputs = [node.inputs[0], *weights]
    bias = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 else None
    if bias is not None:
        beta = float(node.attr("beta", 1.0))
        if bias.const is not None and (beta != 1.0 or tuple(bias.const.shape) != (n,)):  # beta·C as [N]
            folded = np.broadcast_to(bias.const.numpy().astype(np.float32).reshape(-1) * np.float32(beta), (n,))
            bias = _add(run, graph, f"{bias.name}_bias", Tensor.from_numpy(np.ascontiguousarray(folded), DType.FLOAT32))
        inputs = [*inputs, *[None] * (5 - len(inputs)), bias]  # bias: input 5, after zero points, g_idx
    attrs = {"K": Attr.int(k), "N": Attr.int(n), "bits": Attr.int(4), "block_size": Attr.int(run.options.block_size)}
    if run.options.accuracy_level:
        attrs["accuracy_level"] = Attr.int(run.options.accuracy_level)
    nbits = Node("MatMulNBits", inputs, dialect="onnx", domain=_MS_DOMAIN,
                 name=graph.unique_node_name(f"{node.name}_Q4"), outputs=[out], attrs=attrs)
    graph.insert_before(node, nbits)
    old.name = f"{old.name}__float"
    old.replace_all_uses_with(out)
    graph.remove(node)
