"""``extract``: every constant tensor of a model as ``.npy`` files (or one C header)
plus ``manifest.json`` tying each to its operators and roles, with the
quantization parameters and, for quantized TFLite layers, their integer parameters
(multipliers, shifts, tables: :mod:`.layers`).  A sparse TFLite constant is written dense,
with its sparse form in the manifest and its stored values in a second file.

TFLite, ONNX (initializers, ``Constant`` nodes) and GraphDef (``Const`` nodes).
Files are written to a temporary folder next to ``outdir`` and renamed into
place, so a failed extraction leaves no half-written output.  O(total constant size).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import GraphwrightError
from ..formats import load
from ..formats.tflite.sparsity import stored_values
from ..ir import Model
from .c_header import render_header
from .manifest import ConstantEntry, LayerParams, Manifest, build_manifest, role_of

__all__ = ["FORMATS", "ConstantEntry", "LayerParams", "Manifest", "build_manifest", "extract", "role_of"]

FORMATS = ("npy", "c")


def extract(model: Model | str | os.PathLike[str], outdir: str | os.PathLike[str], *, format: str = "npy",
            overwrite: bool = False) -> Manifest:
    """Write ``model``'s constants into ``outdir`` (``npy``: one file each; ``c``: ``model_data.h``)
    and ``manifest.json``; returns the manifest."""
    if format not in FORMATS:
        raise GraphwrightError(f"unknown extract format {format!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(model, Model):
        model = load(model)
    target = Path(outdir)
    if model.source_path is not None and _holds(target, Path(model.source_path)):
        raise GraphwrightError(f"{outdir} holds the input model {model.source_path}; extract into another folder")
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not overwrite:
        raise GraphwrightError(f"{target} exists and is not an empty folder; choose another or allow overwriting")
    manifest, entries = build_manifest(model)
    target = target.resolve()  # the temporary folder goes beside it, never inside ("." included)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        doc = manifest.to_json()
        if format == "npy":
            for entry, tensor in entries:
                np.save(tmp / entry.file, np.asarray(tensor.numpy()), allow_pickle=False)
                if entry.sparsity is not None:
                    np.save(tmp / entry.sparsity["values_file"], stored_values(tensor), allow_pickle=False)
            for layer in manifest.layers:
                for key, value in layer.params.items():
                    if isinstance(value, np.ndarray):
                        np.save(tmp / layer.array_file(key), value, allow_pickle=False)
        else:
            guard = re.sub(r"[^A-Za-z0-9]+", "_", target.name).upper().strip("_") + "_MODEL_DATA_H"
            (tmp / "model_data.h").write_text(render_header(manifest, entries, guard or "MODEL_DATA_H"))
            doc["header"] = "model_data.h"
            for c in doc["constants"]:  # type: ignore[union-attr]
                c["file"] = None
                if "sparsity" in c:
                    c["sparsity"]["values_file"] = None
            for layer_doc in doc["layers"]:  # type: ignore[union-attr]
                for value in layer_doc.values():
                    if isinstance(value, dict) and "file" in value:
                        value["file"] = None
        doc["format"] = format
        (tmp / "manifest.json").write_text(json.dumps(doc, indent=1))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _holds(folder: Path, file: Path) -> bool:
    """``file`` is ``folder`` itself or lies somewhere inside it (links resolved)."""
    try:
        where, what = folder.resolve(), file.resolve()
    except OSError:
        return False
    return what == where or where in what.parents
