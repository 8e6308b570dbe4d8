"""simplify's start-up: its passes load one module each, not every built-in transform."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from graphwright.simplify.passes import ONNX_FUSIONS, OPTIMIZATION_PASSES
from graphwright.transforms import all_transforms
from graphwright.transforms.registry import LAZY_BUILTINS

SRC = Path(__file__).resolve().parents[2] / "src"


def test_every_lazy_entry_is_the_module_that_registers_it() -> None:
    specs = {spec.name: spec for spec in all_transforms()}
    for name, module in LAZY_BUILTINS.items():
        assert specs[name].origin == "builtin"
        assert specs[name].fn.__module__ == f"graphwright.transforms.{module}", name
    needed = set(OPTIMIZATION_PASSES) | set(ONNX_FUSIONS) | {"infer_shapes", "onnx_fold_constants",
                                                              "inline_local_functions"}
    assert needed <= set(LAZY_BUILTINS)


def test_simplify_imports_no_tensorflow_transform_and_not_every_builtin(tmp_path: Path) -> None:
    """(graphwright/__init__ imports graphwright.quantize, which imports the quantize transforms itself.)"""
    code = (
        "import sys\n"
        "from graphwright.simplify import simplify\n"
        f"simplify({str(Path(__file__).resolve().parents[2] / 'examples' / 'small_cnn.onnx')!r}, provenance=False)\n"
        "loaded = [m for m in sys.modules if m.startswith('graphwright.transforms.')]\n"
        "print(sorted(m for m in loaded if m.endswith('_tf') or m.endswith('.builtin') or '.rename.' in m))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert out.stdout.strip() == "[]", out.stdout
