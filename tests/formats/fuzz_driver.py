"""Seeded mutants of an example model through graphwright, in one process; one JSON line per case.

    python -m tests.formats.fuzz_driver FORMAT SEED FIRST COUNT WORKDIR

Case ``i`` mutates ``examples/small_cnn.<ext>`` with ``numpy.random.default_rng([SEED, format, i])``:
one of byte flips, a truncation, an insertion of random bytes, or the corruption of a
length field (a protobuf length prefix, a flatbuffer vector length or offset); every even
TFLite case runs a second mutant made through the IR (:func:`field_mutant`), which reaches the
reference interpreter's checks.  Each
mutant is written to WORKDIR and goes through ``formats.load`` and the command line
in-process — ``summarize``, then ``simplify`` (ONNX) or ``transform`` (GraphDef,
TFLite) and ``run --engine reference`` (TFLite) when it loads.  The driver prints
``{"start": i}`` before a case and ``{"case": i, ...}`` after it, so the caller
(``tests/formats/test_fuzz.py``, which runs it under an address-space limit and a
timeout) knows which case a crash or a hang belongs to.  A stage passes when it exits
0, or 2 with exactly one line on stderr and no traceback, and leaves the input file
unchanged.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXTENSIONS = {"onnx": "onnx", "graphdef": "pb", "tflite": "tflite"}
KINDS = ("flip", "truncate", "insert", "length")
_BAD_INTS = (0, -1, -7, 3, 1000, (1 << 31) - 1)
_BAD_SCALES = (0.0, -1.0, float("nan"), float("inf"), 1e-45, 1e38, 1e-30)
#: the command-line stages run on a mutant that loads, per format ({in}/{out}: the files)
STAGES: dict[str, list[list[str]]] = {
    "onnx": [["simplify", "{in}", "{out}"]],
    "graphdef": [["transform", "{in}", "{out}", "--inputs", "input", "--outputs", "Identity", "--transforms",
                  "strip_unused_nodes fold_constants fold_batch_norms fold_old_batch_norms sort_by_execution_order"]],
    "tflite": [["transform", "{in}", "{out}", "--transforms", "round_weights sort_by_execution_order"],
               ["run", "{in}", "--engine", "reference"]],
}


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return None


def _encode(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_fields(buf: bytes, start: int = 0, end: int | None = None, depth: int = 0,
                  out: list[tuple[int, int, int]] | None = None) -> list[tuple[int, int, int]]:
    """(position, width, value) of the length prefixes of protobuf fields, nested ones included
    wherever a payload parses as fields too (a tolerant walk: it stops where parsing fails)."""
    out = [] if out is None else out
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        key = _varint(buf, pos, end)
        if key is None or key[0] >> 3 == 0:
            return out
        wire, pos = key[0] & 7, key[1]
        if wire == 0:
            skipped = _varint(buf, pos, end)
            if skipped is None:
                return out
            pos = skipped[1]
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            length = _varint(buf, pos, end)
            if length is None or length[1] + length[0] > end:
                return out
            out.append((pos, length[1] - pos, length[0]))
            if depth < 12:
                length_fields(buf, length[1], length[1] + length[0], depth + 1, out)
            pos = length[1] + length[0]
        else:
            return out
    return out


def mutate(data: bytes, fmt: str, seed: int, case: int) -> tuple[str, bytes]:
    """The mutation of case ``case``: its kind and the mutated bytes (deterministic)."""
    rng = np.random.default_rng([seed, list(EXTENSIONS).index(fmt), case])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    buf = bytearray(data)
    if kind == "flip":
        for _ in range(int(rng.integers(1, 9))):
            buf[int(rng.integers(len(buf)))] ^= int(rng.integers(1, 256))
    elif kind == "truncate":
        del buf[int(rng.integers(len(buf))):]
    elif kind == "insert":
        at = int(rng.integers(len(buf) + 1))
        buf[at:at] = rng.integers(0, 256, int(rng.integers(1, 17)), dtype=np.uint8).tobytes()
    elif fmt == "tflite":  # a uint32 that can be a vector length or an offset
        spots = [p for p in range(0, len(buf) - 3, 4) if int.from_bytes(buf[p:p + 4], "little") < len(buf)]
        at = spots[int(rng.integers(len(spots)))]
        old = int.from_bytes(buf[at:at + 4], "little")
        new = _new_length(rng, old) & 0xFFFFFFFF
        buf[at:at + 4] = new.to_bytes(4, "little")
    else:  # a protobuf length prefix, re-encoded (its width may change)
        fields = length_fields(bytes(buf))
        if not fields:
            return kind, bytes(buf[: len(buf) // 2])
        at, width, old = fields[int(rng.integers(len(fields)))]
        buf[at:at + width] = _encode(_new_length(rng, old) & ((1 << 64) - 1))
    return kind, bytes(buf)


def field_mutant(data: bytes, seed: int, case: int) -> bytes:
    """Case ``case``'s second TFLite mutant, made through the IR: one attribute, quantization
    parameter or small constant of one operator set to a bad value, or the operator reading another
    tensor (what byte flips rarely hit), written by graphwright's writer."""
    return _field(data, np.random.default_rng([seed, len(EXTENSIONS), case]))


def _field(data: bytes, rng: np.random.Generator) -> bytes:
    from graphwright import formats  # lazy: the byte-level helpers import without graphwright
    from graphwright.formats.tflite import read_model
    from graphwright.ir import Attr, AttrKind, QuantParams, Tensor

    model = read_model(data)
    nodes = list(model.graph)
    k = int(rng.integers(len(nodes)))
    node = nodes[k]
    choice = int(rng.integers(4))
    ints = [name for name, attr in node.attrs.items() if attr.kind is AttrKind.INT]
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    quantized = [v for v in values if v.quant is not None and v.quant.scale.size]
    consts = [v for v in node.inputs if v is not None and v.const is not None and v.const.size <= 16
              and v.const.dtype.value in ("int32", "int64")]
    if choice == 0 and ints:
        node.attrs[ints[int(rng.integers(len(ints)))]] = Attr.int(_BAD_INTS[int(rng.integers(len(_BAD_INTS)))])
    elif choice == 1 and quantized:
        value = quantized[int(rng.integers(len(quantized)))]
        q = value.quant
        scale, zp = q.scale.copy(), q.zero_point.copy()
        at = int(rng.integers(scale.size))
        if rng.integers(3):
            scale[at] = _BAD_SCALES[int(rng.integers(len(_BAD_SCALES)))]
        else:
            zp = np.resize(zp, scale.shape)
            zp[at] = int(rng.integers(-(1 << 40), 1 << 40))
        value.quant = QuantParams(scale, zp, q.axis)
    elif choice == 2 and consts:
        value = consts[int(rng.integers(len(consts)))]
        array = value.const.numpy().copy()
        array.reshape(-1)[int(rng.integers(array.size))] = (0, -1, 1 << 20, 1 << 30)[int(rng.integers(4))]
        value.const = Tensor.from_numpy(array, value.const.dtype)
    elif k > 0 and node.inputs and node.inputs[0] is not None:
        earlier = [v for n in nodes[:k] for v in n.outputs]
        node.replace_input(0, earlier[int(rng.integers(len(earlier)))])
    try:
        return formats.serialize(model)
    except Exception:  # a value the writer cannot store (an int8 field given 1000): keep the file
        return data


def _new_length(rng: np.random.Generator, old: int) -> int:
    choices = [0, old + 1, max(old - 1, 0), old * 2, old + int(rng.integers(1, 1000)),
               int(rng.integers(0, 1 << 32)), (1 << 31) - 1, (1 << 32) - 1, (1 << 63) - 1]
    return choices[int(rng.integers(len(choices)))]


def _cli(args: list[str]) -> tuple[int, list[str]]:
    from graphwright.cli.main import main  # lazy: the mutation helpers import without graphwright

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = int(main(args) or 0)
        except SystemExit as e:  # argparse
            rc = int(e.code or 0)
    return rc, [line for line in err.getvalue().splitlines() if line.strip()]


def run_case(fmt: str, seed: int, case: int, workdir: Path, data: bytes, kind: str = "") -> dict[str, object]:
    """Mutate (``kind="field"``: :func:`field_mutant`), write, and run every stage; returns what
    each stage did."""
    from graphwright import formats
    from graphwright.errors import GraphwrightError

    if kind == "field":
        mutant = field_mutant(data, seed, case)
    else:
        kind, mutant = mutate(data, fmt, seed, case)
    ext = EXTENSIONS[fmt]
    path, out = workdir / f"case.{ext}", workdir / f"out.{ext}"
    path.write_bytes(mutant)
    stages: list[list[object]] = []
    try:
        formats.load(path)
        stages.append(["load", 0, 0, ""])
        loaded = True
    except GraphwrightError as e:
        text = str(e)
        stages.append(["load", 2, text.count("\n") + 1, text[:300]])
        loaded = False
    except Exception as e:  # a failure of the reader: reported, the test fails on it
        stages.append(["load", 3, 1, f"{type(e).__name__}: {e}"[:300]])
        loaded = False
    commands = [["summarize", "{in}"]] + (STAGES[fmt] if loaded else [])
    for command in commands:
        args = [str(path) if a == "{in}" else str(out) if a == "{out}" else a for a in command]
        rc, lines = _cli(args)
        first = lines[0][:300] if lines else ""
        if any("Traceback" in line for line in lines):
            rc = 99
        if path.read_bytes() != mutant:
            rc, first = 98, "the input file was changed"
        stages.append([command[0], rc, len(lines), first])
        out.unlink(missing_ok=True)
    return {"case": case, "kind": kind, "size": len(mutant), "stages": stages}


def ok(stage: list[object]) -> bool:
    """A stage's outcome is allowed: success, or exit 2 with exactly one stderr line."""
    _, rc, lines, _ = stage
    return rc == 0 or (rc == 2 and lines == 1)


def main(argv: list[str]) -> int:
    fmt, seed, first, count, workdir = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4])
    data = (EXAMPLES / f"small_cnn.{EXTENSIONS[fmt]}").read_bytes()
    workdir.mkdir(parents=True, exist_ok=True)
    for case in range(first, first + count):
        print(json.dumps({"start": case}), flush=True)
        print(json.dumps(run_case(fmt, seed, case, workdir, data)), flush=True)
        if fmt == "tflite" and case % 2 == 0:  # every other case: a second mutant, through the IR
            print(json.dumps({"start": case}), flush=True)
            print(json.dumps(run_case(fmt, seed, case, workdir, data, "field")), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main(sys.argv[1:]))
