"""The calibration child process: run a GraphDef in TensorFlow once per sample.

Started by :func:`graphwright.calibrate.calibrate` with its stderr redirected
to a file, because TensorFlow's ``Print`` op logs from C++ to stderr.  The job
directory holds ``job.json`` (model path, fetches, sample count) and
``sample_<i>.npz`` files; the child writes ``done.json`` when every sample ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ..errors import GraphwrightError
from ..runtime import prepare


def main(job_dir: str) -> int:
    folder = Path(job_dir)
    job = json.loads((folder / "job.json").read_text(encoding="utf-8"))
    try:
        # One op at a time: Print nodes running on parallel threads can interleave their
        # log lines in the shared stderr file, and a mangled line loses a range sample.
        session = prepare(job["model"], backend="tensorflow",
                          options={"inter_op_parallelism_threads": 1, "intra_op_parallelism_threads": 1})
        try:
            for i in range(int(job["samples"])):
                with np.load(folder / f"sample_{i}.npz", allow_pickle=False) as npz:
                    feeds = {name: npz[f"f{k}"] for k, name in enumerate(job["inputs"])}
                session.run(feeds, job["outputs"] or None)
                sys.stderr.flush()
                (folder / "progress").write_text(str(i + 1), encoding="utf-8")  # polled by the parent
        finally:
            session.close()
    except GraphwrightError as e:
        (folder / "done.json").write_text(json.dumps({"error": str(e)}), encoding="utf-8")
        return 1
    (folder / "done.json").write_text(json.dumps({"error": None}), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess
    sys.exit(main(sys.argv[1]))
