"""extract's C header compiles and holds the same numbers as the .npy files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphwright.extract import extract

from .test_extract import TFLITE, _reassemble


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_header_compiles_and_holds_the_same_numbers(tmp_path: Path) -> None:
    manifest = extract(TFLITE, tmp_path / "c", format="c")
    header = tmp_path / "c" / "model_data.h"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-Wno-unused-const-variable", "-c", "-x", "c",
                    str(header), "-o", str(tmp_path / "h.o")], check=True)
    weights = next(c for c in manifest.constants if c.dtype == "int8" and c.uses and c.uses[0]["role"] == "weights")
    bias = next(c for c in manifest.constants if c.dtype == "int32")
    layer = manifest.layers[0]
    program = tmp_path / "check.c"
    program.write_text(
        f'#include <stdio.h>\n#include "{header}"\n'
        "int main(void) { long long a = 0, b = 0; unsigned i;\n"
        f"  for (i = 0; i < sizeof {weights.ident} / sizeof {weights.ident}[0]; ++i) a += (long long)(i % 7 + 1) * {weights.ident}[i];\n"
        f"  for (i = 0; i < sizeof {bias.ident} / sizeof {bias.ident}[0]; ++i) b += {bias.ident}[i];\n"
        f'  printf("%lld %lld %ld %d %.9g\\n", a, b, (long){layer.ident}_multiplier[0], {layer.ident}_shift[0],'
        f" (double){weights.ident}_scale[0]);\n  return 0; }}\n"
    )
    exe = tmp_path / "check"
    subprocess.run(["cc", "-std=c99", "-o", str(exe), str(program)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    tensors = _reassemble(extract(TFLITE, tmp_path / "npy") and tmp_path / "npy")
    w = tensors[weights.name].reshape(-1).astype(np.int64)
    assert int(out[0]) == int(((np.arange(w.size) % 7 + 1) * w).sum())
    assert int(out[1]) == int(tensors[bias.name].astype(np.int64).sum())
    assert int(out[2]) == layer.params["multiplier"][0] and int(out[3]) == layer.params["shift"][0]
    assert float(out[4]) == pytest.approx(weights.quantization["scale"][0], rel=1e-7)  # type: ignore[index]
