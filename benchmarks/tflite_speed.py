"""The reference interpreter vs LiteRT at deployment size: int8 and float32 MobileNetV2,
MobileNetV3-Small and EfficientNet-B0 at 224x224, batch 1, one thread for everyone — as
ratios, in one run (issue 11's targets: int8 <= 2x, float32 <= 3x LiteRT's default kernels,
always faster than LiteRT's BUILTIN_REF).

Usage:  python benchmarks/tflite_speed.py [--repeat 10] [--models mobilenet_v2_224_int8,...] [--json out.json]

Models: tests/models ``tflite_real`` (converter-made, random weights, randomized biases and
batch-norm statistics; built on first use, ~1 minute each).  Engines: LiteRT's default kernels
(XNNPACK), LiteRT's ``BUILTIN_REF`` and graphwright's reference interpreter with its compiled
loops (numba), double rounding.  Each time is the median of ``--repeat`` invokes after a warm-up;
BLAS and LiteRT run one thread (``OPENBLAS_NUM_THREADS=1`` set before numpy loads).  Outputs are
checked: int8 identical to BUILTIN_REF, float32 within 1e-5 of the output's magnitude.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _tflite import median_seconds, one_thread

MODELS = ("mobilenet_v2_224_int8", "mobilenet_v3_small_224_int8", "efficientnet_b0_224_int8",
          "mobilenet_v2_224_float", "mobilenet_v3_small_224_float", "efficientnet_b0_224_float")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    one_thread()
    import numpy as np

    from graphwright.errors import GraphwrightError
    from graphwright.runtime import prepare, run
    from graphwright.runtime.reference import Interpreter
    from tests.models import get_model
    from tests.runtime.reference._oracle import feeds_for


    print(f"batch 1, one thread, median of {args.repeat} invokes (BUILTIN_REF: of 3)")
    print(f"  {'model':<30} {'LiteRT':>9} {'BUILTIN_REF':>12} {'graphwright':>12} {'vs LiteRT':>10} {'vs REF':>8}  output")
    records = {}
    for name in args.models.split(","):
        info = get_model("tflite_real", name)
        feeds = feeds_for(info, 2)
        with prepare(info.path, backend="litert", options={"num_threads": 1}) as s:
            t_lite = median_seconds(lambda s=s, f=feeds: s.run(f), args.repeat)
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
        t_mine = median_seconds(lambda i=interp, f=feeds: i.run(f), args.repeat)
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
        records[name] = {"litert": t_lite, "builtin_ref": t_ref, "graphwright": t_mine, "ok": ok}
        print(f"  {name:<30} {1e3 * t_lite:7.2f}ms {1e3 * t_ref:10.1f}ms {1e3 * t_mine:10.2f}ms "
              f"{t_mine / t_lite:9.2f}x {t_mine / t_ref:7.3f}x  {check}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0 if all(r["ok"] for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
