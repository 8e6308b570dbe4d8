"""What every worker needs, imported once in the process the workers are forked from.

The local runner's ``forkserver`` preloads this module, so a worker starts with the readers,
writers, onnxruntime's and LiteRT's wrappers and the transform registry already loaded instead of
paying for them per model (about 0.8 s each on a small model).  TensorFlow stays out (slow, and
only GraphDef verification needs it).
"""

from __future__ import annotations

from ..errors import GraphwrightError
from ..formats import graphdef, onnx, tflite
from ..runtime import litert, onnxruntime
from ..transforms.registry import all_transforms
from . import work

__all__ = ["MODULES"]

MODULES = (graphdef, onnx, tflite, litert, onnxruntime, work)
try:
    all_transforms()  # registers the built-in transforms and installed plugins
except GraphwrightError:
    pass  # a broken plugin: each job reports it when it asks the registry
