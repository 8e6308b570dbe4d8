"""graphwright: shape trained TensorFlow, ONNX and TFLite graphs for deployment.

    import graphwright as gw

    model = gw.load("model.pb")                      # format chosen by content
    print(gw.summarize(model).outputs)
    gw.transform(model, "strip_unused_nodes round_weights(num_steps=256)", outputs=["softmax"])
    gw.save(model, "model_small.pb")                 # atomic write
"""

from __future__ import annotations

from .errors import (
    BackendUnavailableError,
    GraphCheckError,
    GraphwrightError,
    ModelLoadError,
    ModelSaveError,
    PatternSyntaxError,
    PipelineSyntaxError,
    TransformError,
    VerificationError,
)
from .formats import detect_format, load, save, serialize
from .inspect import summarize
from .ir import Attr, DType, Graph, Model, Node, Tensor, Value
from .quantize import quantize
from .simplify import simplify
from .transforms import PipelineReport, TransformResult, run_pipeline
from .transforms import transform as register_transform

__version__ = "0.1.0"

#: Apply a ``--transforms`` pipeline to a model in place (alias of ``run_pipeline``).
transform = run_pipeline

__all__ = [
    "load", "save", "serialize", "detect_format", "summarize", "simplify", "quantize", "transform", "run_pipeline",
    "register_transform", "TransformResult", "PipelineReport",
    "Attr", "DType", "Graph", "Model", "Node", "Tensor", "Value",
    "GraphwrightError", "ModelLoadError", "ModelSaveError", "GraphCheckError", "TransformError",
    "PipelineSyntaxError", "PatternSyntaxError", "BackendUnavailableError", "VerificationError",
    "__version__",
]
