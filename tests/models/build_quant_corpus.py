"""Models and data for the post-training quantization benchmarks and tests (issue 14, "Anchors to beat").

ONNX (TorchScript exporter, opset 17, dynamic batch; transformers also dynamic sequence), random
weights with randomized biases and norms (``build_onnx_corpus._randomize``):

* full size: torchvision ``resnet50``, ``mobilenet_v3_large``, ``efficientnet_b0``, ``vit_b_16`` at
  224 x 224; transformers ``bert_base`` (BertForMaskedLM, BERT-base config) and ``gpt2`` (GPT2LMHeadModel,
  GPT-2 small config), token logits out;
* small (the default test run): ``resnet18_bn`` and ``mobilenet_v3_small_bn`` at 128 x 128, ``bert_tiny``.

Random weights with randomized batch-norm statistics collapse a deep CNN: its logits barely depend
on the input (Keras MobileNetV2: the float output's centred energy is 1e-13 of its total).  Every
image model therefore re-estimates its batch-norm statistics on 64 natural-image-like inputs (split
``"bn"``, seed 3; the randomized scales and offsets stay), as training would have left them matched
to the data.  The full-size image models also refit their classifier on the same inputs (a trained
classifier does not put every input in one class): the torchvision ones divide the last Linear's
weight by the standard deviation of its input and shift its bias by ``-W @ mean`` (a parameter-free
batch norm folded in front of it), the Keras ones shift the last Dense's bias only, so the mean
logit over the data is the randomized bias.  Re-estimated statistics alone left ResNet50 at 3
distinct classes over 32 eval inputs; centring made that 14, but MobileNetV3-Large stayed at 3
(its pooled features vary mostly along one direction, 84 % of the variance, with a logit spread
of 0.02 against the biases' 0.1): standardizing makes it 17.  The sidecar's
``eval_top1_distinct`` records the count.  (ViT-B/16's head, zero-initialized by torchvision, first
gets ``nn.Linear``'s default initialization: with a zero head every input gave the same logits.)  The small ``_bn`` test models re-estimate their
statistics only (their numbers in the tests are of that).

TFLite (the real TFLiteConverter, from Keras applications with randomized BN affine parameters and
biases, statistics re-estimated and classifier re-centred as above, logits out, float input and
output in every mode): ``<model>_float`` and the converter's own PTQ of the same Keras model,
``<model>_int8`` (``TFLITE_BUILTINS_INT8``) and ``<model>_int16x8``, whose representative dataset
is :func:`samples` ``(meta, "calib")`` — the very samples the other tools calibrate on.  The
conversion's wall time is ``metadata["quantize_s"]``, its CPU time (all threads of the build
process) ``metadata["quantize_cpu_s"]``.  Models: ``mobilenet_v2``, ``resnet50``,
``efficientnet_b0`` at 224, and ``mobilenet_v2_bn`` (alpha 0.35, 96 x 96, batch-norm statistics
re-estimated, classifier as built) for tests.

Data (:func:`samples`): natural-image-like inputs — smooth noise with a 1/f amplitude spectrum, a
luminance field plus weaker colour fields, random gain and offset, in [0, 1] and then preprocessed
as the model expects (``metadata["data"]``) — and token ids drawn Zipf-like from the vocabulary.
Split ``"calib"`` and the held-out ``"eval"`` come from different seeds.

Built through ``tests/models/_cache.py`` as family ``quant_corpus`` (``quant_model(name)``), one
subprocess per model (torch and TensorFlow never share a process).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from . import _cache
from ._info import ModelInfo

BUILDER_VERSION = 2
FAMILY = "quant_corpus"
SEED = 0
CALIB_COUNT = 200  # the converter's representative dataset (and every tool's calibration set)
EVAL_COUNT = 100
_SPLIT_SEED = {"calib": 1, "eval": 2, "bn": 3}
BN_COUNT = 64

ONNX_NAMES = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vit_b_16", "bert_base", "gpt2",
              "resnet18_bn", "mobilenet_v3_small_bn", "bert_tiny")
TFLITE_BASES = ("mobilenet_v2", "resnet50", "efficientnet_b0", "mobilenet_v2_bn")
TFLITE_MODES = ("float", "int8", "int16x8")
NAMES = (*(f"onnx_{n}" for n in ONNX_NAMES),
         *(f"tflite_{b}_{m}" for b in TFLITE_BASES for m in TFLITE_MODES))

_LIBRARIES = (("torch", ("torch",)), ("torchvision", ("torchvision",)), ("transformers", ("transformers",)),
              ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)), ("tensorflow", ("tensorflow-cpu", "tensorflow")),
              ("keras", ("keras",)), ("ai_edge_litert", ("ai-edge-litert",)))

# image models: input size, layout and preprocessing of the [0, 1] image
_IMAGE = {
    "resnet50": (224, "torch"), "mobilenet_v3_large": (224, "torch"), "efficientnet_b0": (224, "torch"),
    "vit_b_16": (224, "torch"), "resnet18_bn": (128, "torch"), "mobilenet_v3_small_bn": (128, "torch"),
}
_KERAS = {"mobilenet_v2": (224, "tf"), "resnet50": (224, "caffe"), "efficientnet_b0": (224, "raw255"),
          "mobilenet_v2_bn": (96, "tf")}
# token models: vocabulary, sequence length of the data
_TEXT = {"bert_base": (30522, 32), "gpt2": (50257, 32), "bert_tiny": (1000, 16)}


def _register() -> None:
    """Make the corpus a family of ``_cache`` (cache keys, locks, sidecars) in this process."""
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_quant_corpus", NAMES, "", _LIBRARIES))


def quant_model(name: str) -> ModelInfo:
    """The cached model ``name`` (built in a subprocess first if missing)."""
    _register()
    if name not in NAMES:
        raise ValueError(f"unknown {FAMILY} model {name!r}; choose from {NAMES}")
    if (info := _cache.cached(FAMILY, name)) is not None:
        return info
    _cache._ensure_cache_dir()
    with _cache._locked(_cache.CACHE_DIR / f".{FAMILY}-{name}.lock"):
        if _cache.cached(FAMILY, name) is None:
            _build_missing(name)
    info = _cache.cached(FAMILY, name)
    if info is None:
        log = _cache.CACHE_DIR / f"{_cache._stem(FAMILY, name)}.log"
        raise _cache.ModelBuildError(f"building {FAMILY}:{name} failed; log: {log}")
    return info


def _build_missing(name: str) -> None:
    _cache._remove_builds(FAMILY, name)
    stem = _cache._stem(FAMILY, name)
    with tempfile.TemporaryDirectory(dir=_cache.CACHE_DIR, prefix=".build-") as tmp:
        with open(_cache.CACHE_DIR / f"{stem}.log", "w") as log:
            subprocess.run([sys.executable, "-m", "tests.models.build_quant_corpus", tmp, name],
                           cwd=_cache.REPO_ROOT, env=_cache._build_env(), stdout=log, stderr=subprocess.STDOUT,
                           timeout=_cache.BUILD_TIMEOUT_S, check=False)
        sidecar = Path(tmp) / f"{stem}.json"
        if not sidecar.exists():
            return
        for path in Path(tmp).glob(f"{stem}.*"):
            if path.suffix != ".json":
                path.replace(_cache.CACHE_DIR / path.name)
        info = ModelInfo.read_sidecar(sidecar)
        replace(info, path=_cache.CACHE_DIR / info.path.name,
                reference=_cache.CACHE_DIR / info.reference.name if info.reference else None).write_sidecar()


# -- data ------------------------------------------------------------------------------------------
def natural_images(count: int, size: int, seed: int) -> np.ndarray:
    """``count`` natural-image-like RGB images, NHWC float32 in [0, 1]: a 1/f-spectrum luminance
    field plus two weaker, smoother colour fields, random gain and offset per image."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    radius = np.sqrt(fx * fx + fy * fy) + 1.0 / size
    out = np.empty((count, size, size, 3), np.float32)
    mix = np.array([[1.0, 1.0, 1.0], [0.5, 0.0, -0.5], [-0.25, 0.5, -0.25]], np.float32)
    for i in range(count):
        fields = []
        for k, power in enumerate((1.5, 2.0, 2.0)):
            spectrum = (rng.standard_normal(radius.shape) + 1j * rng.standard_normal(radius.shape)) / radius ** power
            field = np.fft.irfft2(spectrum, s=(size, size))
            fields.append((field - field.mean()) / (field.std() + 1e-12) * (1.0 if k == 0 else 0.5))
        image = np.stack(fields, -1) @ mix
        image = image * rng.uniform(0.15, 0.3) + rng.uniform(0.3, 0.7)
        out[i] = np.clip(image, 0.0, 1.0)
    return out


def _preprocess(images: np.ndarray, kind: str) -> np.ndarray:
    """[0, 1] NHWC images as each model family expects them."""
    if kind == "torch":  # torchvision: ImageNet mean/std, NCHW
        mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
        return np.ascontiguousarray(((images - mean) / std).transpose(0, 3, 1, 2))
    if kind == "tf":  # keras MobileNetV2: [-1, 1]
        return images * 2.0 - 1.0
    if kind == "caffe":  # keras ResNet50: BGR, 0..255 minus the ImageNet mean
        return images[..., ::-1] * 255.0 - np.array([103.939, 116.779, 123.68], np.float32)
    if kind == "raw255":  # keras EfficientNet: its own Rescaling/Normalization layers take 0..255
        return images * 255.0
    raise ValueError(f"unknown preprocessing {kind!r}")


def token_ids(count: int, length: int, vocab: int, seed: int) -> np.ndarray:
    """``count`` x ``length`` token ids in [0, vocab): Zipf-distributed ranks over a fixed random
    permutation of the vocabulary (frequent tokens recur, as in text)."""
    rng = np.random.default_rng(seed)
    order = np.random.default_rng(SEED).permutation(vocab)
    ranks = np.minimum(rng.zipf(1.3, (count, length)) - 1, vocab - 1)
    return order[ranks].astype(np.int64)


def samples(meta: dict[str, Any], split: str, count: int | None = None, batch: int = 1) -> list[dict[str, np.ndarray]]:
    """Feeds of the model whose sidecar ``metadata`` is ``meta``: ``split`` "calib" or "eval",
    ``count`` samples (default CALIB_COUNT / EVAL_COUNT) in batches of ``batch``."""
    count = count if count is not None else (CALIB_COUNT if split == "calib" else EVAL_COUNT)
    data, seed = meta["data"], _SPLIT_SEED[split]
    if data["kind"] == "image":
        arrays = {data["input"]: _preprocess(natural_images(count, data["size"], seed), data["preprocess"])}
    else:
        ids = token_ids(count, data["length"], data["vocab"], seed)
        arrays = {data["input"]: ids, **({data["mask"]: np.ones_like(ids)} if data.get("mask") else {})}
    return [{k: v[i:i + batch] for k, v in arrays.items()} for i in range(0, count, batch)]


# -- ONNX ------------------------------------------------------------------------------------------
def _onnx_module(name: str) -> tuple[Any, dict[str, Any]]:
    """(torch module, data spec) of an ONNX corpus model."""
    from .build_onnx_corpus import _randomize, _torch, _torchvision  # lazy: imports torch in the build only

    torch = _torch()
    torch.manual_seed(SEED)
    if name in _IMAGE:
        size, kind = _IMAGE[name]
        models = _torchvision().models
        make = {"resnet50": models.resnet50, "mobilenet_v3_large": models.mobilenet_v3_large,
                "efficientnet_b0": models.efficientnet_b0, "vit_b_16": models.vit_b_16,
                "resnet18_bn": models.resnet18, "mobilenet_v3_small_bn": models.mobilenet_v3_small}[name]
        data = {"kind": "image", "input": "input", "size": size, "preprocess": kind}
        module = _randomize(make())
        feeds = samples({"data": data}, "bn", BN_COUNT, batch=16)
        _reestimate_torch(module, feeds)
        if not name.endswith("_bn"):
            _refit_torch_classifier(module, feeds)
        return module, data
    import transformers as tr  # lazy: build only

    vocab, length = _TEXT[name]
    if name == "gpt2":
        inner = tr.GPT2LMHeadModel(tr.GPT2Config())
    elif name == "bert_base":
        inner = tr.BertForMaskedLM(tr.BertConfig())
    else:
        inner = tr.BertForMaskedLM(tr.BertConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=512,
                                                 max_position_embeddings=64))
    inner.set_attn_implementation("eager")
    inner = _randomize(inner)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                              return_dict=True).logits

    module = Logits().eval()
    if name == "gpt2":
        module.inner.config.use_cache = False
    return module, {"kind": "tokens", "input": "input_ids", "mask": "attention_mask", "vocab": vocab,
                    "length": length}


def _reestimate_torch(module: Any, feeds: list[dict[str, np.ndarray]]) -> None:
    """Batch-norm running statistics := their cumulative average over ``feeds`` (the norms in
    training mode, everything else — dropout, stochastic depth — in eval mode; no gradients);
    scales and offsets untouched.  A model without batch norms is left as it is."""
    import torch  # lazy: build only

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        for feed in feeds:
            module(torch.from_numpy(feed["input"]))
    module.eval()


def _refit_torch_classifier(module: Any, feeds: list[dict[str, np.ndarray]]) -> None:
    """The last ``nn.Linear`` refitted to its input's statistics over ``feeds`` (eval mode), as if a
    batch norm without affine parameters stood before it, folded: weight /= std, bias -= weight @ mean."""
    import torch  # lazy: build only

    last = [m for m in module.modules() if isinstance(m, torch.nn.Linear)][-1]
    if not bool(last.weight.any()):  # torchvision's ViT zero-initializes its head: nn.Linear's default first
        torch.nn.init.kaiming_uniform_(last.weight, a=5 ** 0.5)
    seen: list[Any] = []
    hook = last.register_forward_hook(
        lambda _m, inp, _out: seen.append(inp[0].detach().reshape(-1, inp[0].shape[-1]).double()))
    module.eval()
    with torch.no_grad():
        for feed in feeds:
            module(torch.from_numpy(feed["input"]))
        hook.remove()
        features = torch.cat(seen)
        mean, std = features.mean(0), features.std(0)
        weight = last.weight.double() / (std + 1e-2 * std.mean())
        last.bias.sub_((weight @ mean).to(last.bias.dtype))
        last.weight.copy_(weight.to(last.weight.dtype))


def _build_onnx(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    import onnx  # lazy: build only
    import onnxruntime as ort  # lazy: build only
    import torch  # lazy: build only

    from ._info import save_reference  # lazy: build only

    module, data = _onnx_module(name)
    meta: dict[str, Any] = {"data": data}
    feeds = samples(meta, "eval", 2, batch=2)[0]
    if data["kind"] == "image":
        inputs, axes = ["input"], {"input": {0: "batch"}, "logits": {0: "batch"}}
    else:
        inputs = ["input_ids", "attention_mask"]
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                "logits": {0: "batch", 1: "sequence"}}
    args = tuple(torch.from_numpy(feeds[n]) for n in inputs)
    start = time.perf_counter()
    torch.onnx.export(module, args, str(model_path), dynamo=False, opset_version=17, input_names=inputs,
                      output_names=["logits"], dynamic_axes=axes)
    meta["export_s"] = round(time.perf_counter() - start, 2)
    proto = onnx.load(str(model_path), load_external_data=False)
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    with torch.no_grad():
        want = module(*args).numpy()
    meta["ort_vs_torch"] = float(np.abs(got - want).max())
    if not meta["ort_vs_torch"] <= 1e-2 * max(1.0, float(np.abs(want).max())):
        raise AssertionError(f"{name}: onnxruntime differs from torch by {meta['ort_vs_torch']}")
    # how varied the float model's top-1 is on the eval split (a collapsed random model would make
    # top-1 agreement meaningless)
    top = [sess.run(None, f)[0].argmax(-1).ravel() for f in samples(meta, "eval", 32, batch=8)]
    meta["eval_top1_distinct"] = len(np.unique(np.concatenate(top)))
    meta["nodes"] = len(proto.graph.node)
    save_reference(reference_path, [feeds[n] for n in inputs], [got])
    return ModelInfo(family=FAMILY, name=f"onnx_{name}", format="onnx", path=model_path,
                     inputs={n: tuple(feeds[n].shape) for n in inputs}, outputs=["logits"],
                     input_dtype=str(feeds[inputs[0]].dtype), input_dtypes={n: str(feeds[n].dtype) for n in inputs},
                     dynamic_axes={k: v for k, v in axes.items() if k in inputs}, reference=reference_path,
                     metadata=meta)


# -- TFLite ----------------------------------------------------------------------------------------
def keras_application(base: str) -> Any:
    """The randomized Keras application ``base`` (logits out)."""
    import keras  # lazy: build only

    from ._keras_common import randomize_keras_model  # lazy: imports TensorFlow

    keras.utils.set_random_seed(SEED)
    size = _KERAS[base][0]
    apps = keras.applications
    if base == "mobilenet_v2_bn":
        model = apps.MobileNetV2(weights=None, input_shape=(size, size, 3), alpha=0.35, classes=10,
                                 classifier_activation=None)
    else:
        make = {"mobilenet_v2": apps.MobileNetV2, "resnet50": apps.ResNet50, "efficientnet_b0": apps.EfficientNetB0}
        model = make[base](weights=None, input_shape=(size, size, 3), classifier_activation=None)
    randomize_keras_model(model, SEED)
    meta = {"data": {"kind": "image", "input": "x", "size": size, "preprocess": _KERAS[base][1]}}
    batch = samples(meta, "bn", BN_COUNT, batch=BN_COUNT)[0]["x"]
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    # dropout / drop-connect off for the training-mode call (EfficientNet's would drop residual paths)
    drops = [(layer, layer.rate) for layer in model.layers if isinstance(layer, keras.layers.Dropout)]
    for layer, _ in drops:
        layer.rate = 0.0
    for layer in norms:  # moving statistics := this batch's (one training-mode call)
        layer.momentum = 0.0
    model(batch, training=True)
    for layer in norms:
        layer.momentum = 0.99
    for layer, rate in drops:
        layer.rate = rate
    if not base.endswith("_bn"):  # the classifier re-centred on the same batch (module docstring)
        dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)][-1]
        features = keras.Model(model.inputs, dense.input)
        mean = np.mean(np.asarray(features(batch, training=False), np.float64), axis=0)
        kernel, bias = (np.asarray(v, np.float64) for v in (dense.kernel, dense.bias))
        dense.bias.assign((bias - mean @ kernel).astype(np.float32))
    return model


def _build_tflite(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    import tensorflow as tf  # lazy: build only

    from ._tflite_common import Spec, convert, info_of  # lazy: imports TensorFlow

    base, mode = name.rsplit("_", 1) if not name.endswith("int16x8") else (name[:-8], "int16x8")
    size, kind = _KERAS[base]
    model = keras_application(base)
    meta: dict[str, Any] = {"data": {"kind": "image", "input": model.inputs[0].name, "size": size,
                                     "preprocess": kind, "layout": "nhwc"}}
    calib = [f[meta["data"]["input"]] for f in samples(meta, "calib")]

    def representative() -> Any:
        for x in calib:
            yield [x]

    def configure(converter: Any) -> None:
        if mode != "float":
            converter.representative_dataset = representative

    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
           tf.lite.OpsSet.TFLITE_BUILTINS] if mode == "int16x8" else None
    specs = [Spec((1, size, size, 3), low=0.0)]
    start, cpu = time.perf_counter(), time.process_time()
    model_path.write_bytes(convert(model, mode, specs, float_io=True, ops=ops, configure=configure))
    meta["quantize_s"] = round(time.perf_counter() - start, 2)
    meta["quantize_cpu_s"] = round(time.process_time() - cpu, 2)  # all threads of this process
    info = info_of(FAMILY, f"tflite_{name}", model_path, reference_path, specs)
    meta["data"]["input"] = next(iter(info.inputs))
    if mode == "float":  # how varied the float model's top-1 is (as for ONNX)
        from ai_edge_litert.interpreter import Interpreter  # lazy: build only

        interp = Interpreter(model_path=str(model_path))
        interp.allocate_tensors()
        top = []
        for feed in samples(meta, "eval", 32):
            interp.set_tensor(interp.get_input_details()[0]["index"], feed[meta["data"]["input"]])
            interp.invoke()
            top.append(int(interp.get_tensor(interp.get_output_details()[0]["index"]).argmax()))
        meta["eval_top1_distinct"] = len(set(top))
    return replace(info, metadata={**info.metadata, **meta})


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    kind, rest = name.split("_", 1)
    if kind == "onnx":
        return _build_onnx(rest, model_path, reference_path)
    return _build_tflite(rest, model_path, reference_path)


def main(argv: list[str]) -> int:
    """``python -m tests.models.build_quant_corpus OUT_DIR NAME``: build into OUT_DIR, with its sidecar."""
    _register()
    out_dir, name = Path(argv[0]), argv[1]
    stem = _cache._stem(FAMILY, name)
    ext = ".onnx" if name.startswith("onnx_") else ".tflite"
    builder_start = time.perf_counter()
    info = build(name, out_dir / f"{stem}{ext}", out_dir / f"{stem}.npz")
    info = replace(info, metadata={**info.metadata, "build_time_s": round(time.perf_counter() - builder_start, 2),
                                   "size_bytes": info.path.stat().st_size,
                                   "cache_key": stem.rsplit("-", 1)[1]})
    info.write_sidecar()
    print(f"ok {name}: {info.metadata['size_bytes']} bytes, {info.metadata['build_time_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
