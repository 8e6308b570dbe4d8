"""8-bit operators through tables of their own formula, and the compiled lookups that read them.

Binary 8-bit operators (ADD, SUB, MUL, and the others of :mod:`.binary_ops`) go through a table
of the formula's value on all 2^16 input pairs, built once per operator by the same code
(:func:`_by_table`; operators of fewer than ``TABLE_MIN_SIZE`` elements compute their first run
directly and build it only if they run again); unary 8-bit operators through a 256-entry table
(:func:`_by_byte_table`) — so each entry is the kernel's own arithmetic, element for element.
With the compiled loops (:mod:`.jit`) each lookup is one pass (:func:`_byte_lookup`: two bytes at
a time on large tensors, 64 bytes per step on AVX512-VBMI, :func:`_vbmi_lookup`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import OpContext
from .jit import kernels

#: inputs smaller than this are computed directly on an operator's first run (building the
#: 2^16 table costs more than one small run), through the table from its second run on
TABLE_MIN_SIZE = 256


def _by_table(ctx: OpContext, a: np.ndarray, b: np.ndarray,
              fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn(a, b)`` of two 8-bit tensors (per-tensor quantization) through a table of
    all 2^16 input pairs, built once per operator with ``fn`` itself — so it is the
    same arithmetic, element for element; O(2^16) once, then 3 passes of O(n) (one
    compiled pass with ``ctx.jit``)."""
    if a.dtype != b.dtype or a.dtype.itemsize != 1:
        return fn(a, b)
    table = ctx.cache.get("pair_table")
    if table is None and max(a.size, b.size) < TABLE_MIN_SIZE and not ctx.cache.get("ran_small"):
        ctx.cache["ran_small"] = True  # a small operator builds its table only if it runs again
        return fn(a, b)
    if table is None:
        bits = np.arange(1 << 16, dtype=np.uint16)
        hi_bits = (bits >> 8).astype(np.uint8).view(a.dtype)
        lo_bits = (bits & 0xFF).astype(np.uint8).view(a.dtype)
        table = ctx.cache["pair_table"] = np.ascontiguousarray(fn(hi_bits, lo_bits))
    if ctx.jit and a.ndim == b.ndim >= 1 and a.shape != b.shape:  # one tensor times a per-channel vector
        for x, v, x_first in ((a, b, True), (b, a, False)):
            if v.size == x.shape[-1] == v.shape[-1] > 1 and x.flags.c_contiguous and x.size >= 2048 * v.size:
                out = np.empty(x.shape, table.dtype)
                kernels().channel_lookup(x.reshape(-1, v.size).view(np.uint8), np.ascontiguousarray(v).reshape(-1)
                                         .view(np.uint8), table, x_first, out.reshape(-1, v.size))
                return out
    if ctx.jit:  # one compiled pass over [rows, last axis] views, broadcasting by zero strides
        if a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous:
            ctx.cache["direct_pair"] = run = _direct_pair(table, a)
            return run(a, b)  # type: ignore[return-value]
        shape = np.broadcast_shapes(a.shape, b.shape)
        rows = (-1, shape[-1] if shape else 1)
        a2, b2 = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        out = np.empty(shape, table.dtype)
        if out.size == 0:  # nothing to look up (and no row length to infer)
            return out
        kernels().pair_lookup(a2.reshape(rows).view(np.uint8), b2.reshape(rows).view(np.uint8), table,
                              out.reshape(rows))
        return out
    index = np.left_shift(a.view(np.uint8), 8, dtype=np.uint16)
    index = np.bitwise_or(index, b.view(np.uint8), dtype=np.uint16)  # broadcasts like a op b
    return table.take(index)  # type: ignore[no-any-return]


def _direct_pair(table: np.ndarray, like: np.ndarray
                 ) -> Callable[[np.ndarray | None, np.ndarray | None], np.ndarray | None]:
    """:func:`_by_table`'s compiled lookup of two contiguous 8-bit tensors of the shape and dtype of
    ``like`` (None for other inputs), its views set up once: a later run goes from the kernel straight
    to the compiled pass (its dtype, quantization and shape checks cost ~10 µs per operator in a run)."""
    compiled, shape, dtype = kernels().pair_lookup, like.shape, like.dtype

    def run(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        if a is None or b is None or a.shape != shape or b.shape != shape or a.dtype != dtype or b.dtype != dtype \
                or not (a.flags.c_contiguous and b.flags.c_contiguous):
            return None
        out = np.empty(shape, table.dtype)
        if out.size:
            compiled(a.reshape(1, -1).view(np.uint8), b.reshape(1, -1).view(np.uint8), table, out.reshape(1, -1))
        return out

    return run


def _by_byte_table(ctx: OpContext, x: np.ndarray, make: Callable[[], Callable[[np.ndarray], np.ndarray]]
                   ) -> np.ndarray:
    """``fn(x)`` with ``fn = make()`` (an elementwise function; ``make`` derives its
    constants) for an 8-bit tensor through a table of ``fn`` on all 256 input values,
    built once per operator with ``fn`` itself — the same arithmetic, element for
    element; O(256) once, then one gather of O(n) (compiled with ``ctx.jit``)."""
    if x.dtype.itemsize != 1 or x.dtype.kind not in "iu":
        return make()(x)
    lookup = ctx.cache.get("byte_lookup")
    if lookup is None:
        table = np.ascontiguousarray(make()(np.arange(256, dtype=np.uint8).view(x.dtype)))
        lookup = ctx.cache["byte_lookup"] = _byte_lookup(table, ctx.jit)
    if len(ctx.node.inputs) == 1:  # a function of x alone: the interpreter may call it directly
        ctx.cache["compiled"] = (x.shape, x.dtype, lookup)
    return lookup(x)


#: from this many elements on, an 8-bit lookup reads the 128 KB byte-pair table (see :func:`_byte_lookup`)
PAIR_LOOKUP_MIN = 1 << 18


def _byte_lookup(table: np.ndarray, jit: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``table[x]`` for the bytes of an 8-bit ``x``: one compiled pass (``jit``, contiguous
    ``x``) or numpy's gather.  Compiled, with 8-bit results, two bytes at a time where ``x`` has an
    even size of at least :data:`PAIR_LOOKUP_MIN`: a 2^16-entry table of every byte pair's two
    results (128 KB, built here once; half the gathers).  Smaller tensors read the 256-byte table:
    inside a model the convolutions between two lookups evict the pair table, and refetching it
    costs more than the gathers it saves (EfficientNet-B0 int8's swish lookups, measured in the
    run: 7×7×1152 41 → 20 µs, 14×14×480 42 → 32 µs; even at 28×28×240, 2^17.5; 1.7× faster from
    112×112×32 on)."""
    if not jit:
        return lambda x: table[x.view(np.uint8)]  # type: ignore[no-any-return]
    compiled = kernels()
    vector = _vbmi_lookup() if table.dtype.itemsize == 1 and table.size == 256 else None
    if vector is not None:  # 64 bytes per step in registers (see _vbmi_lookup)
        bytes_ = np.ascontiguousarray(table.view(np.uint8))

        def vectored(x: np.ndarray) -> np.ndarray:
            if not x.flags.c_contiguous:
                return table[x.view(np.uint8)]  # type: ignore[no-any-return]
            out = np.empty(x.shape, table.dtype)
            vector(x.reshape(-1).view(np.uint8), bytes_, out.reshape(-1).view(np.uint8))
            return out

        return vectored
    wide = None
    if table.dtype.itemsize == 1:  # 8-bit results: two of them in one uint16 entry
        pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)  # each uint16's two bytes
        wide = np.ascontiguousarray(table.view(np.uint8)[pairs]).reshape(-1).view(np.uint16)

    def lookup(x: np.ndarray) -> np.ndarray:
        if not x.flags.c_contiguous:
            return table[x.view(np.uint8)]  # type: ignore[no-any-return]
        out = np.empty(x.shape, table.dtype)
        if wide is not None and x.size % 2 == 0 and x.size >= PAIR_LOOKUP_MIN:
            compiled.byte_lookup(x.reshape(-1).view(np.uint16), wide, out.reshape(-1).view(np.uint16))
        else:
            compiled.byte_lookup(x.reshape(-1).view(np.uint8), table, out.reshape(-1))
        return out

    return lookup


_VBMI: list[Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None] = []


def _vbmi_lookup() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """``lookup(x, table, out)``: ``out[i] = table[x[i]]`` for flat contiguous uint8 ``x``, ``out`` and a
    256-byte ``table``, 64 bytes per step on AVX512-VBMI: two ``vpermi2b`` (each picks from 128 table
    bytes by the index's low 7 bits) and a select by the index's top bit — the 8-bit swish and sigmoid
    tables of a run at ~0.02 instead of ~0.3 ns per byte.  None where LLVM does not see avx512vbmi on
    the host or the compiled loop differs from numpy's gather on a self-test (once per process)."""
    if _VBMI:
        return _VBMI[0]
    found = None
    try:
        import llvmlite.binding as llvm  # lazy: numba is optional

        features = llvm.get_host_cpu_features()
        if features.get("avx512vbmi") and features.get("avx512bw") and features.get("avx512f"):
            made = _build_vbmi_lookup()
            rng = np.random.default_rng(11)
            ok = True
            for size in (0, 1, 63, 64, 65, 256, 1000, 4099):
                table = rng.integers(0, 256, 256).astype(np.uint8)
                x = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, size).astype(np.uint8)])
                out = np.empty_like(x)
                made(x, table, out)
                ok = ok and np.array_equal(out, table[x])
            found = made if ok else None
    except Exception:  # no VBMI-capable compile here: the scalar gather stays
        found = None
    _VBMI.append(found)
    return found


def _build_vbmi_lookup() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """Compile :func:`_vbmi_lookup`'s loop (numba, an LLVM intrinsic for the 64-byte steps)."""
    import numba  # lazy: numba is optional (the [fast] extra); compiled only where the host has AVX512-VBMI
    from llvmlite import ir  # lazy: as numba
    from numba import types  # lazy: as numba
    from numba.core import cgutils  # lazy: as numba
    from numba.core.extending import intrinsic  # lazy: as numba

    v64 = ir.VectorType(ir.IntType(8), 64)

    @intrinsic
    def steps(typingctx, x, table, out, count):  # type: ignore[no-untyped-def]
        sig = types.void(x, table, out, count)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            def data(i: int) -> object:
                return cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data

            xp, tp, op = data(0), data(1), data(2)
            permute = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v64, [v64, v64, v64]),
                                                     "llvm.x86.avx512.vpermi2var.qi.512")
            quarter = [builder.load(builder.bitcast(builder.gep(tp, [ir.Constant(ir.IntType(64), 64 * j)]),
                                                    v64.as_pointer()), align=1) for j in range(4)]
            with cgutils.for_range(builder, args[3]) as loop:
                at = builder.mul(loop.index, ir.Constant(loop.index.type, 64))
                index = builder.load(builder.bitcast(builder.gep(xp, [at]), v64.as_pointer()), align=1)
                low = builder.call(permute, [quarter[0], index, quarter[1]])  # table[0:128] by bits 0-6
                high = builder.call(permute, [quarter[2], index, quarter[3]])  # table[128:256]
                top = builder.icmp_signed("<", index, ir.Constant(v64, None))  # bit 7 set
                builder.store(builder.select(top, high, low), builder.bitcast(builder.gep(op, [at]), v64.as_pointer()),
                              align=1)
            return context.get_dummy_value()

        return sig, codegen

    @numba.njit(nogil=True, boundscheck=False)
    def lookup(x, table, out):  # type: ignore[no-untyped-def]
        full = x.size // 64
        steps(x, table, out, full)
        for i in range(full * 64, x.size):
            out[i] = table[x[i]]

    return lookup  # type: ignore[no-any-return]
