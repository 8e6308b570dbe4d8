"""quantize_weights on ONNX: int8 initializers behind DequantizeLinear, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright.ir import DType, constant_value

from ._helpers import EXAMPLE


@pytest.mark.parametrize("source", ["example", "cnn"])
def test_onnx_initializers_become_int8_with_dequantize_linear(source: str, tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from graphwright.verify import compare

    if source == "example":
        path = EXAMPLE.with_suffix(".onnx")
    else:
        from tests.models import torch_onnx

        path = torch_onnx("cnn").path
    model = gw.load(path)
    report = gw.transform(model, "quantize_weights(minimum_size=1024)")
    stats = report.steps[0].stats
    assert report.changed and stats["initializers_quantized"] >= 1
    dq = [n for n in model.graph if n.op == "DequantizeLinear"]
    assert len(dq) == stats["initializers_quantized"]
    assert all(constant_value(n.inputs[0]).dtype is DType.INT8 for n in dq)
    out = tmp_path / "q.onnx"
    gw.save(model, out)
    onnx.checker.check_model(str(out))
    assert out.stat().st_size < 0.85 * path.stat().st_size
    result = compare(path, out, rtol=0.05, atol=0.01)  # onnxruntime runs both
    assert result.ok, [(o.name, o.max_abs) for o in result.outputs]


def test_onnx_symmetric_int8_error_is_half_a_step() -> None:
    from graphwright.transforms.quantize.quantize_weights_onnx import symmetric_int8

    w = np.random.default_rng(0).normal(0, 1, (8, 3, 3, 3)).astype(np.float32)
    codes, scale = symmetric_int8(w, 0)
    assert codes.dtype == np.int8 and scale.shape == (8,) and np.abs(codes).max() == 127
    restored = codes.astype(np.float32) * scale[:, None, None, None]
    assert np.all(np.abs(restored - w) <= scale[:, None, None, None] / 2 + 1e-7)
