"""A wide corpus of real ONNX exports for ``simplify`` (issue 12): torchvision, timm,
transformers, control flow and a QDQ model, each through the exporters people use.

Every model has random weights with randomized biases and norms (default
initialisations flatter node counts: zero biases and unit norms fold away).  A
model's name is ``<base>-<exporter>-<axes>``: exporter ``ts`` (TorchScript,
``dynamo=False``, opset 17, the exporter's default constant folding) or
``dynamo`` (``torch.export``, its default opset and onnxscript optimizer), axes
``fixed`` or ``dyn`` (the dims in ``metadata["dims"]`` are dynamic).  Exports an
exporter cannot make are recorded in :data:`EXPORT_FAILURES` (the observed error),
not left out silently.

The sidecar's ``metadata`` says how to feed the model at more than one shape:
``dims`` maps each dynamic dim to the values to try (the first is the export's),
``feeds`` maps each input to its shape (ints and dim names), dtype and, for
integer inputs, the exclusive upper bound of its values (``ones`` for masks).

Built through ``tests/models/_cache.py`` (``corpus_model(name)``), one subprocess
for every missing model.  torchvision's PyPI wheel links a CUDA build of torch,
so its C++ operators do not load next to the CPU torch installed here:
:func:`_torchvision` defines the two it needs (``nms``, ``roi_align``) in Python
before importing it; their ONNX symbolics are torchvision's own.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import _cache
from ._info import ModelInfo

BUILDER_VERSION = 1
FAMILY = "onnx_corpus"
SEED = 0
CHUNK = 8  # models built per subprocess

# (base, exporters x axes): the variants built of each base model
_CNN = ("ts-fixed", "ts-dyn", "dynamo-fixed", "dynamo-dyn")
_DYN = ("ts-dyn", "dynamo-dyn")
VARIANTS: dict[str, tuple[str, ...]] = {
    # torchvision classification / segmentation / video
    "tv_resnet18": _CNN, "tv_mobilenet_v3_small": _CNN, "tv_efficientnet_b0": _CNN,
    "tv_regnet_x_400mf": _CNN, "tv_convnext_tiny": _CNN, "tv_vit_b_16": _CNN, "tv_swin_t": _CNN,
    "tv_deeplabv3_mobilenet_v3_large": _CNN, "tv_lraspp_mobilenet_v3_large": _CNN, "tv_r3d_18": _CNN,
    # torchvision detection, dynamic image size
    "tv_fasterrcnn_mobilenet_v3_large_fpn": _DYN, "tv_retinanet_resnet50_fpn": _DYN,
    "tv_ssdlite320_mobilenet_v3_large": _DYN, "tv_fcos_resnet50_fpn": _DYN,
    # timm
    "timm_efficientformer_l1": _DYN, "timm_mobilevit_xxs": _DYN, "timm_convnext_atto": _DYN,
    "timm_levit_128s": _DYN, "timm_vit_dynamic_img": _DYN,
    # transformers from configs
    "hf_bert": _DYN, "hf_roberta": _DYN, "hf_distilbert": _DYN, "hf_gpt2": _DYN, "hf_llama_kv": _DYN,
    "hf_t5": _DYN, "hf_whisper_encoder": _DYN, "hf_whisper_decoder": _DYN, "hf_clip": _DYN,
    "hf_wav2vec2": _DYN, "hf_vit": _DYN, "hf_deit": _DYN, "hf_swin": _DYN, "hf_segformer": _DYN,
    # control flow and quantized
    "gru_loop": ("ts-dyn",), "resnet18_qdq": ("ts-fixed",),
}

#: Exports an exporter could not make here (torch 2.13.0, torchvision 0.28.0, timm 1.0.31,
#: transformers 5.23.0): name -> the error, as observed.  Not in NAMES.
EXPORT_FAILURES: dict[str, str] = {
    "gru_loop-dynamo-dyn": "torch.onnx.export(dynamo=True) takes no torch.jit.ScriptModule: the loop is TorchScript",
    "tv_fasterrcnn_mobilenet_v3_large_fpn-dynamo-dyn": "torch.export: GuardOnDataDependentSymNode, could not guard on "
    "data-dependent expression Eq(4*u1, 0) (torchvision/ops/boxes.py:103, _batched_nms_coordinate_trick: "
    "boxes.numel() == 0 on the boxes left after the score threshold)",
    "tv_retinanet_resnet50_fpn-dynamo-dyn": "torch.export: GuardOnDataDependentSymNode, could not guard on "
    "4*Min(1000, u0) + ... + 4*Min(1000, u4) > 4000 (torchvision/ops/boxes.py:86, batched_nms: which NMS to use "
    "depends on the number of candidate boxes)",
    "tv_ssdlite320_mobilenet_v3_large-dynamo-dyn": "torch.export: GuardOnDataDependentSymNode, could not guard on "
    "4*Min(300, u0) + ... + 4*Min(300, u3) > 4000 (torchvision/ops/boxes.py:86, batched_nms, as RetinaNet)",
    "tv_fcos_resnet50_fpn-dynamo-dyn": "torch.export: GuardOnDataDependentSymNode in torchvision/ops/boxes.py:86 "
    "(batched_nms), as RetinaNet",
    "hf_whisper_decoder-ts-dyn": "TorchScript exporter: UnsupportedOperatorError, exporting the operator 'aten::diff' "
    "to ONNX opset version 17 is not supported",
    "timm_vit_dynamic_img-ts-dyn": "TorchScript exporter: the export runs at the traced size only; at 96 x 80 "
    "onnxruntime fails in the position-embedding Add ('Attempting to broadcast an axis by a dimension other than 1. "
    "17 by 31'): the tracer fixed the interpolated embedding's size",
}

NAMES = tuple(f"{base}-{v}" for base, vs in VARIANTS.items() for v in vs if f"{base}-{v}" not in EXPORT_FAILURES)

_LIBRARIES = (("torch", ("torch",)), ("torchvision", ("torchvision",)), ("timm", ("timm",)),
              ("transformers", ("transformers",)), ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)),
              ("onnxscript", ("onnxscript",)))


def _register() -> None:
    """Make the corpus a family of ``_cache`` (cache keys, locks, sidecars) in this process."""
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_onnx_corpus", NAMES, ".onnx", _LIBRARIES, batch=True))


def corpus_model(name: str) -> ModelInfo:
    """The cached export ``name`` (building it, and up to CHUNK - 1 more missing models, in one subprocess first)."""
    _register()
    if (info := _cache.cached(FAMILY, name)) is not None:
        return info
    _cache._ensure_cache_dir()
    with _cache._locked(_cache.CACHE_DIR / f".{FAMILY}.lock"):
        if (info := _cache.cached(FAMILY, name)) is None:
            # the model asked for and the next few missing ones: one subprocess's start-up shared
            names = [name, *(n for n in NAMES if n != name and _cache.cached(FAMILY, n) is None)] \
                if name in NAMES else [name]
            build_missing(names[:CHUNK])
    info = _cache.cached(FAMILY, name)
    if info is None:
        log = _cache.CACHE_DIR / f"{_cache._stem(FAMILY, name)}.log"
        raise _cache.ModelBuildError(f"building {FAMILY}:{name} failed; log: {log}")
    return info


def build_missing(names: list[str]) -> None:
    """Build ``names`` in one fresh subprocess (``python -m tests.models.build_onnx_corpus``)."""
    _register()
    for n in names:
        _cache._remove_builds(FAMILY, n)
    stems = [_cache._stem(FAMILY, n) for n in names]
    with tempfile.TemporaryDirectory(dir=_cache.CACHE_DIR, prefix=".build-") as tmp:
        log_path = _cache.CACHE_DIR / f"{FAMILY}-build.log"
        with open(log_path, "a") as log:
            subprocess.run([sys.executable, "-m", "tests.models.build_onnx_corpus", tmp, *names],
                           cwd=_cache.REPO_ROOT, env=_cache._build_env(), stdout=log, stderr=subprocess.STDOUT,
                           timeout=_cache.BUILD_TIMEOUT_S * len(names), check=False)
        for stem in stems:
            sidecar = Path(tmp) / f"{stem}.json"
            if not sidecar.exists():
                continue
            for path in Path(tmp).glob(f"{stem}.*"):
                if path.suffix != ".json":
                    path.replace(_cache.CACHE_DIR / path.name)
            info = ModelInfo.read_sidecar(sidecar)
            replace(info, path=_cache.CACHE_DIR / info.path.name).write_sidecar()


# -- what the builders return ------------------------------------------------------------
@dataclass
class Spec:
    module: Any  # torch.nn.Module or ScriptModule
    inputs: list[str]
    outputs: list[str]
    feeds: dict[str, dict[str, Any]]  # input -> {"shape": [...], "dtype": ..., "high": int | "ones"}
    dims: dict[str, list[int]]  # dynamic dim -> values to try (first = the export's)
    output_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    atol: float = 1e-3  # onnxruntime against torch at export time
    compare_torch: bool = True  # detection: NMS on random boxes may order ties differently
    opset: int = 17


def _image(dims: dict[str, list[int]], shape: list[Any]) -> dict[str, Any]:
    return {"shape": shape, "dtype": "float32"}


def _ids(shape: list[Any], high: int) -> dict[str, Any]:
    return {"shape": shape, "dtype": "int64", "high": high}


def _ones(shape: list[Any]) -> dict[str, Any]:
    return {"shape": shape, "dtype": "int64", "high": "ones"}


def feeds_for(meta: dict[str, Any], setting: int, seed: int = 0) -> dict[str, Any]:
    """Inputs for the model whose sidecar metadata is ``meta``, each dynamic dim at its ``setting``-th value."""
    import numpy as np  # lazy: keeps this module importable without numpy at collection time

    rng = np.random.default_rng(seed + setting)
    values = {d: v[min(setting, len(v) - 1)] for d, v in meta["dims"].items()}
    result: dict[str, Any] = {}
    for name, spec in meta["feeds"].items():
        shape = [values[d] if isinstance(d, str) else d for d in spec["shape"]]
        if spec["dtype"].startswith("float"):
            result[name] = rng.standard_normal(shape).astype(spec["dtype"])
        elif spec.get("high") == "ones":
            result[name] = np.ones(shape, spec["dtype"])
        else:
            result[name] = rng.integers(0, spec["high"], shape).astype(spec["dtype"])
    return result


# -- torch helpers (imported lazily: this module is imported by tests that never build) ------------
def _torch() -> Any:
    import torch  # lazy: only the build subprocess imports torch

    return torch


def _randomize(module: Any) -> Any:
    from ._torch_common import randomize_norms_and_biases  # lazy: imports torch

    torch = _torch()
    torch.manual_seed(SEED)
    randomize_norms_and_biases(module, SEED)
    with torch.no_grad():  # norms that are not nn.LayerNorm / BatchNorm (RMSNorm, GroupNorm, timm's, HF's)
        for name, p in module.named_parameters():
            if p.dim() == 1 and name.endswith("weight") and bool((p == 1).all()):
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif p.dim() == 1 and name.endswith("bias") and bool((p == 0).all()):
                p.copy_(torch.randn_like(p) * 0.1)
    return module.eval()


def _has_ops() -> bool:  # a plain function: torchvision scripts its callers while tracing
    return True


def _torchvision() -> Any:
    """Import torchvision with ``nms`` and ``roi_align`` defined in Python (see the module docstring)."""
    torch = _torch()
    if "torchvision" in sys.modules and sys.modules["torchvision"] is None:
        del sys.modules["torchvision"]  # hidden by tests/models/__init__.py for the other builders
    if "torchvision" not in sys.modules:
        lib = torch.library.Library("torchvision", "DEF")  # kept alive on the function below
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold, float scale) -> Tensor")
        lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                   "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")

        def nms(boxes: Any, scores: Any, iou_threshold: float) -> Any:
            order = torch.argsort(scores, descending=True, stable=True)
            keep: list[int] = []
            suppressed = torch.zeros(len(order), dtype=torch.bool)
            area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
            for i_pos in range(len(order)):
                i = int(order[i_pos])
                if suppressed[i_pos]:
                    continue
                keep.append(i)
                rest = order[i_pos + 1:]
                lt = torch.maximum(boxes[i, :2], boxes[rest, :2])
                rb = torch.minimum(boxes[i, 2:], boxes[rest, 2:])
                wh = (rb - lt).clamp(min=0)
                inter = wh[:, 0] * wh[:, 1]
                iou = inter / (area[i] + area[rest] - inter)
                suppressed[i_pos + 1:] |= iou > iou_threshold
            return torch.tensor(keep, dtype=torch.int64)

        def roi_align(inp: Any, rois: Any, scale: float, ph: int, pw: int, ratio: int, aligned: bool) -> Any:
            from torchvision.ops.roi_align import _roi_align  # lazy: torchvision's pure-Python RoIAlign

            plain = getattr(_roi_align, "__wrapped__", _roi_align)  # not its torch.compile wrapper
            return plain(inp, rois, scale, ph, pw, ratio, aligned)

        lib.impl("nms", nms, "CPU")
        lib.impl("roi_align", roi_align, "CPU")
        _torchvision.lib = lib  # type: ignore[attr-defined]
        import torchvision  # lazy: after the operators exist

        torchvision.extension._has_ops = _has_ops
        sys.modules["torchvision.ops.roi_align"]._has_ops = _has_ops  # (the package attribute is the function)
    import torchvision  # lazy: already imported above

    return torchvision


# -- the models ----------------------------------------------------------------------------
_B = [1, 3]


def _cnn_spec(module: Any, hw: tuple[int, int], hw2: tuple[int, int] | None, out: str = "logits") -> Spec:
    """An image model: batch dynamic; height/width dynamic too where ``hw2`` is given."""
    dims: dict[str, list[int]] = {"batch": _B}
    shape: list[Any] = ["batch", 3, hw[0], hw[1]]
    if hw2 is not None:
        dims.update(height=[hw[0], hw2[0]], width=[hw[1], hw2[1]])
        shape = ["batch", 3, "height", "width"]
    return Spec(_randomize(module), ["input"], [out], {"input": _image(dims, shape)}, dims)


def _tv(base: str) -> Spec:
    tv = _torchvision()
    torch = _torch()
    m = tv.models
    torch.manual_seed(SEED)
    if base == "tv_resnet18":
        return _cnn_spec(m.resnet18(), (64, 64), (96, 80))
    if base == "tv_mobilenet_v3_small":
        return _cnn_spec(m.mobilenet_v3_small(), (64, 64), (96, 80))
    if base == "tv_efficientnet_b0":
        return _cnn_spec(m.efficientnet_b0(), (64, 64), (96, 80))
    if base == "tv_regnet_x_400mf":
        return _cnn_spec(m.regnet_x_400mf(), (64, 64), (96, 80))
    if base == "tv_convnext_tiny":
        return _cnn_spec(m.convnext_tiny(), (64, 64), (96, 96))
    if base == "tv_vit_b_16":  # ViT-B/16's structure, 2 layers, 64 px (its position embedding fixes the size)
        return _cnn_spec(m.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                                             hidden_dim=128, mlp_dim=256), (64, 64), None)
    if base == "tv_swin_t":  # Swin-T's structure, narrower: windows padded and shifted at any size
        return _cnn_spec(m.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2, 2],
                                           num_heads=[2, 2, 4, 4], window_size=[7, 7]), (64, 64), (96, 96))
    if base in ("tv_deeplabv3_mobilenet_v3_large", "tv_lraspp_mobilenet_v3_large"):
        seg = getattr(m.segmentation, base[3:])(weights=None, weights_backbone=None, num_classes=5)

        class Seg(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.seg = seg

            def forward(self, x: Any) -> Any:
                return self.seg(x)["out"]

        return _cnn_spec(Seg(), (64, 64), (96, 80), out="out")
    if base == "tv_r3d_18":
        dims = {"batch": _B, "frames": [4, 6]}
        module = _randomize(m.video.r3d_18(num_classes=10))
        return Spec(module, ["video"], ["logits"],
                    {"video": _image(dims, ["batch", 3, "frames", 32, 32])}, dims)
    # detection: one image [3, H, W], dynamic H and W, outputs of dynamic length
    det = m.detection
    kw: dict[str, Any] = dict(weights=None, weights_backbone=None, num_classes=5)
    if base == "tv_fasterrcnn_mobilenet_v3_large_fpn":
        model = det.fasterrcnn_mobilenet_v3_large_fpn(**kw, min_size=128, max_size=160,
                                                      rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=50)
    elif base == "tv_retinanet_resnet50_fpn":
        model = det.retinanet_resnet50_fpn(**kw, min_size=128, max_size=160)
    elif base == "tv_ssdlite320_mobilenet_v3_large":
        model = det.ssdlite320_mobilenet_v3_large(**kw)
    else:
        model = det.fcos_resnet50_fpn(**kw, min_size=128, max_size=160)
    model = _randomize(model)

    class Det(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.det = model

        def forward(self, image: Any) -> Any:
            out = self.det([image])[0]
            return out["boxes"], out["scores"], out["labels"]

    dims = {"height": [128, 150], "width": [160, 120]}
    return Spec(Det().eval(), ["image"], ["boxes", "scores", "labels"],
                {"image": {"shape": [3, "height", "width"], "dtype": "float32"}}, dims,
                output_axes={o: {0: "detections"} for o in ("boxes", "scores", "labels")},
                compare_torch=False, opset=17)


def _timm(base: str) -> Spec:
    import timm  # lazy: only the timm models need it

    torch = _torch()
    torch.manual_seed(SEED)
    if base == "timm_efficientformer_l1":
        # its attention biases are sized for 224 px (7 x 7 in the last stage): batch dynamic only
        return _cnn_spec(timm.create_model("efficientformer_l1", pretrained=False, num_classes=10), (224, 224), None)
    if base == "timm_mobilevit_xxs":
        return _cnn_spec(timm.create_model("mobilevit_xxs", pretrained=False, num_classes=10), (64, 64), None)
    if base == "timm_convnext_atto":
        return _cnn_spec(timm.create_model("convnext_atto", pretrained=False, num_classes=10), (64, 64), (96, 80))
    if base == "timm_levit_128s":
        return _cnn_spec(timm.create_model("levit_128s", pretrained=False, num_classes=10, img_size=64),
                         (64, 64), None)
    # a ViT whose position embedding is interpolated to the input's size
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, depth=2, img_size=64,
                            dynamic_img_size=True)
    return _cnn_spec(vit, (64, 64), (96, 80))


def _hf(base: str) -> Spec:
    import transformers as tr  # lazy: only the transformers models need it

    torch = _torch()
    nn = torch.nn
    torch.manual_seed(SEED)
    vocab = 1000
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    text_dims = {"batch": _B, "sequence": [16, 9]}
    text_feeds = {"input_ids": _ids(["batch", "sequence"], vocab), "attention_mask": _ones(["batch", "sequence"])}

    class Encoder(nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    def eager(model: Any) -> Any:
        model.set_attn_implementation("eager")
        return _randomize(model)

    if base in ("hf_bert", "hf_roberta", "hf_distilbert", "hf_gpt2"):
        if base == "hf_bert":
            inner = tr.BertModel(tr.BertConfig(vocab_size=vocab, max_position_embeddings=64, **small))
        elif base == "hf_roberta":
            inner = tr.RobertaModel(tr.RobertaConfig(vocab_size=vocab, max_position_embeddings=66, **small))
        elif base == "hf_distilbert":
            inner = tr.DistilBertModel(tr.DistilBertConfig(vocab_size=vocab, dim=64, n_layers=2, n_heads=4,
                                                           hidden_dim=128, max_position_embeddings=64))
        else:
            inner = tr.GPT2Model(tr.GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=64))
        return Spec(Encoder(eager(inner)).eval(), ["input_ids", "attention_mask"], ["hidden"],
                    text_feeds, text_dims, output_axes={"hidden": {0: "batch", 1: "sequence"}})
    if base == "hf_llama_kv":  # one decoding step with a KV cache: rotary positions offset by the past
        cfg = tr.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        llama = eager(tr.LlamaForCausalLM(cfg))
        layers, kv_heads, head_dim = 2, 2, 16

        class Step(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.llama = llama

            def forward(self, input_ids: Any, attention_mask: Any, past_key_0: Any, past_value_0: Any,
                        past_key_1: Any, past_value_1: Any) -> Any:
                past = (past_key_0, past_value_0, past_key_1, past_value_1)
                cache = tr.DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(layers)])
                out = self.llama(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                                 use_cache=True, return_dict=True)
                present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
                return (out.logits, *present)

        past_names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
        present_names = [f"present_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
        dims = {"batch": _B, "sequence": [2, 3], "past": [5, 8], "total": [7, 11]}
        feeds = {"input_ids": _ids(["batch", "sequence"], vocab), "attention_mask": _ones(["batch", "total"]),
                 **{n: {"shape": ["batch", kv_heads, "past", head_dim], "dtype": "float32"} for n in past_names}}
        axes = {"logits": {0: "batch", 1: "sequence"}, **{n: {0: "batch", 2: "total"} for n in present_names}}
        return Spec(Step().eval(), ["input_ids", "attention_mask", *past_names], ["logits", *present_names],
                    feeds, dims, output_axes=axes)
    if base == "hf_t5":
        t5 = eager(tr.T5ForConditionalGeneration(tr.T5Config(vocab_size=vocab, d_model=64, d_kv=16, d_ff=128,
                                                             num_layers=2, num_decoder_layers=2, num_heads=4)))

        class Seq2Seq(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.t5 = t5

            def forward(self, input_ids: Any, attention_mask: Any, decoder_input_ids: Any) -> Any:
                return self.t5(input_ids=input_ids, attention_mask=attention_mask,
                               decoder_input_ids=decoder_input_ids, use_cache=False, return_dict=True).logits

        dims = {**text_dims, "target": [4, 7]}
        feeds = {**text_feeds, "decoder_input_ids": _ids(["batch", "target"], vocab)}
        return Spec(Seq2Seq().eval(), ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"], feeds, dims,
                    output_axes={"logits": {0: "batch", 1: "target"}})
    if base in ("hf_whisper_encoder", "hf_whisper_decoder"):
        cfg = tr.WhisperConfig(vocab_size=vocab, pad_token_id=1, bos_token_id=2, eos_token_id=2,
                               decoder_start_token_id=3, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                               decoder_ffn_dim=128, max_source_positions=32, max_target_positions=64)
        whisper = eager(tr.WhisperForConditionalGeneration(cfg))
        if base == "hf_whisper_encoder":  # Whisper checks the frame count (2 x max_source_positions)
            class WEnc(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.enc = whisper.model.encoder

                def forward(self, input_features: Any) -> Any:
                    return self.enc(input_features=input_features, return_dict=True).last_hidden_state

            dims = {"batch": _B}
            return Spec(WEnc().eval(), ["input_features"], ["hidden"],
                        {"input_features": {"shape": ["batch", 16, 64], "dtype": "float32"}}, dims,
                        output_axes={"hidden": {0: "batch"}})

        class WDec(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.whisper = whisper

            def forward(self, decoder_input_ids: Any, encoder_hidden_states: Any) -> Any:
                out = self.whisper.model.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                                                 use_cache=False, return_dict=True)
                return self.whisper.proj_out(out.last_hidden_state)

        dims = {"batch": _B, "target": [4, 7]}
        feeds = {"decoder_input_ids": _ids(["batch", "target"], vocab),
                 "encoder_hidden_states": {"shape": ["batch", 32, 64], "dtype": "float32"}}
        return Spec(WDec().eval(), ["decoder_input_ids", "encoder_hidden_states"], ["logits"], feeds, dims,
                    output_axes={"logits": {0: "batch", 1: "target"}})
    if base == "hf_clip":
        cfg = tr.CLIPConfig(text_config=dict(vocab_size=vocab, max_position_embeddings=32, **small),
                            vision_config=dict(image_size=64, patch_size=16, **small), projection_dim=32)
        clip = eager(tr.CLIPModel(cfg))

        class Clip(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.clip = clip

            def forward(self, input_ids: Any, attention_mask: Any, pixel_values: Any) -> Any:
                out = self.clip(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                                return_dict=True)
                return out.logits_per_image, out.text_embeds, out.image_embeds

        dims = {"batch": _B, "sequence": [16, 9], "images": [2, 1]}
        feeds = {**text_feeds, "pixel_values": {"shape": ["images", 3, 64, 64], "dtype": "float32"}}
        return Spec(Clip().eval(), ["input_ids", "attention_mask", "pixel_values"],
                    ["logits_per_image", "text_embeds", "image_embeds"], feeds, dims,
                    output_axes={"logits_per_image": {0: "images", 1: "batch"}, "text_embeds": {0: "batch"},
                                 "image_embeds": {0: "images"}})
    if base == "hf_wav2vec2":
        cfg = tr.Wav2Vec2Config(conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, **small)
        w2v = eager(tr.Wav2Vec2Model(cfg))

        class Audio(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w2v = w2v

            def forward(self, input_values: Any) -> Any:
                return self.w2v(input_values=input_values, return_dict=True).last_hidden_state

        dims = {"batch": _B, "samples": [1600, 2400]}
        return Spec(Audio().eval(), ["input_values"], ["hidden"],
                    {"input_values": {"shape": ["batch", "samples"], "dtype": "float32"}}, dims,
                    output_axes={"hidden": {0: "batch", 1: "frames"}})

    class Vision(nn.Module):
        def __init__(self, inner: Any, attr: str) -> None:
            super().__init__()
            self.inner, self.attr = inner, attr

        def forward(self, pixel_values: Any) -> Any:
            return getattr(self.inner(pixel_values=pixel_values, return_dict=True), self.attr)

    vision_dims: dict[str, list[int]] = {"batch": _B}
    shape: list[Any] = ["batch", 3, 64, 64]
    if base == "hf_vit":
        inner, attr = tr.ViTModel(tr.ViTConfig(image_size=64, patch_size=16, **small)), "last_hidden_state"
    elif base == "hf_deit":
        inner, attr = tr.DeiTModel(tr.DeiTConfig(image_size=64, patch_size=16, **small)), "last_hidden_state"
    elif base == "hf_swin":
        inner, attr = tr.SwinModel(tr.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                                 num_heads=[2, 4], window_size=4)), "last_hidden_state"
    else:
        inner = tr.SegformerForSemanticSegmentation(tr.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
            decoder_hidden_size=32, num_labels=5, patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]))
        attr = "logits"
        vision_dims.update(height=[64, 96], width=[64, 80])
        shape = ["batch", 3, "height", "width"]
    return Spec(Vision(eager(inner), attr).eval(), ["pixel_values"], ["out"],
                {"pixel_values": {"shape": shape, "dtype": "float32"}}, vision_dims,
                output_axes={"out": {0: "batch"}})


def _gru_loop() -> Spec:
    """A GRU cell stepped by a TorchScript ``for`` loop over a dynamic length (ONNX Loop carrying the
    state) with an ``if`` on the data inside (ONNX If): exported from ``torch.jit.script``."""
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(SEED)

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wx = nn.Linear(16, 96)
            self.wh = nn.Linear(32, 96)
            self.head = nn.Linear(32, 8)

        def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = torch.zeros(0, x.size(1), 8)
            for t in range(x.size(0)):
                gx, gh = self.wx(x[t]), self.wh(h)
                r = torch.sigmoid(gx[:, :32] + gh[:, :32])
                z = torch.sigmoid(gx[:, 32:64] + gh[:, 32:64])
                n = torch.tanh(gx[:, 64:] + r * gh[:, 64:])
                h = (1.0 - z) * n + z * h
                if bool(h.sum() > 0.0):
                    h = h * 0.5
                y = torch.cat([y, self.head(h).unsqueeze(0)], 0)
            return y, h

    module = torch.jit.script(_randomize(Loop()))
    dims = {"steps": [5, 9], "batch": [1, 3]}
    feeds = {"x": {"shape": ["steps", "batch", 16], "dtype": "float32"},
             "h0": {"shape": ["batch", 32], "dtype": "float32"}}
    return Spec(module, ["x", "h0"], ["y", "h"], feeds, dims,
                output_axes={"y": {0: "steps", 1: "batch"}, "h": {0: "batch"}})


def spec_of(base: str) -> Spec:
    _torchvision()  # timm and transformers import torchvision when it is installed: its operators first
    if base.startswith("tv_") or base == "resnet18_qdq":
        return _tv("tv_resnet18" if base == "resnet18_qdq" else base)
    if base.startswith("timm_"):
        return _timm(base)
    if base.startswith("hf_"):
        return _hf(base)
    if base == "gru_loop":
        return _gru_loop()
    raise ValueError(f"unknown corpus model {base!r}")


# -- export ----------------------------------------------------------------------------------
def export(spec: Spec, exporter: str, dynamic: bool, path: Path, meta: dict[str, Any]) -> None:
    """Export ``spec`` at its dims' first values (a dynamic batch at 2: an exporter specializes a dim of 1)."""
    torch = _torch()
    at = {**meta, "dims": {d: [2 if d == "batch" else v[0]] for d, v in meta["dims"].items()}}
    args = tuple(torch.from_numpy(v) for v in feeds_for(at, 0).values())
    axes: dict[str, dict[int, str]] = {}
    if dynamic:
        for name, feed in spec.feeds.items():
            if dyn := {i: d for i, d in enumerate(feed["shape"]) if isinstance(d, str)}:
                axes[name] = dyn
        axes.update(spec.output_axes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            torch.onnx.export(spec.module, args, str(path), dynamo=False, opset_version=spec.opset,
                              input_names=spec.inputs, output_names=spec.outputs, dynamic_axes=axes or None)
        else:
            dynamic_shapes = None
            if dynamic:
                dynamic_shapes = tuple({i: torch.export.Dim.AUTO for i in axes.get(n, {})} or None
                                       for n in spec.inputs)
            program = torch.onnx.export(spec.module, args, dynamo=True, input_names=spec.inputs,
                                        output_names=spec.outputs, dynamic_shapes=dynamic_shapes)
            program.save(str(path), external_data=False)


def _quantize(src: Path, dst: Path, meta: dict[str, Any]) -> None:
    """onnxruntime's static QDQ quantization (per-channel int8 weights, uint8 activations) of ``src``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static  # lazy: build only

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([feeds_for(meta, 0, seed) for seed in range(8)])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.batches, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True)


def build(name: str, model_path: Path, reference_path: Path | None = None) -> ModelInfo:
    import numpy as np  # lazy: build only
    import onnx  # lazy: build only
    import onnxruntime as ort  # lazy: build only

    base, exporter, axes = name.rsplit("-", 2)
    spec = spec_of(base)
    dynamic = axes == "dyn"
    dims = spec.dims if dynamic else {}
    meta: dict[str, Any] = {
        "dims": dims,
        "feeds": {n: {**f, "shape": [d if not isinstance(d, str) or dynamic else spec.dims[d][0] for d in f["shape"]]}
                  for n, f in spec.feeds.items()},
        "exporter": exporter, "base": base,
    }
    start = time.perf_counter()
    if base == "resnet18_qdq":
        float_path = model_path.with_suffix(".float.onnx")
        export(spec, exporter, dynamic, float_path, meta)
        _quantize(float_path, model_path, meta)
        float_path.unlink()
    else:
        export(spec, exporter, dynamic, model_path, meta)
    meta["export_s"] = round(time.perf_counter() - start, 2)
    proto = onnx.load(str(model_path))
    onnx.checker.check_model(proto)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    feeds = feeds_for(meta, 0)
    got = sess.run(None, feeds)
    if spec.compare_torch and base != "resnet18_qdq":
        torch = _torch()
        with torch.no_grad():
            want = spec.module(*(torch.from_numpy(v) for v in feeds.values()))
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        diff = max(float(np.abs(g - w).max(initial=0)) for g, w in zip(got, want, strict=True))
        if not diff <= spec.atol:
            raise AssertionError(f"{name}: onnxruntime differs from torch by {diff}")
        meta["ort_vs_torch"] = diff
    for setting in range(1, max((len(v) for v in dims.values()), default=1)):
        sess.run(None, feeds_for(meta, setting))  # runs at the other shapes too
    meta["nodes"] = len(proto.graph.node)
    meta["opset"] = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    shapes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    init_names = {i.name for i in proto.graph.initializer}
    return ModelInfo(family=FAMILY, name=name, format="onnx", path=model_path,
                     inputs={n: tuple(1 if isinstance(d, str) else d for d in s) for n, s in shapes.items()
                             if n not in init_names},
                     outputs=[o.name for o in proto.graph.output],
                     input_dtype=str(next(iter(feeds.values())).dtype),
                     input_dtypes={n: str(v.dtype) for n, v in feeds.items()},
                     metadata=meta)


def main(argv: list[str]) -> int:
    """``python -m tests.models.build_onnx_corpus OUT_DIR NAME...``: build into OUT_DIR, one sidecar each."""
    _register()
    out_dir, names = Path(argv[0]), argv[1:]
    failed = 0
    for name in names:
        stem = _cache._stem(FAMILY, name)
        print(f"== {name}", flush=True)
        try:
            info = _cache.build_here(FAMILY, name, out_dir, stem)
            print(f"   ok: {info.metadata['nodes']} nodes, {info.metadata['build_time_s']} s", flush=True)
        except Exception as exc:  # one export failing must not stop the others: the log keeps why
            import traceback  # lazy: failure path only

            traceback.print_exc()
            print(f"   FAILED {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
