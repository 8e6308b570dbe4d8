"""TensorFlow Lite Micro vs graphwright's reference interpreter vs LiteRT's BUILTIN_REF on int8
MobileNetV2, batch 1, one thread for everyone.

Usage:  python benchmarks/tflm_vs_reference.py [--repeat 5] [--models tflite_real:mobilenet_v2_224_int8,...]
                                              [--json out.json]

Models: tests/models (``tflite_ops:mobilenet_v2_int8`` is 96x96, ``tflite_real:mobilenet_v2_224_int8``
224x224; built on first use).  Engines: TFLM's Python interpreter (its reference kernels, every tensor
kept, the arena sized by the tflm backend), LiteRT with ``BUILTIN_REF``, and the reference interpreter
with and without its compiled loops (numba), double rounding.  Each time is the median of ``--repeat``
invokes after a warm-up (the interpreters are built once, outside the timing); BLAS and LiteRT run one
thread (``OPENBLAS_NUM_THREADS=1`` set before numpy loads); TFLM has one thread.  Outputs are checked:
the interpreter identical to BUILTIN_REF, and the largest difference to TFLM shown (TFLM's int8
FULLY_CONNECTED rounds twice where LiteRT's reference kernel rounds once: at most 1 at near-ties).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _tflite import median_seconds, one_thread

MODELS = ("tflite_ops:mobilenet_v2_int8", "tflite_real:mobilenet_v2_224_int8")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    one_thread()
    import numpy as np

    from graphwright.runtime import prepare
    from graphwright.runtime.reference import Interpreter
    from tests.models import get_model
    from tests.runtime.reference._oracle import feeds_for


    print(f"batch 1, one thread, median of {args.repeat} invokes")
    print(f"  {'model':<36} {'TFLM':>9} {'BUILTIN_REF':>12} {'ours (numpy)':>13} {'ours (jit)':>11} "
          f"{'TFLM/jit':>9}  outputs")
    records = {}
    for spec in args.models.split(","):
        family, name = spec.split(":")
        info = get_model(family, name)
        feeds = feeds_for(info, 2)
        times = {}
        with prepare(info.path, backend="tflm") as s:
            from_tflm = s.run(feeds)
            times["tflm"] = median_seconds(lambda s=s, f=feeds: s.run(f), args.repeat)
        with prepare(info.path, backend="litert-ref", options={"num_threads": 1}) as s:
            expected = s.run(feeds)
            times["litert-ref"] = median_seconds(lambda s=s, f=feeds: s.run(f), args.repeat)
        for label, jit in (("numpy", False), ("jit", True)):
            interp = Interpreter(info.path, jit=jit)
            got = interp.run(feeds)
            times[label] = median_seconds(lambda i=interp, f=feeds: i.run(f), args.repeat)
        key = next(iter(expected))
        exact = bool(np.array_equal(got[key], expected[key]))
        vs_tflm = int(np.abs(got[key].astype(np.int64) - from_tflm[key].astype(np.int64)).max())
        records[spec] = {**times, "bit_exact_vs_builtin_ref": exact, "max_abs_diff_vs_tflm": vs_tflm}
        check = ("identical to BUILTIN_REF" if exact else "DIFFERS from BUILTIN_REF") + f", TFLM max |diff| {vs_tflm}"
        print(f"  {spec:<36} {1e3 * times['tflm']:7.1f}ms {1e3 * times['litert-ref']:10.1f}ms "
              f"{1e3 * times['numpy']:11.1f}ms {1e3 * times['jit']:9.1f}ms {times['tflm'] / times['jit']:8.1f}x  "
              f"{check}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0 if all(r["bit_exact_vs_builtin_ref"] for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
