"""``graphwright diff``: what changed between two models, exactly with a provenance sidecar.

A policy layer like ``simplify/``: :func:`diff_models` compares two loaded models, every graph
(If/Loop/Scan bodies and TFLite WHILE/IF subgraphs too, :func:`nested`) (:mod:`.changes`),
:mod:`.provenance` writes and reads the sidecar a pipeline leaves beside its output,
:mod:`.numeric` runs both models on the same inputs for per-output errors and :mod:`.html` writes the self-contained report with pictures of the graph around each change.
"""

from .changes import (
    KINDS,
    Body,
    Change,
    ModelDiff,
    ModelSide,
    bodies,
    diff_models,
    neighbourhood,
    nested,
    nodes_by_key,
)
from .provenance import DiffError, read_provenance, sidecar_path, write_provenance

__all__ = ["KINDS", "Body", "Change", "ModelDiff", "ModelSide", "bodies", "diff_models", "neighbourhood", "nested",
           "nodes_by_key", "DiffError", "read_provenance", "sidecar_path", "write_provenance"]
