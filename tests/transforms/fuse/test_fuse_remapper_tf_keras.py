"""fuse_remapper on the Keras applications after the deployment recipe, against Grappler's remapper.

Grappler's count is taken as TF 2.21 takes it in a Session: the graph placed on the CPU, only the
remapper on (``RewriterConfig.optimizers = ["remap"]``, one iteration), the outputs preserved, in a
child process with oneDNN on.  Our graph must not have more nodes, must import and run with
Grappler off in a oneDNN-on and a oneDNN-off child process (target=eigen for the latter), and
agree with the unfused graph within 1e-5 relative.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf
tf_oracle = pytest.importorskip("tests.tf_oracle")

from tests.models import _cache, keras_graphdef  # noqa: E402
from tests.models._info import ModelInfo  # noqa: E402

DEPLOY = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) fold_constants(ignore_errors=true) "
          "fold_batch_norms fold_old_batch_norms")
#: the applications the test and benchmark compare (build_keras._APPS)
APPS = ("mobilenet_v2", "mobilenet_v3_small", "resnet50", "inception_v3", "efficientnet_b0", "densenet121",
        "xception")


def keras_app(name: str) -> ModelInfo:
    """The cached frozen Keras application ``name`` (tests/models/build_keras.py).

    The three original apps come through ``keras_graphdef``; the others are listed in
    build_keras._APPS but not (yet) in _cache.FAMILIES, so they are built here the same way (a
    subprocess running build_keras.build, _cache's environment) under a stem of their own.
    """
    try:
        return keras_graphdef(name)
    except ValueError:
        pass
    stem = f"keras_graphdef-{name}-local{_cache.builder_version(_cache.FAMILIES['keras_graphdef'])}"
    sidecar = _cache.CACHE_DIR / f"{stem}.json"
    if not sidecar.exists():
        _cache.CACHE_DIR.mkdir(parents=True, exist_ok=True)
        code = ("import sys; from pathlib import Path; from tests.models.build_keras import build; "
                "d = Path(sys.argv[2]); info = build(sys.argv[1], d / (sys.argv[3] + '.pb'), d / (sys.argv[3] + '.npz')); "
                "info.write_sidecar()")
        log = _cache.CACHE_DIR / f"{stem}.log"
        with open(log, "w") as out:
            done = subprocess.run([sys.executable, "-c", code, name, str(_cache.CACHE_DIR), stem],
                                  cwd=_cache.REPO_ROOT, env=_cache._build_env(), stdout=out,
                                  stderr=subprocess.STDOUT, timeout=1800, check=False)
        if done.returncode != 0 or not sidecar.exists():
            raise RuntimeError(f"building {name} failed; log: {log}")
    return ModelInfo.read_sidecar(sidecar)
