"""No writing command ever changes its input: not through a symbolic link, a hard link, a linked
folder or a ``./`` prefix.  Each case exits 2 with one line and leaves the input's bytes as they were."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from .test_cli import MODELS, assert_one_line_error, gw

Alias = Callable[[Path, Path], Path]


def _symlink(real: Path, tmp: Path) -> Path:
    link = tmp / f"link{real.suffix}"
    link.symlink_to(real)
    return link


def _hardlink(real: Path, tmp: Path) -> Path:
    link = tmp / f"hard{real.suffix}"
    os.link(real, link)
    return link


def _dir_symlink(real: Path, tmp: Path) -> Path:
    (tmp / "alias").symlink_to(real.parent, target_is_directory=True)
    return tmp / "alias" / real.name


def _dot_prefix(real: Path, tmp: Path) -> Path:
    return Path(os.path.relpath(real.parent / "." / real.name, Path.cwd()))


ALIASES: dict[str, Alias] = {"symlink": _symlink, "hardlink": _hardlink, "dir_symlink": _dir_symlink,
                             "dot_prefix": _dot_prefix}


def _copy(fmt: str, tmp: Path) -> Path:
    (tmp / "real").mkdir()
    real = tmp / "real" / MODELS[fmt].name
    shutil.copy(MODELS[fmt], real)
    return real


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("fmt", ["graphdef", "onnx", "tflite"])
def test_transform_refuses_to_write_over_its_input(fmt: str, alias: str, tmp_path: Path) -> None:
    real = _copy(fmt, tmp_path)
    before = _digest(real)
    other = ALIASES[alias](real, tmp_path)
    for src, dst in ((other, real), (real, other)):
        result = gw("transform", src, dst, "--transforms", "sort_by_execution_order")
        assert_one_line_error(result, "refusing to overwrite the input")
        assert _digest(real) == before


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_simplify_refuses_to_write_over_its_input(alias: str, tmp_path: Path) -> None:
    real = _copy("onnx", tmp_path)
    before = _digest(real)
    other = ALIASES[alias](real, tmp_path)
    for src, dst in ((other, real), (real, other)):
        assert_one_line_error(gw("simplify", src, dst), "refusing to overwrite the input")
        assert _digest(real) == before


def test_calibrate_refuses_to_write_its_log_over_the_graph(tmp_path: Path) -> None:
    real = _copy("graphdef", tmp_path)
    before = _digest(real)
    assert_one_line_error(gw("calibrate", _symlink(real, tmp_path), real), "refusing to overwrite the input")
    assert _digest(real) == before


@pytest.mark.parametrize("outdir", [".", "real"])
def test_extract_refuses_a_folder_that_holds_the_model(outdir: str, tmp_path: Path) -> None:
    real = _copy("tflite", tmp_path)
    cwd = tmp_path / "real" if outdir == "." else tmp_path
    result = gw("extract", real, outdir, "--force", cwd=cwd)
    assert_one_line_error(result, "holds the input model")
    assert sorted(p.name for p in real.parent.iterdir()) == [real.name]
    assert _digest(real) == _digest(MODELS["tflite"])
