"""``quantize``: post-training quantization of ONNX and TFLite models from the file alone.

Calibration (:mod:`.calibration`), sensitivity analysis, the quantizing transforms and a report
of the accuracy lost, for ONNX (static QDQ, dynamic, weight-only int8/int4) and TFLite (int8,
16x8, dynamic range, weight-only).
"""
