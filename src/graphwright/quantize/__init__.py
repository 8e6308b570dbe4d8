"""``quantize``: post-training quantization of ONNX and TFLite models from the file alone.

Calibration (:mod:`.calibration`), sensitivity analysis, the quantizing transforms and a report
of the accuracy lost, for ONNX (static QDQ, dynamic, weight-only int8/int4) and TFLite (int8,
16x8, dynamic range, weight-only).

    model, report = quantize("model.onnx", mode="static", data="calib/")
    report.outputs[0].sqnr_db, report.layers, report.size_after
"""

from .driver import GRAPHDEF_MESSAGE, METHODS, MODES, quantize
from .html import render_html
from .report import LayerSQNR, OutputError, QuantReport
from .sensitivity import LayerSensitivity

__all__ = ["GRAPHDEF_MESSAGE", "METHODS", "MODES", "LayerSQNR", "LayerSensitivity", "OutputError", "QuantReport",
           "quantize", "render_html"]
