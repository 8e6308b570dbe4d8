"""Calibration inputs: the user's files (.npy, .npz, images) or seeded random arrays.

A data directory is read in file-name order; each file is one sample:

* ``NAME.npz``: one array per model input, keyed by input name;
* ``NAME.npy``: the array of the model's only input;
* ``.png``/``.jpg``/``.jpeg``/``.bmp``: an RGB image for the only input, which
  must be NHWC with known H and W: resized (bilinear) to H x W, then
  ``(pixel - image_mean) / image_std`` as float32, batch 1.  Images need Pillow.

Arrays are read with ``allow_pickle=False`` and checked against the inputs'
dtypes and shapes.  Random samples use :func:`graphwright.verify.random_feeds`
with seeds ``seed, seed + 1, ...``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import VerificationError
from ..runtime.base import InputSpec, check_feed
from ..verify import load_feeds, random_feeds

__all__ = ["DEFAULT_IMAGE_MEAN", "DEFAULT_IMAGE_STD", "IMAGE_SUFFIXES", "load_samples", "random_samples"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
#: Pixels map to [-1, 1] by default, the scaling of most Keras applications.
DEFAULT_IMAGE_MEAN = 127.5
DEFAULT_IMAGE_STD = 127.5
_ARRAY_SUFFIXES = (".npy", ".npz")


def random_samples(specs: Sequence[InputSpec], num: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``num`` seeded random feeds (sample ``i`` uses seed ``seed + i``)."""
    if num < 1:
        raise VerificationError(f"calibrate: the number of samples must be at least 1, got {num}")
    return [random_feeds(specs, seed=seed + i) for i in range(num)]


def load_samples(
    directory: str | Path,
    specs: Sequence[InputSpec],
    *,
    num: int | None = None,
    image_mean: float = DEFAULT_IMAGE_MEAN,
    image_std: float = DEFAULT_IMAGE_STD,
) -> list[dict[str, np.ndarray]]:
    """The samples in ``directory`` (at most ``num``), in file-name order."""
    folder = Path(directory)
    if not folder.is_dir():
        raise VerificationError(f"calibrate: data directory {folder} does not exist")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in _ARRAY_SUFFIXES + IMAGE_SUFFIXES)
    if not files:
        raise VerificationError(
            f"calibrate: {folder} holds no .npy, .npz or image files; add samples or use random inputs"
        )
    if num is not None:
        files = files[:num]
    if image_std == 0:
        raise VerificationError("calibrate: image_std must not be 0")
    return [_sample(path, specs, image_mean, image_std) for path in files]


def _only_input(specs: Sequence[InputSpec], path: Path) -> InputSpec:
    if len(specs) != 1:
        names = ", ".join(s.name for s in specs)
        raise VerificationError(
            f"calibrate: {path.name} gives one array but the model has {len(specs)} inputs ({names}); "
            "use .npz files keyed by input name"
        )
    return specs[0]


def _sample(path: Path, specs: Sequence[InputSpec], mean: float, std: float) -> dict[str, np.ndarray]:
    suffix = path.suffix.lower()
    if suffix == ".npz":
        feeds = load_feeds([path], specs=specs)
        missing = [s.name for s in specs if s.name not in feeds]
        if missing:
            raise VerificationError(f"calibrate: {path.name} has no array for input(s) {', '.join(missing)}")
        return feeds
    spec = _only_input(specs, path)
    if suffix == ".npy":
        return load_feeds([f"{spec.name}={path}"], specs=specs)
    array = _image(path, spec, mean, std)
    check_feed(spec, array, label=path.name)
    return {spec.name: array}


def _image(path: Path, spec: InputSpec, mean: float, std: float) -> np.ndarray:
    try:
        from PIL import Image  # lazy: Pillow is optional, for image samples only
    except ImportError:
        raise VerificationError("calibrate: reading images needs Pillow (pip install pillow)") from None
    shape = spec.shape
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape[1:3]):
        raise VerificationError(
            f"calibrate: input {spec.name!r} (shape {shape}) is not NHWC with a known height and width; "
            "give .npy samples instead of images"
        )
    height, width = int(shape[1]), int(shape[2])  # type: ignore[arg-type]
    channels = shape[3] if isinstance(shape[3], int) else 3
    try:
        with Image.open(path) as opened:
            image = opened.convert("L" if channels == 1 else "RGB").resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.float32)
    except OSError as e:
        raise VerificationError(f"calibrate: cannot read image {path.name}: {e}") from None
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    return ((pixels - np.float32(mean)) / np.float32(std))[None].astype(np.float32)
