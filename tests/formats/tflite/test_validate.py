"""Corrupt, hostile and inconsistent TFLite files give one-line ModelLoadErrors, never a hang."""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as fb

from graphwright import formats
from graphwright.errors import ModelLoadError, ModelSaveError
from graphwright.formats import tflite
from graphwright.formats.tflite import _schema as S
from graphwright.formats.tflite import validate as V

from .test_helpers import unpack
from .test_models import real_models


@pytest.fixture(scope="session")
def tflite_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return real_models(tmp_path_factory)


def _load_error(data: bytes) -> str:
    with pytest.raises(ModelLoadError) as caught:
        tflite.read_model(data, "m.tflite")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("m.tflite: ")
    return message


def _pack(model: Any) -> bytes:
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _edited(path: Path, edit: Callable[[Any], Any]) -> bytes:
    model = unpack(path.read_bytes())
    edit(model)
    return _pack(model)


# -- the verifier's view of the schema matches the installed schema module --------------

def _accessor_kinds(table: str) -> dict[int, str]:
    kinds = {}
    for name, method in vars(getattr(fb, table)).items():
        if not callable(method) or name.startswith(("_", "GetRootAs", "Init")) or name.endswith(
                ("AsNumpy", "Length", "IsNone", "HasIdentifier")):
            continue
        source = inspect.getsource(method)
        slot = re.search(r"Offset\((\d+)\)", source)
        if slot is None:
            continue
        if "String(" in source:
            kind = "str"
        elif "Union(" in source:
            kind = "union"
        elif "Vector(o)" in source and "Indirect(x)" in source:
            kind = "vtab"
        elif "Vector(o)" in source:
            kind = "vec"
        elif "Indirect(o" in source:
            kind = "tab"
        else:
            continue  # scalar
        kinds[int(slot.group(1))] = kind
    return kinds


def test_layout_table_matches_the_generated_accessors() -> None:
    names = {V._VEC: "vec", V._STR: "str", V._TAB: "tab", V._VTAB: "vtab", V._UNION: "union"}
    for table, fields in V.LAYOUT.items():
        kinds = _accessor_kinds(table)
        if table.endswith("Options"):  # their scalar vectors are left to numpy's bounds checks
            kinds = {slot: kind for slot, kind in kinds.items() if kind != "vec"}
        assert {slot: names[kind] for slot, kind, _ in fields} == kinds, table


def test_every_table_with_offsets_is_in_the_layout() -> None:
    tables = {"Model", "OperatorCode", "SubGraph", "Tensor", "QuantizationParameters", "SparsityParameters",
              "DimensionMetadata", "VariantSubType", "Operator", "Buffer", "Metadata", "SignatureDef",
              "TensorMap", "ExternalBufferGroup", "ExternalBuffer"}
    for members in (S.OPTIONS, S.OPTIONS2, S.QUANT_DETAILS, S.SPARSE_INDEX_VECTORS):
        tables |= {m for m in members if m != "NONE"}
    for table in tables:
        kinds = _accessor_kinds(table)
        # scalar vectors of options tables are bounds-checked numpy views: only strings need walking
        needed = {s for s, k in kinds.items() if k != "vec"} if table.endswith("Options") else set(kinds)
        assert needed <= {slot for slot, _, _ in V.LAYOUT.get(table, ())}, table


# -- malformed bytes ---------------------------------------------------------------------

def test_short_empty_and_foreign_files() -> None:
    assert "too short" in _load_error(b"")
    assert "too short" in _load_error(b"\x10\0\0\0TFL")
    assert "TFL3 file identifier" in _load_error(b"\x08\0\0\0ONNX" + bytes(64))
    assert "root offset" in _load_error(b"\xff\xff\0\0TFL3" + bytes(64))


def test_truncated_files_fail_cleanly(tflite_models: dict[str, Path]) -> None:
    for name in ("float", "int8", "control_flow"):
        data = tflite_models[name].read_bytes()
        for cut in sorted({*range(0, 64, 3), *range(64, len(data), max(1, len(data) // 60))}):
            _load_error(data[:cut])


def test_random_bytes_behind_a_tflite_header_fail_cleanly() -> None:
    rng = random.Random(1234)
    for size in (16, 100, 1000, 20000):
        for _ in range(40):
            body = bytes(rng.randrange(256) for _ in range(size))
            root = rng.choice([8, 12, 16, rng.randrange(2 ** 32)]).to_bytes(4, "little")
            _load_error(root + b"TFL3" + body)


@pytest.mark.parametrize("name, seed", [("float", 11), ("int8", 12), ("control_flow", 13)])
def test_mutated_real_models_load_or_fail_with_model_load_error(
    tflite_models: dict[str, Path], name: str, seed: int,
) -> None:
    data = tflite_models[name].read_bytes()
    rng = random.Random(seed)
    outcomes = {"loaded": 0, "rejected": 0}
    for _ in range(300):
        mutated = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0:  # bit flips
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(len(mutated))
                mutated[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a random aligned 32-bit word (offsets, lengths, indices)
            pos = rng.randrange(0, len(mutated) - 4) & ~3
            mutated[pos:pos + 4] = rng.randrange(2 ** 32).to_bytes(4, "little")
        else:  # a random byte
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            model = tflite.read_model(bytes(mutated), "fuzz")
        except ModelLoadError as e:
            assert "\n" not in str(e)
            outcomes["rejected"] += 1
            continue
        outcomes["loaded"] += 1
        try:
            tflite.serialize(model)
        except ModelSaveError:
            pass
    assert outcomes["loaded"] and outcomes["rejected"]


def test_aliased_offsets_cannot_make_loading_quadratic() -> None:
    builder = flatbuffers.Builder(1 << 20)
    name = builder.CreateString("t" * 64)
    fb.TensorStart(builder)
    fb.TensorAddName(builder, name)
    tensor = fb.TensorEnd(builder)
    fb.SubGraphStartTensorsVector(builder, 20000)
    for _ in range(20000):
        builder.PrependUOffsetTRelative(tensor)
    tensors = builder.EndVector()
    fb.SubGraphStart(builder)
    fb.SubGraphAddTensors(builder, tensors)
    subgraph = fb.SubGraphEnd(builder)
    fb.ModelStartSubgraphsVector(builder, 20000)
    for _ in range(20000):
        builder.PrependUOffsetTRelative(subgraph)
    subgraphs = builder.EndVector()
    fb.ModelStart(builder)
    fb.ModelAddSubgraphs(builder, subgraphs)
    builder.Finish(fb.ModelEnd(builder), file_identifier=b"TFL3")
    assert "reference the same data" in _load_error(bytes(builder.Output()))


def test_unknown_union_types_are_reported(tflite_models: dict[str, Path]) -> None:
    def edit(m: Any) -> None:
        op = next(op for op in m.subgraphs[0].operators if op.builtinOptions is not None)
        op.builtinOptionsType = 250

    assert "BuiltinOptions type 250" in _load_error(_edited(tflite_models["float"], edit))


def test_fields_from_a_newer_schema_load_but_are_not_silently_dropped(
    tflite_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    slots = S.num_slots("Tensor")

    def start(builder: flatbuffers.Builder) -> None:
        builder.StartObject(slots + 1)

    def end(builder: flatbuffers.Builder) -> int:
        builder.PrependInt32Slot(slots, 7, 0)
        return int(builder.EndObject())

    model = unpack(tflite_models["float"].read_bytes())
    monkeypatch.setattr(fb, "TensorStart", start)
    monkeypatch.setattr(fb, "TensorEnd", end)
    data = _pack(model)
    monkeypatch.undo()
    loaded = tflite.read_model(data)
    assert loaded.meta["tflite.unknown_fields"] == [f"Tensor field #{slots}"]
    with pytest.raises(ModelSaveError, match="unknown to the installed"):
        tflite.serialize(loaded)


# -- well-formed flatbuffers that do not make a valid model ------------------------------

def _first(m: Any, op: str) -> Any:
    code = S.BUILTIN_CODES[op]
    return next(o for o in m.subgraphs[0].operators
                if max(m.operatorCodes[o.opcodeIndex].builtinCode, m.operatorCodes[o.opcodeIndex].deprecatedBuiltinCode) == code)


def _const_index(m: Any) -> int:
    sg = m.subgraphs[0]
    return next(i for i, t in enumerate(sg.tensors) if m.buffers[t.buffer].data is not None)


def _with(vector: Any, i: int, value: int) -> np.ndarray:
    out = np.array(vector)
    out[i] = value
    return out


def _set(obj: Any, **fields: Any) -> None:
    for k, v in fields.items():
        setattr(obj, k, v)


EDITS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    "op input": ("float", lambda m: _set(m.subgraphs[0].operators[0], inputs=_with(m.subgraphs[0].operators[0].inputs, 0, 999)),
                 "refers to tensor 999"),
    "tensor buffer": ("float", lambda m: _set(m.subgraphs[0].tensors[0], buffer=9999), "refers to buffer 9999"),
    "opcode": ("float", lambda m: _set(m.subgraphs[0].operators[0], opcodeIndex=99), "opcode index 99"),
    "negative dim": ("float", lambda m: _set(m.subgraphs[0].tensors[0], shape=_with(m.subgraphs[0].tensors[0].shape, 1, -3)),
                     "negative dimension"),
    "signature shape": ("float", lambda m: _set(m.subgraphs[0].tensors[0], shapeSignature=np.array([-1], np.int32)),
                        "inconsistent with shape"),
    "const size": ("float", lambda m: _set(m.buffers[m.subgraphs[0].tensors[_const_index(m)].buffer],
                                           data=m.buffers[m.subgraphs[0].tensors[_const_index(m)].buffer].data[:-4]),
                   "bytes but shape"),
    "graph input": ("float", lambda m: _set(m.subgraphs[0], inputs=np.array([123], np.int32)),
                    "input refers to tensor 123"),
    "signature": ("float", lambda m: _set(m.signatureDefs[0].inputs[0], tensorIndex=500), "signature"),
    "two producers": ("float", lambda m: _set(m.subgraphs[0].operators[1], outputs=m.subgraphs[0].operators[0].outputs),
                      "produced by operators"),
    "reads too early": ("float", lambda m: _set(m.subgraphs[0].operators[0],
                                                inputs=_with(m.subgraphs[0].operators[0].inputs, 0,
                                                             m.subgraphs[0].operators[1].outputs[0])),
                        "before operator 1 writes it"),
    "writes constant": ("float", lambda m: _set(m.subgraphs[0].operators[0], outputs=np.array([_const_index(m)], np.int32)),
                        "holds constant data"),
    "writes input": ("float", lambda m: _set(m.subgraphs[0].operators[0], outputs=m.subgraphs[0].inputs[:1]),
                     "also written by operator"),
    "subgraph call": ("control_flow", lambda m: _set(_first(m, "WHILE").builtinOptions, condSubgraphIndex=9),
                      "calls subgraph 9"),
    "zero points": ("int8", lambda m: _set(next(t.quantization for t in m.subgraphs[0].tensors
                                                 if t.quantization.scale is not None and len(t.quantization.scale) > 1),
                                            zeroPoint=np.zeros(1, np.int64)), "scales but 1 zero points"),
    "channel axis": ("int8", lambda m: _set(next(t.quantization for t in m.subgraphs[0].tensors
                                                  if t.quantization.scale is not None and len(t.quantization.scale) > 1),
                                             quantizedDimension=7), "quantized along dimension 7"),
    "sentinel": ("float", lambda m: _set(m.buffers[0], data=np.ones(4, np.uint8)), "empty sentinel"),
    "custom code": ("custom", lambda m: _set(m.operatorCodes[0], customCode=None), "no custom_code"),
    "buffer offset": ("float", lambda m: _set(m.buffers[m.subgraphs[0].tensors[_const_index(m)].buffer],
                                              data=None, offset=10 ** 9, size=10), "spans bytes"),
    "unknown options type": ("float", lambda m: _set(m.subgraphs[0].operators[-1], builtinOptionsType=250,
                                                     builtinOptions=None), "no readable options table"),
    "options table missing": ("float", lambda m: _set(m.subgraphs[0].operators[-1], builtinOptions=None,
                                                      builtinOptionsType=fb.BuiltinOptions.Conv2DOptions),
                              "of type 1 but no readable options table"),
    "mutating inputs": ("float", lambda m: _set(m.subgraphs[0].operators[0], mutatingVariableInputs=[True]),
                        "mutating_variable_inputs"),
    "metadata": ("float", lambda m: _set(m.metadata[0], buffer=777), "metadata refers to buffer 777"),
    "metadata_buffer": ("float", lambda m: _set(m, metadataBuffer=np.array([777], np.int32)), "metadata_buffer"),
    "no subgraphs": ("float", lambda m: _set(m, subgraphs=[], signatureDefs=None), "no subgraphs"),
    "string buffer": ("float", lambda m: (_set(m.subgraphs[0].tensors[_const_index(m)], type=S.TENSOR_TYPES["STRING"]),
                                          _set(m.buffers[m.subgraphs[0].tensors[_const_index(m)].buffer],
                                               data=np.array([5, 0, 0, 0], np.uint8))), "cannot hold 5 strings"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_inconsistent_models_are_rejected_with_the_reason(tflite_models: dict[str, Path], case: str) -> None:
    name, edit, message = EDITS[case]
    assert message in _load_error(_edited(tflite_models[name], edit))


def test_top_level_load_names_the_file(tmp_path: Path, tflite_models: dict[str, Path]) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(tflite_models["float"].read_bytes()[:300])
    with pytest.raises(ModelLoadError, match=re.escape(str(bad))):
        formats.load(bad)
