"""``simplify``: make an ONNX model as small and plain as its meaning allows.

    from graphwright.simplify import simplify

    model, report = simplify("model.onnx", overwrite_input_shapes={"input": (1, 3, 224, 224)})
    print(report.before.nodes, "->", report.after.nodes)

Shape inference, elimination and fusion passes and constant folding run to a
fixed point (see :mod:`graphwright.simplify.driver`); every pass is also a
registered transform usable in ``--transforms`` pipelines.
"""

from .driver import DEFAULT_MAX_ITERATIONS, apply_input_shapes, simplify
from .options import ALIASES, parse_input_shapes, parse_size, resolve_skips, skippable_names
from .report import ModelStats, PassRecord, SimplifyReport

__all__ = [
    "simplify", "apply_input_shapes", "DEFAULT_MAX_ITERATIONS",
    "parse_size", "parse_input_shapes", "resolve_skips", "skippable_names", "ALIASES",
    "ModelStats", "PassRecord", "SimplifyReport",
]
