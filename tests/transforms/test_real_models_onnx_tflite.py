"""Lossless generic transforms on real ONNX and TFLite models, checked on onnxruntime / LiteRT."""

from __future__ import annotations

import onnx
import pytest

import graphwright as gw

from ._generic import _apply, _model, _outputs, _same

LOSSLESS = ["strip_unused_nodes", "sort_by_execution_order", "merge_duplicate_nodes", "obfuscate_names",
            "remove_nodes(op=Identity)", "strip_unused_nodes merge_duplicate_nodes sort_by_execution_order"]


@pytest.mark.parametrize("kind", ["onnx_cnn", "onnx_bert", "tflite_int8", "tflite_float"])
@pytest.mark.parametrize("transforms", LOSSLESS)
def test_lossless_generic_transforms_keep_outputs(kind: str, transforms: str) -> None:
    path = _model(kind)
    model = _apply(path, transforms)
    if kind.startswith("onnx"):
        onnx.checker.check_model(gw.formats.onnx.to_proto(model))
    _same(_outputs(path), _outputs(model))
