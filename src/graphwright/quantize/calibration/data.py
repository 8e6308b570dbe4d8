"""Calibration inputs: the user's arrays (files, a callable, an iterable) or synthetic ones.

Before: a model and a data source.  After: a :class:`Samples` stream of ``{input name: array}``
feeds, each checked against the model's inputs (:func:`graphwright.runtime.input_specs`), read
lazily — one file (``.npy`` memory-mapped) or one generated sample at a time, never the whole set.

:func:`load_samples` reads

* a directory (files in name order; other suffixes ignored) or one file: ``NAME.npy`` holds the
  only input of a single-input model, ``NAME.npz`` one array per input keyed by input name;
* a callable returning an iterable (called again for each pass), or an iterable, of samples:
  mappings ``{input name: array}`` (or a bare array for a single-input model).

An array may hold one sample (the input's shape) or several stacked on a leading axis — either an
extra axis (``[N, *shape]``) or the batch axis itself when the model's batch is 1 or dynamic
(``[N, ...]`` for an input ``[1, ...]``) — and is split into samples of one, unless the inputs of
a feed would split into different numbers of samples while each fits its input as it is (CLIP's
text and image batches, a sequence-first RNN input next to its state): then the feed is one
sample as given; ``batch_size``
regroups them into batches along axis 0.  A wrong name, dtype or shape is one
:class:`~.errors.CalibrationError` line naming the file, the input, what it expects and what it got;
for files that happens when :func:`load_samples` is called, as it counts the samples
(``Samples.total``) from the array headers (no data read).

:func:`synthetic_samples` makes seeded inputs with the structure of real ones (sample ``i`` depends
only on ``(seed, i)``, so shards can make their own): images (rank-4 float inputs, NCHW or NHWC
by which of dims 1 and 3 is 1, 3 or 4) as natural-image-like smooth noise — a 1/f amplitude
spectrum luminance field plus weaker colour fields, a random gain and offset, pixels in [0, 1]
then normalized (``image_norm``: ImageNet mean/std by default); token ids (integer inputs) from
the vocabulary of the embedding table that ``Gather``/``GATHER``/``EMBEDDING_LOOKUP`` reads them
with (log-uniform, Zipf-like; ``[0, 2)`` when no table is found), followed through casts,
reshapes, constant offsets and selects; inputs whose name holds "mask" all ones; 8-bit rank-4
inputs with no table behind them as the same images in pixel units; other float inputs smooth 1/f
noise along their last axis (zero mean, unit std).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ... import formats
from ...ir import DType, Model, Value
from ...runtime import InputSpec, input_specs
from ...runtime.base import format_spec
from .errors import CalibrationError

__all__ = [
    "DEFAULT_DIM", "DEFAULT_IMAGE_SIZE", "IMAGE_NORMS", "Feed", "Samples", "batch_feeds", "find_vocabulary",
    "load_samples",
    "synthetic_samples",
]

Feed = dict[str, np.ndarray]
#: Size of a dynamic non-batch dimension of a synthetic input (images: DEFAULT_IMAGE_SIZE).
DEFAULT_DIM = 32
DEFAULT_IMAGE_SIZE = 224
#: ``(mean, std)`` per channel applied to [0, 1] pixels, by ``image_norm`` name.
IMAGE_NORMS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # torchvision
    "unit": ((0.0,), (1.0,)),  # [0, 1]
    "symmetric": ((0.5,), (0.5,)),  # [-1, 1], most Keras applications
}
_SUFFIXES = (".npy", ".npz")
#: Operators that carry token ids on unchanged (so the vocabulary lookup behind them counts).
_PASS_THROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand",
                 "CAST", "RESHAPE", "EXPAND_DIMS", "SQUEEZE"}


class Samples:
    """A stream of feeds; iterable again when its source is (files, a callable, a generator
    function).  ``total`` is the number of feeds when known in advance, else None."""

    def __init__(self, factory: Callable[[], Iterator[Feed]], total: int | None, source: str) -> None:
        self._factory = factory
        self.total = total
        self.source = source

    def __iter__(self) -> Iterator[Feed]:
        return self._factory()

    def __repr__(self) -> str:
        return f"Samples({self.source}, total={self.total})"


# -- user data -------------------------------------------------------------------------------------
def load_samples(model: Model | str | os.PathLike[str],
                 source: str | os.PathLike[str] | Callable[[], Iterable[Any]] | Iterable[Any],
                 *, batch_size: int = 1) -> Samples:
    """The samples of ``source`` for ``model``, checked and batched (see the module docstring)."""
    specs = input_specs(model)
    if isinstance(source, (str, os.PathLike)):
        files = _files(Path(source))
        total = _count(files, specs)
        return Samples(lambda: batch_feeds(_from_files(files, specs), specs, batch_size),
                       _batches(total, batch_size), os.fspath(source))
    if callable(source):
        return Samples(lambda: batch_feeds(_from_items(source(), specs), specs, batch_size),  # type: ignore[operator]
                       None, "a callable")
    if isinstance(source, (Mapping, np.ndarray)):
        source = [source]
    items = source
    return Samples(lambda: batch_feeds(_from_items(items, specs), specs, batch_size), None, "an iterable")


def _batches(total: int, batch_size: int) -> int:
    return -(-total // batch_size)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix.lower() not in _SUFFIXES:
            raise CalibrationError(f"{path}: calibration data must be .npy or .npz files")
        return [path]
    if not path.is_dir():
        raise CalibrationError(f"calibration data {path} does not exist")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _SUFFIXES)
    if not files:
        raise CalibrationError(f"{path} holds no .npy or .npz files; save samples there with numpy.save")
    return files


def _count(files: Sequence[Path], specs: Sequence[InputSpec]) -> int:
    """How many samples the files hold, from the array headers alone (no data is read)."""
    total = 0
    for path in files:
        if path.suffix.lower() == ".npy":
            total += len(_split(_only_input(specs, path.name), _read_npy(path), path.name))
        else:
            total += sum(1 for _ in _split_feed(_npz_headers(path), specs, path.name))
    return total


def _npz_headers(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz as zero-memory stand-ins of the right shape and dtype (headers only)."""
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read(f)
                out[member[:-4]] = np.broadcast_to(np.zeros((), dtype), shape)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise CalibrationError(f"cannot read {path.name}: {e}") from None
    return out


def _read_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CalibrationError(f"cannot read {path.name}: {e}") from None


def _from_files(files: Sequence[Path], specs: Sequence[InputSpec]) -> Iterator[Feed]:
    for path in files:
        if path.suffix.lower() == ".npy":
            spec = _only_input(specs, path.name)
            for part in _split(spec, _read_npy(path), path.name):
                yield {spec.name: np.array(part)}
        else:
            yield from _split_feed(_read_npz(path), specs, path.name)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError) as e:
        raise CalibrationError(f"cannot read {path.name}: {e}") from None


def _from_items(items: Iterable[Any], specs: Sequence[InputSpec]) -> Iterator[Feed]:
    for i, item in enumerate(items):
        where = f"sample {i}"
        if isinstance(item, Mapping):
            yield from _split_feed({str(k): np.asarray(v) for k, v in item.items()}, specs, where)
        elif isinstance(item, np.ndarray):
            spec = _only_input(specs, where)
            yield from ({spec.name: part} for part in _split(spec, item, where))
        else:
            raise CalibrationError(f"{where} is a {type(item).__name__}; give a mapping {{input name: array}}")


def _only_input(specs: Sequence[InputSpec], where: str) -> InputSpec:
    if len(specs) != 1:
        names = ", ".join(repr(s.name) for s in specs)
        raise CalibrationError(f"{where} gives one array but the model has {len(specs)} inputs ({names}); "
                               "give .npz files (or mappings) keyed by input name")
    return specs[0]


def _split_feed(arrays: Mapping[str, np.ndarray], specs: Sequence[InputSpec], where: str) -> Iterator[Feed]:
    by_name = {s.name: s for s in specs}
    unknown = [k for k in arrays if k not in by_name]
    if unknown:
        known = ", ".join(repr(s.name) for s in specs)
        raise CalibrationError(f"{where}: the model has no input {unknown[0]!r}; its inputs are {known}")
    missing = [s.name for s in specs if s.name not in arrays]
    if missing:
        raise CalibrationError(f"{where}: no array for input {missing[0]!r}")
    parts = {s.name: _split(s, arrays[s.name], where) for s in specs}
    counts = {name: len(p) for name, p in parts.items()}
    if len(set(counts.values())) > 1:
        if all(s.shape is None or s.accepts_shape(arrays[s.name].shape) for s in specs):
            yield dict(arrays)  # leading axes that are not one batch (CLIP's texts and images, a time axis)
            return
        raise CalibrationError(f"{where}: the inputs hold different numbers of samples ({counts})")
    for i in range(next(iter(counts.values()))):
        yield {name: np.asarray(p[i]) for name, p in parts.items()}


def _split(spec: InputSpec, array: np.ndarray, where: str) -> list[np.ndarray]:
    """``array`` as a list of one-sample arrays of ``spec`` (see the module docstring)."""
    expected = spec.dtype.numpy
    if expected is not None and array.dtype != expected:
        raise CalibrationError(
            f"{where}: input {spec.name!r} expects {spec.dtype.value} but the array is {array.dtype} "
            f"{list(array.shape)}; convert it (array.astype(numpy.{np.dtype(expected).name}))")
    shape = spec.shape
    if shape is None:
        return [array]
    rank = len(shape)
    if array.ndim == rank + 1 and spec.accepts_shape(array.shape[1:]):
        return [array[i] for i in range(array.shape[0])]
    first = shape[0] if rank else None
    batch_one = rank >= 1 and (first == 1 or not isinstance(first, int) or first < 0)
    rest_fits = array.ndim == rank and InputSpec(spec.name, spec.dtype, shape[1:]).accepts_shape(array.shape[1:])
    if batch_one and rest_fits:
        return [array[i: i + 1] for i in range(array.shape[0])]
    if spec.accepts_shape(array.shape):
        return [array]
    raise CalibrationError(
        f"{where}: input {spec.name!r} expects {format_spec(spec.dtype, shape)} (one sample, or several "
        f"stacked on a leading axis) but the array is {format_spec(str(array.dtype), array.shape)}")


def batch_feeds(feeds: Iterator[Feed], specs: Sequence[InputSpec], batch_size: int) -> Iterator[Feed]:
    """The feeds concatenated ``batch_size`` at a time along axis 0 (the last group may be
    smaller); refused when an input's batch axis is fixed."""
    if batch_size < 1:
        raise CalibrationError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size == 1:
        yield from feeds
        return
    for spec in specs:
        first = spec.shape[0] if spec.shape else None
        if spec.shape is not None and (not spec.shape or (isinstance(first, int) and first >= 0)):
            raise CalibrationError(f"batch_size {batch_size} needs a dynamic batch axis but input {spec.name!r} "
                                   f"is {format_spec(spec.dtype, spec.shape)}; use batch_size=1")
    group: list[Feed] = []
    for feed in feeds:
        group.append(feed)
        if len(group) == batch_size:
            yield _concat(group)
            group = []
    if group:
        yield _concat(group)


def _concat(group: Sequence[Feed]) -> Feed:
    return {name: np.concatenate([feed[name] for feed in group], axis=0) for name in group[0]}


# -- synthetic data --------------------------------------------------------------------------------
def synthetic_samples(model: Model | str | os.PathLike[str], count: int, seed: int = 0, *,
                      batch_size: int = 1, dims: Mapping[str, int] | None = None,
                      image_norm: str = "imagenet", offset: int = 0) -> Samples:
    """``count`` seeded feeds shaped like real inputs (see the module docstring).

    ``dims`` sizes dynamic dimensions by name (default: batch 1, image sides 224, others 32);
    ``image_norm`` is one of :data:`IMAGE_NORMS`; ``offset`` starts at sample ``offset`` (sample
    ``i`` is the same whatever the batching or the shard that makes it).
    """
    if count < 0:
        raise CalibrationError(f"the number of samples must be >= 0, got {count}")
    if image_norm not in IMAGE_NORMS:
        raise CalibrationError(f"image_norm must be one of {', '.join(IMAGE_NORMS)}, got {image_norm!r}")
    ir = model if isinstance(model, Model) else formats.load(model)
    specs = input_specs(ir)
    makers = [_maker(ir, spec, dict(dims or {}), image_norm) for spec in specs]

    def generate() -> Iterator[Feed]:
        for i in range(offset, offset + count):
            rng = np.random.default_rng([seed, i])
            yield {spec.name: make(rng) for spec, make in zip(specs, makers)}

    return Samples(lambda: batch_feeds(generate(), specs, batch_size), _batches(count, batch_size),
                   f"synthetic (seed {seed})")


def _maker(model: Model, spec: InputSpec, dims: dict[str, int], image_norm: str) -> Callable[[np.random.Generator], np.ndarray]:
    dtype = spec.dtype
    np_type = dtype.numpy
    if np_type is None:
        raise CalibrationError(f"cannot make synthetic values for input {spec.name!r} of type {dtype.value}")
    layout = _image_layout(spec)
    shape = _concrete_shape(spec, dims, image=layout is not None)
    if "mask" in spec.name.lower() or dtype is DType.BOOL:
        return lambda rng: np.ones(shape, dtype=np_type)
    if dtype.is_integer:
        vocab = find_vocabulary(model, spec.name)
        if vocab is None and layout is not None:
            return lambda rng: _integer_image(rng, shape, layout, dtype)
        return lambda rng: _token_ids(rng, shape, vocab or 2).astype(np_type)
    if layout is not None:
        mean, std = IMAGE_NORMS[image_norm]
        return lambda rng: ((_image(rng, shape, layout) - _per_channel(mean, shape, layout))
                            / _per_channel(std, shape, layout)).astype(np_type)
    return lambda rng: _smooth(rng, shape).astype(np_type)


def _image_layout(spec: InputSpec) -> str | None:
    """``"NCHW"``/``"NHWC"`` for a rank-4 float or 8-bit input whose channel dim is 1, 3 or 4."""
    shape = spec.shape
    if shape is None or len(shape) != 4 or not (spec.dtype.is_float or spec.dtype in (DType.UINT8, DType.INT8)):
        return None
    if shape[1] in (1, 3, 4):
        return "NCHW"
    if shape[3] in (1, 3, 4):
        return "NHWC"
    return None


def _concrete_shape(spec: InputSpec, dims: Mapping[str, int], *, image: bool) -> tuple[int, ...]:
    if spec.shape is None:
        raise CalibrationError(f"input {spec.name!r} has an unknown rank; give samples instead of synthetic ones")
    out = []
    for axis, d in enumerate(spec.shape):
        if isinstance(d, int) and d >= 0:
            out.append(d)
        elif isinstance(d, str) and d in dims:
            out.append(int(dims[d]))
        else:
            out.append(1 if axis == 0 else DEFAULT_IMAGE_SIZE if image else DEFAULT_DIM)
    return tuple(out)


def _per_channel(values: tuple[float, ...], shape: tuple[int, ...], layout: str) -> np.ndarray:
    channels = shape[1] if layout == "NCHW" else shape[3]
    v = np.resize(np.asarray(values, dtype=np.float32), channels)
    return v.reshape((1, channels, 1, 1) if layout == "NCHW" else (1, 1, 1, channels))


def _field(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A unit-std field with a 1/f amplitude spectrum (power 1/f**2, as natural images)."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fy * fy + fx * fx)
    amplitude = 1.0 / np.maximum(f, 1.0 / max(height, width))
    amplitude[0, 0] = 0.0
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) * amplitude
    field = np.fft.irfft2(spectrum, s=(height, width))
    std = field.std()
    return field / std if std > 0 else field


def _image(rng: np.random.Generator, shape: tuple[int, ...], layout: str) -> np.ndarray:
    """Pixels in [0, 1]: luminance plus 0.3 x per-channel colour fields, random gain and offset."""
    n, c, h, w = shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
    out = np.empty((n, c, h, w), dtype=np.float64)
    for b in range(n):
        luminance = _field(rng, h, w)
        gain, offset = rng.uniform(0.12, 0.25), rng.uniform(0.3, 0.6)
        for ch in range(c):
            out[b, ch] = offset + gain * (luminance + 0.3 * _field(rng, h, w)) / 1.044
    np.clip(out, 0.0, 1.0, out=out)
    return out if layout == "NCHW" else out.transpose(0, 2, 3, 1)


def _integer_image(rng: np.random.Generator, shape: tuple[int, ...], layout: str, dtype: DType) -> np.ndarray:
    pixels = np.round(_image(rng, shape, layout) * 255.0)
    return (pixels - 128.0 if dtype is DType.INT8 else pixels).astype(dtype.numpy)


def _token_ids(rng: np.random.Generator, shape: tuple[int, ...], vocab: int) -> np.ndarray:
    """Log-uniform ids in ``[0, vocab)``: frequent small ids, as a Zipf-like token distribution."""
    ids = np.floor(np.exp(rng.random(shape) * np.log(vocab))).astype(np.int64) - 1
    return np.clip(ids, 0, vocab - 1)


def _smooth(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean unit-std noise with a 1/f amplitude spectrum along the last axis."""
    if not shape or shape[-1] < 4:
        return rng.standard_normal(shape)
    n = shape[-1]
    f = np.fft.rfftfreq(n)
    amplitude = 1.0 / np.maximum(f, 1.0 / n)
    amplitude[0] = 0.0
    spectrum = (rng.standard_normal((*shape[:-1], f.size)) + 1j * rng.standard_normal((*shape[:-1], f.size)))
    x = np.fft.irfft(spectrum * amplitude, n=n, axis=-1)
    std = x.std()
    return x / std if std > 0 else x


def find_vocabulary(model: Model, input_name: str) -> int | None:
    """The row count of the smallest embedding table that looks up ``input_name``'s values
    (through casts and reshapes), or None when none does.  O(readers reached)."""
    start = next((v for v in model.graph.inputs if v.name == input_name), None)
    if start is None:
        return None
    sizes: list[int] = []
    seen: set[int] = set()
    todo: list[Value] = [start]
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        for node, index in value.uses():
            size = _table_rows(node, index)
            if size:
                sizes.append(size)
            elif _passes_ids(node, index):
                todo.extend(v for v in node.outputs if v is not None)
    return min(sizes) if sizes else None


def _passes_ids(node: Any, index: int) -> bool:
    """True when ``node`` hands its input ``index`` on as (possibly shifted) ids: casts and
    reshapes, an add of a constant, a select's data operands (TensorFlow's negative-index fix-up
    ``select(ids < 0, ids + vocab, ids)``)."""
    if node.op in _PASS_THROUGH:
        return index == 0
    if node.op in ("SELECT", "SELECT_V2", "Where"):
        return index in (1, 2)
    if node.op in ("ADD", "Add"):
        other = node.inputs[1 - index] if len(node.inputs) == 2 else None
        return other is not None and other.const is not None
    return False


def _table_rows(node: Any, index: int) -> int | None:
    """Rows of the constant table ``node`` gathers from when input ``index`` holds the ids."""
    if node.op in ("Gather", "GATHER") and index == 1:
        table = node.inputs[0]
        axis = int(node.attr("axis", 0) or 0)
    elif node.op == "EMBEDDING_LOOKUP" and index == 0:
        table, axis = node.inputs[1], 0
    else:
        return None
    shape = table.shape if table is not None and table.const is not None else None
    if not shape or not isinstance(shape[axis], int):
        return None
    return int(shape[axis])
