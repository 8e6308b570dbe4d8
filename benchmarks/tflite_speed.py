"""The reference interpreter vs LiteRT at deployment size: int8 and float32 MobileNetV2,
MobileNetV3-Small and EfficientNet-B0 at 224x224, batch 1, one thread for everyone — as
ratios, in one run (issue 11's targets: int8 <= 2x, float32 <= 3x LiteRT's default kernels,
always faster than LiteRT's BUILTIN_REF).

Usage:  python benchmarks/tflite_speed.py [--repeat 10] [--models mobilenet_v2_224_int8,...] [--json out.json]

Models: tests/models ``tflite_real`` (converter-made, random weights, randomized biases and
batch-norm statistics; built on first use, ~1 minute each).  Engines: LiteRT's default kernels
(XNNPACK), LiteRT's ``BUILTIN_REF`` and graphwright's reference interpreter with its compiled
loops (numba), double rounding; its 8-bit convolutions sum on onnxruntime's integer GEMM (MLAS),
one thread too.  Each time is the median of ``--repeat`` invokes after a warm-up, LiteRT's default
kernels and graphwright taking turns invoke by invoke (so both see the same load on a shared
machine); BLAS, onnxruntime and LiteRT run one thread (``OPENBLAS_NUM_THREADS=1`` set before numpy
loads).  Two clocks: wall time, and the CPU time of the invoking thread (``time.thread_time``:
LiteRT with one thread and graphwright both compute in the calling thread), which other work on
the machine disturbs less.  Outputs are checked: int8 identical to BUILTIN_REF, float32 within
1e-5 of the output's magnitude.  ``--profile`` adds graphwright's time per operator type.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _tflite import median_seconds, one_thread

MODELS = ("mobilenet_v2_224_int8", "mobilenet_v3_small_224_int8", "efficientnet_b0_224_int8",
          "mobilenet_v2_224_float", "mobilenet_v3_small_224_float", "efficientnet_b0_224_float")


def _turns(fns: list[Callable[[], Any]], repeat: int) -> list[tuple[float, float]]:
    """(median wall seconds, median thread-CPU seconds) of each of ``fns``, called in turns ``repeat``
    times after one warm-up call each."""
    for fn in fns:
        fn()
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            w, c = time.perf_counter(), time.thread_time()
            fn()
            cpu[i].append(time.thread_time() - c)
            wall[i].append(time.perf_counter() - w)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu, strict=True)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--profile", action="store_true", help="print graphwright's time per operator type")
    args = p.parse_args()
    one_thread()
    import numpy as np

    from graphwright.errors import GraphwrightError
    from graphwright.runtime import prepare, run
    from graphwright.runtime.reference import Interpreter
    from tests.models import get_model
    from tests.runtime.reference._oracle import feeds_for


    print(f"batch 1, one thread, median of {args.repeat} invokes (BUILTIN_REF: of 3); wall (CPU) times")
    print(f"  {'model':<30} {'LiteRT':>16} {'BUILTIN_REF':>12} {'graphwright':>16} {'vs LiteRT':>14} {'vs REF':>8}  output")
    records = {}
    for name in args.models.split(","):
        info = get_model("tflite_real", name)
        feeds = feeds_for(info, 2)
        try:  # a child process first: BUILTIN_REF aborts the process on some models (MobileNetV3-Small int8 224)
            run(info.path, feeds, backend="litert-ref", isolate=True)
        except GraphwrightError as e:
            ref_failure = " ".join(str(e).split())[:80]
            rounding, oracle = "single", "litert"  # then single rounding, within 1 LSB of the default kernels
        else:
            ref_failure, rounding, oracle = "", "double", "litert-ref"
        t_ref = float("nan")
        with prepare(info.path, backend=oracle, options={"num_threads": 1}) as s:
            expected = s.run(feeds)
            if not ref_failure:
                t_ref = median_seconds(lambda s=s, f=feeds: s.run(f), 3)
        interp = Interpreter(info.path, jit=True, rounding=rounding)
        got = interp.run(feeds)
        with prepare(info.path, backend="litert", options={"num_threads": 1}) as s:
            (t_lite, c_lite), (t_mine, c_mine) = _turns([lambda s=s, f=feeds: s.run(f),
                                                         lambda i=interp, f=feeds: i.run(f)], args.repeat)
        key = next(iter(expected))
        a, b = got[key], expected[key]
        if ref_failure:
            ok = int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max()) <= 1
            check = f"BUILTIN_REF fails ({ref_failure}); single rounding vs default kernels: " + \
                ("within 1 LSB" if ok else "DIFFERS")
        elif b.dtype.kind == "f":
            err = float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
            check = f"rel err {err:.1e}" + ("" if err <= 1e-5 else "  (OVER 1e-5)")
            ok = err <= 1e-5
        else:
            ok = bool(np.array_equal(a, b))
            check = "bit-exact" if ok else "DIFFERS"
        records[name] = {"litert": t_lite, "builtin_ref": t_ref, "graphwright": t_mine, "litert_cpu": c_lite,
                         "graphwright_cpu": c_mine, "ok": ok}
        print(f"  {name:<30} {1e3 * t_lite:6.2f} ({1e3 * c_lite:5.2f})ms {1e3 * t_ref:10.1f}ms "
              f"{1e3 * t_mine:6.2f} ({1e3 * c_mine:5.2f})ms {t_mine / t_lite:5.2f}x ({c_mine / c_lite:4.2f}x) "
              f"{t_mine / t_ref:7.3f}x  {check}", flush=True)
        if args.profile:
            times = interp.profile(feeds, repeat=min(args.repeat, 10))
            print("      " + "  ".join(f"{op} {1e3 * t:.2f}" for op, t in times.items() if t >= 5e-5), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0 if all(r["ok"] for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
