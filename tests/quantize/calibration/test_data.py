"""Calibration data: files split and checked with one-line errors, callables and iterables,
batching, and synthetic inputs with the structure of real ones (smooth images in the normalized
range, token ids inside the vocabulary, masks of ones), deterministic per seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphwright.formats import load
from graphwright.ir import Model
from graphwright.quantize.calibration import CalibrationError, find_vocabulary, load_samples, synthetic_samples
from tests.models import get_model
from tests.models.build_onnx_corpus import corpus_model


def _model(tmp_path: Path, inputs: list[onnx.ValueInfoProto], nodes: list[onnx.NodeProto],
           outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto] | None = None,
           name: str = "m.onnx") -> Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load(path)


def _image_model(tmp_path: Path, shape: list[object]) -> Model:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(tmp_path, [x], [helper.make_node("Relu", ["x"], ["y"])], [y], name=f"img{len(shape)}.onnx")


def _token_model(tmp_path: Path) -> Model:
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, 5])
    other = helper.make_tensor_value_info("count", TensorProto.INT64, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    table = helper.make_tensor("table", TensorProto.FLOAT, [50, 4], np.ones(200, np.float32))
    nodes = [helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "ids32"], ["emb"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["count"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["emb"], ["s"], keepdims=0),
             helper.make_node("Add", ["s", "m"], ["t"]),
             helper.make_node("Mul", ["t", "c"], ["y"])]
    return _model(tmp_path, [ids, mask, other], nodes, [out], [table], name="tokens.onnx")


def test_files_are_split_into_samples_in_name_order(tmp_path: Path) -> None:
    model = _image_model(tmp_path, [1, 3, 4, 4])
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    stacked = rng.standard_normal((3, 1, 3, 4, 4)).astype(np.float32)  # an extra leading axis
    on_batch = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)  # stacked on the batch axis
    single = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.save(data / "a.npy", stacked)
    np.save(data / "b.npy", on_batch)
    np.savez(data / "c.npz", x=single)
    (data / "notes.txt").write_text("ignored")
    samples = load_samples(model, data)
    feeds = list(samples)
    assert samples.total == 6  # counted from the headers
    expected = [*stacked, *(on_batch[i: i + 1] for i in range(2)), single]
    assert len(feeds) == 6 and all(set(f) == {"x"} for f in feeds)
    for feed, want in zip(feeds, expected):
        np.testing.assert_array_equal(feed["x"], want)
    assert len(list(samples)) == 6  # a directory can be read again
    npy_only = load_samples(model, data / "b.npy")
    assert npy_only.total == 2 and len(list(npy_only)) == 2


@pytest.mark.parametrize("content,message", [
    (np.zeros((1, 3, 4, 4), np.float64),
     "bad.npy: input 'x' expects float32 but the array is float64 [1, 3, 4, 4]; convert it"),
    (np.zeros((1, 4, 4, 3), np.float32),
     "bad.npy: input 'x' expects float32 [1, 3, 4, 4] (one sample, or several stacked on a leading axis) "
     "but the array is float32 [1, 4, 4, 3]"),
    ({"image": np.zeros((1, 3, 4, 4), np.float32)}, "bad.npz: the model has no input 'image'; its inputs are 'x'"),
    ({}, "bad.npz: no array for input 'x'"),
])
def test_a_wrong_file_is_one_line_naming_it(tmp_path: Path, content: object, message: str) -> None:
    model = _image_model(tmp_path, [1, 3, 4, 4])
    if isinstance(content, dict):
        path = tmp_path / "bad.npz"
        np.savez(path, **content)
    else:
        path = tmp_path / "bad.npy"
        np.save(path, content)
    with pytest.raises(CalibrationError) as info:
        list(load_samples(model, path))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_source_errors(tmp_path: Path) -> None:
    model = _token_model(tmp_path)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "ids.npy", np.zeros((1, 5), np.int64))
    with pytest.raises(CalibrationError, match=r"^ids.npy gives one array but the model has 3 inputs "
                                               r"\('ids', 'attention_mask', 'count'\); give .npz files"):
        list(load_samples(model, tmp_path / "d"))
    with pytest.raises(CalibrationError, match=r"holds no \.npy or \.npz files"):
        load_samples(model, tmp_path / "d" / "..")
    with pytest.raises(CalibrationError, match="does not exist"):
        load_samples(model, tmp_path / "missing")
    with pytest.raises(CalibrationError, match="sample 1: the inputs hold different numbers of samples"):
        feed = {"ids": np.zeros((1, 5), np.int64), "attention_mask": np.ones((1, 5), np.int64),
                "count": np.ones(1, np.int64)}
        list(load_samples(model, [feed, {**feed, "ids": np.zeros((2, 1, 5), np.int64)}]))


def test_independent_leading_axes_are_one_sample(tmp_path: Path) -> None:
    """CLIP's text batch and image batch are different dynamic dims: a feed of 1 text and 2 images
    (or a sequence-first input next to its state) is one sample as given, not refused; a feed whose
    arrays do not fit their inputs as they are is still refused."""
    texts = helper.make_tensor_value_info("texts", TensorProto.FLOAT, ["t", 4])
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["i", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model(tmp_path, [texts, images], [helper.make_node("MatMul", ["texts", "images_t"], ["y"]),
                                               helper.make_node("Transpose", ["images"], ["images_t"])], [y])
    feed = {"texts": np.ones((1, 4), np.float32), "images": np.full((2, 4), 2, np.float32)}
    got = list(load_samples(model, [feed]))
    assert len(got) == 1 and {k: v.shape for k, v in got[0].items()} == {"texts": (1, 4), "images": (2, 4)}
    with pytest.raises(CalibrationError, match="different numbers of samples"):
        list(load_samples(model, [{**feed, "images": np.ones((2, 1, 4), np.float32)}]))


def test_callables_iterables_and_batches(tmp_path: Path) -> None:
    dynamic = _image_model(tmp_path, ["N", 3, 4, 4])
    arrays = [np.full((1, 3, 4, 4), k, np.float32) for k in range(5)]
    calls = []

    def source() -> list[dict[str, np.ndarray]]:
        calls.append(1)
        return [{"x": a} for a in arrays]

    samples = load_samples(dynamic, source, batch_size=2)
    batches = list(samples)
    assert [b["x"].shape[0] for b in batches] == [2, 2, 1] and len(calls) == 1
    np.testing.assert_array_equal(batches[1]["x"][:, 0, 0, 0], [2, 3])
    assert len(list(samples)) == 3 and len(calls) == 2  # a callable is called again for a new pass
    bare = list(load_samples(dynamic, iter(arrays)))
    assert len(bare) == 5 and bare[4]["x"][0, 0, 0, 0] == 4
    stacked = list(load_samples(dynamic, {"x": np.concatenate(arrays)}))
    assert len(stacked) == 5 and stacked[3]["x"].shape == (1, 3, 4, 4)  # a dynamic batch axis is split too
    fixed = _image_model(tmp_path, [1, 3, 4, 4])
    with pytest.raises(CalibrationError, match="batch_size 2 needs a dynamic batch axis but input 'x' is "
                                               r"float32 \[1, 3, 4, 4\]; use batch_size=1"):
        list(load_samples(fixed, source, batch_size=2))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_synthetic_images_are_smooth_and_normalized(tmp_path: Path, layout: str) -> None:
    shape = [1, 3, 64, 64] if layout == "NCHW" else [1, 64, 64, 3]
    model = _image_model(tmp_path, shape)
    feeds = [f["x"] for f in synthetic_samples(model, 6, seed=3)]
    again = [f["x"] for f in synthetic_samples(model, 6, seed=3)]
    other = next(iter(synthetic_samples(model, 1, seed=4)))["x"]
    shifted = [f["x"] for f in synthetic_samples(model, 2, seed=3, offset=4)]
    assert all(np.array_equal(a, b) for a, b in zip(feeds, again))  # deterministic
    assert not np.array_equal(feeds[0], other)
    assert np.array_equal(shifted[0], feeds[4]) and np.array_equal(shifted[1], feeds[5])  # sample i is fixed
    images = np.stack([f[0] if layout == "NCHW" else f[0].transpose(2, 0, 1) for f in feeds])  # S, C, H, W
    assert images.dtype == np.float32 and images.shape == (6, 3, 64, 64)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    low, high = (0 - mean) / std, (1 - mean) / std  # ImageNet-normalized [0, 1] pixels
    for c in range(3):
        assert low[c] - 1e-5 <= images[:, c].min() and images[:, c].max() <= high[c] + 1e-5
        assert 0.3 < images[:, c].std() < 1.5  # a real spread, not saturated
    # smooth: neighbouring pixels correlate (white noise would give ~0)
    right = np.corrcoef(images[..., :-1].ravel(), images[..., 1:].ravel())[0, 1]
    down = np.corrcoef(images[..., :-1, :].ravel(), images[..., 1:, :].ravel())[0, 1]
    assert right > 0.7 and down > 0.7
    # the channels share luminance but are not copies of each other
    rg = np.corrcoef(images[:, 0].ravel(), images[:, 1].ravel())[0, 1]
    assert 0.5 < rg < 0.99


def test_synthetic_tokens_stay_in_the_vocabulary(tmp_path: Path) -> None:
    model = _token_model(tmp_path)
    assert find_vocabulary(model, "ids") == 50 and find_vocabulary(model, "count") is None
    feeds = list(synthetic_samples(model, 50, seed=0))
    ids = np.stack([f["ids"] for f in feeds])
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 25
    assert np.mean(ids < 10) > np.mean(ids >= 40)  # frequent small ids, as real token streams
    assert all((f["attention_mask"] == 1).all() for f in feeds)
    counts = np.stack([f["count"] for f in feeds])
    assert set(np.unique(counts)) <= {0, 1}  # no vocabulary behind it: a safe small range


def test_synthetic_tokens_of_real_exports() -> None:
    bert = load(corpus_model("hf_bert-ts-dyn").path)
    feeds = list(synthetic_samples(bert, 4, seed=0, dims={"sequence": 16}))
    assert feeds[0]["input_ids"].shape == (1, 16) and feeds[0]["attention_mask"].shape == (1, 16)
    assert max(int(f["input_ids"].max()) for f in feeds) < 1000  # word_embeddings has 1000 rows
    tflite = load(get_model("tflite_real", "transformer_float").path)
    name = tflite.graph.inputs[0].name
    assert find_vocabulary(tflite, name) == 64  # GATHER behind TF's select(ids < 0, ids + 64, ids)
    ids = np.stack([f[name] for f in synthetic_samples(tflite, 20, seed=1)])
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 64
