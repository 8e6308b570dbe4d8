"""What every post-training quantization transform shares: its options and the ranges it reads.

A *ranges* mapping gives, for a value of the float model (by its IR name), the ``(min, max)`` its
float tensor takes on calibration data — computed by :mod:`graphwright.quantize.calibration` with
one of its methods, or written by hand.  On disk it is JSON::

    {"format": "graphwright.ranges/1", "method": "minmax", "ranges": {"conv1/Relu": [0.0, 6.0], ...}}

The quantizing transforms read the JSON file (pipelines) or take the mapping (Python API); a
value they need but the mapping does not hold is an error naming it, never a guess.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import TransformError

__all__ = [
    "ACTIVATION_TYPES", "RANGES_FORMAT", "WEIGHT_TYPES", "QuantOptions", "Ranges",
    "load_ranges", "ranges_json", "resolve_ranges",
]

#: The ``format`` key a ranges file carries.
RANGES_FORMAT = "graphwright.ranges/1"
ACTIVATION_TYPES = ("int8", "uint8", "int16")
#: ``float16`` is TFLite weight-only (the converter's float16 mode).
WEIGHT_TYPES = ("int8", "uint8", "int4", "uint4", "float16")

Ranges = Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class QuantOptions:
    """Options of quantize_static / quantize_dynamic / quantize_weights, for every format.

    ``io_type`` (TFLite full-integer only): the type of the model's inputs and outputs —
    ``float32`` keeps float edges with QUANTIZE/DEQUANTIZE, ``int8``/``int16`` makes them integer.
    ``target`` (ONNX only): ``generic`` writes standard-domain ops only; ``onnxruntime`` may use
    its contrib ops (``MatMulNBits``, com.microsoft int16 Q/DQ below opset 21).
    ``int4_method`` (ONNX 4-bit weights): ``mse`` picks each block's scale to minimise its squared
    weight error (never above round-to-nearest's); ``rtn`` is onnxruntime's ``MatMulNBitsQuantizer``
    (round-to-nearest of the block's range: the same bytes); ``gptq`` chooses the codes with each layer's
    input Hessian from calibration data (:mod:`.gptq_onnx`; layers without one: ``mse``).
    ``accuracy_level`` (ONNX 4-bit, ``target="onnxruntime"``): ``MatMulNBits``' attribute — 4 (default)
    lets onnxruntime compute with int8 activations quantized per block at run time (~1.7x faster on
    CPU than float, -0.03 dB output SQNR on GPT-2 / BERT-base), 0 leaves it unset (float32 compute,
    ``MatMulNBitsQuantizer``'s default); 1-3: float32, float16, bfloat16 where supported.
    """

    activation_type: str = "int8"
    weight_type: str = "int8"
    per_channel: bool = True
    symmetric_activations: bool = False
    symmetric_weights: bool = True
    exclude_ops: frozenset[str] = field(default_factory=frozenset)
    exclude_nodes: frozenset[str] = field(default_factory=frozenset)
    io_type: str = "float32"
    block_size: int = 128
    target: str = "generic"
    int4_method: str = "mse"
    accuracy_level: int = 4

    def __post_init__(self) -> None:
        if self.activation_type not in ACTIVATION_TYPES:
            raise TransformError(f"activation_type must be one of {', '.join(ACTIVATION_TYPES)}, "
                                 f"got {self.activation_type!r}")
        if self.weight_type not in WEIGHT_TYPES:
            raise TransformError(f"weight_type must be one of {', '.join(WEIGHT_TYPES)}, got {self.weight_type!r}")
        if self.io_type not in ("float32", "int8", "uint8", "int16"):
            raise TransformError(f"io_type must be float32, int8, uint8 or int16, got {self.io_type!r}")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise TransformError(f"block_size must be a power of two >= 16, got {self.block_size}")
        if self.target not in ("generic", "onnxruntime"):
            raise TransformError(f"target must be generic or onnxruntime, got {self.target!r}")
        if self.int4_method not in ("rtn", "mse", "gptq"):
            raise TransformError(f"int4_method must be rtn, mse or gptq, got {self.int4_method!r}")
        if self.accuracy_level not in (0, 1, 2, 3, 4):
            raise TransformError(f"accuracy_level must be 0 (unset), 1, 2, 3 or 4, got {self.accuracy_level!r}")

    def excluded(self, op: str, name: str) -> bool:
        """True when a node of ``op`` named ``name`` is to stay in float."""
        return op in self.exclude_ops or name in self.exclude_nodes

    @staticmethod
    def build(*, exclude_ops: Iterable[str] | None = None, exclude_nodes: Iterable[str] | None = None,
              **kwargs: object) -> QuantOptions:
        return QuantOptions(exclude_ops=frozenset(exclude_ops or ()),
                            exclude_nodes=frozenset(exclude_nodes or ()), **kwargs)  # type: ignore[arg-type]


def load_ranges(path: str | os.PathLike[str]) -> dict[str, tuple[float, float]]:
    """Read a ranges JSON file (see the module docstring); one clear error when it is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TransformError(f"cannot read ranges file {os.fspath(path)!r}: {exc}") from None
    table = doc.get("ranges") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise TransformError(f"{os.fspath(path)!r} is not a graphwright ranges file "
                             f"(expected {{\"format\": \"{RANGES_FORMAT}\", \"ranges\": {{name: [min, max]}}}})")
    return resolve_ranges(table, source=os.fspath(path))


def resolve_ranges(table: Mapping[str, object], *, source: str = "ranges") -> dict[str, tuple[float, float]]:
    """Check a ``{name: (min, max)}`` mapping: two finite numbers each, ``min <= max``."""
    out: dict[str, tuple[float, float]] = {}
    for name, pair in table.items():
        try:
            lo, hi = (float(v) for v in pair)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise TransformError(f"{source}: range of {name!r} is not [min, max]: {pair!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise TransformError(f"{source}: range of {name!r} must be finite with min <= max, got [{lo}, {hi}]")
        out[str(name)] = (lo, hi)
    return out


def ranges_json(ranges: Ranges, *, method: str = "") -> str:
    """The JSON text of a ranges file (what ``graphwright quantize --save-ranges`` writes)."""
    doc = {"format": RANGES_FORMAT, "method": method,
           "ranges": {name: [float(lo), float(hi)] for name, (lo, hi) in sorted(ranges.items())}}
    return json.dumps(doc, indent=1) + "\n"
