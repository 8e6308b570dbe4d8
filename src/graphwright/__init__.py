"""graphwright: shape trained TensorFlow, ONNX and TFLite graphs for deployment.

    import graphwright as gw

    model = gw.load("model.pb")                      # format chosen by content
    print(gw.summarize(model).outputs)
    gw.transform(model, "strip_unused_nodes round_weights(num_steps=256)", outputs=["softmax"])
    gw.save(model, "model_small.pb")                 # atomic write
"""

from __future__ import annotations

import sys
import types
from typing import Any

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
from .ir import Attr, DType, Graph, Model, Node, Tensor, Value
from .simplify import simplify
from .transforms import PipelineReport, TransformResult, run_pipeline
from .transforms import transform as register_transform

__version__ = "0.1.0"

#: Apply a ``--transforms`` pipeline to a model in place (alias of ``run_pipeline``).
transform = run_pipeline


class _Package(types.ModuleType):
    """``graphwright.quantize`` and ``graphwright.summarize`` are imported on first use: the quantizer
    and the summary pull in ~100 ms of modules that ``simplify`` and ``transform`` never use.

    ``quantize`` is a property because the name is also the subpackage's: the import system binds
    ``graphwright.quantize`` to the subpackage when it is first imported (by anyone), which would
    shadow a plain lazy attribute; the setter takes that binding, the getter keeps giving the function
    (as the eager ``from .quantize import quantize`` did)."""

    @property
    def quantize(self) -> Any:
        from .quantize import quantize as fn  # lazy: the quantizer's modules, unused by simplify/transform

        return fn

    @quantize.setter
    def quantize(self, value: Any) -> None:  # the subpackage, bound by the import system: kept in sys.modules
        pass

    def __getattr__(self, name: str) -> Any:
        if name == "summarize":
            from .inspect import summarize  # lazy: the summary's modules, unused by simplify/transform

            return summarize
        raise AttributeError(f"module 'graphwright' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package

__all__ = [
    "load", "save", "serialize", "detect_format", "summarize", "simplify", "quantize", "transform", "run_pipeline",
    "register_transform", "TransformResult", "PipelineReport",
    "Attr", "DType", "Graph", "Model", "Node", "Tensor", "Value",
    "GraphwrightError", "ModelLoadError", "ModelSaveError", "GraphCheckError", "TransformError",
    "PipelineSyntaxError", "PatternSyntaxError", "BackendUnavailableError", "VerificationError",
    "__version__",
]
