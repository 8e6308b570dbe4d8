"""Jobs of a batch: from a folder of models, or from a manifest (JSON, or YAML when PyYAML is installed).

A manifest is a list of models, or an object with optional ``defaults`` and ``output_dir`` and a
``models`` list; every entry is a path or an object::

    {"output_dir": "out", "defaults": {"transforms": "fold_constants eliminate_identity"},
     "models": ["a.onnx",
                {"model": "b.onnx", "simplify": {"skip_optimizations": ["fuse_bn_into_conv"]}, "check": 2},
                {"model": "c.tflite", "output": "c_small.tflite", "inputs": ["x=c_input.npy"]}]}

Paths are relative to the manifest's folder.  An entry's keys are :data:`JOB_KEYS`; a job has a
``transforms`` pipeline or ``simplify`` options (``true`` or an object of :data:`SIMPLIFY_KEYS`),
not both.  Every problem is one :class:`ManifestError` line naming the entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GraphwrightError

__all__ = ["Job", "ManifestError", "JOB_KEYS", "SIMPLIFY_KEYS", "MODEL_SUFFIXES",
           "jobs_from_folder", "jobs_from_manifest", "parse_manifest"]

#: The files a folder batch picks up.
MODEL_SUFFIXES = (".onnx", ".pb", ".pbtxt", ".tflite")
#: The keys of a manifest entry.
JOB_KEYS = ("name", "model", "output", "transforms", "simplify", "input_names", "output_names",
            "inputs", "check", "seed", "rtol", "atol")
#: Simplify options a manifest may give (keyword arguments of :func:`graphwright.simplify.simplify`).
SIMPLIFY_KEYS = ("overwrite_input_shapes", "skip_optimizations", "skip_all_optimizations", "skip_constant_folding",
                 "skip_shape_inference", "size_limit", "growth_limit", "fold_budget", "max_iterations", "target",
                 "inline_functions")


class ManifestError(GraphwrightError):
    """A batch's manifest or folder cannot be turned into jobs."""


@dataclass
class Job:
    """One model of a batch: read ``model``, apply ``transforms`` or simplify, write ``output``.

    With ``inputs`` (``NAME=FILE.npy`` or ``FILE.npz`` items, as ``compare --input``) or ``check``
    (a number of seeded random inputs) the result is compared with the original before it is
    written; beyond ``rtol``/``atol`` nothing is written and the job has failed.
    """

    name: str
    model: str
    output: str
    transforms: str | None = None
    simplify: dict[str, Any] | None = None
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    check: int = 0
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return cls(**dict(data))


def jobs_from_folder(folder: str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                     transforms: str | None = None, simplify: Mapping[str, Any] | None = None,
                     check: int = 0, seed: int = 0) -> list[Job]:
    """One job per model file directly in ``folder`` (sorted by name), its output of the same name in
    ``output_dir``."""
    src = Path(folder)
    if not src.is_dir():
        raise ManifestError(f"{folder} is not a folder")
    paths = sorted(p for p in src.iterdir() if p.is_file() and p.suffix.lower() in MODEL_SUFFIXES)
    if not paths:
        raise ManifestError(f"no model files ({', '.join(MODEL_SUFFIXES)}) in {folder}")
    out = Path(output_dir)
    if out.resolve() == src.resolve():
        raise ManifestError(f"the output folder {output_dir} is the input folder; choose another one")
    entries = [{"model": str(p), "output": str(out / p.name)} for p in paths]
    defaults: dict[str, Any] = {"check": check, "seed": seed}
    if transforms is not None:
        defaults["transforms"] = transforms
    if simplify is not None:
        defaults["simplify"] = dict(simplify)
    return parse_manifest({"defaults": defaults, "models": entries}, base=Path.cwd(), output_dir=out)


def jobs_from_manifest(path: str | os.PathLike[str], *, output_dir: str | os.PathLike[str] | None = None,
                       defaults: Mapping[str, Any] | None = None) -> list[Job]:
    """Read a manifest file (``.json``; ``.yaml``/``.yml`` with PyYAML installed) into jobs.

    ``output_dir`` (the command line's ``--out``) wins over the manifest's; ``defaults`` (the
    command line's options) are overridden by the manifest's defaults and entries."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ManifestError(f"cannot read the manifest {path}: {e.strerror or e}") from e
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # lazy: PyYAML is optional; only YAML manifests need it
        except ImportError as e:
            raise ManifestError(f"{path}: YAML manifests need PyYAML (pip install pyyaml); or write it as JSON") from e
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ManifestError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from e
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{path} is not valid JSON: {e}") from e
    return parse_manifest(data, base=p.resolve().parent, output_dir=output_dir, defaults=defaults, where=str(path))


def parse_manifest(data: Any, *, base: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None,
                   defaults: Mapping[str, Any] | None = None, where: str = "manifest") -> list[Job]:
    """Jobs from a manifest's parsed content; relative paths are read from ``base``."""
    root = Path(base)
    if isinstance(data, list):
        data = {"models": data}
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: expected a list of models or an object with 'models'")
    unknown = sorted(set(data) - {"models", "defaults", "output_dir"})
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                            "(expected 'models', 'defaults', 'output_dir')")
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise ManifestError(f"{where}: 'models' must be a non-empty list")
    merged = dict(defaults or {})
    file_defaults = data.get("defaults") or {}
    if not isinstance(file_defaults, dict):
        raise ManifestError(f"{where}: 'defaults' must be an object")
    merged.update(file_defaults)
    if output_dir is not None:
        out_dir = Path(output_dir)
    elif data.get("output_dir") is not None:
        out_dir = _path(root, str(data["output_dir"]))
    else:
        out_dir = None
    jobs: list[Job] = []
    for i, entry in enumerate(models):
        label = f"{where}: model {i + 1}"
        if isinstance(entry, str):
            entry = {"model": entry}
        if not isinstance(entry, dict):
            raise ManifestError(f"{label}: expected a path or an object, got {type(entry).__name__}")
        jobs.append(_job({**merged, **entry}, root, out_dir, label))
    names = [j.name for j in jobs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ManifestError(f"{where}: job names must be unique; {', '.join(map(repr, twice))} appear twice "
                            "(give them a 'name')")
    outputs = [os.path.abspath(j.output) for j in jobs]
    same = sorted({o for o in outputs if outputs.count(o) > 1})
    if same:
        raise ManifestError(f"{where}: two jobs write {same[0]}; give them different outputs")
    models = {os.path.abspath(j.model) for j in jobs}
    clobber = sorted(o for o in outputs if o in models)
    if clobber:
        raise ManifestError(f"{where}: a job would write over the model {clobber[0]}, an input of the batch; "
                            "choose another output")
    return jobs


def _path(root: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else root / p


def _job(entry: dict[str, Any], root: Path, out_dir: Path | None, label: str) -> Job:
    if not isinstance(entry.get("model"), str) or not entry["model"]:
        raise ManifestError(f"{label}: needs 'model', the path of a model file")
    model = _path(root, entry["model"])
    label = f"{label} ({entry['model']})"
    unknown = sorted(set(entry) - set(JOB_KEYS))
    if unknown:
        raise ManifestError(f"{label}: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(JOB_KEYS)}")
    for key in ("check", "seed"):
        value = entry.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ManifestError(f"{label}: '{key}' must be a whole number of at least 0, got {value!r}")
    for key in ("rtol", "atol"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0):
            raise ManifestError(f"{label}: '{key}' must be a number of at least 0, got {value!r}")
    transforms, simplify = entry.get("transforms"), entry.get("simplify")
    if simplify is False:
        simplify = None
    if transforms is not None and simplify is not None:
        raise ManifestError(f"{label}: give 'transforms' or 'simplify', not both")
    if transforms is None and simplify is None:
        raise ManifestError(f"{label}: needs 'transforms' (a pipeline) or 'simplify' (true or options)")
    if transforms is not None and (not isinstance(transforms, str) or not transforms.strip()):
        raise ManifestError(f"{label}: 'transforms' must be a pipeline text")
    if simplify is True:
        simplify = {}
    if simplify is not None:
        if not isinstance(simplify, dict):
            raise ManifestError(f"{label}: 'simplify' must be true or an object of options")
        bad = sorted(set(simplify) - set(SIMPLIFY_KEYS))
        if bad:
            raise ManifestError(f"{label}: unknown simplify option(s) {', '.join(map(repr, bad))}; "
                                f"known: {', '.join(SIMPLIFY_KEYS)}")
    if entry.get("output"):
        output = _path(out_dir or root, str(entry["output"]))
    elif out_dir is not None:
        output = out_dir / model.name
    else:
        raise ManifestError(f"{label}: needs 'output', or an output folder ('output_dir' or --out)")
    inputs = entry.get("inputs") or []
    if isinstance(inputs, dict):
        inputs = [f"{k}={v}" for k, v in inputs.items()]
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise ManifestError(f"{label}: 'inputs' must be a list of NAME=FILE.npy / FILE.npz items or an object")
    inputs = [_input(root, item) for item in inputs]
    return Job(
        name=str(entry.get("name") or model.name),
        model=str(model),
        output=str(output),
        transforms=transforms,
        simplify=None if simplify is None else dict(simplify),
        input_names=_names(entry.get("input_names"), label, "input_names"),
        output_names=_names(entry.get("output_names"), label, "output_names"),
        inputs=inputs,
        check=int(entry.get("check", 0)),
        seed=int(entry.get("seed", 0)),
        rtol=entry.get("rtol"),
        atol=entry.get("atol"),
    )


def _input(root: Path, item: str) -> str:
    name, sep, file = item.partition("=")
    return f"{name}={_path(root, file)}" if sep else str(_path(root, item))


def _names(value: Any, label: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{label}: '{key}' must be a list of names or a comma-separated text")
    return [v.strip() for v in value if v.strip()]
