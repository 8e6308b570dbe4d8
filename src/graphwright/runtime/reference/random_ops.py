"""RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL and MULTINOMIAL: TensorFlow's Philox4x32-10 generator
seeded by the operator's seed and seed2 as LiteRT's, drawing on from run to run (the generator
lives in the operator's cache under ``"philox"``; the interpreter re-seeds it where LiteRT
re-prepares the operator); unseeded ones (both 0: LiteRT seeds from /dev/urandom) are refused as
non-deterministic.  O(output size); MULTINOMIAL O(samples · log classes).
"""

from __future__ import annotations

import numpy as np

from ._common import OpContext, ints, kernel
from .prepare import OpCheck, Shape, prepare_rule

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


# -- prepare checks ------------------------------------------------------------------------------------


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
