"""ONNX text recognizers and sequence models with a dynamic width / sequence, exported from torch.

The models whose run-time shape glue (``Shape -> Gather -> Unsqueeze -> Concat``,
``ConstantOfShape`` of a partly dynamic shape) ``fold_symbolic_shapes`` must fold:

* ``crnn_*``: CNN -> collapse the height -> ``reshape(b, c*h, w).permute`` by the
  dynamic width -> bidirectional LSTM -> CTC head (log-softmax), batch 1 as OCR
  recognizers are usually exported, width dynamic;
* ``easy_crnn_*``: EasyOCR-style: VGG-ish CNN -> the permuted map averaged over the height -> two batch-first BiLSTM+Linear blocks -> CTC head; batch and width dynamic;
* ``svtr_*``: SVTR-style: conv patch embedding -> flatten -> attention blocks whose
  q/k/v reshapes read ``B, N, C = x.shape`` -> back to NCHW -> height pooling -> CTC
  head; batch and width dynamic;
* ``dbnet_*``: a DBNet-style text detector: strided CNN, FPN upsampling to the skip's run-time
  size, levels resized and concatenated, transposed-conv head; batch, height and width dynamic;
* ``gru_*``: a sequence model (embedding-free): GRU over ``x.view(b*t, -1)``-style
  glue, batch and sequence dynamic;
* ``vad_ts``: Silero-VAD-style: an ``If`` on the sample rate choosing one of two front ends
  (reflect pad, strided "STFT" conv, magnitude, conv encoder), an LSTM cell whose state is an input
  and an output; batch and samples dynamic;
* ``lstm_loop_ts``: an LSTM cell stepped by a TorchScript ``for`` loop (an ONNX
  ``Loop`` carrying state) over a dynamic sequence.

``_ts`` models come from the TorchScript exporter (``dynamo=False``, opset 17, no
constant folding), ``_dynamo`` ones from ``torch.onnx.export(..., dynamo=True)``
(opset 18).  Weights are random, and BatchNorm statistics, norms and biases are
randomized (default initialisations flatter node counts).  Each build checks
onnxruntime against torch at two widths / sequence lengths.

Runs inside a build subprocess: ``python -m tests.models.build_onnx_ocr OUT_DIR NAME=STEM ...``
registers the ``onnx_ocr`` family in ``_cache.FAMILIES`` and builds through ``_cache.build_here``
(the pytest side, ``tests/simplify/test_dynamic_exports.py``, registers the same family and
starts this process; nothing in the pytest process imports torch).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from . import _cache
from ._info import ModelInfo, save_reference
from ._torch_common import onnx_facts, randomize_norms_and_biases

FAMILY = "onnx_ocr"
#: Libraries whose versions shape the files (part of the cache key).
LIBRARIES = (("torch", ("torch",)), ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)),
             ("onnxscript", ("onnxscript",)))
BUILDER_VERSION = 1  # bump to rebuild cached models made by this module

NAMES = ("crnn_ts", "crnn_dynamo", "easy_crnn_ts", "easy_crnn_dynamo", "dbnet_ts", "dbnet_dynamo", "svtr_ts",
         "svtr_dynamo", "gru_ts", "gru_dynamo", "lstm_loop_ts", "vad_ts")
SEED = 0
ATOL = 1e-4
HEIGHT = 32
CLASSES = 37


def _conv_bn(cin: int, cout: int, stride: int | tuple[int, int] = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class CRNN(nn.Module):
    """CNN (height 32 -> 1, width /4) -> BiLSTM -> CTC head; output [W/4, B, classes]."""

    def __init__(self) -> None:
        super().__init__()
        self.cnn = nn.Sequential(
            _conv_bn(3, 16), nn.MaxPool2d(2, 2),
            _conv_bn(16, 32), nn.MaxPool2d(2, 2),
            _conv_bn(32, 48), nn.MaxPool2d((2, 1), (2, 1)),
            _conv_bn(48, 64), nn.MaxPool2d((4, 1), (4, 1)),
        )
        self.rnn = nn.LSTM(64, 48, bidirectional=True)
        self.head = nn.Linear(96, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.cnn(x)
        b, c, h, w = f.shape
        f = f.reshape(b, c * h, w).permute(2, 0, 1)  # [T, B, C]
        seq, _ = self.rnn(f)
        t, b2, hidden = seq.shape
        logits = self.head(seq.reshape(t * b2, hidden)).reshape(t, b2, -1)
        return logits.log_softmax(2)


class BiLSTMBlock(nn.Module):
    """EasyOCR's BidirectionalLSTM: batch-first BiLSTM then a Linear."""

    def __init__(self, cin: int, hidden: int, cout: int) -> None:
        super().__init__()
        self.rnn = nn.LSTM(cin, hidden, bidirectional=True, batch_first=True)
        self.linear = nn.Linear(hidden * 2, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rnn.flatten_parameters()
        out, _ = self.rnn(x)
        return self.linear(out)


class EasyCRNN(nn.Module):
    """EasyOCR-style recognizer: VGG-ish features, the permuted map averaged over its last axis (what
    AdaptiveAvgPool2d((None, 1)) computes; the TorchScript exporter refuses that pool with a dynamic
    width), two stacked BiLSTM blocks, a CTC head; batch and width dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(1, 16), nn.MaxPool2d(2, 2), _conv_bn(16, 32), nn.MaxPool2d(2, 2),
            _conv_bn(32, 48), nn.MaxPool2d((2, 1), (2, 1)), _conv_bn(48, 64),
        )
        self.sequence = nn.Sequential(BiLSTMBlock(64, 32, 32), BiLSTMBlock(32, 32, 32))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)  # [B, C, H', W']
        f = f.permute(0, 3, 1, 2).mean(3)  # [B, W', C]
        return self.head(self.sequence(f))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.scale = (dim // heads) ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        out = (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SVTR(nn.Module):
    """Patch embedding (/4) -> 2 attention blocks over H*W tokens -> NCHW -> conv (H/2) -> mean over H -> CTC."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Sequential(_conv_bn(3, 16, 2), _conv_bn(16, dim, 2))
        self.blocks = nn.Sequential(Block(dim, heads), Block(dim, heads))
        self.merge = _conv_bn(dim, 48, (2, 1))
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.embed(x)
        b, c, h, w = f.shape
        tokens = self.blocks(f.flatten(2).transpose(1, 2))
        f = tokens.transpose(1, 2).reshape(b, c, h, w)
        f = self.merge(f).mean(2)  # [B, C, W]
        return self.head(f.permute(0, 2, 1)).softmax(-1)  # [B, W, classes]


class SeqGRU(nn.Module):
    """[B, T, F] -> per-step projection via view(b*t, f) -> GRU -> per-step head -> [B, T, classes]."""

    def __init__(self, features: int = 24, hidden: int = 32) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, f = x.shape
        h = self.norm(torch.relu(self.inp(x.reshape(b * t, f)))).reshape(b, t, -1)
        out, _ = self.gru(h)
        return self.head(out.reshape(-1, out.shape[-1])).reshape(b, t, -1)


class LoopLSTM(nn.Module):
    """An LSTM cell stepped by a scripted loop over a dynamic sequence; state from zeros of a computed shape."""

    def __init__(self, features: int = 16, hidden: int = 24) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(features, hidden)
        self.hidden = hidden
        self.head = nn.Linear(hidden, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = torch.zeros([b, self.hidden], dtype=x.dtype)
        c = torch.zeros([b, self.hidden], dtype=x.dtype)
        outs = []
        for i in range(x.shape[1]):
            h, c = self.cell(x[:, i], (h, c))
            outs.append(h)
        return self.head(torch.stack(outs, 1))


class DBNet(nn.Module):
    """DBNet-style text detector: a strided CNN (/4 .. /32), an FPN whose upsamplings read the skip's
    size at run time (``F.interpolate(p, size=c.shape[2:])``), the four levels resized to the /4 map
    and concatenated, a transposed-conv head back to the input size; batch, height and width dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.stages = nn.ModuleList([_conv_bn(3, 8, 4), _conv_bn(8, 16, 2), _conv_bn(16, 24, 2), _conv_bn(24, 32, 2)])
        self.lateral = nn.ModuleList([nn.Conv2d(c, 16, 1) for c in (8, 16, 24, 32)])
        self.head = nn.Sequential(_conv_bn(64, 16), nn.ConvTranspose2d(16, 8, 2, 2), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.ConvTranspose2d(8, 1, 2, 2), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        p = [lat(f) for lat, f in zip(self.lateral, feats)]
        for i in (2, 1, 0):
            p[i] = p[i] + nn.functional.interpolate(p[i + 1], size=feats[i].shape[2:], mode="nearest")
        h, w = p[0].shape[2:]
        fuse = torch.cat([p[0], *(nn.functional.interpolate(q, size=(h, w), mode="nearest") for q in p[1:])], 1)
        return self.head(fuse)


class _VadBranch(nn.Module):
    """One sample rate's front end: reflect pad, a strided "STFT" convolution, magnitude, a conv encoder."""

    def __init__(self, hop: int) -> None:
        super().__init__()
        self.hop = hop
        self.stft = nn.Conv1d(1, 32, hop * 2, stride=hop, bias=False)
        self.encoder = nn.Sequential(nn.Conv1d(16, 32, 3, padding=1), nn.ReLU(),
                                     nn.Conv1d(32, 32, 3, stride=2, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        spec = self.stft(nn.functional.pad(x.unsqueeze(1), (self.hop, self.hop), mode="reflect"))
        re, im = spec[:, :16], spec[:, 16:]
        return self.encoder(torch.sqrt(re * re + im * im + 1e-6)).reshape(b, 32, -1)


class VAD(nn.Module):
    """Silero-VAD-style: an ``If`` on the sample rate (16 kHz / 8 kHz front ends), an LSTM cell whose
    state [2, B, 64] is an input and an output; batch and samples dynamic.  Scripted (the If)."""

    def __init__(self) -> None:
        super().__init__()
        self.b16, self.b8 = _VadBranch(64), _VadBranch(32)
        self.cell = nn.LSTMCell(32, 64)
        self.out = nn.Conv1d(64, 1, 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor, sr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if bool(sr == 16000):
            f = self.b16(x)
        else:
            f = self.b8(x)
        h, c = self.cell(f.mean(2), (state[0], state[1]))
        return torch.sigmoid(self.out(h.unsqueeze(2))).squeeze(1), torch.stack([h, c])


#: (sample rate, samples, batch) of the VAD's checks: both branches, every dynamic dim at two sizes.
VAD_SAMPLES = ((16000, 512, 2), (8000, 256, 3), (16000, 1024, 1), (8000, 768, 2))


def _build_vad(model_path: Path, reference_path: Path) -> ModelInfo:
    torch.manual_seed(SEED)
    model = VAD().eval()
    randomized = randomize_norms_and_biases(model, SEED)
    scripted = torch.jit.script(model)
    rng = np.random.default_rng(SEED)
    batch = {"input": {0: "batch", 1: "samples"}, "state": {1: "batch"}, "output": {0: "batch"},
             "state_out": {1: "batch"}}
    args = (torch.randn(2, 512), torch.zeros(2, 2, 64), torch.tensor(16000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scripted, args, str(model_path), dynamo=False, opset_version=17,
                          input_names=["input", "state", "sr"], output_names=["output", "state_out"],
                          dynamic_axes=batch)
    proto = onnx.load(str(model_path))
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    samples, diffs, first = [], {}, None
    for sr, n, b in VAD_SAMPLES:
        x = rng.standard_normal((b, n)).astype(np.float32)
        state = rng.standard_normal((2, b, 64)).astype(np.float32)
        got = session.run(None, {"input": x, "state": state, "sr": np.array(sr, np.int64)})
        with torch.no_grad():
            want = scripted(torch.from_numpy(x), torch.from_numpy(state), torch.tensor(sr))
        diff = max(float(np.max(np.abs(g - w.numpy()))) for g, w in zip(got, want))
        if not diff < ATOL:
            raise AssertionError(f"vad at sr={sr}, {b}x{n}: onnxruntime differs from torch by {diff}")
        diffs[f"{sr}/{b}x{n}"] = diff
        samples.append({"input": [[b, n], "float32"], "state": [[2, b, 64], "float32"], "sr": [[], "int64", sr]})
        first = first or (x, state, sr, got)
    x, state, sr, got = first  # type: ignore[misc]
    save_reference(reference_path, [x, state, np.array(sr, np.int64)], got)
    return ModelInfo(
        family=FAMILY, name="vad_ts", format="onnx", path=model_path, reference=reference_path,
        inputs={"input": (2, 512), "state": (2, 2, 64), "sr": ()}, outputs=["output", "state_out"],
        input_dtype="float32", input_dtypes={"input": "float32", "state": "float32", "sr": "int64"},
        output_shapes={"output": tuple(got[0].shape), "state_out": tuple(got[1].shape)},
        output_dtypes={"output": "float32", "state_out": "float32"}, dynamic_axes=batch,
        metadata={"exporter": "ts", "samples": samples, "max_abs_diff_vs_torch": diffs, "randomized": randomized,
                  **onnx_facts(proto)},
    )


#: name -> (module factory, input shape, dynamic axes of the input {axis: name}, output dynamic axes,
#: a second input shape to check at)
_SPECS: dict[str, tuple[Any, tuple[int, ...], dict[int, str], dict[int, str], tuple[int, ...]]] = {
    "crnn": (CRNN, (1, 3, HEIGHT, 100), {3: "width"}, {0: "steps"}, (1, 3, HEIGHT, 64)),
    "easy_crnn": (EasyCRNN, (2, 1, HEIGHT, 100), {0: "batch", 3: "width"}, {0: "batch", 1: "steps"},
                  (3, 1, HEIGHT, 48)),
    "svtr": (SVTR, (1, 3, HEIGHT, 96), {0: "batch", 3: "width"}, {0: "batch", 1: "steps"}, (2, 3, HEIGHT, 160)),
    "dbnet": (DBNet, (1, 3, 96, 128), {0: "batch", 2: "height", 3: "width"}, {0: "batch", 2: "height", 3: "width"},
              (2, 3, 64, 160)),
    "gru": (SeqGRU, (2, 12, 24), {0: "batch", 1: "sequence"}, {0: "batch", 1: "sequence"}, (3, 7, 24)),
    "lstm_loop": (LoopLSTM, (1, 9, 16), {0: "batch", 1: "sequence"}, {0: "batch", 1: "sequence"}, (2, 4, 16)),
}


def _export(model: nn.Module, x: torch.Tensor, path: Path, exporter: str, axes: dict[int, str],
            out_axes: dict[int, str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, do_constant_folding=False,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": axes, "output": out_axes})
        else:
            dims = {i: torch.export.Dim(name, min=2 if name != "batch" else 1, max=4096)
                    for i, name in axes.items()}
            if isinstance(model, DBNet):  # the FPN needs sizes divisible by 32
                dims.update({i: 32 * torch.export.Dim(f"{axes[i]}_32", min=1, max=128) for i in (2, 3)})
            program = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, input_names=["input"],
                                        output_names=["output"], dynamic_shapes=({**dims},), verbose=False)
            program.save(str(path))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"input": x})[0])


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Build, export and check one model against torch at two input shapes; return its ModelInfo."""
    if name == "vad_ts":
        return _build_vad(model_path, reference_path)
    kind, exporter = name.rsplit("_", 1)
    factory, shape, axes, out_axes, other = _SPECS[kind]
    torch.manual_seed(SEED)
    model = factory()
    if kind == "lstm_loop":
        model = torch.jit.script(model)
    model.eval()
    randomized = randomize_norms_and_biases(model, SEED)
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(shape).astype(np.float32)
    _export(model, torch.from_numpy(x), model_path, exporter, axes, out_axes)
    proto = onnx.load(str(model_path))
    onnx.checker.check_model(proto, full_check=True)
    diffs = {}
    got = None
    for sample in (x, rng.standard_normal(other).astype(np.float32)):
        out = _run(model_path, sample)
        with torch.no_grad():
            want = model(torch.from_numpy(sample)).numpy()
        diff = float(np.max(np.abs(out - want)))
        if not (out.shape == want.shape and diff < ATOL):
            raise AssertionError(f"{name} at {sample.shape}: onnxruntime differs from torch ({out.shape} vs "
                                 f"{want.shape}, max diff {diff})")
        diffs[str(sample.shape)] = diff
        got = out if got is None else got
    save_reference(reference_path, [x], [got])
    info = ModelInfo(
        family="onnx_ocr", name=name, format="onnx", path=model_path, reference=reference_path,
        inputs={"input": shape}, outputs=["output"], input_dtype="float32", input_dtypes={"input": "float32"},
        output_shapes={"output": tuple(got.shape)}, output_dtypes={"output": "float32"},
        dynamic_axes={"input": axes, "output": out_axes},
        metadata={"exporter": exporter, "other_shape": list(other), "max_abs_diff_vs_torch": diffs,
                  "randomized": randomized, **onnx_facts(proto)},
    )
    return replace(info)


def main(argv: list[str]) -> int:
    """``OUT_DIR NAME=STEM ...``: build each model into OUT_DIR (one failing does not stop the others)."""
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_onnx_ocr", NAMES, ".onnx", LIBRARIES, batch=True))
    out_dir, failed = Path(argv[0]), 0
    for item in argv[1:]:
        name, stem = item.split("=", 1)
        try:
            info = _cache.build_here(FAMILY, name, out_dir, stem)
            print(f"built {name}: {info.metadata['num_nodes']} nodes in {info.metadata['build_time_s']} s", flush=True)
        except Exception as exc:  # the log keeps why; the others still build
            failed += 1
            print(f"FAILED {name}: {type(exc).__name__}: {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
