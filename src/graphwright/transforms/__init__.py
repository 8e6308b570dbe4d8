"""Transforms: the registry, the pipeline language, presets and the runner.

Write a transform::

    from graphwright.transforms import transform, TransformResult

    @transform("scale_names", dialects={"tf", "onnx"})
    def scale_names(model, ctx, *, suffix: str = "_x") -> TransformResult:
        '''Append a suffix to every node name.'''
        for node in model.graph:
            node.name += suffix
        return TransformResult(changed=True)

and run it: ``run_pipeline(model, 'scale_names(suffix=_y)', outputs=[...])``.
"""

from .context import TransformContext
from .params import Params
from .pipeline import TransformCall, format_call, parse_pipeline
from .presets import PRESETS, Preset
from .registry import DIALECTS, ENTRY_POINT_GROUP, TransformResult, TransformSpec, all_transforms, get, transform
from .runner import PipelineReport, StepReport, StepRunner, plan_pipeline, run_pipeline

__all__ = [
    "TransformContext", "Params", "TransformCall", "format_call", "parse_pipeline", "PRESETS", "Preset",
    "DIALECTS", "ENTRY_POINT_GROUP", "TransformResult", "TransformSpec", "all_transforms", "get",
    "transform", "PipelineReport", "StepReport", "StepRunner", "plan_pipeline", "run_pipeline",
]
