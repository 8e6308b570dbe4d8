"""Calibration samples: .npy/.npz/image folders read and checked against the model's inputs; seeded random samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright import VerificationError
from graphwright.calibrate import load_samples, random_samples
from graphwright.ir import DType
from graphwright.runtime import InputSpec

SPEC = InputSpec("input", DType.FLOAT32, (1, 32, 32, 3))


def test_samples_are_read_and_checked(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    np.save(tmp_path / "1.npy", rng.uniform(0, 1, (1, 32, 32, 3)).astype(np.float32))
    from PIL import Image

    Image.fromarray(np.full((10, 10, 3), 255, np.uint8)).save(tmp_path / "2.png")
    samples = load_samples(tmp_path, [SPEC])
    assert [list(s) for s in samples] == [["input"], ["input"]]
    assert samples[1]["input"].shape == (1, 32, 32, 3) and np.allclose(samples[1]["input"], 1.0)
    assert len(load_samples(tmp_path, [SPEC], num=1)) == 1
    a, b = random_samples([SPEC], 2, 5)
    assert not np.array_equal(a["input"], b["input"])
    np.testing.assert_array_equal(random_samples([SPEC], 2, 5)[1]["input"], b["input"])


@pytest.mark.parametrize("setup, message", [
    ("empty", "holds no .npy, .npz or image files"),
    ("missing", "does not exist"),
    ("two_inputs", "use .npz files keyed by input name"),
    ("bad_shape", "input"),
])
def test_bad_samples_are_one_line_errors(tmp_path: Path, setup: str, message: str) -> None:
    specs = [SPEC]
    folder = tmp_path / "d"
    if setup != "missing":
        folder.mkdir()
    if setup == "two_inputs":
        np.save(folder / "a.npy", np.zeros((1, 32, 32, 3), np.float32))
        specs = [SPEC, InputSpec("other", DType.FLOAT32, (1, 4))]
    if setup == "bad_shape":
        np.save(folder / "a.npy", np.zeros((1, 8, 8, 3), np.float32))
    with pytest.raises(VerificationError, match=message) as info:
        load_samples(folder, specs)
    assert "\n" not in str(info.value)
