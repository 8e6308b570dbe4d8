"""YOLO-family detectors in plain torch, exported to ONNX with a fixed and a dynamic input size.

Two small (width-scaled) detectors written here from the architectures' descriptions, no
ultralytics package:

* ``yolov5_*``: Focus stem (space-to-depth by strided slices) -> Conv-BN-SiLU / C3 backbone -> SPPF ->
  PANet neck (nearest upsampling, concatenation) -> anchor-based Detect head on strides 8/16/32:
  per level ``view(b, anchors, outputs, ny, nx).permute``, sigmoid, the grid and the anchor grid built
  from the feature map's run-time size, ``xy = (2 s - 0.5 + grid) * stride``, ``wh = (2 s)^2 * anchor``,
  the three levels concatenated into ``[B, boxes, 5 + classes]``;
* ``yolov8_*``: Conv stem -> C2f backbone (split, chained bottlenecks, concat of every stage) -> SPPF ->
  PANet neck of C2f blocks -> decoupled anchor-free head (box branch of ``4 * reg_max`` distribution bins,
  class branch), DFL (softmax over the bins, a fixed 1x1 conv by ``0..reg_max-1``), anchor points and
  strides made from the feature maps' sizes (``make_anchors``), ``dist2bbox`` to centre/size, sigmoid
  scores; output ``[B, 4 + classes, anchors]``.

Each with the TorchScript exporter (``_ts``, opset 17, no constant folding) and the dynamo exporter
(``_dynamo``, opset 18), at a fixed 1x3x320x320 input and (``_dyn``) with dynamic batch, height and
width (multiples of 32).  Weights are random, and BatchNorm statistics and biases are randomized.
Each build checks onnxruntime against torch (at two sizes of every dynamic dim for ``_dyn``).

Runs inside a build subprocess: ``python -m tests.models.build_onnx_yolo OUT_DIR NAME=STEM ...``
(the pytest side, ``tests/simplify/test_yolo_exports.py``, registers the ``onnx_yolo`` family and
starts this process; nothing in the pytest process imports torch).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from . import _cache
from ._info import ModelInfo, save_reference
from ._torch_common import onnx_facts, randomize_norms_and_biases

FAMILY = "onnx_yolo"
#: Libraries whose versions shape the files (part of the cache key).
LIBRARIES = (("torch", ("torch",)), ("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime",)),
             ("onnxscript", ("onnxscript",)))
BUILDER_VERSION = 1  # bump to rebuild cached models made by this module

NAMES = ("yolov5_ts", "yolov5_ts_dyn", "yolov5_dynamo", "yolov5_dynamo_dyn",
         "yolov8_ts", "yolov8_ts_dyn", "yolov8_dynamo", "yolov8_dynamo_dyn")
SEED = 0
SIZE = 320
OTHER = (2, 3, 256, 384)  # the second input shape of a dynamic export: every dynamic dim differs
CLASSES = 20
RTOL, ATOL = 1e-4, 1e-3  # boxes are in pixels (hundreds)


class Conv(nn.Module):
    """Conv (no bias) -> BatchNorm -> SiLU."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool = True, k: tuple[int, int] = (1, 3)) -> None:
        super().__init__()
        self.cv1 = Conv(c, c, k[0])
        self.cv2 = Conv(c, c, k[1])
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class Focus(nn.Module):
    """YOLOv5's original stem: space-to-depth by four strided slices, then a Conv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = Conv(cin * 4, cout, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))


class C3(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2, self.cv3 = Conv(cin, c), Conv(cin, c), Conv(2 * c, cout)
        self.m = nn.Sequential(*(Bottleneck(c, shortcut) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C2f(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1 = Conv(cin, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, cout)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut, (3, 3)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        c = cin // 2
        self.cv1, self.cv2 = Conv(cin, c), Conv(4 * c, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class DetectV5(nn.Module):
    """Anchor-based head: grid and anchor grid from the run-time feature size, decoded boxes."""

    ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))
    STRIDES = (8, 16, 32)

    def __init__(self, channels: tuple[int, ...]) -> None:
        super().__init__()
        self.no, self.na = CLASSES + 5, 3
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)
        self.register_buffer("anchors", torch.tensor(self.ANCHORS, dtype=torch.float32).view(3, 3, 2))

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        z = []
        for i, conv in enumerate(self.m):
            x = conv(feats[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32), torch.arange(nx, dtype=torch.float32),
                                    indexing="ij")
            grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2) - 0.5
            anchor_grid = self.anchors[i].view(1, self.na, 1, 1, 2).expand(1, self.na, ny, nx, 2)
            xy, wh, conf = x.sigmoid().split((2, 2, self.no - 4), 4)
            xy = (xy * 2 + grid) * self.STRIDES[i]
            wh = (wh * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class YOLOv5(nn.Module):
    def __init__(self, w: int = 16) -> None:
        super().__init__()
        self.b0 = nn.Sequential(Focus(3, w), Conv(w, 2 * w, 3, 2), C3(2 * w, 2 * w), Conv(2 * w, 4 * w, 3, 2),
                                C3(4 * w, 4 * w, 2))  # P3
        self.b1 = nn.Sequential(Conv(4 * w, 8 * w, 3, 2), C3(8 * w, 8 * w, 2))  # P4
        self.b2 = nn.Sequential(Conv(8 * w, 16 * w, 3, 2), C3(16 * w, 16 * w), SPPF(16 * w, 16 * w))  # P5
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h5 = Conv(16 * w, 8 * w)
        self.c4 = C3(16 * w, 8 * w, shortcut=False)
        self.h4 = Conv(8 * w, 4 * w)
        self.c3 = C3(8 * w, 4 * w, shortcut=False)
        self.d3 = Conv(4 * w, 4 * w, 3, 2)
        self.n4 = C3(8 * w, 8 * w, shortcut=False)
        self.d4 = Conv(8 * w, 8 * w, 3, 2)
        self.n5 = C3(16 * w, 16 * w, shortcut=False)
        self.detect = DetectV5((4 * w, 8 * w, 16 * w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b0(x)
        p4 = self.b1(p3)
        p5 = self.b2(p4)
        t5 = self.h5(p5)
        t4 = self.h4(self.c4(torch.cat((self.up(t5), p4), 1)))
        o3 = self.c3(torch.cat((self.up(t4), p3), 1))
        o4 = self.n4(torch.cat((self.d3(o3), t4), 1))
        o5 = self.n5(torch.cat((self.d4(o4), t5), 1))
        return self.detect([o3, o4, o5])


class DFL(nn.Module):
    """Distribution focal loss integral: softmax over ``reg_max`` bins, a fixed 1x1 conv by 0..reg_max-1."""

    def __init__(self, reg_max: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1)
        self.c1 = reg_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats: list[torch.Tensor], strides: tuple[int, ...],
                 offset: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor points (cell centres) and their strides, from each feature map's size."""
    points, stride_tensor = [], []
    for feat, stride in zip(feats, strides):
        h, w = feat.shape[2:]
        sx = torch.arange(w, dtype=feat.dtype) + offset
        sy = torch.arange(h, dtype=feat.dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), float(stride), dtype=feat.dtype))
    return torch.cat(points), torch.cat(stride_tensor)


def dist2bbox(distance: torch.Tensor, anchor_points: torch.Tensor, dim: int = 1) -> torch.Tensor:
    lt, rb = distance.chunk(2, dim)
    x1y1, x2y2 = anchor_points - lt, anchor_points + rb
    return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)


class DetectV8(nn.Module):
    STRIDES = (8, 16, 32)

    def __init__(self, channels: tuple[int, ...], reg_max: int = 16) -> None:
        super().__init__()
        self.reg_max, self.no = reg_max, CLASSES + 4 * reg_max
        c2, c3 = max(16, channels[0] // 4, 4 * reg_max), max(channels[0], min(CLASSES, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
                                 for c in channels)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, CLASSES, 1))
                                 for c in channels)
        self.dfl = DFL(reg_max)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        x = [torch.cat((self.cv2[i](f), self.cv3[i](f)), 1) for i, f in enumerate(feats)]
        shape = x[0].shape
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(x, self.STRIDES))
        x_cat = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2)
        box, cls = x_cat.split((4 * self.reg_max, CLASSES), 1)
        dbox = dist2bbox(self.dfl(box), anchors.unsqueeze(0), dim=1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class YOLOv8(nn.Module):
    def __init__(self, w: int = 16) -> None:
        super().__init__()
        self.b0 = nn.Sequential(Conv(3, w, 3, 2), Conv(w, 2 * w, 3, 2), C2f(2 * w, 2 * w, 1, True),
                                Conv(2 * w, 4 * w, 3, 2), C2f(4 * w, 4 * w, 2, True))  # P3
        self.b1 = nn.Sequential(Conv(4 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w, 2, True))  # P4
        self.b2 = nn.Sequential(Conv(8 * w, 16 * w, 3, 2), C2f(16 * w, 16 * w, 1, True), SPPF(16 * w, 16 * w))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.c4 = C2f(24 * w, 8 * w)
        self.c3 = C2f(12 * w, 4 * w)
        self.d3 = Conv(4 * w, 4 * w, 3, 2)
        self.n4 = C2f(12 * w, 8 * w)
        self.d4 = Conv(8 * w, 8 * w, 3, 2)
        self.n5 = C2f(24 * w, 16 * w)
        self.detect = DetectV8((4 * w, 8 * w, 16 * w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b0(x)
        p4 = self.b1(p3)
        p5 = self.b2(p4)
        t4 = self.c4(torch.cat((self.up(p5), p4), 1))
        o3 = self.c3(torch.cat((self.up(t4), p3), 1))
        o4 = self.n4(torch.cat((self.d3(o3), t4), 1))
        o5 = self.n5(torch.cat((self.d4(o4), p5), 1))
        return self.detect([o3, o4, o5])


_AXES = {0: "batch", 2: "height", 3: "width"}


def _export(model: nn.Module, x: torch.Tensor, path: Path, exporter: str, dynamic: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            axes = {"input": _AXES, "output": {0: "batch", 1 if isinstance(model, YOLOv5) else 2: "boxes"}}
            torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, do_constant_folding=False,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes=axes if dynamic else None)
        else:
            dims = ({0: torch.export.Dim("batch", min=1, max=64),
                     2: 32 * torch.export.Dim("height_32", min=2, max=64),
                     3: 32 * torch.export.Dim("width_32", min=2, max=64)},) if dynamic else None
            program = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, input_names=["input"],
                                        output_names=["output"], dynamic_shapes=dims, verbose=False)
            program.save(str(path))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"input": x})[0])


def build(name: str, model_path: Path, reference_path: Path) -> ModelInfo:
    """Build, export and check one detector against torch (two input shapes if dynamic); its ModelInfo."""
    kind, exporter, *rest = name.split("_")
    dynamic = rest == ["dyn"]
    torch.manual_seed(SEED)
    model = {"yolov5": YOLOv5, "yolov8": YOLOv8}[kind]().eval()
    randomized = randomize_norms_and_biases(model, SEED)
    rng = np.random.default_rng(SEED)
    shape = (1, 3, SIZE, SIZE)
    x = rng.standard_normal(shape).astype(np.float32)
    _export(model, torch.from_numpy(x), model_path, exporter, dynamic)
    proto = onnx.load(str(model_path))
    onnx.checker.check_model(proto, full_check=True)
    diffs, got = {}, None
    for sample in (x, rng.standard_normal(OTHER).astype(np.float32)) if dynamic else (x,):
        out = _run(model_path, sample)
        with torch.no_grad():
            want = model(torch.from_numpy(sample)).numpy()
        if not (out.shape == want.shape and np.allclose(out, want, rtol=RTOL, atol=ATOL)):
            raise AssertionError(f"{name} at {sample.shape}: onnxruntime differs from torch ({out.shape} vs "
                                 f"{want.shape}, max diff {np.max(np.abs(out - want)) if out.shape == want.shape else '-'})")
        diffs[str(sample.shape)] = float(np.max(np.abs(out - want)))
        got = out if got is None else got
    save_reference(reference_path, [x], [got])
    axes = {"input": _AXES, "output": {0: "batch", 1 if kind == "yolov5" else 2: "boxes"}} if dynamic else \
        {"input": {}, "output": {}}
    return ModelInfo(
        family=FAMILY, name=name, format="onnx", path=model_path, reference=reference_path,
        inputs={"input": shape}, outputs=["output"], input_dtype="float32", input_dtypes={"input": "float32"},
        output_shapes={"output": tuple(got.shape)}, output_dtypes={"output": "float32"}, dynamic_axes=axes,
        metadata={"exporter": exporter, "other_shape": list(OTHER if dynamic else shape),
                  "max_abs_diff_vs_torch": diffs, "randomized": randomized, **onnx_facts(proto)},
    )


def main(argv: list[str]) -> int:
    """``OUT_DIR NAME=STEM ...``: build each model into OUT_DIR (one failing does not stop the others)."""
    _cache.FAMILIES.setdefault(FAMILY, _cache.Family("build_onnx_yolo", NAMES, ".onnx", LIBRARIES, batch=True))
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
