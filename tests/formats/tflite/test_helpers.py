"""Shared tools of the tflite tests: a ModelT comparator and a LiteRT runner (tested here too)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as fb
from ai_edge_litert.interpreter import Interpreter

from .test_models import real_models


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)


def unpack(data: bytes) -> Any:
    return fb.ModelT.InitFromPackedBuf(data, 0)


def _buffer_bytes(model: Any, data: bytes, index: int) -> bytes:
    buf = model.buffers[index]
    if buf.offset > 1:
        return data[buf.offset: buf.offset + buf.size]
    return b"" if buf.data is None else np.asarray(buf.data, np.uint8).tobytes()


class ModelDiff:
    """Field-by-field comparison of two unpacked models (``ModelT`` trees).

    Walks every attribute of the object API recursively.  Index fields that a
    writer may renumber are compared by what they designate: tensor and
    metadata buffers by their bytes (inline or after the flatbuffer), operator
    code indices by the code they select; the buffer table itself and buffer
    offsets/sizes (a layout detail) are skipped.  With ``strict=True`` indices
    must be identical as well.
    """

    _LAYOUT_FIELDS: ClassVar[set[tuple[str, str]]] = {("BufferT", "offset"), ("BufferT", "size"),
                      ("OperatorT", "largeCustomOptionsOffset"), ("OperatorT", "largeCustomOptionsSize")}

    def __init__(self, a: Any, a_bytes: bytes, b: Any, b_bytes: bytes, *, strict: bool = False) -> None:
        self.a, self.b = (a, a_bytes), (b, b_bytes)
        self.strict = strict
        self.problems: list[str] = []

    def run(self) -> list[str]:
        self._walk(self.a[0], self.b[0], "model")
        return self.problems

    def _walk(self, x: Any, y: Any, path: str) -> None:
        if len(self.problems) > 20:
            return
        if x is None or y is None:
            if x is not y:
                self.problems.append(f"{path}: {_short(x)} != {_short(y)}")
            return
        if type(x) is not type(y) and not (isinstance(x, (list, np.ndarray)) and isinstance(y, (list, np.ndarray))):
            self.problems.append(f"{path}: type {type(x).__name__} != {type(y).__name__}")
            return
        if hasattr(x, "__dict__") and type(x).__module__ == fb.__name__:
            cls = type(x).__name__
            for field, xv in vars(x).items():
                yv = getattr(y, field)
                here = f"{path}.{field}"
                if not self.strict and (cls, field) in self._LAYOUT_FIELDS:
                    continue
                if field in ("buffer",) and cls in ("TensorT", "MetadataT"):
                    self._same_buffer(xv, yv, here)
                    if not self.strict:
                        continue
                if cls == "OperatorT" and field == "customOptions":
                    xv, yv = self._custom_options(x, self.a), self._custom_options(y, self.b)
                if cls == "OperatorT" and field == "opcodeIndex":
                    self._walk(self.a[0].operatorCodes[xv], self.b[0].operatorCodes[yv], f"{here}->code")
                    if not self.strict:
                        continue
                if cls == "ModelT" and field == "buffers" and not self.strict:
                    self._buffer_sets(here)
                    continue
                if cls == "ModelT" and field == "metadataBuffer" and not self.strict and xv is not None and yv is not None:
                    for i, (p, q) in enumerate(zip(xv, yv)):
                        self._same_buffer(int(p), int(q), f"{here}[{i}]")
                    continue
                self._walk(xv, yv, here)
            return
        if isinstance(x, (list, np.ndarray)):
            if len(x) != len(y):
                self.problems.append(f"{path}: length {len(x)} != {len(y)}")
                return
            if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
                if x.dtype != y.dtype or x.tobytes() != y.tobytes():
                    self.problems.append(f"{path}: arrays differ ({x.dtype} vs {y.dtype})")
                return
            for i, (p, q) in enumerate(zip(x, y)):
                self._walk(p, q, f"{path}[{i}]")
            return
        if isinstance(x, float):
            if struct.pack("<d", x) != struct.pack("<d", y):
                self.problems.append(f"{path}: {x!r} != {y!r}")
            return
        if x != y:
            self.problems.append(f"{path}: {_short(x)} != {_short(y)}")

    def _same_buffer(self, i: int, j: int, path: str) -> None:
        if _buffer_bytes(self.a[0], self.a[1], i) != _buffer_bytes(self.b[0], self.b[1], j):
            self.problems.append(f"{path}: buffer {i} and buffer {j} hold different bytes")

    def _buffer_sets(self, path: str) -> None:
        def contents(side: tuple[Any, bytes]) -> list[bytes]:
            return sorted(_buffer_bytes(side[0], side[1], i) for i in range(len(side[0].buffers or [])))

        if [c for c in contents(self.a) if c] != [c for c in contents(self.b) if c]:
            self.problems.append(f"{path}: the non-empty buffers differ")

    @staticmethod
    def _custom_options(op: Any, side: tuple[Any, bytes]) -> bytes | None:
        if op.largeCustomOptionsOffset > 1:
            start = op.largeCustomOptionsOffset
            return side[1][start: start + op.largeCustomOptionsSize]
        return None if op.customOptions is None else np.asarray(op.customOptions, np.uint8).tobytes()


def model_diff(a_bytes: bytes, b_bytes: bytes, *, strict: bool = False) -> list[str]:
    return ModelDiff(unpack(a_bytes), a_bytes, unpack(b_bytes), b_bytes, strict=strict).run()


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 80 else text[:77] + "..."


def seeded_inputs(details: list[dict[str, Any]], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape, dtype = tuple(int(s) for s in d["shape"]), np.dtype(d["dtype"])
        if dtype.kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            out.append(rng.integers(max(info.min, -128), min(info.max, 127), shape, endpoint=True).astype(dtype))
        else:
            out.append(rng.integers(0, 2, shape).astype(dtype))
    return out


def run_tflite(data: bytes, *, seed: int = 0, invocations: int = 1) -> list[np.ndarray]:
    """Outputs of every invocation, run by LiteRT on seeded inputs."""
    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    outputs: list[np.ndarray] = []
    for k in range(invocations):
        for d, x in zip(interpreter.get_input_details(), seeded_inputs(interpreter.get_input_details(), seed + k)):
            interpreter.set_tensor(d["index"], x)
        interpreter.invoke()
        outputs += [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]
    return outputs


def same_outputs(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b))


# -- the tools themselves -----------------------------------------------------------

def test_comparator_finds_a_changed_field_a_changed_weight_and_a_changed_code(
    tflite_models: dict[str, Any],
) -> None:
    data = tflite_models["int8"].read_bytes()
    assert model_diff(data, data, strict=True) == []

    def repacked(edit: Any) -> bytes:
        import flatbuffers

        model = unpack(data)
        edit(model)
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def conv(m: Any) -> Any:
        return next(op for op in m.subgraphs[0].operators if hasattr(op.builtinOptions, "strideW"))

    def stride(m: Any) -> None:
        conv(m).builtinOptions.strideW += 1

    def weight(m: Any) -> None:
        t = m.subgraphs[0].tensors[conv(m).inputs[1]]
        data = np.array(m.buffers[t.buffer].data)
        data[0] ^= 1
        m.buffers[t.buffer].data = data

    def version(m: Any) -> None:
        m.operatorCodes[0].version += 1

    def scale(m: Any) -> None:
        m.subgraphs[0].tensors[0].quantization.scale = m.subgraphs[0].tensors[0].quantization.scale * 2

    for edit, where in ((stride, "strideW"), (weight, "buffer"), (version, "code"), (scale, "scale")):
        problems = model_diff(data, repacked(edit))
        assert problems and any(where in p for p in problems), (where, problems)


def test_runner_is_deterministic_and_seed_sensitive(tflite_models: dict[str, Any]) -> None:
    data = tflite_models["float"].read_bytes()
    assert same_outputs(run_tflite(data, seed=1), run_tflite(data, seed=1))
    assert not same_outputs(run_tflite(data, seed=1), run_tflite(data, seed=2))


@pytest.mark.parametrize("bad", [b"", b"abc"])
def test_runner_rejects_non_models(bad: bytes) -> None:
    with pytest.raises(ValueError):
        run_tflite(bad)
