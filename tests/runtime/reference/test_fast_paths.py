"""The interpreter's fast paths give exactly what the exact int64 paths give.

* :class:`FastRequant` (float requantization + exact fix-ups, and the compiled
  loop of :mod:`.jit`) against
  ``multiply_by_quantized_multiplier`` (itself checked against the C definitions in
  test_fixedpoint.py and against LiteRT in test_bitexact.py), on random and on
  adversarial accumulators (exact ties and near-ties of both roundings);
* the 2^16-entry ADD/MUL tables against the direct formula, on every input pair;
* float32 block GEMMs against int64 matrix products;
* scratch-buffer reuse: runs do not change earlier results, threads do not mix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter, multiply_by_quantized_multiplier
from graphwright.runtime.reference._common import OpContext
from graphwright.runtime.reference.add_sub_mul import _add_sub_q, _compiled_mul, _mul_q
from graphwright.runtime.reference.conv_common import _float32_blocks, _gemm, _Plan
from graphwright.runtime.reference.requant import FastRequant, Float32Requant
from graphwright.runtime.reference.table_lookup import _by_table, _byte_lookup

from ._oracle import feeds_for
from .conftest import model, random_feeds


def _exact(acc: np.ndarray, bias: np.ndarray, m: np.ndarray, shift: np.ndarray, zp: int, lo: int, hi: int,
           rounding: str, dtype: np.dtype) -> np.ndarray:
    y = multiply_by_quantized_multiplier(acc.astype(np.int64) + bias, m, shift, rounding) + zp
    return np.clip(y, lo, hi).astype(dtype)


def _adversarial(rng: np.random.Generator, m: np.ndarray, shift: np.ndarray, bias: np.ndarray, rows: int,
                 limit: float) -> np.ndarray:
    """Accumulators whose (acc + bias)·M lands on or next to half-integers (and at r-bit ties)."""
    real = m * 2.0 ** (shift - 31)
    k = rng.integers(-200, 200, (rows, m.size)) + 0.5
    target = np.round(k / real) - bias + rng.integers(-2, 3, (rows, m.size))
    return np.clip(target, -limit, limit)


#: (accumulator dtype, compiled): int32 accumulators come only from the compiled dense kernel
ACCUMULATORS = [(np.float32, False), (np.float64, False), (np.float32, True), (np.float64, True), (np.int32, True)]


@pytest.mark.parametrize(("acc_dtype", "native"), ACCUMULATORS,
                         ids=[f"{np.dtype(a).name}-{'jit' if n else 'numpy'}" for a, n in ACCUMULATORS])
@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8])
def test_fast_requant_equals_exact_path(rounding: str, acc_dtype: type, out_dtype: type, native: bool) -> None:
    rng = np.random.default_rng(7)
    channels = 37
    m = rng.integers(1 << 30, 1 << 31, channels)
    shift = -rng.integers(3, 13, channels)
    shift[:3] = [0, -3, -12]
    bias = rng.integers(-(1 << 16), 1 << 16, channels)
    info = np.iinfo(out_dtype)
    zp = int(rng.integers(info.min, info.max))
    for lo, hi in [(info.min, info.max), (zp, info.max), (max(info.min, zp - 3), min(info.max, zp + 40))]:
        fast = FastRequant.build(bias=bias, m=m, shift=shift, zp=zp, lo=lo, hi=hi, rounding=rounding,
                                 acc_dtype=np.float64 if acc_dtype is np.int32 else acc_dtype,
                                 out_dtype=np.dtype(out_dtype), native=native)
        assert fast is not None and (fast.native is not None) == native
        limit = 2.0**23 if acc_dtype is np.float32 else 2.0**30
        random = rng.integers(-(1 << 18), 1 << 18, (400, 5, channels)).astype(acc_dtype)
        tricky = _adversarial(rng, m, shift, bias, 2000, limit).astype(acc_dtype).reshape(40, 50, channels)
        for acc in (random, tricky):
            got = fast(acc, np.dtype(out_dtype))
            expected = _exact(acc, bias, m, shift, zp, lo, hi, rounding, np.dtype(out_dtype))
            assert got.dtype == out_dtype and got.shape == acc.shape
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("acc_dtype", [np.int32, np.float32])
@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8])
def test_compiled_float32_pass_with_fixups_equals_exact_path(rounding: str, acc_dtype: type, out_dtype: type) -> None:
    """Sums below 2^24 (a float32 plan): the compiled float32 pass with exact int64 fix-ups of the
    near-ties gives the int64 formula's integers, on random sums, at ±(2^23) and on adversarial ones."""
    rng = np.random.default_rng(11)
    channels = 29
    m = rng.integers(1 << 30, 1 << 31, channels)
    shift = -rng.integers(2, 14, channels)
    bias = rng.integers(-(1 << 16), 1 << 16, channels)
    info = np.iinfo(out_dtype)
    zp = int(rng.integers(info.min, info.max))
    fast = FastRequant.build(bias=bias, m=m, shift=shift, zp=zp, lo=int(info.min), hi=int(info.max),
                             rounding=rounding, acc_dtype=np.float32, out_dtype=np.dtype(out_dtype), native=True)
    assert fast is not None and fast.flagged is not None
    random = rng.integers(-(1 << 23), 1 << 23, (301, channels))
    edges = np.tile(np.array([[-(1 << 23)] * channels, [(1 << 23) - 1] * channels, [0] * channels]), (50, 1))
    tricky = _adversarial(rng, m, shift, bias, 3000, 2.0**23)
    for acc in (random, edges, tricky):  # each over _FLAGGED_MIN sums: the float32 pass
        acc = acc.astype(acc_dtype)
        np.testing.assert_array_equal(fast(acc, np.dtype(out_dtype)),
                                      _exact(acc, bias, m, shift, zp, int(info.min), int(info.max), rounding,
                                             np.dtype(out_dtype)))
    one_bit = FastRequant.build(bias=bias, m=m, shift=np.full(channels, -1), zp=zp, lo=int(info.min),
                                hi=int(info.max), rounding="double", acc_dtype=np.float32,
                                out_dtype=np.dtype(out_dtype), native=True)
    assert one_bit is not None and one_bit.flagged is None  # r = 1: a slack of 1/4, the int64 pass keeps it


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "jit"])
def test_fast_requant_hits_exact_ties(native: bool) -> None:
    """acc·M exactly k + ½ (and the double-rounding trap one LSB below it) are fixed up."""
    m, shift = np.array([1 << 30]), np.array([-3])  # M = 2^-4
    fast = FastRequant.build(bias=None, m=m, shift=shift, zp=0, lo=-128, hi=127, rounding="double",
                             acc_dtype=np.float32, out_dtype=np.dtype(np.int8), native=native)
    assert fast is not None
    acc = np.arange(-100, 101, dtype=np.float32).reshape(-1, 1)
    got = fast(acc, np.dtype(np.int8))
    np.testing.assert_array_equal(got, _exact(acc, np.zeros(1, np.int64), m, shift, 0, -128, 127, "double",
                                              np.dtype(np.int8)))
    assert got[100 + 8, 0] == 1 and got[100 - 8, 0] == -1  # ±0.5 rounds away from zero


@pytest.mark.parametrize(("m", "shift", "out_dtype", "rounding"), [
    ([1 << 30], [1], np.int8, "double"),     # left shift: int32 wrap-around, kept exact
    ([-(1 << 30)], [-3], np.int8, "double"),  # negative multiplier
    ([1 << 30], [-3], np.int16, "double"),   # 16-bit output
    ([1 << 30], [-1], np.int8, "double"),    # r = 1: a quarter of all values would need fix-ups
])
def test_fast_requant_declines_what_it_cannot_do_exactly(m: list[int], shift: list[int], out_dtype: type,
                                                         rounding: str) -> None:
    assert FastRequant.build(bias=None, m=np.array(m), shift=np.array(shift), zp=0, lo=-128, hi=127,
                             rounding=rounding, acc_dtype=np.float32, out_dtype=np.dtype(out_dtype)) is None


@pytest.mark.parametrize("rounding", ["double", "single"])
def test_compiled_requant_takes_the_layers_the_float_path_declines(rounding: str) -> None:
    """r = 1 leaves the float path no room for its double-rounding slack; the compiled
    int64 loop is exact there (and for single rounding, which the float path also takes)."""
    m, shift = np.array([1 << 30, (1 << 31) - 1]), np.array([-1, 0])
    declined = FastRequant.build(bias=None, m=m, shift=shift, zp=3, lo=-128, hi=127, rounding=rounding,
                                 acc_dtype=np.float32, out_dtype=np.dtype(np.int8)) is None
    assert declined == (rounding == "double")
    fast = FastRequant.build(bias=np.array([5, -7]), m=m, shift=shift, zp=3, lo=-128, hi=127, rounding=rounding,
                             acc_dtype=np.float32, out_dtype=np.dtype(np.int8), native=True)
    assert fast is not None
    acc = np.arange(-300, 301, dtype=np.float32)[:, None].repeat(2, axis=1)
    np.testing.assert_array_equal(fast(acc, np.dtype(np.int8)),
                                  _exact(acc, np.array([5, -7]), m, shift, 3, -128, 127, rounding, np.dtype(np.int8)))


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "jit"])
@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8])
def test_float32_requant_is_xnnpacks_formula(native: bool, out_dtype: type) -> None:
    """clamp(rint(float32(acc + bias)·S) + zp), S = float32(s_in·s_w/s_out): computed here
    scalar by scalar with Python's float32 emulation, against both paths."""
    rng = np.random.default_rng(11)
    channels = 7
    s_in, s_out = 0.0213, 0.0871
    s_w = rng.uniform(1e-3, 2e-2, channels).astype(np.float32)
    bias = rng.integers(-5000, 5000, channels)
    info = np.iinfo(out_dtype)
    zp = int(rng.integers(info.min, info.max))
    fast = Float32Requant.build(bias=bias, s_in=s_in, s_w=s_w, s_out=s_out, channels=channels, zp=zp,
                                lo=info.min, hi=info.max, out_dtype=np.dtype(out_dtype), native=native)
    assert fast is not None and (fast.native is not None) == native
    acc = np.concatenate([rng.integers(-(1 << 20), 1 << 20, (300, channels)),
                          rng.integers(-3000, 3000, (300, channels))]).astype(np.float32)
    got = fast(acc, np.dtype(out_dtype))
    scale = [np.float32(np.float32(s_in) * w) / np.float32(s_out) for w in s_w]
    for (i, c), value in np.ndenumerate(got):
        u = np.float32(float(acc[i, c]) + float(bias[c])) * scale[c]
        assert value == min(max(int(np.rint(u)) + zp, info.min), info.max), (i, c)


def test_float32_blocks_give_exact_long_sums() -> None:
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (3000, 50)).astype(np.float64)
    x = rng.integers(-255, 256, (7, 3000))
    blocks = _float32_blocks(w, 255)
    assert blocks is not None and len(blocks) >= 2
    assert [b[0] for b in blocks][1:] == [b[1] for b in blocks][:-1]
    for _, _, block in blocks:
        assert block.dtype == np.float32
        assert 255 * np.abs(block.astype(np.float64)).sum(axis=0).max() < 2**24
    plan = _Plan(w, np.float64, None, None, None)
    plan.chunks = blocks
    acc = _gemm(plan, x.astype(np.float32))
    assert acc.dtype == np.float64
    np.testing.assert_array_equal(acc.astype(np.int64), x @ w.astype(np.int64))
    assert _float32_blocks(w, 255, most=1) is None


def _direct(ctx: OpContext, op: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    if op == "MUL":
        return lambda p, q: _mul_q(ctx, p, q)
    return lambda p, q: _add_sub_q(ctx, p, q, -1 if op == "SUB" else 1)


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "jit"])
@pytest.mark.parametrize(("name", "op"), [("mobilenet_v2_int8", "ADD"), ("convs_int8", "MUL"),
                                          ("convs_int8", "SUB"), ("misc_int8", "MUL")])
def test_pair_tables_equal_the_direct_formula_on_every_pair(name: str, op: str, jit: bool) -> None:
    interp = Interpreter(model("tflite_ops", name).path)
    nodes = [n for n in interp.graph if n.op == op and n.outputs[0].dtype is not None
             and n.outputs[0].dtype.value == "int8"]
    assert nodes
    bits = np.arange(1 << 16, dtype=np.uint16)
    a = (bits >> 8).astype(np.uint8).view(np.int8).reshape(256, 256)
    b = (bits & 0xFF).astype(np.uint8).view(np.int8).reshape(256, 256)
    for node in nodes[:3]:
        ctx = OpContext(node, [a, b], "double", {}, jit)
        direct = _direct(ctx, op)
        np.testing.assert_array_equal(_by_table(ctx, a, b, direct), direct(a, b))
        assert "pair_table" in ctx.cache
        np.testing.assert_array_equal(_by_table(ctx, a[:1], b, direct), direct(a[:1], b))  # broadcasting


@pytest.mark.slow
@pytest.mark.parametrize(("name", "op"), [("convs_int8", "MUL"), ("convs_int8", "SUB")])
def test_per_channel_vector_tables_equal_the_direct_formula(name: str, op: str) -> None:
    """A tensor times a per-channel vector (squeeze-and-excite), either order: the pair table's
    columns of the vector's values, every byte of the tensor, all 256 values of every channel."""
    node = next(n for n in Interpreter(model("tflite_ops", name).path).graph if n.op == op
                and n.outputs[0].dtype is not None and n.outputs[0].dtype.value == "int8")
    rng = np.random.default_rng(9)
    v = rng.integers(-128, 128, (1, 1, 1, 8)).astype(np.int8)
    x = np.broadcast_to(np.arange(256, dtype=np.uint8).view(np.int8).reshape(1, 16, 16, 1), (1, 16, 16, 8)).copy()
    x = np.concatenate([x, rng.integers(-128, 128, (1, 16, 16, 8)).astype(np.int8)], axis=1)  # 512 rows
    for a, b in ((x, v), (v, x)):
        ctx = OpContext(node, [a, b], "double", {}, True)
        direct = _direct(ctx, op)
        _by_table(ctx, a, b, direct)
        np.testing.assert_array_equal(_by_table(ctx, a, b, direct), direct(a, b))
        big = np.tile(a if a.size > b.size else b, (1, 4, 1, 1))  # 2048 rows: the per-channel tables
        pair = (big, b) if a.size > b.size else (a, big)
        np.testing.assert_array_equal(_by_table(ctx, *pair, direct), direct(*pair))


@pytest.mark.slow
@pytest.mark.parametrize("rounding", ["double", "single"])
@pytest.mark.parametrize("name", ["convs_int8", "misc_int8"])
def test_compiled_mul_equals_the_direct_formula_on_every_pair(name: str, rounding: str) -> None:
    """The compiled 8-bit MUL (same shapes, or a tensor by a per-channel vector, either order) against
    the int64 formula, on every pair of input bytes."""
    nodes = [n for n in Interpreter(model("tflite_ops", name).path).graph if n.op == "MUL"
             and n.outputs[0].dtype is not None and n.outputs[0].dtype.value == "int8"]
    assert nodes
    bits = np.arange(1 << 16, dtype=np.uint16)
    a = (bits >> 8).astype(np.uint8).view(np.int8).reshape(1, 256, 256)
    b = (bits & 0xFF).astype(np.uint8).view(np.int8).reshape(1, 256, 256)
    vector = np.arange(256, dtype=np.uint8).view(np.int8).reshape(1, 1, 256)
    for node in nodes:
        ctx = OpContext(node, [a, b], rounding, {}, True)
        for x, y in ((a, b), (a, vector), (vector, a)):
            got = _compiled_mul(ctx, x, y)
            assert got is not None
            np.testing.assert_array_equal(got, _mul_q(ctx, x, y))
        assert _compiled_mul(ctx, a, b[:, :, :1]) is None  # a broadcast other than a per-channel vector


@pytest.mark.parametrize("size", [255, 256, 1001, 1 << 18, (1 << 18) + 2])  # the pair table from 2**18 elements
@pytest.mark.parametrize("out_dtype", [np.int8, np.uint8, np.int16])
def test_byte_lookups_two_bytes_at_a_time_equal_the_table(size: int, out_dtype: type) -> None:
    """8-bit results two at a time (even sizes), 16-bit ones (int8 -> int16 QUANTIZE) one at a time."""
    rng = np.random.default_rng(size)
    info = np.iinfo(out_dtype)
    table = rng.integers(info.min, info.max, 256, endpoint=True).astype(out_dtype)
    lookup = _byte_lookup(table, True)
    x = rng.integers(-128, 128, size).astype(np.int8)
    x[:2] = [-128, 127]
    np.testing.assert_array_equal(lookup(x), table[x.view(np.uint8)])
    np.testing.assert_array_equal(lookup(x[::2]), table[x[::2].view(np.uint8)])  # strided: numpy's gather


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "jit"])
def test_small_operators_build_their_table_on_the_second_run(jit: bool) -> None:
    node = next(n for n in Interpreter(model("tflite_ops", "mobilenet_v2_int8").path).graph if n.op == "ADD")
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-128, 128, (1, 2, 2, 8)).astype(np.int8) for _ in range(2))  # 32 < TABLE_MIN_SIZE
    ctx = OpContext(node, [a, b], "double", {}, jit)
    direct = _direct(ctx, "ADD")
    first = _by_table(ctx, a, b, direct)
    assert "pair_table" not in ctx.cache  # one small run: computed directly
    second = _by_table(ctx, a, b, direct)
    assert "pair_table" in ctx.cache  # it ran again: the table pays from now on
    np.testing.assert_array_equal(first, direct(a, b))
    np.testing.assert_array_equal(second, first)


@pytest.mark.slow
def test_mobilenet_layers_take_the_fast_paths() -> None:
    info = model("tflite_ops", "mobilenet_v2_int8")
    interp = Interpreter(info.path)
    interp.run(random_feeds(info.inputs, info.input_dtypes, 0))
    plans = [interp._cache[n]["plan"] for n in interp.graph
             if n.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]
    assert len(plans) == 53
    assert all(p.fast is not None for p in plans)
    assert sum(p.chunks is not None for p in plans) == 1  # the 1280-deep classifier


@pytest.mark.slow
def test_scratch_buffers_do_not_leak_between_runs_or_threads() -> None:
    info = model("tflite_ops", "mobilenet_v2_int8")
    interp = Interpreter(info.path)
    feeds = [random_feeds(info.inputs, info.input_dtypes, seed) for seed in range(4)]
    fresh = [Interpreter(info.path).trace(f) for f in feeds]
    first = interp.trace(feeds[0])
    snapshot = {k: v.copy() for k, v in first.items()}
    interp.trace(feeds[1])
    for key, value in first.items():  # a later run must not overwrite returned tensors
        np.testing.assert_array_equal(value, snapshot[key])
        np.testing.assert_array_equal(value, fresh[0][key])
    results: dict[int, dict[str, np.ndarray]] = {}

    def work(i: int) -> None:
        for _ in range(3):
            results[i] = interp.run(feeds[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        for key, value in results[i].items():
            np.testing.assert_array_equal(value, fresh[i][key])


@pytest.mark.slow
def test_profile_breaks_the_run_down_by_operator_type() -> None:
    info = model("tflite_ops", "mobilenet_v2_int8")
    interp = Interpreter(info.path)
    feeds = random_feeds(info.inputs, info.input_dtypes, 1)
    times = interp.profile(feeds, repeat=2)
    assert set(times) == {n.op for n in interp.graph}
    assert all(t > 0 for t in times.values())
    assert list(times.values()) == sorted(times.values(), reverse=True)
    np.testing.assert_array_equal(interp.run(feeds)[interp.outputs[0]],
                                  Interpreter(info.path).run(feeds)[interp.outputs[0]])  # steps restored


@pytest.mark.slow
def test_swish_gates_nobody_reads_are_left_out_of_runs() -> None:
    """EfficientNet's swish x·sigmoid(x): the MUL reads one table of x, so a run (not a trace, not
    a run asking for the gate) leaves the LOGISTIC out — outputs still LiteRT's BUILTIN_REF's."""
    info = model("tflite_ops", "efficientnet_b0_int8")
    interp = Interpreter(info.path, jit=True)
    feeds = [feeds_for(info, seed) for seed in range(3)]
    first = interp.run(feeds[0])  # the first run decides which MULs are gated
    skipped = interp._main.skipped(set(interp.outputs))
    ops = [interp._main.steps[i][1].op for i in skipped]
    assert len(ops) >= 16 and set(ops) == {"LOGISTIC"}
    gate = interp._main.steps[min(skipped)][1].outputs[0].name
    for f in feeds:
        theirs = execute(info.path, dict(f), Job(backend="litert-ref", outputs=[*interp.outputs, gate])).outputs
        mine = interp.run(f)
        for name in interp.outputs:
            np.testing.assert_array_equal(mine[name], theirs[name])
        asked = interp.run(f, outputs=[gate])  # asked for: computed
        np.testing.assert_array_equal(asked[gate], theirs[gate])
        np.testing.assert_array_equal(interp.trace(f)[gate], theirs[gate])
    np.testing.assert_array_equal(interp.run(feeds[0])[interp.outputs[0]], first[interp.outputs[0]])


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "jit"])
def test_shape_arithmetic_is_kept_between_runs_while_shapes_stay(jit: bool) -> None:
    """MobileNetV3's squeeze-and-excite reshapes (SHAPE -> STRIDED_SLICE -> PACK): computed once per
    input shape by run(), never by trace(); batches 1, 3, 1, 2 on one interpreter give what a fresh
    interpreter's trace gives, and a tensor of the kept arithmetic asked for is the caller's copy."""
    info = model("tflite_ops", "mobilenet_v3_small_int8")
    interp = Interpreter(info.path, jit=jit)
    static = [interp._main.steps[i][1] for i in interp._main.static]
    assert {n.op for n in static} >= {"SHAPE", "STRIDED_SLICE", "PACK"}
    packed = next(n.outputs[0].name for n in static if n.op == "PACK")
    (spec,) = interp.inputs
    rng = np.random.default_rng(4)
    for batch in (1, 3, 1, 2):
        feeds = {spec.name: rng.integers(-128, 128, (batch, *tuple(spec.shape)[1:])).astype(np.int8)}
        fresh = Interpreter(info.path, jit=jit).trace(feeds)
        for _ in range(2):  # the second run reads the kept arithmetic
            got = interp.run(feeds, outputs=[*interp.outputs, packed])
            for key, value in got.items():
                np.testing.assert_array_equal(value, fresh[key], err_msg=f"batch {batch}: {key}")
            got[packed][...] = 0  # the caller's copy: the next run is not changed by it
        assert interp._main.frozen
