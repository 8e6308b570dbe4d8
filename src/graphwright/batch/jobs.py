"""Jobs of a batch: from a folder of models, or from a manifest (JSON, or YAML when PyYAML is installed).

A manifest is a list of models, or an object with optional ``defaults`` and ``output_dir`` and a
``models`` list; every entry is a path or an object::

    {"output_dir": "out", "defaults": {"transforms": "fold_constants eliminate_identity"},
     "models": ["a.onnx",
                {"model": "b.onnx", "simplify": {"skip_optimizations": ["fuse_bn_into_conv"]}, "check": 2},
                {"model": "c.tflite", "output": "c_small.tflite", "inputs": ["x=c_input.npy"]},
                {"model": "d.onnx", "quantize": {"mode": "static", "method": "entropy", "data": "calib/"},
                 "check": 4, "min_sqnr_db": 25}]}

Paths are relative to the manifest's folder (``quantize``'s ``data`` and ``ranges`` too).  An
entry's keys are :data:`JOB_KEYS`; a job has exactly one of a ``transforms`` pipeline,
``simplify`` options (``true`` or an object of :data:`SIMPLIFY_KEYS`) or ``quantize`` options (an
object of :data:`QUANTIZE_KEYS` with a ``mode``; the keyword arguments of
:func:`graphwright.quantize.quantize`).  A quantize job is verified against a quality floor,
``min_sqnr_db``, not ``rtol``/``atol``.  Every problem is one :class:`ManifestError` line naming
the entry.  An entry's ``quantize`` options update the defaults' (an entry's other keys replace them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GraphwrightError

__all__ = ["Job", "ManifestError", "JOB_KEYS", "SIMPLIFY_KEYS", "QUANTIZE_KEYS", "MODEL_SUFFIXES",
           "jobs_from_folder", "jobs_from_manifest", "parse_manifest"]

#: The files a folder batch picks up.
MODEL_SUFFIXES = (".onnx", ".pb", ".pbtxt", ".tflite")
#: The keys of a manifest entry.
JOB_KEYS = ("name", "model", "output", "transforms", "simplify", "quantize", "input_names", "output_names",
            "inputs", "check", "seed", "rtol", "atol", "min_sqnr_db")
#: Simplify options a manifest may give (keyword arguments of :func:`graphwright.simplify.simplify`).
SIMPLIFY_KEYS = ("overwrite_input_shapes", "skip_optimizations", "skip_all_optimizations", "skip_constant_folding",
                 "skip_shape_inference", "size_limit", "growth_limit", "fold_budget", "max_iterations", "target",
                 "inline_functions")
#: Quantize options a manifest may give (keyword arguments of :func:`graphwright.quantize.quantize`)
#: and the JSON type each takes; ``mode`` is required.
QUANTIZE_KEYS: dict[str, tuple[type, ...]] = {
    "mode": (str,), "data": (str,), "method": (str,), "calibration_samples": (int,), "eval_samples": (int,),
    "seed": (int,), "ranges": (str,), "activation_type": (str,), "weight_type": (str,), "per_channel": (bool,),
    "symmetric_activations": (bool,), "io_type": (str,), "bits": (int,), "block_size": (int,), "target": (str,),
    "exclude_ops": (list, str), "exclude_nodes": (list, str), "keep_float": (int, str), "minimum_size": (int,),
}
#: Quantize options that are paths (relative to the manifest's folder).
_QUANTIZE_PATHS = ("data", "ranges")


class ManifestError(GraphwrightError):
    """A batch's manifest or folder cannot be turned into jobs."""


@dataclass
class Job:
    """One model of a batch: read ``model``, apply ``transforms``, simplify or quantize, write ``output``.

    With ``inputs`` (``NAME=FILE.npy`` or ``FILE.npz`` items, as ``compare --input``) or ``check``
    (a number of seeded random inputs) the result is compared with the original before it is
    written; beyond ``rtol``/``atol`` nothing is written and the job has failed.  A quantize job's
    floor is ``min_sqnr_db`` instead (the worst output's SQNR, over the report's held-out samples
    and the check inputs); without it nothing fails on quality.
    """

    name: str
    model: str
    output: str
    transforms: str | None = None
    simplify: dict[str, Any] | None = None
    quantize: dict[str, Any] | None = None
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    check: int = 0
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None
    min_sqnr_db: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return cls(**dict(data))


def jobs_from_folder(folder: str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                     transforms: str | None = None, simplify: Mapping[str, Any] | None = None,
                     quantize: Mapping[str, Any] | None = None, check: int = 0, seed: int = 0,
                     min_sqnr_db: float | None = None) -> list[Job]:
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
    entries = [{"model": str(p)} for p in paths]  # written as out / the model's name
    defaults: dict[str, Any] = {"check": check, "seed": seed}
    if transforms is not None:
        defaults["transforms"] = transforms
    if simplify is not None:
        defaults["simplify"] = dict(simplify)
    if quantize is not None:
        defaults["quantize"] = dict(quantize)
    if min_sqnr_db is not None:
        defaults["min_sqnr_db"] = min_sqnr_db
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
    quantize = _merge_options(merged.get("quantize"), file_defaults.get("quantize"))
    merged.update(file_defaults)
    # quantize options without a mode (the command line's --method alone) only complete quantize entries
    merged.pop("quantize", None)
    if isinstance(quantize, dict) and "mode" in quantize:
        merged["quantize"] = quantize
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
        if isinstance(entry.get("quantize"), dict):  # the entry's options over the defaults'
            entry = {**entry, "quantize": _merge_options(quantize, entry["quantize"])}
        jobs.append(_job({**merged, **entry}, root, out_dir, label, own=set(entry)))
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


def _merge_options(base: Any, over: Any) -> Any:
    """Two layers of quantize options: ``over``'s keys win; anything but two objects is ``over``
    (or ``base`` when there is no ``over``)."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **over}
    return base if over is None else over


def _path(root: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else root / p


def _job(entry: dict[str, Any], root: Path, out_dir: Path | None, label: str,
         own: set[str] | frozenset[str] = frozenset()) -> Job:
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
    kinds = ("transforms", "simplify", "quantize")
    if own & set(kinds):  # the entry's own kind of job replaces the defaults'
        entry = {key: value for key, value in entry.items() if key not in kinds or key in own}
    transforms, simplify, quantize = entry.get("transforms"), entry.get("simplify"), entry.get("quantize")
    simplify = None if simplify is False else simplify
    quantize = None if quantize is False else quantize
    given = [key for key, value in (("transforms", transforms), ("simplify", simplify), ("quantize", quantize))
             if value is not None]
    if len(given) > 1:
        raise ManifestError(f"{label}: give one of 'transforms', 'simplify' or 'quantize', not "
                            f"{' and '.join(map(repr, given))}")
    if not given:
        raise ManifestError(f"{label}: needs 'transforms' (a pipeline), 'simplify' (true or options) or "
                            "'quantize' (options with a 'mode')")
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
    if quantize is not None:
        quantize = _quantize_options(quantize, root, label)
    min_sqnr = _floor(entry, quantize is not None, label, own)
    if quantize is not None:  # a default tolerance is for the other jobs
        entry = {**entry, "rtol": None, "atol": None}
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
        quantize=quantize,
        input_names=_names(entry.get("input_names"), label, "input_names"),
        output_names=_names(entry.get("output_names"), label, "output_names"),
        inputs=inputs,
        check=int(entry.get("check", 0)),
        seed=int(entry.get("seed", 0)),
        rtol=entry.get("rtol"),
        atol=entry.get("atol"),
        min_sqnr_db=min_sqnr,
    )


def _quantize_options(value: Any, root: Path, label: str) -> dict[str, Any]:
    """The entry's quantize options, checked against :data:`QUANTIZE_KEYS`, paths made absolute."""
    if not isinstance(value, dict):
        raise ManifestError(f"{label}: 'quantize' must be an object of options with a 'mode'")
    bad = sorted(set(value) - set(QUANTIZE_KEYS))
    if bad:
        raise ManifestError(f"{label}: unknown quantize option(s) {', '.join(map(repr, bad))}; "
                            f"known: {', '.join(QUANTIZE_KEYS)}")
    if not isinstance(value.get("mode"), str) or not value["mode"]:
        raise ManifestError(f"{label}: 'quantize' needs a 'mode' (static, dynamic, weights; TFLite also int8, 16x8)")
    options: dict[str, Any] = {}
    for key, item in value.items():
        types = QUANTIZE_KEYS[key]
        if item is None:
            continue
        wrong_bool = isinstance(item, bool) and bool not in types
        if wrong_bool or not isinstance(item, types):
            kinds = " or ".join({str: "a text", int: "a whole number", bool: "true or false",
                                 list: "a list of names"}[t] for t in types)
            raise ManifestError(f"{label}: quantize option '{key}' must be {kinds}, got {item!r}")
        if key in _QUANTIZE_PATHS:
            item = str(_path(root, item))
        elif list in types:
            item = _names(item, label, f"quantize {key}")
        options[key] = item
    return options


def _floor(entry: dict[str, Any], quantize: bool, label: str, own: set[str] | frozenset[str]) -> float | None:
    """``min_sqnr_db``: a number, for quantize jobs only (which take no ``rtol``/``atol``).  Given in
    the defaults, each applies to the jobs it fits; given in the entry, it must fit."""
    floor = entry.get("min_sqnr_db")
    if floor is not None and (not isinstance(floor, (int, float)) or isinstance(floor, bool)):
        raise ManifestError(f"{label}: 'min_sqnr_db' must be a number of dB, got {floor!r}")
    if floor is not None and not quantize and "min_sqnr_db" not in own:
        return None
    if floor is not None and not quantize:
        raise ManifestError(f"{label}: 'min_sqnr_db' is the floor of a quantize job; this job's tolerance is "
                            "'rtol'/'atol'")
    if quantize:
        given = [key for key in ("rtol", "atol") if key in own and entry.get(key) is not None]
        if given:
            raise ManifestError(f"{label}: a quantize job is verified against 'min_sqnr_db' (dB), not "
                                f"{' / '.join(map(repr, given))}")
    return None if floor is None else float(floor)


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
