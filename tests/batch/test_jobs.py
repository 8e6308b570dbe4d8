"""Manifests and folders into jobs: defaults, relative paths, and one-line errors naming the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphwright.batch import jobs_from_folder, jobs_from_manifest, parse_manifest
from graphwright.batch.jobs import ManifestError


def test_a_json_manifest_gives_defaults_paths_and_options(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    manifest = tmp_path / "m" / "zoo.json"
    manifest.write_text(json.dumps({
        "output_dir": "out",
        "defaults": {"transforms": "fold_constants", "check": 2},
        "models": [
            "a.onnx",
            {"model": "sub/b.onnx", "simplify": {"skip_optimizations": ["fuse_bn_into_conv"]}, "transforms": None,
             "inputs": {"x": "x.npy"}, "seed": 5, "atol": 0.001},
            {"model": "/abs/c.tflite", "output": "/elsewhere/c2.tflite", "name": "third", "check": 0,
             "output_names": "y,z"},
        ],
    }))
    a, b, c = jobs_from_manifest(manifest)
    root = tmp_path / "m"
    assert (a.name, a.model, a.output, a.transforms, a.simplify, a.check) == (
        "a.onnx", str(root / "a.onnx"), str(root / "out" / "a.onnx"), "fold_constants", None, 2)
    assert (b.name, b.transforms, b.simplify, b.inputs, b.seed, b.atol, b.output) == (
        "b.onnx", None, {"skip_optimizations": ["fuse_bn_into_conv"]}, [f"x={root / 'x.npy'}"], 5, 0.001,
        str(root / "out" / "b.onnx"))
    assert (c.name, c.model, c.output, c.check, c.output_names) == (
        "third", "/abs/c.tflite", "/elsewhere/c2.tflite", 0, ["y", "z"])
    # --out on the command line wins over the manifest's output_dir
    assert jobs_from_manifest(manifest, output_dir=tmp_path / "cli")[0].output == str(tmp_path / "cli" / "a.onnx")


def test_a_yaml_manifest_reads_like_json(tmp_path: Path) -> None:
    pytest.importorskip("yaml", reason="YAML manifests are optional (PyYAML)")
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text("output_dir: out\nmodels:\n  - model: a.onnx\n    simplify: true\n    check: 1\n")
    (job,) = jobs_from_manifest(manifest)
    assert (job.model, job.output, job.simplify, job.check) == (
        str(tmp_path / "a.onnx"), str(tmp_path / "out" / "a.onnx"), {}, 1)


@pytest.mark.parametrize(("data", "message"), [
    ({"models": []}, "'models' must be a non-empty list"),
    ({"models": ["a.onnx"], "extra": 1}, "unknown key(s) 'extra'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "bogus": 1}]}, "model 1 (a.onnx): unknown key(s) 'bogus'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "transforms": "x"}]}, "not 'transforms' and 'simplify'"),
    ({"models": [{"model": "a.onnx"}]}, "needs 'transforms' (a pipeline), 'simplify' (true or options) or 'quantize'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "quantize": {"mode": "static"}}]},
     "not 'simplify' and 'quantize'"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static", "methd": "entropy"}}]},
     "model 1 (a.onnx): unknown quantize option(s) 'methd'; known: mode, data"),
    ({"models": [{"model": "a.onnx", "quantize": {"method": "entropy"}}]}, "model 1 (a.onnx): 'quantize' needs a 'mode'"),
    ({"models": [{"model": "a.onnx", "quantize": True}]}, "'quantize' must be an object of options"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static", "calibration_samples": "10"}}]},
     "quantize option 'calibration_samples' must be a whole number, got '10'"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static", "per_channel": 1}}]},
     "quantize option 'per_channel' must be true or false"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static", "bits": True}}]},
     "quantize option 'bits' must be a whole number, got True"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static"}, "atol": 0.1}]},
     "verified against 'min_sqnr_db' (dB), not 'atol'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "min_sqnr_db": 30}]}, "'min_sqnr_db' is the floor of a quantize job"),
    ({"models": [{"model": "a.onnx", "quantize": {"mode": "static"}, "min_sqnr_db": "30"}]},
     "'min_sqnr_db' must be a number of dB"),
    ({"models": [{"model": "a.onnx", "simplify": {"nope": 1}}]}, "unknown simplify option(s) 'nope'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "check": -1}]}, "'check' must be a whole number"),
    ({"models": [{"simplify": True}]}, "model 1: needs 'model'"),
    ({"models": [{"model": "a.onnx", "simplify": True, "output": "x.onnx"},
                 {"model": "d/a.onnx", "simplify": True, "output": "y.onnx"}]}, "'a.onnx' appear twice"),
    ({"models": [{"model": "a.onnx", "simplify": True, "output": "x.onnx"},
                 {"model": "b.onnx", "simplify": True, "output": "x.onnx"}]}, "two jobs write"),
    ({"models": [{"model": "a.onnx", "simplify": True}]}, "needs 'output', or an output folder"),
    ({"models": [{"model": "a.onnx", "simplify": True, "output": "b.onnx"},
                 {"model": "b.onnx", "simplify": True, "output": "c.onnx"}]}, "would write over the model"),
    (42, "expected a list of models or an object"),
])
def test_bad_manifests_are_one_line_errors(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(data, base=tmp_path, where="zoo.json")
    assert message in str(info.value)
    assert str(info.value).startswith("zoo.json")
    assert "\n" not in str(info.value)


def test_unreadable_and_invalid_manifest_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read the manifest"):
        jobs_from_manifest(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ManifestError, match=r"bad\.json is not valid JSON"):
        jobs_from_manifest(bad)


def test_a_folder_gives_one_job_per_model_file_in_name_order(tmp_path: Path) -> None:
    src = tmp_path / "models"
    src.mkdir()
    for name in ("b.tflite", "a.onnx", "c.pb", "notes.txt"):
        (src / name).write_bytes(b"")
    (src / "sub").mkdir()
    jobs = jobs_from_folder(src, tmp_path / "out", transforms="strip_unused_nodes", check=1)
    assert [(j.name, j.output, j.transforms, j.check) for j in jobs] == [
        (n, str(tmp_path / "out" / n), "strip_unused_nodes", 1) for n in ("a.onnx", "b.tflite", "c.pb")]
    with pytest.raises(ManifestError, match="is the input folder"):
        jobs_from_folder(src, src, simplify={})
    with pytest.raises(ManifestError, match="no model files"):
        jobs_from_folder(src / "sub", tmp_path / "out", simplify={})


def test_quantize_entries_resolve_paths_and_take_defaults_where_they_fit(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    manifest = tmp_path / "m" / "zoo.json"
    manifest.write_text(json.dumps({
        "output_dir": "out",
        "defaults": {"quantize": {"mode": "static", "method": "entropy", "data": "calib/"}, "check": 2,
                     "atol": 0.01, "min_sqnr_db": 25},
        "models": [
            "a.onnx",
            {"model": "b.onnx", "quantize": {"mode": "weights", "bits": 4, "ranges": "/abs/r.json",
                                             "exclude_nodes": "fc1,fc2", "keep_float": 1}, "min_sqnr_db": 12.5},
            {"model": "c.onnx", "simplify": True},  # its own kind replaces the defaults' quantize
        ],
    }))
    a, b, c = jobs_from_manifest(manifest)
    root = tmp_path / "m"
    assert (a.quantize, a.check, a.min_sqnr_db, a.atol, a.output) == (
        {"mode": "static", "method": "entropy", "data": str(root / "calib")}, 2, 25.0, None, str(root / "out" / "a.onnx"))
    # the entry's quantize options update the defaults' (mode replaced, method and data kept)
    assert (b.quantize, b.min_sqnr_db) == (
        {"mode": "weights", "method": "entropy", "data": str(root / "calib"), "bits": 4, "ranges": "/abs/r.json",
         "exclude_nodes": ["fc1", "fc2"], "keep_float": 1}, 12.5)
    # the default floor is a quantize job's; the default tolerance is this one's
    assert (c.quantize, c.simplify, c.min_sqnr_db, c.atol) == (None, {}, None, 0.01)
    (job,) = jobs_from_folder(_one_model(tmp_path), tmp_path / "o", quantize={"mode": "dynamic"}, min_sqnr_db=30)
    assert (job.quantize, job.transforms, job.simplify, job.min_sqnr_db) == ({"mode": "dynamic"}, None, None, 30.0)
    # a relative output folder is not joined twice
    (job,) = jobs_from_folder(_one_model(tmp_path / "rel"), Path("o"), simplify={})
    assert job.output == str(Path("o") / "a.onnx")


def _one_model(tmp_path: Path) -> Path:
    folder = tmp_path / "one"
    folder.mkdir(parents=True)
    (folder / "a.onnx").write_bytes(b"")
    return folder


def test_command_line_quantize_options_complete_the_manifests(tmp_path: Path) -> None:
    """--method / --quantize-data without --quantize (defaults without a mode) reach only quantize entries;
    with a mode, a manifest's own default quantize options are laid over them."""
    data = {"defaults": {"transforms": "fold_constants"}, "output_dir": "o", "models": [
        "a.onnx", {"model": "b.onnx", "quantize": {"mode": "static"}}]}
    a, b = parse_manifest(data, base=tmp_path, defaults={"quantize": {"method": "entropy", "data": "/d"}})
    assert (a.transforms, a.quantize) == ("fold_constants", None)
    assert b.quantize == {"mode": "static", "method": "entropy", "data": "/d"}
    data = {"defaults": {"quantize": {"mode": "dynamic", "eval_samples": 4}}, "output_dir": "o", "models": ["a.onnx"]}
    (a,) = parse_manifest(data, base=tmp_path, defaults={"quantize": {"mode": "static", "method": "mse"}})
    assert a.quantize == {"mode": "dynamic", "method": "mse", "eval_samples": 4}
