"""The remaining BUILTIN_REF operators, as LiteRT's reference kernels:

* ONE_HOT, BROADCAST_ARGS, UNIQUE, MATRIX_DIAG, MATRIX_SET_DIAG, SPARSE_TO_DENSE in the value
  types each LiteRT kernel takes (float32, int8, uint8, int32, int64; bool for ONE_HOT, int16 for
  MATRIX_DIAG and UNIQUE; quantized values are copied as integers);
* L2_POOL_2D, FAKE_QUANT, EMBEDDING_LOOKUP_SPARSE in float32; HASHTABLE_LOOKUP (int32 keys, numeric
  values); REAL, IMAG, COMPLEX_ABS of complex64/complex128, RFFT2D; LSH_PROJECTION (FarmHash
  Fingerprint64 of seed and input row, written here);
* RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL and MULTINOMIAL: TensorFlow's Philox4x32-10 generator
  seeded by the operator's seed and seed2 as LiteRT's, drawing on from run to run; unseeded ones
  (both 0: LiteRT seeds from /dev/urandom) are refused as non-deterministic.

SKIP_GRAM is refused: its tensors are strings, which the interpreter does not compute with.
O(output size), but UNIQUE (O(n log n)), LSH_PROJECTION (O(bits · input)) and MULTINOMIAL
(O(samples · log classes)).
"""

from __future__ import annotations

import numpy as np

from ._common import REFUSED, OpContext, apply_activation, ints, kernel, output_size, padding_before, round_half_away
from .prepare import OpCheck, Shape, prepare_rule

REFUSED["SKIP_GRAM"] = ("it reads and writes string tensors; graphwright reads them from the file, but the "
                        "reference interpreter computes numeric, bool and complex tensors only")


@kernel("ONE_HOT")
def one_hot(ctx: OpContext) -> list[np.ndarray]:
    """on_value where the index equals the position along the new ``axis`` (out-of-range indices: none)."""
    indices, depth = ctx.x(0), ints(ctx.x(1))
    if len(depth) != 1 or depth[0] < 0:
        raise ctx.error(f"depth {depth} is not one non-negative value")
    axis = int(ctx.attr("axis", -1))
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    if not 0 <= axis <= indices.ndim:
        raise ctx.error(f"axis {ctx.attr('axis')} is out of range for indices of rank {indices.ndim}")
    positions = np.arange(depth[0]).reshape((-1,) + (1,) * (indices.ndim - axis))
    hit = np.expand_dims(indices, axis) == positions
    on, off = ctx.x(2).reshape(-1)[0], ctx.x(3).reshape(-1)[0]
    return [np.where(hit, on, off).astype(ctx.out_dtype())]


@kernel("BROADCAST_ARGS")
def broadcast_args(ctx: OpContext) -> list[np.ndarray]:
    """The broadcast of two shapes (numpy's rule, as LiteRT's kernel)."""
    a, b = ints(ctx.x(0)), ints(ctx.x(1))
    try:
        shape = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        raise ctx.error(f"shapes {a} and {b} do not broadcast") from None
    return [np.asarray(shape, ctx.out_dtype())]


@kernel("UNIQUE")
def unique(ctx: OpContext) -> list[np.ndarray]:
    """The distinct values in order of first appearance, and each element's index among them."""
    x = ctx.x(0)
    if x.ndim != 1:
        raise ctx.error(f"its input has shape {list(x.shape)}; LiteRT's kernel takes a 1-D tensor")
    _, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return [x[np.sort(first)], rank[inverse.reshape(-1)].astype(ctx.out_dtype(1))]


@kernel("MATRIX_DIAG")
def matrix_diag(ctx: OpContext) -> list[np.ndarray]:
    """[..., N] -> [..., N, N] with the input on the diagonal, zeros elsewhere."""
    x = ctx.x(0)
    out = np.zeros((*x.shape, x.shape[-1]), x.dtype)
    n = x.shape[-1]
    out[..., np.arange(n), np.arange(n)] = x
    return [out]


@kernel("MATRIX_SET_DIAG")
def matrix_set_diag(ctx: OpContext) -> list[np.ndarray]:
    """[..., M, N] with its main diagonal replaced by the second input [..., min(M, N)]."""
    x, diagonal = ctx.x(0), ctx.x(1)
    n = min(x.shape[-2:])
    if diagonal.shape != (*x.shape[:-2], n):
        raise ctx.error(f"diagonal {list(diagonal.shape)} does not fit input {list(x.shape)}")
    out = x.copy()
    out[..., np.arange(n), np.arange(n)] = diagonal
    return [out]


@kernel("SPARSE_TO_DENSE")
def sparse_to_dense(ctx: OpContext) -> list[np.ndarray]:
    """default_value everywhere, then each index (a scalar, a vector of 1-D indices or [N, rank] rows)
    set to its value (one value for all, or one each) in order; out-of-range indices refused."""
    indices, shape, values, default = ctx.x(0), ints(ctx.x(1)), ctx.x(2), ctx.x(3)
    out = np.full(shape, default.reshape(-1)[0], ctx.out_dtype())
    rows = indices.reshape(-1, 1) if indices.ndim < 2 else indices
    if rows.shape[1] != len(shape) or values.size not in (1, rows.shape[0]):
        raise ctx.error(f"indices {list(indices.shape)}, values {list(values.shape)} do not fit "
                        f"output shape {shape}")
    if rows.size and (np.any(rows < 0) or np.any(rows >= np.asarray(shape))):
        raise ctx.error(f"an index is out of range for output shape {shape}")
    out[tuple(rows.T)] = np.broadcast_to(values.reshape(-1), (rows.shape[0],))
    return [out]


@kernel("L2_POOL_2D")
def l2_pool(ctx: OpContext) -> list[np.ndarray]:
    """sqrt(mean of squares) over each window's in-bounds elements (float32), then the activation."""
    x = ctx.x(0)
    if x.dtype != np.float32 or x.ndim != 4:
        raise ctx.error(f"its input is {x.dtype} {list(x.shape)}; LiteRT's kernel takes float32 NHWC")
    kh, kw = int(ctx.attr("filter_height", 1)), int(ctx.attr("filter_width", 1))
    sh, sw = int(ctx.attr("stride_h", 1)), int(ctx.attr("stride_w", 1))
    padding = int(ctx.attr("padding", 0))
    n, h, w, c = x.shape
    oh, ow = output_size(h, kh, sh, 1, padding), output_size(w, kw, sw, 1, padding)
    top, left = padding_before(h, kh, sh, 1, oh)[0], padding_before(w, kw, sw, 1, ow)[0]
    # zero-padded squares: a padded element adds an exact 0 and is not counted
    bottom, right = max((oh - 1) * sh + kh - top - h, 0), max((ow - 1) * sw + kw - left - w, 0)
    squares = np.pad(x * x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    inside = np.pad(np.ones((h, w), np.int32), ((top, bottom), (left, right)))
    total = np.zeros((n, oh, ow, c), np.float32)
    count = np.zeros((oh, ow), np.int32)
    for ky in range(kh):  # LiteRT adds in float32, filter row by row
        for kx in range(kw):
            rows, cols = slice(ky, ky + (oh - 1) * sh + 1, sh), slice(kx, kx + (ow - 1) * sw + 1, sw)
            total += squares[:, rows, cols]
            count += inside[rows, cols]
    out = np.sqrt(total / count[None, :, :, None].astype(np.float32))
    return [apply_activation(ctx, out, np.dtype(np.float32))]


def _nudged(low: float, high: float, bits: int) -> tuple[np.float32, np.float32, np.float32]:
    """LiteRT's FakeQuant Nudge on the grid 0 .. 2^bits - 1: (min, max, scale) moved so that
    real 0 is a grid point (float32)."""
    f32 = np.float32
    qmin, qmax = f32(0), f32((1 << bits) - 1)
    scale = (f32(high) - f32(low)) / (qmax - qmin)
    zero_from_min = qmin - f32(low) / scale
    zero = qmin if zero_from_min < qmin else qmax if zero_from_min > qmax else f32(round_half_away(zero_from_min))
    return (qmin - zero) * scale, (qmax - zero) * scale, scale


@kernel("FAKE_QUANT")
def fake_quant(ctx: OpContext) -> list[np.ndarray]:
    """Clamp to the nudged range, snap to its grid: round((x - min) / scale) * scale + min (float32)."""
    x = ctx.x(0)
    if x.dtype != np.float32:
        raise ctx.error(f"its input is {x.dtype}; LiteRT's kernel takes float32")
    low, high, scale = _nudged(float(ctx.attr("min", 0.0)), float(ctx.attr("max", 0.0)), int(ctx.attr("num_bits", 8)))
    shifted = np.minimum(high, np.maximum(low, x)) - low
    snapped = round_half_away(shifted * (np.float32(1) / scale))
    return [(snapped * scale + low).astype(np.float32)]


@kernel("EMBEDDING_LOOKUP_SPARSE")
def embedding_lookup_sparse(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: each lookup adds its row of the table times its weight (float32, in
    order) into the output bucket its index row (all but the last index) names; a bucket is
    divided by the sum of its weights (mean) or their root sum of squares (sqrtn) when the
    lookups move on to another bucket — so a bucket met twice apart is divided twice, as LiteRT's."""
    ids, indices, dense, weights, table = (ctx.x(i) for i in range(5))
    combiner = int(ctx.attr("combiner", 0) or 0)
    dense_shape = ints(dense)
    if indices.ndim != 2 or indices.shape[1] != len(dense_shape) or not len(ids) == len(indices) == len(weights):
        raise ctx.error(f"ids {list(ids.shape)}, indices {list(indices.shape)}, dense shape {dense_shape} and "
                        f"weights {list(weights.shape)} do not fit")
    buckets, row = dense_shape[:-1], int(np.prod(table.shape[1:]))
    out = np.zeros((int(np.prod(buckets)), row), np.float32)
    rows = table.reshape(len(table), row)

    def finish(bucket: int, count: int, total: np.float32, squares: np.float32) -> None:
        if combiner != 0 and count:
            out[bucket] /= total if combiner == 1 else np.sqrt(squares)

    current, count, total, squares = 0, 0, np.float32(0), np.float32(0)
    for i, idx in enumerate(ints(ids)):
        where = ints(indices[i, :-1])
        if not 0 <= idx < len(table) or any(not 0 <= v < d for v, d in zip(where, buckets)):
            raise ctx.error(f"lookup {i} (id {idx}, index {ints(indices[i])}) is out of range (LiteRT refuses it)")
        bucket = int(np.ravel_multi_index(where, buckets)) if buckets else 0
        if bucket != current:
            finish(current, count, total, squares)
            current, count, total, squares = bucket, 0, np.float32(0), np.float32(0)
        w = np.float32(weights[i])
        count, total, squares = count + 1, total + w, squares + w * w
        out[bucket] += rows[idx] * w
    finish(current, count, total, squares)
    return [out.reshape(*buckets, *table.shape[1:])]


@kernel("HASHTABLE_LOOKUP")
def hashtable_lookup(ctx: OpContext) -> list[np.ndarray]:
    """Each lookup key found in the sorted ``keys`` by C's ``bsearch`` (glibc's halving, so
    unsorted keys give LiteRT's answers too) -> its value row, hit 1; else zeros, hit 0."""
    lookups, keys, values = ctx.x(0), ints(ctx.x(1)), ctx.x(2)
    out = np.zeros((len(lookups), *values.shape[1:]), values.dtype)
    hits = np.zeros(len(lookups), np.uint8)
    for i, key in enumerate(ints(lookups)):
        low, high = 0, len(keys)
        while low < high:
            mid = (low + high) // 2
            if key < keys[mid]:
                high = mid
            elif key > keys[mid]:
                low = mid + 1
            else:
                out[i], hits[i] = values[mid], 1
                break
    return [out, hits]


@kernel("REAL", "IMAG", "COMPLEX_ABS")
def complex_part(ctx: OpContext) -> list[np.ndarray]:
    """The real part, imaginary part or magnitude of complex64 (float32) / complex128 (float64) values."""
    x = ctx.x(0)
    if x.dtype.kind != "c":
        raise ctx.error(f"its input is {x.dtype}; LiteRT's kernel takes complex64 or complex128")
    part = {"REAL": np.real, "IMAG": np.imag, "COMPLEX_ABS": np.abs}[ctx.node.op](x)
    return [np.ascontiguousarray(part, ctx.out_dtype())]


@kernel("RFFT2D")
def rfft2d(ctx: OpContext) -> list[np.ndarray]:
    """The 2-D real FFT over the last two dimensions (what ``tf.signal.stft`` and ``rfft2d`` become):
    the input cropped or zero-padded to ``fft_length`` (input 1), transformed in double as LiteRT's
    kernel does (its Ooura rdft2d: the same transform to within float rounding), the
    ``fft_length[1] / 2 + 1`` non-negative frequencies as complex64."""
    x, lengths = ctx.x(0), [int(n) for n in ints(ctx.x(1))]
    if x.dtype != np.float32 or x.ndim < 2:
        raise ctx.error(f"its input is {x.dtype} of rank {x.ndim}; LiteRT's kernel takes float32 of rank 2 or more")
    return [np.fft.rfft2(x.astype(np.float64), s=lengths, axes=(-2, -1)).astype(np.complex64)]


# -- LSH_PROJECTION: FarmHash's Fingerprint64 (farmhashna::Hash64) --------------------------------

_MASK = (1 << 64) - 1
_K0, _K1, _K2 = 0xC3A5C85C97CB3127, 0xB492B66FBE98F273, 0x9AE16A3B2F90404F


def _rotr(v: int, shift: int) -> int:
    return ((v >> shift) | (v << (64 - shift))) & _MASK


def _fetch(s: bytes, at: int, size: int = 8) -> int:
    return int.from_bytes(s[at:at + size], "little")


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _hash16(u: int, v: int, mul: int) -> int:
    a = _shift_mix(((u ^ v) * mul) & _MASK)
    b = _shift_mix(((v ^ a) * mul) & _MASK)
    return (b * mul) & _MASK


def _weak32(s: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    """FarmHash's WeakHashLen32WithSeeds of the 32 bytes at ``at``."""
    w, x, y, z = (_fetch(s, at + 8 * k) for k in range(4))
    a = (a + w) & _MASK
    b = _rotr((b + a + z) & _MASK, 21)
    c = a
    a = (a + x + y) & _MASK
    b = (b + _rotr(a, 44)) & _MASK
    return (a + z) & _MASK, (b + c) & _MASK


def _fingerprint_long(s: bytes) -> int:
    """Fingerprint64 of more than 64 bytes: 64-byte rounds on a 56-byte state, then the last 64 bytes."""
    n = len(s)
    x, y = 81, (81 * _K1 + 113) & _MASK
    z = (_shift_mix((y * _K2 + 113) & _MASK) * _K2) & _MASK
    v, w = (0, 0), (0, 0)
    x = (x * _K2 + _fetch(s, 0)) & _MASK
    end = ((n - 1) // 64) * 64
    last = end + ((n - 1) & 63) - 63

    def mix(at: int, mul: int, nine: int) -> None:
        nonlocal x, y, z, v, w
        x = (_rotr((x + y + v[0] + _fetch(s, at + 8)) & _MASK, 37) * mul) & _MASK
        y = (_rotr((y + v[1] + _fetch(s, at + 48)) & _MASK, 42) * mul) & _MASK
        x ^= (w[1] * nine) & _MASK
        y = (y + v[0] * nine + _fetch(s, at + 40)) & _MASK
        z = (_rotr((z + w[0]) & _MASK, 33) * mul) & _MASK
        v = _weak32(s, at, (v[1] * mul) & _MASK, (x + w[0]) & _MASK)
        w = _weak32(s, at + 32, (z + w[1]) & _MASK, (y + _fetch(s, at + 16)) & _MASK)
        x, z = z, x

    for at in range(0, end, 64):
        mix(at, _K1, 1)
    mul = (_K1 + ((z & 0xFF) << 1)) & _MASK
    w = ((w[0] + ((n - 1) & 63)) & _MASK, w[1])
    v = ((v[0] + w[0]) & _MASK, v[1])
    w = ((w[0] + v[0]) & _MASK, w[1])
    mix(last, mul, 9)
    return _hash16((_hash16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _MASK,
                   (_hash16(v[1], w[1], mul) + x) & _MASK, mul)


def _fingerprint64(s: bytes) -> int:
    """FarmHash Fingerprint64 (farmhashna::Hash64) of ``s``, as an unsigned 64-bit integer."""
    n = len(s)
    mul = (_K2 + 2 * n) & _MASK
    if n > 64:
        return _fingerprint_long(s)
    if n > 32:
        a, b = (_fetch(s, 0) * _K2) & _MASK, _fetch(s, 8)
        c, d = (_fetch(s, n - 8) * mul) & _MASK, (_fetch(s, n - 16) * _K2) & _MASK
        y = (_rotr((a + b) & _MASK, 43) + _rotr(c, 30) + d) & _MASK
        z = _hash16(y, (a + _rotr((b + _K2) & _MASK, 18) + c) & _MASK, mul)
        e, f = (_fetch(s, 16) * mul) & _MASK, _fetch(s, 24)
        g, h = ((y + _fetch(s, n - 32)) * mul) & _MASK, ((z + _fetch(s, n - 24)) * mul) & _MASK
        return _hash16((_rotr((e + f) & _MASK, 43) + _rotr(g, 30) + h) & _MASK,
                       (e + _rotr((f + a) & _MASK, 18) + g) & _MASK, mul)
    if n > 16:
        a, b = (_fetch(s, 0) * _K1) & _MASK, _fetch(s, 8)
        c, d = (_fetch(s, n - 8) * mul) & _MASK, (_fetch(s, n - 16) * _K2) & _MASK
        return _hash16((_rotr((a + b) & _MASK, 43) + _rotr(c, 30) + d) & _MASK,
                       (a + _rotr((b + _K2) & _MASK, 18) + c) & _MASK, mul)
    if n >= 8:
        a, b = (_fetch(s, 0) + _K2) & _MASK, _fetch(s, n - 8)
        c = (_rotr(b, 37) * mul + a) & _MASK
        return _hash16(c, ((_rotr(a, 25) + b) * mul) & _MASK, mul)
    if n >= 4:
        return _hash16((n + (_fetch(s, 0, 4) << 3)) & _MASK, _fetch(s, n - 4, 4), mul)
    if n:
        y, z = s[0] + (s[n >> 1] << 8), n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _MASK) * _K2) & _MASK
    return _K2


def _sign_bit(rows: list[bytes], weights: np.ndarray | None, seed: np.float32) -> int:
    """1 when the (weighted) sum of the rows' signed hashes under ``seed`` (its float32 bytes first) is positive."""
    prefix = seed.tobytes()
    score = 0.0
    for i, row in enumerate(rows):
        signature = _fingerprint64(prefix + row)
        value = float(signature - (1 << 64) if signature >> 63 else signature)  # int64 -> double
        score += value if weights is None else float(weights[i]) * value
    return int(score > 0)


@kernel("LSH_PROJECTION")
def lsh_projection(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: bit j of hash function i is the sign of Σ weight·Fingerprint64(seed ‖ row)
    with seed the float32 value [i, j] of the first input; sparse (type 1): each function's bits
    as an integer plus i·2^bits, dense (type 2): every bit."""
    seeds = ctx.x(0).astype(np.float32)
    functions, bits = seeds.shape
    x = np.ascontiguousarray(ctx.x(1))
    rows = [row.tobytes() for row in x.reshape(x.shape[0], -1)]
    weights = ctx.x(2) if ctx.has(2) else None
    signs = np.asarray([[_sign_bit(rows, weights, seed) for seed in row] for row in seeds], np.int32)
    if int(ctx.attr("type", 0) or 0) == 2:
        return [signs.reshape(-1)]
    packed = (signs << np.arange(bits - 1, -1, -1, dtype=np.int32)).sum(axis=1, dtype=np.int32)
    return [packed + np.arange(functions, dtype=np.int32) * np.int32(1 << bits)]


# -- RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL: TensorFlow's Philox4x32-10 -----------------

_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_U32 = np.uint64(0xFFFFFFFF)


def _seed(value: object) -> int:
    """A seed as LiteRT holds it: the option's int64 cut to a C ``int``, then widened back with its sign."""
    low = int(value or 0) & 0xFFFFFFFF  # type: ignore[call-overload]
    return low - (1 << 32) if low >> 31 else low


def _philox(ctx: OpContext, blocks: int, skip: int | None = None) -> np.ndarray:
    """The next ``blocks`` outputs of the node's Philox4x32-10 generator ([blocks, 4] uint32), seeded as
    LiteRT's (key = seed, counter high half = seed2), one counter step per block; the generator then
    moves on by ``blocks`` steps (or ``skip``).  It lives in the node's cache, so it goes on from run
    to run as LiteRT's does."""
    if "philox" not in ctx.cache:
        seed, seed2 = (_seed(ctx.attr(name)) & ((1 << 64) - 1) for name in ("seed", "seed2"))
        ctx.cache["philox"] = (seed, seed2 << 64)  # key, 128-bit counter
    key, counter = ctx.cache["philox"]
    counters = [(counter + k) & ((1 << 128) - 1) for k in range(blocks)]
    ctx.cache["philox"] = (key, (counter + (blocks if skip is None else skip)) & ((1 << 128) - 1))
    words = np.asarray([[(c >> (32 * w)) & 0xFFFFFFFF for w in range(4)] for c in counters], np.uint64).reshape(-1, 4)
    k0, k1 = key & 0xFFFFFFFF, key >> 32
    for _ in range(10):
        p0, p1 = words[:, 0] * np.uint64(_PHILOX_M[0]), words[:, 2] * np.uint64(_PHILOX_M[1])
        words = np.stack([(p1 >> np.uint64(32)) ^ words[:, 1] ^ np.uint64(k0), p1 & _U32,
                          (p0 >> np.uint64(32)) ^ words[:, 3] ^ np.uint64(k1), p0 & _U32], axis=1)
        k0, k1 = (k0 + _PHILOX_W[0]) & 0xFFFFFFFF, (k1 + _PHILOX_W[1]) & 0xFFFFFFFF
    return words.astype(np.uint32)


def _unit_floats(bits: np.ndarray) -> np.ndarray:
    """TF's Uint32ToFloat: 23 random mantissa bits under exponent 0, minus 1 — in [0, 1)."""
    return ((bits & np.uint32(0x7FFFFF)) | np.uint32(127 << 23)).view(np.float32) - np.float32(1)


def _random_shape(ctx: OpContext) -> list[int]:
    shape = ints(ctx.x(0))
    if any(d < 0 for d in shape):
        raise ctx.error(f"output shape {shape} has a negative dimension")
    return shape


@kernel("RANDOM_UNIFORM")
def random_uniform(ctx: OpContext) -> list[np.ndarray]:
    """Uniform [0, 1) floats, four per generator step (as LiteRT, a partial last step is spent)."""
    shape = _random_shape(ctx)
    count = int(np.prod(shape))
    return [_unit_floats(_philox(ctx, -(-count // 4)).reshape(-1)[:count]).reshape(shape)]


@kernel("RANDOM_STANDARD_NORMAL")
def random_standard_normal(ctx: OpContext) -> list[np.ndarray]:
    """Box-Muller pairs in float32 (TF's BoxMullerFloat): r = sqrt(-2 log max(u0, 1e-7)),
    (r sin 2πu1, r cos 2πu1), four per generator step."""
    shape = _random_shape(ctx)
    count = int(np.prod(shape))
    bits = _philox(ctx, -(-count // 4)).reshape(-1, 2)
    u0 = np.maximum(_unit_floats(bits[:, 0]), np.float32(1e-7))
    angle = (2 * np.pi * _unit_floats(bits[:, 1]).astype(np.float64)).astype(np.float32)  # float(2π·u), π double
    radius = np.sqrt(np.float32(-2) * np.log(u0))
    pairs = np.stack([np.sin(angle) * radius, np.cos(angle) * radius], axis=1).astype(np.float32)
    return [pairs.reshape(-1)[:count].reshape(shape)]


@kernel("MULTINOMIAL")
def multinomial(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's kernel: per batch row the (double) cumulative exp(logit − max finite logit) over the
    finite logits, each sample the first class whose cumulative sum exceeds u·total, u a double from
    52 random bits of two generator words (two per sample, rows drawing on in turn); then the
    generator skips 512 steps per batch row and rounded-up-to-4 samples, for the next run."""
    logits, samples = ctx.x(0), ints(ctx.x(1))
    if logits.ndim != 2 or logits.shape[1] == 0 or len(samples) != 1 or samples[0] < 0:
        raise ctx.error(f"logits {list(logits.shape)} or num_samples {samples} do not fit (LiteRT refuses them)")
    batch, count = logits.shape[0], samples[0]
    draws = batch * count
    skip = batch * ((count + 3) // 4 * 4) * 2 * 256
    bits = _philox(ctx, -(-draws // 2), skip).reshape(-1, 2)[:draws].astype(np.uint64)
    mantissa = ((bits[:, 0] & np.uint64(0xFFFFF)) << np.uint64(32)) | bits[:, 1]
    uniform = (mantissa | np.uint64(1023 << 52)).view(np.float64) - 1.0
    out = np.empty((batch, count), ctx.out_dtype())
    for row in range(batch):
        values = logits[row].astype(np.float32)
        finite = np.isfinite(values)
        peak = float(values[finite].max()) if finite.any() else float(np.finfo(np.float32).min)
        cdf = np.cumsum(np.where(finite, np.exp(values.astype(np.float64) - peak), 0.0))
        out[row] = np.searchsorted(cdf, uniform[row * count:(row + 1) * count] * cdf[-1], side="right")
    return [out]


# -- prepare checks ---------------------------------------------------------------------------------

#: the value types LiteRT's ONE_HOT and SPARSE_TO_DENSE kernels take (no int16: LiteRT fails on it)
_VALUE_TYPES = ("float32", "int32", "int64", "int8", "uint8")


def _value_type(op: OpCheck, types: tuple[str, ...]) -> None:
    out = op.node.outputs[0]
    if out.dtype is not None and out.dtype.value not in types:
        raise op.fail(f"its values are {out.dtype.value}; LiteRT's kernel takes {', '.join(types)}")


@prepare_rule("ONE_HOT", arity=(4, 4))
def _one_hot_shape(op: OpCheck) -> list[Shape]:
    _value_type(op, (*_VALUE_TYPES, "bool"))
    x, depth = op.shape(0), op.ints(1, "depth")
    if x is None or depth is None:
        return [None]
    axis = op.int_attr("axis", -1, -1, len(x))  # LiteRT: -1 (last) or 0 .. rank
    axis = len(x) if axis < 0 else axis
    return [(*x[:axis], max(depth[0], 0), *x[axis:])]


@prepare_rule("BROADCAST_ARGS", arity=(2, 2))
def _broadcast_args_shape(op: OpCheck) -> list[Shape]:
    a, b = op.rank(0, 1), op.rank(1, 1)
    return [None if a is None or b is None else (max(a[0], b[0]),)]


@prepare_rule("UNIQUE", arity=(1, 1), outputs=2)  # values, indices
def _unique_shape(op: OpCheck) -> list[Shape]:
    op.need(0, "input")
    x = op.rank(0, 1)
    return [None, x]


@prepare_rule("MATRIX_DIAG", arity=(1, 1))
def _matrix_diag_shape(op: OpCheck) -> list[Shape]:
    x = op.shape(0)
    if x is not None and not x:
        raise op.fail("its input is a scalar")
    return [None if x is None else (*x, x[-1])]


@prepare_rule("MATRIX_SET_DIAG", arity=(2, 2))
def _matrix_set_diag_shape(op: OpCheck) -> list[Shape]:
    x, d = op.shape(0), op.shape(1)
    if x is not None and (len(x) < 2 or (d is not None and d != (*x[:-2], min(x[-2:])))):
        raise op.fail(f"input {list(x)} and diagonal {list(d or ())} do not fit")
    return [x]


@prepare_rule("SPARSE_TO_DENSE", arity=(4, 4))
def _sparse_to_dense_shape(op: OpCheck) -> list[Shape]:
    _value_type(op, _VALUE_TYPES)
    op.rank(0, 0, 1, 2)
    shape = op.ints(1, "output_shape")
    return [None if shape is None else tuple(shape)]


@prepare_rule("L2_POOL_2D", arity=(1, 1))
def _l2_pool_shape(op: OpCheck) -> list[Shape]:
    x = op.rank(0, 4)
    sizes = [op.int_attr(name, 1, 1) for name in ("filter_height", "filter_width", "stride_h", "stride_w")]
    if x is None:
        return [None]
    padding = op.int_attr("padding", 0, 0, 1)
    n, h, w, c = x
    return [(n, output_size(h, sizes[0], sizes[2], 1, padding), output_size(w, sizes[1], sizes[3], 1, padding), c)]


@prepare_rule("FAKE_QUANT", arity=(1, 1))
def _fake_quant_shape(op: OpCheck) -> list[Shape]:
    op.int_attr("num_bits", 8, 1, 16)
    low, high = float(op.attr("min", 0.0) or 0.0), float(op.attr("max", 0.0) or 0.0)
    if not low < high:
        raise op.fail(f"its range [{low}, {high}] is empty")
    if op.attr("narrow_range"):
        raise op.fail("narrow_range is set, which LiteRT's kernel refuses on activations")
    return [op.shape(0)]


@prepare_rule("EMBEDDING_LOOKUP_SPARSE", arity=(5, 5))
def _embedding_lookup_sparse_shape(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("ids", "indices", "dense shape", "weights", "table")):
        op.need(i, what)
    for i, dtype in ((0, "int32"), (1, "int32"), (2, "int32"), (3, "float32"), (4, "float32")):
        value = op.node.inputs[i]
        if value is not None and value.dtype is not None and value.dtype.value != dtype:
            raise op.fail(f"input {i} is {value.dtype.value}; LiteRT's kernel takes {dtype}")
    op.int_attr("combiner", 0, 0, 2)  # sum, mean, sqrtn
    for i, rank in ((0, 1), (1, 2), (2, 1), (3, 1)):
        op.rank(i, rank)
    table, dense = op.shape(4), op.ints(2, "dense shape")
    if table is not None and len(table) < 2:
        raise op.fail(f"its table {list(table)} is not at least 2-D")
    return [None if table is None or dense is None else (*dense[:-1], *table[1:])]


@prepare_rule("HASHTABLE_LOOKUP", arity=(3, 3), outputs=2)  # values, hits
def _hashtable_lookup_shape(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("lookups", "keys", "values")):
        op.need(i, what)
    lookups, keys, values = op.rank(0, 1), op.rank(1, 1), op.shape(2)
    if keys is not None and values is not None and (not values or values[0] != keys[0]):
        raise op.fail(f"keys {list(keys)} and values {list(values)} do not fit")
    if lookups is None or values is None:
        return [None, None]
    return [(lookups[0], *values[1:]), lookups]


@prepare_rule("REAL", "IMAG", "COMPLEX_ABS", arity=(1, 1))
def _complex_part_shape(op: OpCheck) -> list[Shape]:
    return [op.shape(0)]


@prepare_rule("RFFT2D", arity=(2, 2))
def _rfft2d_shape(op: OpCheck) -> list[Shape]:
    op.need(1, "fft_length")
    x, lengths = op.shape(0), op.ints(1, "fft_length")
    if lengths is None or x is None:
        return [None]
    if len(lengths) != 2 or any(n <= 0 or n & (n - 1) for n in lengths):
        raise op.fail(f"fft_length {lengths} is not two powers of two, as LiteRT's kernel needs")
    if len(x) < 2:
        raise op.fail(f"its input {list(x)} has rank below 2")
    return [(*x[:-2], lengths[0], lengths[1] // 2 + 1)]


@prepare_rule("LSH_PROJECTION", arity=(2, 3))
def _lsh_projection_shape(op: OpCheck) -> list[Shape]:
    op.need(0, "hash functions")
    op.need(1, "input")
    kind = op.int_attr("type", 0)
    if kind not in (1, 2):
        raise op.fail(f"its projection type {kind} is neither sparse (1) nor dense (2)")
    functions, x = op.rank(0, 2), op.shape(1)
    if functions is not None and functions[1] > 32:
        raise op.fail(f"{functions[1]} bits per hash function are over LiteRT's 32")
    if x is not None and not x:
        raise op.fail("its input is a scalar")
    if op.has(2):
        weights = op.rank(2, 1)
        if weights is not None and x is not None and weights[0] != x[0]:
            raise op.fail(f"weights {list(weights)} do not fit input {list(x)}")
    if functions is None:
        return [None]
    return [(functions[0],) if kind == 1 else (functions[0] * functions[1],)]


def _seeded(op: OpCheck) -> None:
    if not _seed(op.attr("seed")) and not _seed(op.attr("seed2")):
        raise op.fail("a non-deterministic op: seed and seed2 are both 0, so LiteRT seeds its Philox generator "
                      "from /dev/urandom", "give the operator a seed")


@prepare_rule("RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", arity=(1, 1))
def _random_shape_rule(op: OpCheck) -> list[Shape]:
    _seeded(op)
    op.rank(0, 1)
    out = op.node.outputs[0]
    if out.dtype is not None and out.dtype.value != "float32":
        raise op.fail(f"its output is {out.dtype.value}; LiteRT's kernel writes float32")
    shape = op.ints(0, "shape")
    return [None if shape is None else tuple(shape)]


@prepare_rule("MULTINOMIAL", arity=(2, 2))
def _multinomial_shape(op: OpCheck) -> list[Shape]:
    _seeded(op)
    logits, samples = op.rank(0, 2), op.ints(1, "num_samples")
    out = op.node.outputs[0]
    if out.dtype is not None and out.dtype.value not in ("int32", "int64"):
        raise op.fail(f"its output is {out.dtype.value}; LiteRT's kernel writes int32 or int64")
    return [None if logits is None or samples is None else (logits[0], max(samples[0], 0))]
