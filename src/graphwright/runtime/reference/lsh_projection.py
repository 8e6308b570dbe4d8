"""LSH_PROJECTION, as LiteRT's kernel: bit j of hash function i is the sign of
Σ weight·Fingerprint64(seed ‖ row), with FarmHash's Fingerprint64 (``farmhashna::Hash64``)
written here.  O(bits · input).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, kernel
from .prepare import OpCheck, Shape, prepare_rule

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


# -- prepare checks ------------------------------------------------------------------------------------


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
