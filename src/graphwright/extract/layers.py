"""The integer parameters of quantized TFLite layers: everything an integer-only target
needs to compute each layer as LiteRT's reference kernels (``BUILTIN_REF``) do, derived
with the reference interpreter's own functions (:mod:`graphwright.runtime.reference`).

``layer_params(node)`` gives one flat dict per quantized operator (None for float ones and
operators that move values without changing them).  ``MBQM(x, m, shift)`` below is
``MultiplyByQuantizedMultiplier``: ``x·m·2^(shift−31)`` with the reference kernels' two
roundings (``shift`` > 0 shifts left first).  Zero points are given as they are stored
(LiteRT's ``input_offset`` is ``−zero_point``).  Per operator:

* CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV (8-bit and 16x8): per output
  channel ``multiplier``/``shift`` of ``s_in·s_w[c]/s_out``;
  ``y = clamp(R(Σ w·(x − zp_in) + bias, m[c], shift[c]) + zp_out)`` where ``accumulator`` is
  ``int32`` (wrapping) or ``int64`` and ``R`` is given by ``rounding``: ``double`` (MBQM),
  ``single`` (``(acc·m + 2^(30−shift)) >> (31−shift)``, the 8-bit FULLY_CONNECTED), ``int64``
  (MBQM64, below) or ``real`` (the 16x8 FULLY_CONNECTED: ``round_half_away(acc·real_multiplier[c])``
  in double); ``strides``, ``dilations``, ``padding`` (TFLite's: the odd padding pixel goes
  after), ``depth_multiplier`` and ``groups`` (a grouped CONV_2D: input channels and filters split
  evenly).  BATCH_MATMUL: one multiplier of ``float32(s_1·s_2)/s_out``,
  ``adj_x``/``adj_y``, the same ``accumulator``/``rounding`` keys.
* ADD / SUB (8-bit, and int16 with general scales): ``left_shift`` (20; 15 for int16),
  ``a_i = MBQM((x_i − zp_i)·2^left_shift, input{i}_multiplier, input{i}_shift)``,
  ``y = clamp(MBQM(a_1 ± a_2, output_multiplier, output_shift) + zp_out)``; int16 with
  power-of-two scales and zero points 0 (``pot_scale_int16``): ``input{i}_shift`` only,
  ``y = clamp(RDBPOT(x_1, −shift_1) ± RDBPOT(x_2, −shift_2))`` (RoundingDivideByPOT).
* MUL: ``y = clamp(MBQM((x_1 − zp_1)(x_2 − zp_2), output_multiplier, output_shift) + zp_out)``;
  int16 × int16 → 8-bit (``q015_product``, LiteRT's LSTM path): the raw values multiplied as
  Q0.15 (16-bit SaturatingRoundingDoublingHighMul), ``RoundingDivideByPOT(·, 8)``, clamped
  (``activation_min/max`` less ``zp_out``), plus ``zp_out``.
* DIV (8-bit, int16): ``x = x_1 − zp_1``, ``y = x_2 − zp_2`` (both negated when ``y < 0``);
  ``(r, k)`` = GetReciprocal(y, 31) (gemmlowp's 1/(1 + x) of ``y`` normalised, ``k`` its bits
  over one); ``h`` = the redundant sign bits of ``x``; ``u = SRDHM(x·2^h, r)``;
  ``y = clamp(RDBPOT(SRDHM(u, output_multiplier), −(output_shift − k − h)) + zp_out)``.
* SQUARED_DIFFERENCE (8-bit): ``a_i`` as ADD's with ``left_shift`` 7,
  ``y = clamp(MBQM((a_1 − a_2)², output_multiplier, output_shift) + zp_out)``.
* AVERAGE_POOL_2D / MAX_POOL_2D: the window (``filter``), strides and padding;
  ``y = clamp(round_half_away(Σ x / count))`` or ``clamp(max x)`` over the in-image taps
  (input and output share their quantization).
* MEAN: ``y = MBQM(Σ x − zp_in·n, multiplier, shift) + zp_out`` clamped to the type, with
  ``1/n`` folded into the multiplier (``n`` = ``reduced_count``), whatever the scales.  SUM: the same without the fold (``s_in/s_out``; the sum wraps as
  an int32; as TFLite Micro computes it — LiteRT's BUILTIN_REF reads 8/16-bit SUM inputs as
  uint8).  REDUCE_PROD: ``p = x_0 − zp_in``, then ``p = MBQM64(p·(x_i − zp_in), m, shift)``
  for each next element and ``y = MBQM64(p, m, shift) + zp_out``, ``m·2^(shift−31) ≈
  s_in/s_out^(1/n)``, where MBQM64 is the int64 multiply (the multiplier rounded to 15 bits,
  ``(p·r + 2^(14−shift)) >> (15−shift)``, wrapped to int32).
* RELU / RELU6 / RELU_N1_TO_1 / RELU_0_TO_1: ``y = clamp(MBQM(x − zp_in, multiplier, shift) + zp_out)``.
* QUANTIZE (integer to integer): ``y = clamp(MBQM(x − zp_in, multiplier, shift) + zp_out)``;
  from float: ``y = clamp(round_half_away(x / scale) + zp_out)``.  DEQUANTIZE:
  ``scale·(x − zp_in)``.
* LOGISTIC / TANH / HARD_SWISH / RELU* / QUANTIZE / LEAKY_RELU and the element-wise math of
  :data:`TABULATED`: ``table``, the outputs for every input value — 256 for 8-bit inputs
  (``-128..127`` or ``0..255``, inline), 65536 for int16 ones (``-32768..32767``, in their own
  ``.npy`` file) — computed by the interpreter's kernel itself: ``y = table[x − table_first_input]``
  (the type's minimum, or the zero point for RSQRT/SQRT/LOG, which LiteRT defines on x ≥ zp only).
  int16 LOGISTIC/TANH also give ``input_multiplier``/``input_right_shift``, which bring the
  input to the scale of LiteRT's interpolated sigmoid table (``sigmoid_table_uint16``); HARD_SWISH also gives its fixed-point
  multipliers (int16 ``output_multiplier_fixedpoint_int16`` / ``reluish_multiplier_fixedpoint_int16``
  and their exponents) as LiteRT's Prepare derives them.
* SOFTMAX (8-bit): the integer-only kernel of LiteRT's ``BUILTIN_REF`` and TFLite Micro
  (gemmlowp fixed point) takes ``input_multiplier``/``input_left_shift`` (``β·s_in·2^26`` as a
  multiplier greater than one: the input difference to the row maximum becomes a fixed-point
  number with 5 integer bits) and ``diff_min`` (differences below it contribute nothing).
  graphwright's interpreter computes the same outputs from ``exp_table``, the float32
  ``exp(−s_in·β·d)`` for ``d = max − x`` in 0..255, then ``y = round(e/(Σ e · s_out)) + zp_out``
  in float32 (``beta``, scales given), so the fixed-point parameters are derived here, as
  LiteRT's PreprocessSoftmaxScaling and CalculateInputRadius do.
* SOFTMAX (int16, 16x8): LiteRT's ``exp_lut`` (exp on [−10, 0]) and ``one_over_one_plus_x_lut``
  (1/(1 + x) on [0, 1]), 513 int16 entries each (``LUTLookup``: entry ``256 + (v >> 7)``
  interpolated on the low 7 bits), and ``input_multiplier``/``input_left_shift`` of
  ``float32(s_in·β)/(10/65535)``: per row ``e = LUT_exp(clamp(MBQM(x − max, m, shift) + 32767))``,
  the sum ``S`` of ``e`` normalised by its leading zeros ``h``, ``r = LUT_1/(1+x)(clamp(((S << (h − 1))
  + 2^13 >> 14) − 3·2^15))``, ``y = clamp((e·r + 2^(30−h)) >> (31 − h), 0, 32767)``.
* UNIDIRECTIONAL_SEQUENCE_LSTM / LSTM (full-integer: int8 activations, int16 cell state): what
  LiteRT's PopulateQuantizedLstmParams8x8_16 and PopulatePrecomputedZPTimesWeightsWithBias
  derive — per gate (``input``, ``forget``, ``cell``, ``output``; no ``input`` with CIFG)
  ``input_to_<gate>_multiplier``/``_shift`` (``s_w·s_in/s_gate``, float32) and
  ``recurrent_to_<gate>_*`` (``s_r·s_state/s_gate``), their zero-point-folded int32 biases
  ``input_to_<gate>_effective_bias`` (``bias − zp_in·Σ_row w``; no bias with layer norm) and
  ``recurrent_to_<gate>_effective_bias`` (``−zp_state·Σ_row r``); with peepholes
  ``cell_to_<gate>_*`` (``2^cell_exponent·s_p/s_gate``); with layer norm
  ``layer_norm_<gate>_multiplier``/``_shift`` (the coefficients' scale) and
  ``<gate>_variance_guard`` (``max(1, int(10000·s_ln))``); ``gate_scales`` (``2^-12``, Q3.12,
  without layer norm, else the four intermediates' scales); ``hidden_multiplier``/``_shift``
  (``2^-15/s_hidden·2^-15``) and ``hidden_zero_point`` (the fifth intermediate); with a
  projection ``projection_multiplier``/``_shift`` (``s_proj·s_hidden/s_state``) and
  ``projection_effective_bias`` (``bias − zp_hidden·Σ_row w``);
  ``cell_exponent`` (log2 of the cell scale), ``quantized_cell_clip`` and
  ``quantized_proj_clip`` (0: none), ``time_major``.  The interpreter's lstm.py / lstm_integer.py run the layer
  from the same quantities (peepholes there as LiteRT applies them: to the first ``outputs``
  cells of each batch row, or of the flattened batch when time-major).
* SVDF (int8, int16 time weights and state): each run shifts the state left by one and writes
  ``clamp16(MBQM(Σ w_f·(x − zp_in), feature_multiplier, feature_shift))`` as each filter's newest
  entry; ``y = clamp8(MBQM(bias + Σ_rank Σ_memory w_t·state, output_multiplier, output_shift) + zp_out)``
  (``rank``, ``memory_size`` given).
* LOG_SOFTMAX (8-bit): per row ``d = x − max``, ``a = MBQM(d, input_multiplier,
  input_left_shift)`` (Q5.26), ``S = Σ_{d ≥ diff_min} RDBPOT(exp(a), 12)`` (gemmlowp's exp on
  negative values, Q12.19), ``L = log(S)`` (Q5.26); elements with ``d`` above
  ``max(diff_min − 1, MBQM(L − 2^31, reverse_scaling_divisor, reverse_scaling_shift))`` give
  ``clamp(RDBPOT(a − L, 22) + type max)``, the others the type's minimum.
* L2_NORMALIZATION (8-bit): per row ``(m, e) = InvSqrt(Σ (x − zp_in)²)`` (gemmlowp's
  Newton–Raphson in Q3.28, as LiteRT's GetInvSqrtQuantizedMultiplierExp); int8 (output scale
  1/128): ``y = clamp(MBQM(x − zp_in, m, e + output_shift))``, ``output_shift`` 7; uint8 (the
  legacy kernel): ``y = clamp(RDBPOT(SRDHM(input_premultiplier·(x − zp_in), m), −e) + 128)``.
* RESIZE_BILINEAR (8-bit and int16, input and output quantized alike): ``height_scale_10`` /
  ``width_scale_10``; per output index ``i`` the source position ``p = i·s`` (half-pixel:
  ``i·s + s/2 − 512``) in 2^-10 steps, ``lo = max(p / 1024, 0)``, ``hi = min((p + 1023) / 1024,
  in − 1)`` (C division), the four neighbours weighted by ``(1024 − f)`` / ``f`` with ``f = p −
  1024·lo`` per axis, summed in int64 and divided by 2^20 rounding half away from zero.
* CONCATENATION: ``axis``; 8-bit inputs share the output's quantization (``same_quantization``);
  uint8 inputs that do not are rescaled in float32 (``input_scales``, ``input_zero_points``).
* LEAKY_RELU: ``identity_multiplier``/``identity_shift`` (``s_in/s_out``) for x ≥ zp_in,
  ``alpha_multiplier``/``alpha_shift`` (``α·s_in/s_out``) below; PRELU: ``identity_*`` and
  ``alpha_*`` (``s_in·s_α/s_out``), ``y = clamp(MBQM((x − zp_in)·(α − zp_α), …) + zp_out)``.

Every dict also has ``input_zero_point``/``output_zero_point`` (per input where several)
and ``activation_min``/``activation_max`` (the fused activation's clamp, or the type range).
Not covered yet: LiteRT's 513-entry LUTs of int16 element-wise math (given as full tables
instead).
O(operators), plus one kernel evaluation over all input values per table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..ir import Node, Value
from ..runtime.reference import (
    KERNELS,
    OpContext,
    Quant,
    activation_range,
    legacy_multiplier,
    quant_of,
    quantize_multiplier,
)
from ..runtime.reference.conv import accumulator, channel_scales, multipliers
from ..runtime.reference.elementwise import LEFT_SHIFT
from ..runtime.reference.fixedpoint import fold_divisor
from ..runtime.reference.luts import lut16_double
from ..runtime.reference.math_ops import log_softmax_params

__all__ = ["INTEGER_TYPES", "layer_params"]

INTEGER_TYPES = frozenset({"int8", "uint8", "int16"})
Params = dict[str, Any]
#: element-wise operators given by their table alone (beyond those with parameters of their own)
TABULATED = ("EXP", "LOG", "ELU", "GELU", "RSQRT", "SQRT", "ABS", "NEG")
_BUILDERS: dict[str, Callable[[Node], Params | None]] = {}


def _layer(*ops: str) -> Callable[[Callable[[Node], Params | None]], Callable[[Node], Params | None]]:
    def register(fn: Callable[[Node], Params | None]) -> Callable[[Node], Params | None]:
        for op in ops:
            _BUILDERS[op] = fn
        return fn

    return register


def layer_params(node: Node) -> Params | None:
    """The integer parameters of a quantized TFLite operator (see the module docstring)."""
    build = _BUILDERS.get(node.op)
    if build is None or node.domain == "custom" or not node.outputs or not node.inputs or node.inputs[0] is None:
        return None
    if _integer(node.outputs[0]) is None and _integer(node.inputs[0]) is None:
        return None
    params = build(node)
    if params is not None and params.get("table") is not None:
        params["table_first_input"] = table_first_input(node)
    return params


def _integer(value: Value | None) -> Quant | None:
    """The quantization of an 8/16-bit integer tensor, else None."""
    if value is None or value.dtype is None or value.dtype.value not in INTEGER_TYPES:
        return None
    return quant_of(value)


def _f64(scale: float) -> float:
    """A float32 scale as the double the C code promotes it to."""
    return float(np.float64(np.float32(scale)))


def _f32(*factors: float, over: float) -> float:
    """A product of float32 factors over a float32 divisor, computed in float32 as C does
    with ``float`` operands, then widened."""
    value = np.float32(1.0)
    for f in factors:
        value = np.float32(value * np.float32(f))
    return float(np.float32(value / np.float32(over)))


def _mult(real: float) -> tuple[int, int]:
    m, s = quantize_multiplier(real)
    return int(m), int(s)


def _dtype(value: Value) -> np.dtype:
    assert value.dtype is not None and value.dtype.numpy is not None
    return np.dtype(value.dtype.numpy)


def _clamp(node: Node, dtype: np.dtype) -> Params:
    """The fused activation's clamp (CalculateActivationRangeQuantized) or the type range."""
    act = int(node.attr("fused_activation_function", 0) or 0)
    lo, hi = activation_range(OpContext(node, [], "double"), act, dtype)
    return {"activation_min": int(lo), "activation_max": int(hi)}


def _quants(node: Node, *inputs: int) -> list[Quant] | None:
    """Quantization of the given inputs and of the output, or None if one lacks it."""
    values = [node.inputs[i] if i < len(node.inputs) else None for i in inputs] + [node.outputs[0]]
    found = [_integer(v) for v in values]
    return None if any(q is None for q in found) else found  # type: ignore[return-value]


def _table(node: Node) -> list[int] | np.ndarray | None:
    """An element-wise operator's outputs for every input value from ``table_first_input(node)``
    on, computed by the interpreter's own kernel: 256 (8-bit inputs, a list) or up to 65536
    (int16, an array written to its own file); None for other inputs, or where the kernel refuses."""
    x, kernel = node.inputs[0], KERNELS.get(node.op)
    if x is None or x.dtype is None or x.dtype.value not in INTEGER_TYPES or kernel is None:
        return None
    dtype = _dtype(x)
    inputs = np.arange(table_first_input(node), np.iinfo(dtype).max + 1).astype(dtype)
    try:
        (out, *_) = kernel(OpContext(node, [inputs, *(None for _ in node.inputs[1:])], "double", {}, False))
    except (VerificationError, ArithmeticError, ValueError, IndexError, TypeError):
        return None  # the kernel refuses these inputs, or this node: no table
    out = np.asarray(out).reshape(-1)
    return out.copy() if dtype == np.int16 else [int(v) for v in out]


def table_first_input(node: Node) -> int:
    """The input value of ``table[0]``: the type's minimum, or the zero point for the operators
    LiteRT defines on non-negative values only (RSQRT, SQRT, LOG)."""
    x = node.inputs[0]
    assert x is not None
    q = quant_of(x)
    if node.op in _NON_NEGATIVE and q is not None:
        return q.zp
    return int(np.iinfo(_dtype(x)).min)


#: operators whose kernels refuse inputs below the zero point
_NON_NEGATIVE = frozenset({"RSQRT", "SQRT", "LOG"})


# -- convolutions ------------------------------------------------------------------------------------

#: (data input, bias input) of the operators with weights
_OPERANDS = {"CONV_2D": (0, 2), "DEPTHWISE_CONV_2D": (0, 2), "FULLY_CONNECTED": (0, 2), "TRANSPOSE_CONV": (2, 3)}


def _probe(node: Node) -> OpContext:
    """A context whose inputs are empty arrays of the inputs' dtypes (for the kernels' helpers
    that look at dtypes only)."""
    arrays = [None if v is None or v.dtype is None or v.dtype.numpy is None else np.empty(0, v.dtype.numpy)
              for v in node.inputs]
    return OpContext(node, arrays, "double")  # type: ignore[arg-type]


def _rounding(op: str, acc: str) -> str:
    """How the accumulator is scaled: ``double`` (MBQM), ``single`` (one rounding: LiteRT's
    reference FULLY_CONNECTED on 8-bit tensors), ``int64`` (MBQM64, the 16x8 kernels) or
    ``real`` (the 16x8 FULLY_CONNECTED: ``round_half_away(acc·real_multiplier[c])`` in double)."""
    if op == "FULLY_CONNECTED":
        return "single" if acc == "int32" else "real"
    return "double" if acc == "int32" else "int64"


@_layer("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")
def _conv(node: Node) -> Params | None:
    """As the interpreter's convolutions (conv_common.py's multipliers, accumulator and requantization)."""
    data, bias = _OPERANDS[node.op]
    if len(node.inputs) <= max(data, 1):
        return None
    x, w, y = node.inputs[data], node.inputs[1], node.outputs[0]
    if x is None or w is None or x.dtype is None or x.dtype.value not in INTEGER_TYPES or w.shape is None:
        return None
    q_in, q_w, q_out = quant_of(x), quant_of(w), quant_of(y)
    if q_in is None or q_w is None or q_out is None:
        return None
    channels = w.shape[3] if node.op == "DEPTHWISE_CONV_2D" else w.shape[0]
    if not isinstance(channels, int):
        return None
    legacy = x.dtype.value == "uint8" and q_w.scale.size == 1
    m, s = multipliers(q_in, q_w, q_out, channels, legacy)
    acc = accumulator(_probe(node), data, bias)
    params: Params = {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "weights_zero_point": q_w.zp,
                      **_clamp(node, _dtype(y)), "multiplier": [int(v) for v in m], "shift": [int(v) for v in s],
                      "accumulator": acc, "rounding": _rounding(node.op, acc)}
    if params["rounding"] == "real":
        params["real_multiplier"] = [float(v) for v in channel_scales(q_in.s, q_w, q_out.s, channels)]
    if node.op != "FULLY_CONNECTED":
        params["strides"] = [int(node.attr("stride_h", 1)), int(node.attr("stride_w", 1))]
        params["padding"] = "SAME" if int(node.attr("padding", 0)) == 0 else "VALID"
    if node.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        params["dilations"] = [int(node.attr("dilation_h_factor", 1)), int(node.attr("dilation_w_factor", 1))]
    if node.op == "CONV_2D":  # grouped when the input has a multiple of the filters' input channels
        depth = (x.meta.get("tflite.shape") or x.shape or (None,))[-1]
        params["groups"] = depth // w.shape[3] if isinstance(depth, int) and isinstance(w.shape[3], int) else 1
    if node.op == "DEPTHWISE_CONV_2D":
        params["depth_multiplier"] = int(node.attr("depth_multiplier", 1) or 1)
    return params


@_layer("BATCH_MATMUL")
def _batch_matmul(node: Node) -> Params | None:
    """As the interpreter's BATCH_MATMUL (matmul.py): one per-tensor multiplier of
    ``float32(s_1·s_2)/s_out``, an int32 (8-bit) or int64 (int16) accumulator."""
    qs = _quants(node, 0, 1)
    if qs is None or qs[1].scale.size != 1:
        return None
    q1, q2, qo = qs
    m, s = legacy_multiplier(q1.s, q2, qo.s, 1)
    acc = "int64" if _dtype(node.inputs[0]) == np.int16 else "int32"  # type: ignore[arg-type]
    return {"input1_zero_point": q1.zp, "input2_zero_point": q2.zp, "output_zero_point": qo.zp,
            **_clamp(node, _dtype(node.outputs[0])), "multiplier": int(m[0]), "shift": int(s[0]),
            "accumulator": acc, "rounding": _rounding(node.op, acc),
            "adj_x": bool(node.attr("adj_x", False)), "adj_y": bool(node.attr("adj_y", False))}


# -- element-wise arithmetic --------------------------------------------------------------------------

def _log2_if_pot(scale: float) -> int | None:
    """LiteRT's CheckedLog2: the rounded log2 of a scale that is a power of two (within 1e-3)."""
    exact = math.log2(scale)
    rounded = round(exact)
    return rounded if abs(exact - rounded) < 1e-3 else None


@_layer("ADD", "SUB")
def _add_sub(node: Node) -> Params | None:
    """As LiteRT's Prepare of ADD/SUB: the interpreter computes the same in add_sub_mul.py inline."""
    qs = _quants(node, 0, 1)
    if qs is None:
        return None
    q1, q2, qo = qs
    dtype = _dtype(node.outputs[0])
    params: Params = {"input1_zero_point": q1.zp, "input2_zero_point": q2.zp, "output_zero_point": qo.zp,
                      **_clamp(node, dtype)}
    if dtype == np.int16 and node.attr("pot_scale_int16", False):
        logs = [_log2_if_pot(q.s) for q in (q1, q2, qo)]
        if None not in logs and q1.zp == q2.zp == qo.zp == 0:
            return {**params, "pot_scale_int16": True, "input1_shift": logs[0] - logs[2],  # type: ignore[operator]
                    "input2_shift": logs[1] - logs[2]}  # type: ignore[operator]
    left_shift = 15 if dtype == np.int16 else LEFT_SHIFT
    twice_max = 2.0 * max(_f64(q1.s), _f64(q2.s))
    m1, s1 = _mult(_f64(q1.s) / twice_max)
    m2, s2 = _mult(_f64(q2.s) / twice_max)
    mo, so = _mult(twice_max / _f64(np.float32((1 << left_shift) * np.float32(qo.s))))
    return {**params, "left_shift": left_shift, "input1_multiplier": m1, "input1_shift": s1,
            "input2_multiplier": m2, "input2_shift": s2, "output_multiplier": mo, "output_shift": so}


@_layer("SQUARED_DIFFERENCE")
def _squared_difference(node: Node) -> Params | None:
    """As LiteRT's Prepare (8-bit): each input rescaled like ADD's with a left shift of 7, the
    squared difference by ``(2·max(s1, s2))² / (2^14·s_out)`` (the interpreter computes these inline)."""
    qs = _quants(node, 0, 1)
    if qs is None or _dtype(node.outputs[0]).itemsize != 1:
        return None
    q1, q2, qo = qs
    left_shift = 7
    twice_max = 2.0 * max(_f64(q1.s), _f64(q2.s))
    m1, s1 = _mult(_f64(q1.s) / twice_max)
    m2, s2 = _mult(_f64(q2.s) / twice_max)
    mo, so = _mult(twice_max * twice_max / _f64(np.float32((1 << (2 * left_shift)) * np.float32(qo.s))))
    return {"input1_zero_point": q1.zp, "input2_zero_point": q2.zp, "output_zero_point": qo.zp,
            **_clamp(node, _dtype(node.outputs[0])), "left_shift": left_shift, "input1_multiplier": m1,
            "input1_shift": s1, "input2_multiplier": m2, "input2_shift": s2, "output_multiplier": mo,
            "output_shift": so}


@_layer("MUL")
def _mul(node: Node) -> Params | None:
    """As LiteRT's Prepare: ``s_1·s_2/s_out`` in float32 (the interpreter's add_sub_mul.py divides
    in double, which differs from LiteRT on some 16x8 layers, e.g. a LayerNorm's product)."""
    qs = _quants(node, 0, 1)
    if qs is None:
        return None
    q1, q2, qo = qs
    params = {"input1_zero_point": q1.zp, "input2_zero_point": q2.zp, "output_zero_point": qo.zp,
              **_clamp(node, _dtype(node.outputs[0]))}
    if _dtype(node.inputs[0]) == np.int16 and _dtype(node.outputs[0]).itemsize == 1:  # type: ignore[arg-type]
        return {**params, "q015_product": True}  # the LSTM path: no multiplier
    m, s = _mult(_f32(q1.s, q2.s, over=qo.s))
    return {**params, "output_multiplier": m, "output_shift": s}


# -- pooling and reductions ------------------------------------------------------------------------

@_layer("AVERAGE_POOL_2D", "MAX_POOL_2D")
def _pool(node: Node) -> Params | None:
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, **_clamp(node, _dtype(node.outputs[0])),
            "filter": [int(node.attr("filter_height", 1)), int(node.attr("filter_width", 1))],
            "strides": [int(node.attr("stride_h", 1)), int(node.attr("stride_w", 1))],
            "padding": "SAME" if int(node.attr("padding", 0)) == 0 else "VALID"}


def _reduction(node: Node) -> tuple[Quant, Quant, list[int], int] | None:
    """(input and output quantization, reduced axes, their element count) of a reduction."""
    qs = _quants(node, 0)
    x, axes = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if qs is None or x is None or x.shape is None or axes is None or axes.const is None:
        return None
    shape = x.meta.get("tflite.shape") or x.shape  # the static shape beside a signature with unknown dims
    rank = len(shape)
    reduced = sorted({int(a) % rank for a in np.asarray(axes.const.numpy()).reshape(-1)}) if rank else []
    if any(not isinstance(shape[a], int) or shape[a] < 0 for a in reduced):
        return None
    return qs[0], qs[1], reduced, int(np.prod([shape[a] for a in reduced], dtype=np.int64)) if reduced else 1


@_layer("MEAN")
def _mean(node: Node) -> Params | None:
    found = _reduction(node)
    if found is None:
        return None
    q_in, q_out, reduced, n = found
    lo, hi = np.iinfo(_dtype(node.outputs[0])).min, np.iinfo(_dtype(node.outputs[0])).max
    m, s = fold_divisor(*_mult(_f64(q_in.s) / _f64(q_out.s)), n)  # as pool.py's MEAN
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "activation_min": int(lo),
            "activation_max": int(hi), "axes": reduced, "reduced_count": n, "multiplier": m, "shift": s}


@_layer("SUM")
def _sum(node: Node) -> Params | None:
    """As the interpreter's quantized SUM (reduce_ops.py computes the multiplier inline)."""
    found = _reduction(node)
    if found is None:
        return None
    q_in, q_out, reduced, n = found
    m, s = _mult(_f64(q_in.s) / _f64(q_out.s))
    dtype = _dtype(node.outputs[0])
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "activation_min": int(np.iinfo(dtype).min),
            "activation_max": int(np.iinfo(dtype).max), "axes": reduced, "reduced_count": n,
            "multiplier": m, "shift": s}


@_layer("REDUCE_PROD")
def _reduce_prod(node: Node) -> Params | None:
    """As the interpreter's quantized REDUCE_PROD: the multiplier of ``s_in / s_out^(1/n)``,
    applied after every product and once more at the end (reduce_ops.py computes it inline)."""
    found = _reduction(node)
    if found is None or found[3] == 0:
        return None
    q_in, q_out, reduced, n = found
    m, s = _mult(float(np.float32(q_in.s)) / math.pow(float(np.float32(q_out.s)), 1.0 / n))
    dtype = _dtype(node.outputs[0])
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "activation_min": int(np.iinfo(dtype).min),
            "activation_max": int(np.iinfo(dtype).max), "axes": reduced, "reduced_count": n,
            "multiplier": m, "shift": s}


# -- unary activations and conversions --------------------------------------------------------------

def _rescale(node: Node, real: float | None = None) -> Params | None:
    """Zero points, clamp and the multiplier of ``s_in/s_out`` (or ``real``)."""
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    m, s = _mult(_f64(q_in.s) / _f64(q_out.s) if real is None else real)
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, **_clamp(node, _dtype(node.outputs[0])),
            "multiplier": m, "shift": s}


@_layer("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1")
def _relu(node: Node) -> Params | None:
    """The interpreter divides the scales in float32 before widening (activations.py, inline)."""
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    params = _rescale(node, _f32(q_in.s, over=q_out.s))
    assert params is not None
    bounds = {"RELU": (0.0, math.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0),
              "RELU_0_TO_1": (0.0, 1.0)}[node.op]
    tmin, tmax = (int(v) for v in (np.iinfo(_dtype(node.outputs[0])).min, np.iinfo(_dtype(node.outputs[0])).max))
    scale = np.float32(q_out.s)
    params["activation_min"] = max(tmin, q_out.zp + int(_half_away(np.float32(bounds[0]) / scale)))
    if bounds[1] != math.inf:
        params["activation_max"] = min(tmax, q_out.zp + int(_half_away(np.float32(bounds[1]) / scale)))
    params["table"] = _table(node)
    return params


def _half_away(v: float) -> float:
    return math.copysign(math.floor(abs(float(v)) + 0.5), float(v))


@_layer("QUANTIZE")
def _quantize(node: Node) -> Params | None:
    x, q_out = node.inputs[0], _integer(node.outputs[0])
    if x is None or q_out is None or q_out.scale.size != 1:
        return None
    if x.dtype is not None and x.dtype.value in ("float32", "float16"):
        return {"output_zero_point": q_out.zp, "scale": float(np.float32(q_out.s)),
                **_clamp(node, _dtype(node.outputs[0]))}
    params = _rescale(node)
    if params is not None:
        params["table"] = _table(node)
    return params


@_layer("DEQUANTIZE")
def _dequantize(node: Node) -> Params | None:
    q_in = _integer(node.inputs[0])
    if q_in is None:
        return None
    return {"input_zero_point": [int(z) for z in q_in.zero_point.reshape(-1)],
            "scale": [float(s) for s in q_in.scale.reshape(-1)], "axis": q_in.axis}


@_layer("LOGISTIC", "TANH", *TABULATED)
def _lookup(node: Node) -> Params | None:
    qs = _quants(node, 0)
    if qs is None:
        return None
    table = _table(node)
    if table is None:
        return None
    q_in, q_out = qs
    params = {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, **_clamp(node, _dtype(node.outputs[0])),
              "table": table}
    if node.op in ("LOGISTIC", "TANH") and _dtype(node.inputs[0]) == np.int16:  # type: ignore[arg-type]
        params["input_multiplier"], params["input_right_shift"] = _sigmoid_input_rescale(q_in.s, node.op == "TANH")
    return params


def _sigmoid_input_rescale(s_in: float, tanh: bool) -> tuple[int, int]:
    """LiteRT's int16 LOGISTIC/TANH Prepare (the interpreter's activations.py has the same inline):
    ``(x·multiplier + round) >> right_shift`` brings the input to the scale 1/(3·4096) of its
    interpolated sigmoid table — ``3·2^k`` unshifted for a power-of-two scale whose
    ``k = 12 + log2(s_in)`` is 0 (or 1 for TANH), else ``s_in·3·4096`` doubled until it
    exceeds 32767/2, truncated, with as many right shifts."""
    log2 = _log2_if_pot(s_in)
    if log2 is not None and 12 + log2 in ((0, 1) if tanh else (0,)):
        return 3 << (12 + log2), 0
    multiplier, shift = _f64(s_in) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


@_layer("HARD_SWISH")
def _hard_swish(node: Node) -> Params | None:
    """LiteRT's Prepare: the input at scale ``s_in/128``; its multipliers to the output scale and
    to the 'reluish' scale ``3/2^15``, rounded to 16 bits (the interpreter computes them inline
    in activations.py; the table comes from its kernel)."""
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(q_in.s))
    m_out, e_out = _mult(float(np.float32(hires / np.float32(q_out.s))))
    m_rel, e_rel = _mult(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, **_clamp(node, _dtype(node.outputs[0])),
            "output_multiplier_fixedpoint_int16": _down16(m_out), "output_multiplier_exponent": e_out,
            "reluish_multiplier_fixedpoint_int16": _down16(m_rel), "reluish_multiplier_exponent": e_rel,
            "table": _table(node)}


def _down16(m: int) -> int:
    """LiteRT's DownScaleInt32ToInt16Multiplier: round a 31-bit multiplier to 15 bits, saturating."""
    return 32767 if m >= (1 << 31) - 1 - (1 << 15) else (m + (1 << 15)) >> 16


@_layer("SOFTMAX")
def _softmax(node: Node) -> Params | None:
    """8-bit SOFTMAX: the fixed-point parameters, and the interpreter's float32 table (which
    activations.py builds inline); int16: LiteRT's two 513-entry LUTs and input multiplier."""
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    beta = np.float32(node.attr("beta", 1.0) or 1.0)
    if _dtype(node.inputs[0]) == np.int16:  # type: ignore[arg-type]
        return _softmax_int16(q_in, q_out, beta)
    if _dtype(node.inputs[0]).itemsize != 1:  # type: ignore[arg-type]
        return None
    table = np.exp(np.float32(-q_in.s) * beta * np.arange(256, dtype=np.float32)).astype(np.float32)
    # the fixed-point softmax: PreprocessSoftmaxScaling and CalculateInputRadius with
    # 5 integer bits for the scaled difference to the row maximum
    real = min(float(beta) * _f64(q_in.s) * float(1 << (31 - _SOFTMAX_DIFF_BITS)), float((1 << 31) - 1))
    multiplier, left_shift = _mult(real)
    radius = ((1 << _SOFTMAX_DIFF_BITS) - 1) * float(1 << (31 - _SOFTMAX_DIFF_BITS)) / float(1 << left_shift)
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "beta": float(beta),
            "input_scale": float(np.float32(q_in.s)), "output_scale": float(np.float32(q_out.s)),
            "exp_table": [float(v) for v in table], "input_multiplier": multiplier, "input_left_shift": left_shift,
            "diff_min": -math.floor(radius)}


#: integer bits of the scaled input difference in the fixed-point softmax (gemmlowp's F5)
_SOFTMAX_DIFF_BITS = 5


def _softmax_int16(q_in: Quant, q_out: Quant, beta: np.float32) -> Params:
    """LiteRT's 16x8 SOFTMAX Prepare: ``exp_lut`` (exp on [−10, 0]) and
    ``one_over_one_plus_x_lut`` (1/(1 + x) on [0, 1]), 513 int16 entries each, output range
    [−1, 1) (LUTPopulate in double, as the interpreter's luts.py builds them); the input
    multiplier of ``float32(s_in·β) / (10/65535)`` (a row's differences to its maximum scaled so
    that −65535 stands for −10)."""
    step = 1.0 / 65535
    m, shift = _mult(float(np.float32(np.float32(q_in.s) * beta)) / (10.0 / 65535.0))
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "beta": float(beta),
            "input_scale": float(np.float32(q_in.s)), "output_scale": float(np.float32(q_out.s)),
            "input_multiplier": m, "input_left_shift": shift,
            "exp_lut": lut16_double(np.exp, 10.0 * step, 32767, 2.0 * step).astype(np.int16),
            "one_over_one_plus_x_lut": lut16_double(lambda v: 1.0 / (1.0 + v), step, -32768,
                                                    2.0 * step).astype(np.int16)}


@_layer("CONCATENATION")
def _concatenation(node: Node) -> Params | None:
    q_out = _integer(node.outputs[0])
    if q_out is None:
        return None
    ins = [_integer(v) for v in node.inputs]
    if any(q is None for q in ins):
        return None
    same = all(np.float32(q.s) == np.float32(q_out.s) and q.zp == q_out.zp for q in ins if q is not None)
    return {"axis": int(node.attr("axis", 0)), "output_zero_point": q_out.zp,
            "output_scale": float(np.float32(q_out.s)), "same_quantization": bool(same),
            "input_zero_points": [q.zp for q in ins if q is not None],
            "input_scales": [float(np.float32(q.s)) for q in ins if q is not None]}


@_layer("LEAKY_RELU")
def _leaky_relu(node: Node) -> Params | None:
    """As LiteRT's Prepare: ``s_in/s_out`` and ``s_in·α/s_out`` in float32."""
    qs = _quants(node, 0)
    if qs is None:
        return None
    q_in, q_out = qs
    mi, si = _mult(_f32(q_in.s, over=q_out.s))
    ma, sa = _mult(_f32(q_in.s, float(node.attr("alpha", 0.2)), over=q_out.s))
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, **_clamp(node, _dtype(node.outputs[0])),
            "identity_multiplier": mi, "identity_shift": si, "alpha_multiplier": ma, "alpha_shift": sa,
            "table": _table(node)}


@_layer("PRELU")
def _prelu(node: Node) -> Params | None:
    """As LiteRT's Prepare: ``s_in/s_out`` and ``s_in·s_α/s_out`` in float32 (per-tensor α)."""
    qs = _quants(node, 0, 1)
    if qs is None:
        return None
    q_in, q_alpha, q_out = qs
    mi, si = _mult(_f32(q_in.s, over=q_out.s))
    ma, sa = _mult(_f32(q_in.s, q_alpha.s, over=q_out.s))
    return {"input_zero_point": q_in.zp, "alpha_zero_point": q_alpha.zp, "output_zero_point": q_out.zp,
            **_clamp(node, _dtype(node.outputs[0])),
            "identity_multiplier": mi, "identity_shift": si, "alpha_multiplier": ma, "alpha_shift": sa}


# -- the integer LSTM -------------------------------------------------------------------------------

#: the LSTM gates, in the order of their weight, bias and layer-norm inputs
_GATES = ("input", "forget", "cell", "output")


@_layer("UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM")
def _lstm(node: Node) -> Params | None:
    """As LiteRT's integer LSTM Prepare (see the module docstring); None unless int8 input and
    weights with an int16 cell state and five intermediates, the fifth quantized."""
    def at(i: int) -> Value | None:
        return node.inputs[i] if i < len(node.inputs) else None

    def scale(i: int) -> np.float32:
        q = quant_of(at(i))  # type: ignore[arg-type]
        assert q is not None
        return np.float32(q.s)

    x, cell, state = at(0), at(19), at(18)
    if any(v is None or v.dtype is None for v in (x, cell, state, at(2))) or x.dtype.value != "int8" \
            or cell.dtype.value != "int16" or at(2).dtype.value != "int8":  # type: ignore[union-attr]
        return None
    intermediates = node.meta.get("tflite.intermediates") or []
    hidden = quant_of(intermediates[4]) if len(intermediates) == 5 else None
    q_in, q_state, q_cell, q_out = quant_of(x), quant_of(state), quant_of(cell), _integer(node.outputs[0])  # type: ignore[arg-type]
    if hidden is None or q_in is None or q_state is None or q_cell is None or q_out is None:
        return None
    exponent = _log2_if_pot(float(np.float32(q_cell.s)))
    if exponent is None:
        return None
    cifg, peephole = at(1) is None, at(11) is not None
    layer_norm, projection = at(21) is not None, at(16) is not None
    gate_scales = [np.float32(2.0 ** -12)] * 4
    if layer_norm:
        gate_q = [quant_of(v) for v in intermediates[:4]]
        if any(q is None for q in gate_q):
            return None
        gate_scales = [np.float32(q.s) for q in gate_q]  # type: ignore[union-attr]
    s_in, s_state = np.float32(q_in.s), np.float32(q_state.s)
    cell_clip = float(node.attr("cell_clip", 0.0) or 0.0)
    proj_clip = float(node.attr("proj_clip", 0.0) or 0.0)
    params: Params = {
        "input_zero_point": q_in.zp, "output_state_zero_point": q_state.zp, "output_zero_point": q_out.zp,
        "use_cifg": cifg, "use_peephole": peephole, "use_layer_norm": layer_norm, "use_projection": projection,
        "gate_scales": [float(v) for v in gate_scales], "cell_exponent": exponent,
        "time_major": bool(node.attr("time_major", False)) if node.op != "LSTM" else True,
        "quantized_cell_clip": int(np.trunc(np.clip(np.float32(cell_clip) / np.float32(q_cell.s), -32768, 32767)))
        if cell_clip > 0 else 0,
        "quantized_proj_clip": int(np.trunc(np.clip(np.float32(proj_clip) / np.float32(q_out.s), -128, 127)))
        if proj_clip > 0 else 0,
        "hidden_zero_point": hidden.zp,
    }
    params["hidden_multiplier"], params["hidden_shift"] = _mult(
        float(np.float32(2.0 ** -15 / _f64(hidden.s) * 2.0 ** -15)))
    for g, gate in enumerate(_GATES):
        if cifg and g == 0:
            continue
        w_in, w_rec = at(1 + g), at(5 + g)
        if w_in is None or w_rec is None or w_in.const is None or w_rec.const is None:
            return None
        for kind, index, other in (("input", 1 + g, s_in), ("recurrent", 5 + g, s_state)):
            m, s = _mult(float(np.float32(np.float32(scale(index) * other) / gate_scales[g])))
            params[f"{kind}_to_{gate}_multiplier"], params[f"{kind}_to_{gate}_shift"] = m, s
        bias = at(12 + g)
        base = bias.const.numpy().astype(np.int64) if bias is not None and bias.const is not None and not layer_norm \
            else np.zeros(w_in.shape[0], np.int64)  # type: ignore[index]
        rows_in = w_in.const.numpy().astype(np.int64).sum(axis=1)
        rows_rec = w_rec.const.numpy().astype(np.int64).sum(axis=1)
        params[f"input_to_{gate}_effective_bias"] = (base - q_in.zp * rows_in).astype(np.int32)
        params[f"recurrent_to_{gate}_effective_bias"] = (-q_state.zp * rows_rec).astype(np.int32)
        if peephole and not (cifg and g == 0) and g != 2:
            p_index = 9 + (0, 1, None, 2)[g]  # type: ignore[operator]
            params[f"cell_to_{gate}_multiplier"], params[f"cell_to_{gate}_shift"] = _mult(
                float(np.float32(2.0 ** exponent * _f64(scale(p_index)) / float(gate_scales[g]))))
        if layer_norm:
            s_ln = scale(20 + g)
            params[f"layer_norm_{gate}_multiplier"], params[f"layer_norm_{gate}_shift"] = _mult(_f64(s_ln))
            params[f"{gate}_variance_guard"] = max(1, int(np.float32(10000) * s_ln))
    if projection:
        w = at(16)
        if w is None or w.const is None:
            return None
        params["projection_multiplier"], params["projection_shift"] = _mult(
            float(np.float32(np.float32(scale(16) * np.float32(hidden.s)) / s_state)))
        bias = at(17)
        base = bias.const.numpy().astype(np.int64) if bias is not None and bias.const is not None \
            else np.zeros(w.const.numpy().shape[0], np.int64)
        params["projection_effective_bias"] = (base - hidden.zp * w.const.numpy().astype(np.int64).sum(axis=1)
                                               ).astype(np.int32)
    return params


@_layer("SVDF")
def _svdf(node: Node) -> Params | None:
    """LiteRT's integer SVDF Prepare (int8 input, feature weights and output, int16 time weights
    and state): ``feature_multiplier``/``_shift`` of ``s_in·s_feature/s_state`` and
    ``output_multiplier``/``_shift`` of ``s_state·s_time/s_out`` (float32), ``rank``,
    ``memory_size``; None for float and hybrid SVDFs."""
    x, features, times, state = (node.inputs[i] if i < len(node.inputs) else None for i in (0, 1, 2, 4))
    if any(v is None or v.dtype is None for v in (x, features, times, state)) or \
            (x.dtype.value, times.dtype.value, state.dtype.value) != ("int8", "int16", "int16"):  # type: ignore[union-attr]
        return None
    qs = [quant_of(v) for v in (x, features, times, state)] + [_integer(node.outputs[0])]  # type: ignore[arg-type]
    if any(q is None for q in qs) or times.shape is None:  # type: ignore[union-attr]
        return None
    s_in, s_feature, s_time, s_state, s_out = (np.float32(q.s) for q in qs)  # type: ignore[union-attr]
    m1, e1 = _mult(float(np.float32(np.float32(s_in * s_feature) / s_state)))
    m2, e2 = _mult(float(np.float32(np.float32(s_state * s_time) / s_out)))
    return {"input_zero_point": qs[0].zp, "output_zero_point": qs[4].zp,  # type: ignore[union-attr]
            "feature_multiplier": m1, "feature_shift": e1, "output_multiplier": m2, "output_shift": e2,
            "rank": int(node.attr("rank", 1) or 1), "memory_size": int(times.shape[1])}  # type: ignore[union-attr]


@_layer("LOG_SOFTMAX")
def _log_softmax(node: Node) -> Params | None:
    """LiteRT's 8-bit LOG_SOFTMAX Prepare (PreprocessLogSoftmaxScalingExp, β = 1, 5 integer bits),
    as the interpreter's math_ops computes it: ``input_multiplier``/``input_left_shift`` (the
    difference to the row maximum into Q5.26), ``reverse_scaling_divisor``/``_shift`` and
    ``diff_min``; the output is fixed at scale 16/256 with the zero point at the type's top."""
    qs = _quants(node, 0)
    if qs is None or _dtype(node.inputs[0]).itemsize != 1:  # type: ignore[arg-type]
        return None
    q_in, q_out = qs
    m, left, m_rev, s_rev, diff_min = log_softmax_params(q_in.s)
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "input_scale": float(np.float32(q_in.s)),
            "output_scale": float(np.float32(q_out.s)), "input_multiplier": int(m), "input_left_shift": int(left),
            "reverse_scaling_divisor": int(m_rev), "reverse_scaling_shift": int(s_rev), "diff_min": int(diff_min)}


@_layer("L2_NORMALIZATION")
def _l2_normalization(node: Node) -> Params | None:
    """int8 L2_NORMALIZATION (LiteRT's reference_integer_ops): the output is fixed at scale 1/128,
    zero point 0; per row ``S = Σ (x − zp_in)²``, ``(m, e)`` = gemmlowp's inverse square root of
    ``S`` (GetInvSqrtQuantizedMultiplierExp, reverse shift), ``y = clamp8(MBQM(x − zp_in, m, e + 7))``."""
    qs = _quants(node, 0)
    if qs is None or _dtype(node.inputs[0]).itemsize != 1:  # type: ignore[arg-type]
        return None
    q_in, q_out = qs
    if _dtype(node.inputs[0]) == np.uint8:  # type: ignore[arg-type]
        return {"input_zero_point": q_in.zp, "output_zero_point": 128, "output_scale": float(np.float32(q_out.s)),
                "input_premultiplier": 128, "activation_min": 0, "activation_max": 255}
    return {"input_zero_point": q_in.zp, "output_zero_point": q_out.zp, "output_scale": float(np.float32(q_out.s)),
            "output_shift": 7, "activation_min": -128, "activation_max": 127}


@_layer("RESIZE_BILINEAR")
def _resize_bilinear(node: Node) -> Params | None:
    """Quantized RESIZE_BILINEAR (LiteRT's ResizeBilinearInteger: input and output share their
    quantization): ``output_size``, the flags, and each axis' scale in 2^-10 steps —
    ``round(2^10·in/out)`` (``(2^10·(in − 1) + (out − 1)/2) / (out − 1)`` with align_corners)."""
    qs = _quants(node, 0)
    x, size = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if qs is None or x is None or size is None or size.const is None:
        return None
    shape = x.meta.get("tflite.shape") or x.shape
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape[1:3]):
        return None
    out = [int(v) for v in np.asarray(size.const.numpy()).reshape(-1)]
    align, half = bool(node.attr("align_corners", False)), bool(node.attr("half_pixel_centers", False))

    def scale_10(n_in: int, n_out: int) -> int:
        if align and n_out > 1:
            return ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
        return ((1 << 10) * n_in + n_out // 2) // n_out

    return {"input_zero_point": qs[0].zp, "output_zero_point": qs[1].zp, "output_size": out,
            "align_corners": align, "half_pixel_centers": half,
            "height_scale_10": scale_10(int(shape[1]), out[0]), "width_scale_10": scale_10(int(shape[2]), out[1])}


@_layer("DIV")
def _div(node: Node) -> Params | None:
    """Quantized DIV (8-bit, int16): LiteRT's Prepare multiplier of ``s_1/(s_2·s_out)`` in float32
    (the interpreter's binary_ops.py computes the same inline)."""
    qs = _quants(node, 0, 1)
    if qs is None:
        return None
    q1, q2, qo = qs
    m, s = _mult(float(np.float32(np.float32(q1.s) / np.float32(np.float32(q2.s) * np.float32(qo.s)))))
    return {"input1_zero_point": q1.zp, "input2_zero_point": q2.zp, "output_zero_point": qo.zp,
            **_clamp(node, _dtype(node.outputs[0])), "output_multiplier": m, "output_shift": s}
