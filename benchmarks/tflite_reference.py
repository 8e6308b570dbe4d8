"""The reference interpreter vs LiteRT: invoke time on a full-integer int8 MobileNetV2
(96x96, batch 1), as a ratio, in one run.

Usage:  python benchmarks/tflite_reference.py [--repeat 20] [--threads 1] [--json out.json]   (repo root)

Both run in this process on the same model file and the same seeded inputs:
LiteRT with its default kernels (XNNPACK) and with its reference kernels
(``BUILTIN_REF``), and graphwright's interpreter with double rounding (bit-exact
with BUILTIN_REF) and single rounding — with its compiled loops (numba, the
``[fast]`` extra; skipped when numba is missing) and on numpy alone.  Each timing
is the median of ``--repeat`` invokes after one warm-up; the one-time preparation
(weight matrices, multipliers, loading the compiled loops from numba's disk
cache) is timed separately.  ``--threads`` sets LiteRT's thread count and, through
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` set before numpy is imported, the
BLAS threads of the numpy side (1 by default: on a shared machine BLAS threads
fighting for cores dominate the time).  The outputs are checked: bit-exact vs
BUILTIN_REF, ±1 vs the default kernels.  The last lines break the compiled
interpreter's time down by operator type (each operator's fastest of ``--repeat`` runs).

Results on the 2-core sandbox (2026-11-21, 1 thread, load average ~0.7,
``--repeat 50``): LiteRT default 0.86 ms, LiteRT BUILTIN_REF 28.2 ms; graphwright
compiled 4.08 ms double rounding (**4.73x**, target <= 5x; 0.15x of BUILTIN_REF),
3.90 ms single (4.52x); numpy only 8.51 ms (9.9x); bit-exact.  Other runs that day:
4.68-4.81x quiet, 5.2x with another benchmark on the second core.  By operator
(sum of per-operator minima 3.36 ms): CONV_2D 2.36, DEPTHWISE_CONV_2D 0.65,
FULLY_CONNECTED 0.16, ADD 0.09, SOFTMAX 0.08, MEAN 0.01 ms.  Also timed, no
target: int8 MobileNetV3-Small 64x64 3.7x LiteRT, int8 EfficientNet-B0 64x64 7.5x
(300 small operators: Python's ~3-10 us per operator shows).  The first compiled
run on a machine compiles the loops (~3.5 s, once; then cached on disk).

Where the time goes now: the float32 GEMMs of the 1x1 and im2col convolutions
are 1.19 ms of the 2.32 (BLAS at 45-160 GFLOP/s; the 3x3-spatial layers near
the end are bound by reading float32 weights, 4x the bytes of LiteRT's int8),
the compiled requantization 0.45 ms (0.5 ns per element, int64 multiply-shift),
the ``x - zp`` float32 conversion 0.17 ms; the interpreter's own loop is 0.08 ms.
The compiled depthwise loop runs at ~0.8-1.5 ns per output (8-lane int32
multiply-adds); an explicit 3x3 float32 variant measured 0.7-0.9 ns, not worth
its special case.  Compiled int8 dot products (``vpmaddwd``) beat BLAS only for
the 1-row classifier, where they read int16 instead of float32 weights.

History, same machine: numpy only, before the fast paths 21-33 ms; float
requantization and preallocated runners 9.4-10.5 ms; depthwise layers as one
``einsum`` over strided views 7.9-8.5 ms, where numpy's per-pass cost was the floor
(the requantization of 1.27 M outputs took 3.4 ms in ~8 passes per element).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    return p.parse_args()


def main() -> int:
    args = _args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # must precede the numpy import
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np

    from graphwright.runtime import prepare
    from graphwright.runtime.reference import Interpreter, jit
    from tests.models import get_model

    info = get_model("tflite_ops", "mobilenet_v2_int8")
    rng = np.random.default_rng(0)
    (name, shape), = info.inputs.items()
    feeds = {name: rng.integers(-128, 128, shape).astype(np.int8)}

    def median_time(fn) -> float:  # type: ignore[no-untyped-def]
        fn()
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    results: dict[str, float] = {}
    outputs: dict[str, dict[str, np.ndarray]] = {}
    for backend in ("litert", "litert-ref"):
        session = prepare(info.path, backend=backend, options={"num_threads": args.threads})
        outputs[backend] = session.run(feeds)
        results[backend] = median_time(lambda s=session: s.run(feeds))
    modes = [("jit", True), ("numpy", False)] if jit.available() else [("numpy", False)]
    for mode, compiled in modes:
        for rounding in ("double", "single"):
            start = time.perf_counter()
            interp = Interpreter(info.path, rounding=rounding, jit=compiled)
            outputs[f"{mode}-{rounding}"] = interp.run(feeds)  # first run builds the plans (and compiles)
            results[f"{mode}-{rounding}-prepare"] = time.perf_counter() - start
            results[f"{mode}-{rounding}"] = median_time(lambda i=interp: i.run(feeds))
    best = modes[0][0]

    (out,) = outputs["litert"]
    exact_ref = all(np.array_equal(outputs[f"{mode}-double"][out], outputs["litert-ref"][out]) for mode, _ in modes)
    diff = max(int(np.abs(outputs[f"{mode}-single"][out].astype(int) - outputs["litert"][out].astype(int)).max())
               for mode, _ in modes)
    exact_single = float(np.mean(outputs[f"{best}-single"][out] == outputs["litert"][out]))
    rows = [
        ("LiteRT default kernels (XNNPACK)", results["litert"]),
        ("LiteRT reference kernels (BUILTIN_REF)", results["litert-ref"]),
    ] + [(f"graphwright reference ({mode}), {rounding} rounding", results[f"{mode}-{rounding}"])
         for mode, _ in modes for rounding in ("double", "single")]
    print(f"int8 MobileNetV2 96x96 batch 1, {args.threads} thread(s), median of {args.repeat} invokes")
    for label, seconds in rows:
        print(f"  {label:<48} {1e3 * seconds:9.2f} ms   {seconds / results['litert']:7.2f}x LiteRT default")
    print("  one-time preparation (double): " + ", ".join(
        f"{mode} {1e3 * results[f'{mode}-double-prepare']:.1f} ms" for mode, _ in modes))
    ratio = results[f"{best}-double"] / results["litert"]
    print(f"  ratio reference ({best})/LiteRT-default: {ratio:.2f}x (target <= 5x); "
          f"reference/LiteRT-ref: {results[f'{best}-double'] / results['litert-ref']:.3f}x")
    print(f"  outputs: bit-exact vs BUILTIN_REF: {exact_ref}; single rounding vs default: max |diff| "
          f"{diff}, {100 * exact_single:.2f}% exact")
    breakdown = Interpreter(info.path, jit=modes[0][1]).profile(feeds, repeat=args.repeat)
    print(f"  reference ({best}, double) by operator type, sum of per-operator minima: " + ", ".join(
        f"{op} {1e3 * seconds:.2f} ms" for op, seconds in breakdown.items()) + f"; total {1e3 * sum(breakdown.values()):.2f} ms")
    others: dict[str, dict[str, float | bool]] = {}
    print("other converter-made int8 classifiers (compiled loops, double rounding; no target):")
    for other in ("mobilenet_v3_small_int8", "efficientnet_b0_int8"):
        o_info = get_model("tflite_ops", other)
        (o_name, o_shape), = o_info.inputs.items()
        o_feeds = {o_name: rng.integers(-128, 128, o_shape).astype(np.int8)}
        mine = Interpreter(o_info.path, jit=modes[0][1])
        with prepare(o_info.path, backend="litert-ref", options={"num_threads": args.threads}) as reference:
            expected = reference.run(o_feeds)
        got = mine.run(o_feeds)
        same = got.keys() == expected.keys() and all(np.array_equal(got[k], expected[k]) for k in got)
        with prepare(o_info.path, backend="litert", options={"num_threads": args.threads}) as litert:
            t_lite = median_time(lambda s=litert, f=o_feeds: s.run(f))
        t_mine = median_time(lambda i=mine, f=o_feeds: i.run(f))
        others[other] = {"litert": t_lite, "reference": t_mine, "exact_vs_builtin_ref": same}
        exact_ref = exact_ref and same
        print(f"  {other:<26} LiteRT {1e3 * t_lite:6.2f} ms, graphwright {1e3 * t_mine:6.2f} ms "
              f"({t_mine / t_lite:.2f}x); bit-exact vs BUILTIN_REF: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": results, "exact_vs_builtin_ref": exact_ref,
                                               "max_diff_vs_default": diff, "others": others}, indent=1))
    return 0 if exact_ref and diff <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
