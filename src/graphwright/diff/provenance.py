"""The provenance sidecar: ``OUT.provenance.json`` beside a model a pipeline wrote.

The record itself is kept by the step runner while a pipeline runs
(:class:`graphwright.transforms.runner.Provenance`, in ``model.meta``); this module writes it
beside the output file and reads it back for ``graphwright diff``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import GraphwrightError
from ..formats.files import atomic_path
from ..ir import Model
from ..transforms.runner import PROVENANCE_VERSION, Provenance, provenance_of

__all__ = ["DiffError", "SIDECAR_SUFFIX", "sidecar_path", "provenance_json", "write_provenance",
           "read_provenance"]

#: What is appended to a model's file name to name its sidecar.
SIDECAR_SUFFIX = ".provenance.json"


class DiffError(GraphwrightError):
    """Bad input to ``graphwright diff`` (models of two formats, an unreadable sidecar...)."""


def sidecar_path(model_path: str | os.PathLike[str]) -> Path:
    """``model.onnx`` -> ``model.onnx.provenance.json``."""
    p = Path(model_path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def provenance_json(model: Model, *, source: str | None = None, output: str | None = None) -> dict[str, Any]:
    """The sidecar's content for ``model`` (an empty record when no step ran on it)."""
    record = provenance_of(model)
    if record is None:
        record = Provenance(model)
    data = record.to_json(model)
    data["source"] = source
    data["output"] = output
    return data


def write_provenance(model: Model, output: str | os.PathLike[str], *, source: str | None = None) -> Path:
    """Write ``OUTPUT.provenance.json`` beside the model file ``output`` (atomically)."""
    target = sidecar_path(output)
    data = provenance_json(model, source=source, output=str(output))
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return target


def read_provenance(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a sidecar; a malformed one is a :class:`DiffError` naming the file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise DiffError(f"cannot read provenance sidecar {p}: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DiffError(f"provenance sidecar {p} is not valid JSON: {e}") from e
    if not isinstance(data, dict) or data.get("graphwright_provenance") != PROVENANCE_VERSION:
        raise DiffError(f"{p} is not a graphwright provenance sidecar (version {PROVENANCE_VERSION})")
    nodes, removed = data.get("nodes"), data.get("removed")
    if not isinstance(nodes, dict) or not isinstance(removed, dict):
        raise DiffError(f"provenance sidecar {p}: 'nodes' and 'removed' must be objects")
    for name, entry in nodes.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("from"), list):
            raise DiffError(f"provenance sidecar {p}: node {name!r} has no 'from' list")
    for name, entry in removed.items():
        if not isinstance(entry, dict):
            raise DiffError(f"provenance sidecar {p}: removed node {name!r} is not an object")
    return data
