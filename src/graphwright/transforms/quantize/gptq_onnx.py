"""GPTQ for 4-bit ONNX MatMul/Gemm weights: blockwise codes chosen with the layer's input statistics.

Before: a float weight ``W[K, N]`` (K the reduction axis) and the Hessian of its layer's squared
output error, ``H = sum x x^T`` over the calibration rows ``x[K]`` of the layer's input.  After: the
same ``(levels, scales, zero points)`` triple as :func:`._nbits_onnx._mse_block` — blocks of
``block_size`` rows of one column, one scale (and zero point when asymmetric) per block — so the
``DequantizeLinear`` and ``MatMulNBits`` writers store it unchanged.

Algorithm (Frantar et al., GPTQ, with groups equal to the writers' blocks): rows of W are quantized
in order 0..K-1, each row ``j`` rounded from its compensated value ``w~_j``; a block's scale is chosen
(``mse`` range search and least-squares refit of :mod:`._nbits_onnx`) when its first row is reached,
from the block's rows as compensated for every row before it.  This minimises, greedily, the layer's
output error ``(W - Q)^T H (W - Q)`` instead of the weight error.  With ``H + damp·mean(diag H)·I
= R R^T``, ``R`` upper triangular (the Cholesky factor of the reversed matrix, float32), and
``E_i = w_i - q_i`` the rounding errors against the *original* rows:

* a row, when quantized: ``w~_j = w_j + (sum_{i<j} R[i, j] E_i) / R[j, j]``;
* a block ``B`` at its start (the rows after ``B`` free): ``w~_B = w_B + R_BB^-T (sum_{i<B} R[i, B]^T E_i)``
  (the least-squares compensation ``H_rr^-1 H_rd E_d`` of the free rows, of which only ``B``'s are needed);

which are GPTQ's updates with ``U = R^-1`` (its upper Cholesky factor of ``H^-1``) written without
inverting anything: one Cholesky factorisation per weight, no inverse.  The sums ``Y = R^T E`` are
accumulated lazily: within a block by sub-blocks of ``_SUB`` rows (rank-1 updates inside, one matrix
product across), across blocks by one product per block.  Rows whose input is always 0 (``H[i, i] =
0``) get weight 0.  Cost per weight: ``K^3/3`` for the factor (blocked, float32 matrix products) +
``K^2·N/2`` for the updates + ``K·block_size·N`` for the block starts; memory ``O(K^2 + K·N)``.

:func:`collect_hessians` streams calibration samples through onnxruntime, adding ``x^T x`` (one
float32 product per ``_ROWS`` rows, symmetric) per run: memory is one ``K x K`` float32 matrix per
distinct layer input, whatever the number of samples.  The session computes only the layers' inputs:
the model is serialized with those as its only outputs and without the nodes none of them depends on
(a language model's head, for instance), then put back as it was.  Samples whose inputs share their
shapes run several to a batch (concatenated along axis 0) once a first pair has given the same
values batched as one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from ...ir import Model, Node, Value
from ...ir.traversal import subgraphs

__all__ = ["DAMP", "collect_hessians", "gptq_levels", "hessian_inputs", "upper_factor"]

#: Dampening: ``H + DAMP·mean(diag H)·I`` (GPTQ's 1 %).
DAMP = 0.01
#: Rows per rank-1 sub-block (the rest of the update is one matrix product).
_SUB = 32
#: Activation rows gathered per Hessian update (memory: _ROWS x K floats per layer input); also the
#: most rows one batched onnxruntime run is given.
_ROWS = 1024
#: Most samples run together in one onnxruntime call.
_BATCH = 8
#: Columns of the Cholesky factor computed per panel.
_PANEL = 256
#: Tolerance of the batched-vs-single check, relative to the largest magnitude of each value.
_BATCH_RTOL = 1e-4


def hessian_inputs(model: Model, minimum_size: int, options: object) -> dict[str, tuple[str, int]]:
    """Of every MatMul/Gemm whose weight becomes 4-bit as B (``[K, N]`` or ``[N, K]`` with transB):
    ``{weight name: (input activation name, K)}``, main graph only (weights in subgraphs, and a weight-first
    MatMul's A, get ``mse``).  A weight read by several layers takes the first layer's input."""
    from .quantize_weights_onnx import _FOURBIT_OPS, _why_not_4bit  # lazy: that module imports this one's users

    out: dict[str, tuple[str, int]] = {}
    for node in model.graph:
        if node.op not in _FOURBIT_OPS or node.domain not in ("", "ai.onnx"):
            continue
        _reason, site = _why_not_4bit(node, model.graph, minimum_size, options)  # type: ignore[arg-type]
        if site is None or site.index != 1 or (node.op == "Gemm" and node.attr("transA", 0)):
            continue
        weight = node.inputs[1]
        k = weight.const.shape[1 if site.transposed else 0]
        out.setdefault(weight.name, (node.inputs[0].name, int(k)))
    return out


def collect_hessians(model: Model, samples: Iterable[Mapping[str, np.ndarray]], inputs: Mapping[str, tuple[str, int]],
                     on_sample: Callable[[int], None] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """``({weight name: H[K, K] float32}, samples run)`` over ``samples`` (see the module docstring);
    ``inputs`` from :func:`hessian_inputs`.  ``on_sample(count)`` after each sample (or batch of them)."""
    from ...runtime import prepare  # lazy: loads onnxruntime on first use

    by_input: dict[str, list[str]] = {}
    for weight, (name, _k) in inputs.items():
        by_input.setdefault(name, []).append(weight)
    graph_inputs = {v.name for v in model.graph.inputs}
    produced = {v.name: v for node in model.graph for v in node.outputs if v is not None and v.name}
    computed = [produced[n] for n in by_input if n not in graph_inputs and n in produced]
    fetch = [v.name for v in computed]
    widths = {name: inputs[weights[0]][1] for name, weights in by_input.items()}
    sums: dict[str, np.ndarray] = {}
    pending: dict[str, list[np.ndarray]] = {}
    held: dict[str, int] = {}

    def add(name: str, array: np.ndarray) -> None:
        k = widths[name]
        x = np.asarray(array, np.float32)
        if x.ndim == 0 or x.shape[-1] != k:
            return
        x = x.reshape(-1, k)
        finite = np.isfinite(x).all(axis=1)
        pending.setdefault(name, []).append(x if finite.all() else x[finite])
        held[name] = held.get(name, 0) + len(x)
        if held[name] >= _ROWS:
            flush(name)

    def flush(name: str) -> None:  # one symmetric product per _ROWS rows: the K x K sum is read and written once
        parts = pending.pop(name, [])
        held.pop(name, None)
        if not parts:
            return
        x = parts[0] if len(parts) == 1 else np.concatenate(parts)
        product = x.T @ x
        if name in sums:
            sums[name] += product
        else:
            sums[name] = product

    session = None
    if computed:
        with _only_computing(model, computed):
            session = prepare(model, options={"graph_optimization_level": "disable"})
    count = 0
    try:
        for feeds, size in _batches(samples, session, fetch, graph_inputs & set(by_input)):
            for name, array in feeds.items():
                add(name, array)
            count += size
            if on_sample is not None:
                on_sample(count)
    finally:
        if session is not None:
            session.close()
    for name in list(pending):
        flush(name)
    return {w: sums[name] for name, weights in by_input.items() if name in sums for w in weights}, count


def _batches(samples: Iterable[Mapping[str, np.ndarray]], session: object, fetch: list[str],
             from_feeds: set[str]) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """``({layer input: array}, samples in it)`` per onnxruntime run.  The first two samples run one by
    one and then together (the pair not counted twice): when both ways give the same values, later
    samples run up to :data:`_BATCH` at a time (and up to about ``_ROWS`` rows), each batch of
    consecutive samples whose inputs have the same shapes and types."""
    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = session.run(feeds, fetch) if session is not None else {}  # type: ignore[attr-defined]
        for name in from_feeds:
            out[name] = np.asarray(feeds[name])
        return out

    iterator = iter(samples)
    first = [s for _, s in zip(range(2), iterator)]
    singles = [run(feeds) for feeds in first]
    for got in singles:
        yield got, 1
    batched = len(first) == 2 and _batchable(first) and _same_batched(run, first, singles)
    if not batched:
        for feeds in iterator:
            yield run(feeds), 1
        return
    rows = max(1, max((int(np.prod(a.shape[:-1])) for a in singles[0].values() if a.ndim), default=1))
    size = max(1, min(_BATCH, _ROWS // rows))
    group: list[Mapping[str, np.ndarray]] = []
    for feeds in iterator:
        if group and (len(group) == size or not _batchable([group[0], feeds])):
            yield run(_concat(group)), len(group)
            group = []
        group.append(feeds)
    if group:
        yield run(_concat(group)), len(group)


def _batchable(group: Sequence[Mapping[str, np.ndarray]]) -> bool:
    """Every sample has the same input names, and arrays of rank >= 1 with the same dtypes and the
    same shapes past axis 0."""
    first = group[0]
    keys = set(first)
    for feeds in group:
        if set(feeds) != keys:
            return False
        for name in keys:
            a, b = np.asarray(feeds[name]), np.asarray(first[name])
            if a.ndim == 0 or a.dtype != b.dtype or a.shape[1:] != b.shape[1:]:
                return False
    return True


def _concat(group: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(group) == 1:
        return dict(group[0])
    return {name: np.concatenate([np.asarray(f[name]) for f in group]) for name in group[0]}


def _same_batched(run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
                  pair: Sequence[Mapping[str, np.ndarray]], singles: Sequence[dict[str, np.ndarray]]) -> bool:
    """Whether running ``pair`` concatenated gives each value as the two single runs concatenated
    (a model whose axis 0 is not a batch, or that mixes samples, does not)."""
    try:
        together = run(_concat(pair))
    except Exception:  # any failure (a fixed batch of 1, a reshape...) means: one by one
        return False
    for name, got in together.items():
        want = [np.asarray(s[name]) for s in singles]
        if any(w.ndim == 0 for w in want):
            return False
        expected = np.concatenate(want)
        if got.shape != expected.shape:
            return False
        scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=0.0))
        if not np.allclose(got, expected, rtol=0.0, atol=_BATCH_RTOL * max(scale, 1e-30), equal_nan=True):
            return False
    return True


@contextmanager
def _only_computing(model: Model, wanted: Sequence[Value]) -> Iterator[None]:
    """For the duration: the main graph's outputs are ``wanted`` and the nodes none of them depends on
    are unlinked (none when the model has subgraphs or control edges); then the graph is put back as
    it was — outputs, node order, each node's inputs and the order of each value's uses."""
    graph = model.graph
    outputs = graph.outputs
    order = list(graph)
    dead: list[Node] = []
    if not model.subgraphs and all(not n.control_inputs and not n.control_users and not subgraphs(n) for n in order):
        live: set[Node] = set()
        stack = [v.producer for v in wanted if v.producer is not None]
        while stack:
            node = stack.pop()
            if node in live:
                continue
            live.add(node)
            stack.extend(v.producer for v in node.inputs if v is not None and v.producer is not None)
        dead = [n for n in order if n not in live]
    saved = {n: n.inputs for n in dead}
    uses = {v: v.uses() for n in dead for v in n.inputs if v is not None}
    graph.set_outputs(list(wanted))
    try:
        if dead:
            graph.remove(dead, force=True)
        yield
    finally:
        for node in dead:
            if node.graph is None:
                graph.append(node)
            node.set_inputs(saved[node])
        if dead:
            graph.sort(order)
        for value, before in uses.items():
            if value.uses() != before:  # re-made in the original order
                for node, i in before:
                    node.replace_input(i, None)
                for node, i in before:
                    node.replace_input(i, value)
        graph.set_outputs(outputs)


def upper_factor(h: np.ndarray, panel: int = _PANEL) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(R, inverses)``: ``R`` upper triangular, float32, with ``h = R R^T`` (``h`` symmetric positive
    definite, any float dtype), and the inverses of ``R``'s diagonal panels ``R[p:p+panel, p:p+panel]``
    (``p`` = 0, panel, 2·panel...; the last one short), in that order: the inverse of a diagonal block
    of ``R`` inside one panel is that part of the panel's inverse.

    ``R`` is the Cholesky factor of the reversed matrix, reversed; computed right-looking in panels
    (those of the reversed matrix end where ``R``'s begin): each panel's diagonal block by LAPACK and
    inverted, the panel below it by that inverse, the trailing lower triangle by matrix products one
    row panel at a time (~2.5x faster than ``numpy.linalg.cholesky`` at K=3072 on one thread; relative
    error of ``R R^T`` ~1e-6).  Raises ``numpy.linalg.LinAlgError`` when ``h`` is not positive definite."""
    a = np.array(h[::-1, ::-1], np.float32, order="C")
    n = a.shape[0]
    starts = [0, *range(n % panel or panel, n, panel)] if n > panel else [0]
    ends = [*starts[1:], n]
    inverses = []
    for k, e in zip(starts, ends):
        l11 = np.linalg.cholesky(a[k:e, k:e])
        a[k:e, k:e] = l11
        a[k:e, e:] = 0  # the upper triangle: R's lower
        inv = np.tril(np.linalg.inv(l11))
        inverses.append(np.ascontiguousarray(inv[::-1, ::-1]))
        if e < n:
            l21 = a[e:, k:e] @ inv.T
            a[e:, k:e] = l21
            for r, f in zip(starts, ends):
                if r >= e:
                    a[r:f, e:f] -= l21[r - e:f - e] @ l21[:f - e].T
    return np.ascontiguousarray(a[::-1, ::-1]), inverses[::-1]


def _factor(h: np.ndarray, damp: float, panel: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`upper_factor` of ``h`` damped by ``damp·mean(diag h)`` (``h`` float32, its diagonal changed
    in place), the dampening raised tenfold (up to 3 times) while float32 finds it not positive definite."""
    diagonal = np.diag_indices(h.shape[0])
    base = h[diagonal].astype(np.float64)
    mean = float(np.mean(base))
    for attempt in range(4):
        h[diagonal] = (base + damp * mean * 10.0 ** attempt).astype(np.float32)
        try:
            return upper_factor(h, panel)
        except np.linalg.LinAlgError:
            if attempt == 3:
                raise
    raise AssertionError("unreachable")


def gptq_levels(w: np.ndarray, hessian: np.ndarray, block_size: int, symmetric: bool,
                damp: float = DAMP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of ``w[K, N]`` and ``hessian[K, K]``: (levels ``[N, kb, block_size]`` float32 in the
    ``DequantizeLinear`` form — int4 values when symmetric, uint4 codes with zero points otherwise;
    rows past K level 0 —, scales ``[N, kb]`` float32, zero points ``[N, kb]`` float32)."""
    from ._nbits_onnx import _mse_block  # lazy: _nbits_onnx calls this module

    k, n = np.shape(w)
    if np.shape(hessian) != (k, k):
        raise ValueError(f"Hessian of shape {np.shape(hessian)} for a weight with K={k}")
    kb = -(-k // block_size)
    h = np.array(hessian, np.float32)
    dead = ~(np.diagonal(h) > 0)
    w = np.array(w, np.float32, order="C")  # the original rows, those never fed zeroed
    if dead.any():
        h[dead, dead] = 1.0
        w[dead] = 0.0
    panel = block_size * max(1, _PANEL // block_size)  # blocks of block_size rows lie inside R's panels
    r, inverses = _factor(h, damp, panel)
    del h
    r_inv_diag = (np.float32(1) / np.diagonal(r)).astype(np.float32)
    y = np.zeros((k, n), np.float32)  # y[j] = sum over the rows i quantized so far of R[i, j] E_i
    levels = np.empty((n, kb, block_size), np.float32)
    scales = np.empty((n, kb), np.float32)
    zps = np.empty((n, kb), np.float32)
    errs = np.empty((block_size, n), np.float32)
    made = np.empty((block_size, n), np.float32)  # the block's levels, rows contiguous while they are made
    row = np.empty(n, np.float32)
    for b in range(kb):
        i1, i2 = b * block_size, min(k, (b + 1) * block_size)
        width = i2 - i1
        rb = r[i1:i2, i1:i2]
        t = y[i1:i2]  # a view: completed in place as the block's rows are quantized
        if b:
            p1 = i1 - i1 % panel
            start = w[i1:i2] + inverses[i1 // panel][i1 - p1:i2 - p1, i1 - p1:i2 - p1].T @ t
        else:
            start = w[i1:i2]
        group = np.empty((n, 1, block_size), np.float32)
        group[:, 0, :width] = start.T
        group[:, 0, width:] = group[:, 0, width - 1:width]
        lo = np.minimum(group.min(axis=2), np.float32(0))
        hi = np.maximum(group.max(axis=2), np.float32(0))
        _x, scale, zp = _mse_block(group, lo, hi, symmetric, pad=block_size - width)
        s, z = scale[:, 0], zp[:, 0]
        inv = np.where(s != 0, np.float32(1) / np.where(s != 0, s, np.float32(1)), np.float32(0)).astype(np.float32)
        q_lo, q_hi = (np.float32(-8), np.float32(7)) if symmetric else (-z, np.float32(15) - z)
        for j1 in range(0, width, _SUB):
            j2 = min(width, j1 + _SUB)
            for j in range(j1, j2):
                np.multiply(t[j], r_inv_diag[i1 + j], out=row)
                row += w[i1 + j]
                row *= inv
                np.rint(row, out=row)
                np.maximum(row, q_lo, out=row)
                np.minimum(row, q_hi, out=row)
                made[j] = row
                e = errs[j]
                np.multiply(row, s, out=e)
                np.subtract(w[i1 + j], e, out=e)
                if j + 1 < j2:
                    t[j + 1:j2] += rb[j, j + 1:j2, None] * e
            if j2 < width:
                t[j2:] += rb[j1:j2, j2:].T @ errs[j1:j2]
        if i2 < k:
            y[i2:] += r[i1:i2, i2:].T @ errs[:width]
        if not symmetric:
            made[:width] += z
        made[width:] = 0 if symmetric else z
        levels[:, b, :] = made.T
        scales[:, b] = s
        zps[:, b] = z
    return levels, scales, zps
